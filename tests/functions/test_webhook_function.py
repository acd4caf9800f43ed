"""The ``webhook`` function, driven by events/webhook_sqs_fifo_batch.json against moto."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests._moto import FaultInjector, server_error
from tests.functions.conftest import Deployment, FakeLambdaContext, load_event

BATCH = "webhook_sqs_fifo_batch.json"


def _record(event: dict[str, Any], index: int) -> dict[str, Any]:
    return event["Records"][index]  # type: ignore[no-any-return]


def _failures(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def _user_messages(deployment: Deployment, session_id: str) -> list[str]:
    session = deployment.session(session_id)
    assert session is not None, f"{session_id} was never written"
    return [e.message_id for e in session.events if e.type == "user"]


def _message(session_id: str, message_id: str, text: str, group: str | None = None,
             n: int = 1, principal: str = "guest-1") -> dict[str, Any]:
    record = copy.deepcopy(_record(load_event(BATCH), 0))
    record["messageId"] = f"sqs-{message_id}-{n}"
    record["body"] = json.dumps({"sessionId": session_id, "messageId": message_id, "text": text,
                                 "principal": principal})
    record["attributes"]["MessageGroupId"] = group or session_id
    return record


def test_the_bad_record_alone_is_reported_and_the_good_ones_run_a_turn(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    event = load_event(BATCH)

    response = webhook.handler(event, context)

    assert _failures(response) == [_record(event, 1)["messageId"]]
    booking = deployed.session("thread-7")
    assert _user_messages(deployed, "thread-7") == ["crm-ticket-881"]
    assert booking.status == "awaiting_input"  # the concierge asked which night
    assert [c.name for c in booking.yielded_tools] == ["ask_guest"]
    stay = deployed.session("thread-9")
    assert _user_messages(deployed, "thread-9") == ["crm-ticket-883"]
    assert [e.type for e in stay.events][-2:] == ["assistant", "invocation_end"]
    assert deployed.session("thread-8") is None  # the bad record wrote nothing


def test_a_redelivered_batch_lands_each_message_once(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    event = load_event(BATCH)
    webhook.handler(event, context)
    versions = {sid: deployed.session(sid).version for sid in ("thread-7", "thread-9")}

    redelivered = load_event(BATCH)
    for record in redelivered["Records"]:
        record["attributes"]["ApproximateReceiveCount"] = "2"
    response = webhook.handler(redelivered, FakeLambdaContext())

    assert _failures(response) == [_record(event, 1)["messageId"]]  # still only the bad one
    assert _user_messages(deployed, "thread-7") == ["crm-ticket-881"]
    assert _user_messages(deployed, "thread-9") == ["crm-ticket-883"]
    assert {sid: deployed.session(sid).version for sid in versions} == versions


def test_a_redelivery_in_a_new_execution_environment_lands_once(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    deployed.cold_start("webhook").handler(load_event(BATCH), context)

    response = deployed.cold_start("webhook").handler(load_event(BATCH), FakeLambdaContext())

    assert len(_failures(response)) == 1
    assert _user_messages(deployed, "thread-9") == ["crm-ticket-883"]


def test_a_message_for_a_session_waiting_on_a_tool_waits_in_its_inbox_once(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    webhook.handler({"Records": [_message("thread-5", "m-1", "Book me in")]}, context)
    assert deployed.session("thread-5").status == "awaiting_input"

    record = _message("thread-5", "m-2", "Actually, two nights", n=2)
    response = webhook.handler({"Records": [record]}, FakeLambdaContext())

    assert _failures(response) == []  # it landed: in the inbox, to run once the tool is answered
    queued = deployed.session("thread-5")
    assert queued.status == "awaiting_input"
    assert [(q.id, q.text) for q in queued.inbox] == [("m-2", "Actually, two nights")]

    assert _failures(webhook.handler({"Records": [record]}, FakeLambdaContext())) == []
    assert deployed.session("thread-5").version == queued.version  # the redelivery: once


def test_a_message_that_cannot_be_written_is_reported_not_lost(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    FaultInjector(webhook.app.store._client).fail("TransactWriteItems",
                                                  *[server_error() for _ in range(50)])
    record = _message("thread-6", "m-1", "How long is my stay BK-6?")

    assert _failures(webhook.handler({"Records": [record]}, context)) == [record["messageId"]]
    assert deployed.session("thread-6") is None


def test_a_failed_record_holds_back_only_the_rest_of_its_own_session(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    bad = copy.deepcopy(_record(load_event(BATCH), 1))
    bad["attributes"]["MessageGroupId"] = "thread-1"
    after_bad = _message("thread-1", "m-2", "How long is my stay BK-1?", group="thread-1")
    other = _message("thread-2", "m-3", "How long is my stay BK-2?")

    response = webhook.handler({"Records": [bad, after_bad, other]}, context)

    # FIFO order within a session: the record after the bad one must not overtake it.
    assert _failures(response) == [bad["messageId"], after_bad["messageId"]]
    assert deployed.session("thread-1") is None
    assert _user_messages(deployed, "thread-2") == ["m-3"]


def test_bodies_that_are_not_a_webhook_message_are_reported(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    records = []
    for n, body in enumerate(["not json", json.dumps({"sessionId": "s", "messageId": "m",
                                                       "text": "hi", "principal": "p",
                                                       "role": "admin"}),
                              json.dumps({"sessionId": "s", "messageId": "m", "text": "hi"}),
                              json.dumps({"sessionId": "", "messageId": "m", "text": "hi",
                                          "principal": "p"}),
                              json.dumps({"sessionId": "bad id!", "messageId": "m",
                                          "text": "hi", "principal": "p"})]):
        record = _message(f"thread-{n}", f"m-{n}", "x", n=n)
        record["body"] = body
        records.append(record)

    response = webhook.handler({"Records": records}, context)

    assert _failures(response) == [r["messageId"] for r in records]


def test_records_that_would_not_finish_in_the_time_left_are_handed_back(
        deployed: Deployment) -> None:
    webhook = deployed.cold_start("webhook")
    event = load_event(BATCH)
    short = FakeLambdaContext(remaining_ms=webhook.NEEDED_MS - 1)

    response = webhook.handler(event, short)

    assert _failures(response) == [r["messageId"] for r in event["Records"]]
    assert deployed.session("thread-7") is None
    assert deployed.session("thread-9") is None


def test_a_deferred_result_from_a_trusted_producer_resumes_the_parked_turn_once(
        deployed: Deployment, context: FakeLambdaContext, monkeypatch: Any) -> None:
    from pathlib import Path

    monkeypatch.setenv("DORMANT_APP", str(Path(__file__).with_name("deferred_app.py")))
    webhook = deployed.cold_start("webhook")
    started = _message("thread-41", "m-41", "Build me the occupancy report",
                       principal="guest-41")
    assert _failures(webhook.handler({"Records": [started]}, context)) == []
    parked = deployed.session("thread-41")
    assert [t.call_id for t in parked.deferred_tools] == ["call_0000000000000041"]

    event = load_event("webhook_sqs_fifo_tool_result.json")
    assert _failures(webhook.handler(event, FakeLambdaContext())) == []

    done = deployed.session("thread-41")
    assert done.deferred_tools == [] and done.status == "active"
    types = [e.type for e in done.events]
    assert types[-4:] == ["tool_result", "invocation_resume", "assistant", "invocation_end"]
    (result,) = [e for e in done.events if e.type == "tool_result"]
    assert result.deferred and result.result == {"status": "done",
                                                 "report": "s3://reports/41.pdf"}
    assert done.events[-2].text == "Your report is ready: s3://reports/41.pdf"

    redelivered = load_event("webhook_sqs_fifo_tool_result.json")
    redelivered["Records"][0]["attributes"]["ApproximateReceiveCount"] = "2"
    assert _failures(webhook.handler(redelivered, FakeLambdaContext())) == []  # done already
    assert deployed.session("thread-41").version == done.version  # it landed once
