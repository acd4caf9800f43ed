"""Delegation over the webhook queue (``Agent.as_delegate``): the parent's turn parks on its
call and hands the child's start on; the child runs in the webhook function and hands its
answer back to the parent, which resumes. Every record is delivered twice: each lands once."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dormant.session import child_session_id
from tests.functions.conftest import (
    HAND_ON,
    Deployment,
    FakeLambdaContext,
    batch_failures,
    load_event,
    queue_event,
)

CALL = "call_0000000000000051"


def _message(session_id: str, text: str, principal: str) -> dict[str, Any]:
    record = copy.deepcopy(load_event(HAND_ON)["Records"][0])
    record["messageId"] = "sqs-start-1"
    record["body"] = json.dumps({"sessionId": session_id, "messageId": "m-1", "text": text,
                                 "principal": principal})
    record["attributes"]["MessageGroupId"] = session_id
    return record


@pytest.fixture
def delegating(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DORMANT_APP", str(Path(__file__).with_name("delegate_app.py")))


@pytest.mark.usefixtures("delegating")
def test_a_child_delegated_over_the_webhook_queue_answers_its_parent_once(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    started = webhook.handler({"Records": [_message("thread-51", "Survey tides", "guest-51")]},
                              context)
    assert batch_failures(started) == []
    parent = deployed.session("thread-51")
    assert [t.call_id for t in parent.deferred_tools] == [CALL]
    child_id = child_session_id("thread-51", CALL)
    assert parent.head.children == [{"session": child_id, "call_id": CALL}]
    assert deployed.session(child_id) is None  # its start is on the queue, not run here

    [start] = deployed.queued()
    body = json.loads(start["Body"])
    assert (body["kind"], body["sessionId"], body["principal"]) == ("hand_on", child_id,
                                                                    "guest-51")
    assert body["input"]["delegated"] == {"session": "session_thread-51", "callId": CALL,
                                          "agent": "research"}
    event = queue_event([start])
    assert batch_failures(webhook.handler(event, FakeLambdaContext())) == []
    child = deployed.session(child_id)
    assert child.head.parent == {"session": "session_thread-51", "call_id": CALL,
                                 "agent": "research"}
    assert child.head.principal == "guest-51"
    assert [e.type for e in child.events][-2:] == ["assistant", "invocation_end"]
    answer = deployed.queued()
    assert batch_failures(webhook.handler(event, FakeLambdaContext())) == []  # the start again
    assert deployed.session(child_id).version == child.version
    assert deployed.queued() == []  # a duplicate start hands nothing on

    [result] = answer
    assert json.loads(result["Body"])["input"] == {
        "toolResults": [{"callId": CALL, "result": "Found 3 papers on tides.",
                         "isError": False}]}
    event = queue_event([result])
    assert batch_failures(webhook.handler(event, FakeLambdaContext())) == []
    done = deployed.session("thread-51")
    assert batch_failures(webhook.handler(event, FakeLambdaContext())) == []  # already answered
    assert deployed.session("thread-51").version == done.version  # it landed once
    assert deployed.queued() == []
    results = [e for e in done.events if e.type == "tool_result"]
    assert [(e.call_id, e.result, e.deferred) for e in results] == [
        (CALL, "Found 3 papers on tides.", True)]
    assert [e.type for e in done.events][-2:] == ["assistant", "invocation_end"]
    assert done.events[-2].text == "The researcher found 3 papers on tides."
