"""Hand-on (``App.hand_on``): work a request cannot finish goes to the webhook SQS FIFO queue,
and the ``webhook`` function runs it (events/webhook_sqs_fifo_hand_on.json), against moto."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from dormant.handlers import HandlerInput, Input, RestResponse, RetryRequest
from dormant.models import ModelError
from dormant.models._base import ToolCallChunk, UsageChunk
from dormant.stores import DynamoDBStore
from tests.functions.conftest import (
    HAND_ON,
    Deployment,
    FakeLambdaContext,
    batch_failures,
    load_event,
    queue_event,
)

#: The Cognito user of the api events (events/api_*.json), who owns the sample's sessions.
SUB = "7d9c2a5e-4f1b-4c3a-9e8d-1a2b3c4d5e6f"


def _record(body: dict[str, Any] | str, n: int, group: str = "session_thread-x") -> dict[str, Any]:
    record = copy.deepcopy(load_event(HAND_ON)["Records"][0])
    record["messageId"] = f"sqs-hand-on-{n}"
    record["body"] = body if isinstance(body, str) else json.dumps(body)
    record["attributes"]["MessageGroupId"] = group
    return record


class _Flaky:
    """Looks a stay up, then the provider fails: the session is ``failed``, retryable (what a
    turn cut by the deadline after its tools ran leaves)."""

    def __init__(self) -> None:
        self.calls = 0

    def stream(self, request: Any, *, signal: Any) -> Any:
        self.calls += 1
        if self.calls > 1:
            raise ModelError("provider down")
        yield ToolCallChunk(call_id="", name="lookup_stay", args={"ref": "BK-7"})
        yield UsageChunk()


def _failed_session(deployed: Deployment, session_id: str, principal: str | None = SUB) -> None:
    from dormant.samples.bookings import build

    app, concierge = build(store=DynamoDBStore(deployed.table, bucket=deployed.bucket))
    flaky = app.agent(name="concierge", model=_Flaky(), tools=list(concierge.tools.values()))
    reply = app.handler.rest(agent=flaky)(HandlerInput(
        session_id=session_id, input=Input(message="How long is my stay BK-7?",
                                           message_id=f"{session_id}-m1"), principal=principal))
    assert (reply.code, reply.commit_status) == ("model_error", "committed")
    assert deployed.session(session_id).status == "failed"


def _retry(session_id: str, retry_id: str, principal: str | None = SUB) -> HandlerInput:
    return HandlerInput(session_id=session_id, input=Input(retry=RetryRequest(retry_id=retry_id)),
                        principal=principal)


def _retries(deployed: Deployment, session_id: str) -> list[str]:
    return [e.retry_id for e in deployed.session(session_id).events
            if getattr(e, "retry_id", None)]


# --- sending ----------------------------------------------------------------------------------


def test_the_api_hands_on_a_well_formed_fifo_message_grouped_by_session(
        deployed: Deployment) -> None:
    api = deployed.cold_start("api")
    sender = api.app.hand_on
    assert sender is not None and sender.queue_url == deployed.queue_url
    assert sender._client is None  # no SQS client at cold start: made on the first hand-on

    sender(_retry("thread-1", "deadline-1"))

    [message] = deployed.queued()
    assert json.loads(message["Body"]) == {
        "kind": "hand_on", "sessionId": "session_thread-1",
        "input": {"retry": {"retryId": "deadline-1"}}, "principal": SUB}
    attributes = message["Attributes"]
    assert attributes["MessageGroupId"] == "session_thread-1"  # the canonical session id
    assert attributes["MessageDeduplicationId"] == hashlib.sha256(
        message["Body"].encode()).hexdigest()


def test_the_same_work_handed_on_twice_is_queued_once(deployed: Deployment) -> None:
    api = deployed.cold_start("api")
    from dormant.aws.hand_on import handing_on_from  # the module this cold start imported
    message = HandlerInput(session_id="session_thread-2",
                           input=Input(message="Book me in", message_id="m-cut"), principal=SUB)
    with handing_on_from("request-1"):
        api.app.hand_on(_retry("thread-2", "deadline-2"))
        api.app.hand_on(message)
    with handing_on_from("request-2"):  # ids, not origins, make these stable
        api.app.hand_on(_retry("session_thread-2", "deadline-2"))
        api.app.hand_on(message)

    bodies = [json.loads(m["Body"])["input"] for m in deployed.queued()]
    assert bodies == [{"retry": {"retryId": "deadline-2"}},
                      {"message": "Book me in", "messageId": "m-cut"}]


def test_a_drain_lands_once_per_origin_and_the_next_drain_is_not_dropped(
        deployed: Deployment) -> None:
    api = deployed.cold_start("api")
    from dormant.aws.hand_on import HandOnMessage, handing_on_from
    drain = HandlerInput(session_id="thread-3", principal=SUB)
    with handing_on_from("request-1"):
        api.app.hand_on(drain)
        api.app.hand_on(drain)  # the same drain sent again: one message
    with handing_on_from("sqs-record-of-that-drain"):
        api.app.hand_on(drain)  # the next drain, from the invocation that ran the first

    queued = deployed.queued()
    assert [json.loads(m["Body"]) for m in queued] == [
        {"kind": "hand_on", "sessionId": "session_thread-3", "input": {}, "principal": SUB}] * 2
    record = HandOnMessage.of(drain)
    assert [m["Attributes"]["MessageDeduplicationId"] for m in queued] == [
        record.deduplication_id("request-1"), record.deduplication_id("sqs-record-of-that-drain")]


def test_a_failed_send_is_logged_and_counted_never_raised(
        deployed: Deployment, caplog: pytest.LogCaptureFixture) -> None:
    api = deployed.cold_start("api")
    from dormant.aws.hand_on import metrics

    metrics.clear_metrics()  # the store is shared by every Metrics instance
    api.app.hand_on.queue_url = deployed.queue_url + "-gone"

    api.app.hand_on(_retry("thread-4", "deadline-4"))  # the turn committed: no raise
    api.app.hand_on(HandlerInput(session_id="bad id!", principal=SUB))  # nor for a bad id

    failures = [r for r in caplog.records if r.getMessage().startswith("hand-on not sent")]
    assert [(r.levelname, getattr(r, "session_id", None), getattr(r, "hand_on", None))
            for r in failures] == [("ERROR", "thread-4", "retry"), ("ERROR", "bad id!", "drain")]
    assert all(r.exc_info for r in failures)
    assert metrics.metric_set["HandOnsFailed"]["Value"] == [1.0, 1.0]
    metrics.clear_metrics()
    assert deployed.queued() == []


@pytest.mark.parametrize("function", ["api", "webhook", "wake"])
def test_every_function_hands_on_to_the_webhook_queue(
        deployed: Deployment, function: str) -> None:
    module = deployed.cold_start(function)
    from dormant.aws.hand_on import QueueHandOn
    assert isinstance(module.app.hand_on, QueueHandOn)
    assert module.app.hand_on.queue_url == deployed.queue_url


def test_without_the_queue_url_nothing_is_handed_on(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEBHOOK_QUEUE_URL")
    assert deployed.cold_start("api").app.hand_on is None


# --- running: the webhook function ------------------------------------------------------------


def test_the_sample_hand_on_batch_runs_a_retry_a_drain_and_a_message(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _failed_session(deployed, "thread-11")
    webhook = deployed.cold_start("webhook")
    event = load_event(HAND_ON)

    response = webhook.handler(event, context)

    assert batch_failures(response) == []
    retried = deployed.session("thread-11")
    assert retried.status != "failed"
    assert _retries(deployed, "thread-11") == ["deadline-retry-1"]
    assert [e.type for e in retried.events][-2:] == ["assistant", "invocation_end"]
    # The drain found an empty inbox ("nothing to run"): done, and nothing was written.
    assert deployed.session("thread-12") is None
    ran = deployed.session("thread-13")
    assert [e.message_id for e in ran.events if e.type == "user"] == ["msg-cut-1"]

    versions = {sid: deployed.session(sid).version for sid in ("thread-11", "thread-13")}
    again = webhook.handler(load_event(HAND_ON), FakeLambdaContext())  # a redelivery

    assert batch_failures(again) == []  # duplicate_retry, nothing to run, duplicate_message: done
    assert {sid: deployed.session(sid).version for sid in versions} == versions


def test_a_retry_handed_on_by_the_api_runs_in_the_webhook_once(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _failed_session(deployed, "thread-5")
    deployed.cold_start("api").app.hand_on(_retry("thread-5", "deadline-5"))
    event = queue_event(deployed.queued())
    webhook = deployed.cold_start("webhook")

    assert batch_failures(webhook.handler(event, context)) == []
    assert deployed.session("thread-5").status != "failed"
    assert _retries(deployed, "thread-5") == ["deadline-5"]

    version = deployed.session("thread-5").version
    assert batch_failures(webhook.handler(event, FakeLambdaContext())) == []  # duplicate_retry
    assert deployed.session("thread-5").version == version


def test_a_drain_handed_on_by_the_api_with_nothing_queued_is_done(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    webhook.handler({"Records": [_record({"sessionId": "thread-6", "messageId": "m-1",
                                          "text": "How long is my stay BK-6?",
                                          "principal": "guest-6"}, 0,
                                         group="thread-6")]}, context)
    version = deployed.session("thread-6").version
    deployed.cold_start("api").app.hand_on(HandlerInput(session_id="thread-6"))

    response = webhook.handler(queue_event(deployed.queued()), FakeLambdaContext())

    assert batch_failures(response) == []  # "nothing to run": the inbox is already empty
    assert deployed.session("thread-6").version == version


def test_a_retry_for_a_session_no_longer_failed_is_done(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _failed_session(deployed, "thread-7")
    webhook = deployed.cold_start("webhook")
    first = _record({"kind": "hand_on", "sessionId": "thread-7",
                     "input": {"retry": {"retryId": "by-the-user"}}, "principal": SUB}, 1)
    late = _record({"kind": "hand_on", "sessionId": "thread-7",
                    "input": {"retry": {"retryId": "deadline-7"}}, "principal": SUB}, 2)

    response = webhook.handler({"Records": [first, late]}, context)

    assert batch_failures(response) == []  # nothing_to_retry: somebody retried it already
    assert _retries(deployed, "thread-7") == ["by-the-user"]


def test_a_hand_on_for_another_principals_session_is_reported(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _failed_session(deployed, "thread-8")
    webhook = deployed.cold_start("webhook")
    record = _record({"kind": "hand_on", "sessionId": "thread-8",
                      "input": {"retry": {"retryId": "r-8"}}, "principal": "someone-else"}, 1)

    assert batch_failures(webhook.handler({"Records": [record]}, context)) == [record["messageId"]]
    assert deployed.session("thread-8").status == "failed"


def test_malformed_hand_on_records_are_reported_and_the_good_one_runs(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    bad_bodies: list[dict[str, Any] | str] = [
        {"kind": "hand_off", "sessionId": "thread-9", "input": {}},
        {"kind": "hand_on", "sessionId": "thread-9"},  # no input
        {"kind": "hand_on", "sessionId": "", "input": {}},
        {"kind": "hand_on", "sessionId": "thread-9", "input": {"nonsense": 1}},
        {"kind": "hand_on", "sessionId": "thread-9", "input": "run it"},
        {"kind": "hand_on", "sessionId": "thread-9", "input": {}, "text": "hi"},
        '{"kind": "hand_on", ',
    ]
    bad = [_record(body, n, group=f"thread-9-{n}") for n, body in enumerate(bad_bodies)]
    good = _record({"kind": "hand_on", "sessionId": "thread-10", "principal": None,
                    "input": {"message": "How long is my stay BK-10?", "messageId": "m-10"}},
                   99, group="session_thread-10")

    response = webhook.handler({"Records": [*bad, good]}, context)

    assert batch_failures(response) == [r["messageId"] for r in bad]
    assert deployed.session("thread-9") is None
    assert [e.message_id for e in deployed.session("thread-10").events
            if e.type == "user"] == ["m-10"]


def test_a_hand_on_the_webhook_makes_comes_from_its_record(
        deployed: Deployment, context: FakeLambdaContext,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn handler calls ``app.hand_on`` mid-request: from the webhook, the record being
    processed is the origin (a redelivery of it hands on the same drain once)."""
    webhook = deployed.cold_start("webhook")
    from dormant.aws.hand_on import HandOnMessage

    real_turn = webhook.turn

    def draining_turn(request: HandlerInput, **kwargs: Any) -> RestResponse:
        webhook.app.hand_on(HandlerInput(session_id=request.session_id,
                                         principal=request.principal))
        return real_turn(request, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(webhook, "turn", draining_turn)
    record = _record({"kind": "hand_on", "sessionId": "thread-12", "input": {},
                      "principal": SUB}, 1)

    assert batch_failures(webhook.handler({"Records": [record]}, context)) == []
    assert batch_failures(webhook.handler({"Records": [record]}, FakeLambdaContext())) == []

    [message] = deployed.queued()
    assert message["Attributes"]["MessageDeduplicationId"] == HandOnMessage.of(
        HandlerInput(session_id="thread-12", principal=SUB)).deduplication_id(
        record["messageId"])


def test_hand_on_records_that_would_not_finish_in_the_time_left_are_handed_back(
        deployed: Deployment) -> None:
    webhook = deployed.cold_start("webhook")
    event = load_event(HAND_ON)

    response = webhook.handler(event, FakeLambdaContext(remaining_ms=webhook.NEEDED_MS - 1))

    assert batch_failures(response) == [r["messageId"] for r in event["Records"]]
    assert deployed.session("thread-13") is None


# --- the done rule ----------------------------------------------------------------------------


def _reply(status: str, code: str | None = None, commit_status: str | None = None,
           version: int | None = None) -> RestResponse:
    return RestResponse(session_id="session_t", status=status, output={}, code=code,
                        commit_status=commit_status, version=version)


_RETRY = {"kind": "hand_on", "sessionId": "t", "input": {"retry": {"retryId": "r"}}}
_DRAIN = {"kind": "hand_on", "sessionId": "t", "input": {}}


@pytest.mark.parametrize(("body", "reply", "done"), [
    (_RETRY, _reply("completed", commit_status="committed"), True),
    (_RETRY, _reply("error", "model_error", "committed"), True),  # failed again, recorded
    (_RETRY, _reply("completed", commit_status="superseded", version=7), True),  # tools kept
    (_DRAIN, _reply("yielded_tool"), True),
    (_DRAIN, _reply("queued", commit_status="committed"), True),
    (_DRAIN, _reply("recorded"), True),
    (_DRAIN, _reply("stopped"), True),
    (_DRAIN, _reply("paused"), True),
    (_DRAIN, _reply("interrupted"), True),
    (_RETRY, _reply("error", "duplicate_retry"), True),
    (_RETRY, _reply("error", "nothing_to_retry"), True),
    (_RETRY, _reply("error", "duplicate_message"), True),
    (_RETRY, _reply("error", "not_running"), True),
    (_DRAIN, _reply("error", "not_pending"), True),  # nothing to run
    (_DRAIN, _reply("error", "invalid_input"), False),
    (_DRAIN, _reply("error", "session_failed"), True),  # the inbox waits for the retry
    (_RETRY, _reply("error", "invalid_input"), False),
    (_RETRY, _reply("error", "store_error"), False),
    (_RETRY, _reply("completed", commit_status="failed"), False),
    (_DRAIN, _reply("completed", commit_status="superseded"), False),
    (_DRAIN, _reply("error", "awaiting_input"), False),
    (_RETRY, _reply("error", "session_not_found"), False),
])
def test_what_counts_as_done_for_a_hand_on_record(
        deployed: Deployment, body: dict[str, Any], reply: RestResponse, done: bool) -> None:
    webhook = deployed.cold_start("webhook")
    record = webhook.HandOnMessage.model_validate(body)
    assert webhook.hand_on_done(record, reply) is done


# --- end to end: the turn handler hands on, the webhook runs it ------------------------------


def test_the_api_hands_on_its_inbox_and_the_webhook_runs_it(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    """A message sent while the session waits on a tool is queued; the answer's turn finishes
    but too little of the invocation's time is left for another turn (14 s left, 5 s kept
    for the reply, 10 s needed per queued message): the api hands the drain on and the
    webhook runs the queued message."""
    from tests.functions.conftest import api_body, with_body

    api = deployed.cold_start("api")
    paused = api_body(api.handler(load_event("api_post_turn.json"), context))
    assert paused["status"] == "yielded_tool"
    later = {"sessionId": "thread-42", "message": "How long is my stay BK-1042?",
             "messageId": "msg-0002"}
    queued = api_body(api.handler(with_body(load_event("api_post_turn.json"), later), context))
    assert queued["status"] == "queued"
    resume = load_event("api_post_turn_resume.json")
    body = api_body(resume)
    body["tools"][0]["callId"] = paused["yieldedTools"][0]["callId"]

    answered = api_body(api.handler(with_body(resume, body),
                                    FakeLambdaContext(remaining_ms=14_000)))

    assert (answered["status"], answered.get("handedOn")) == ("completed", True)
    assert [q.id for q in deployed.session("thread-42").inbox] == ["msg-0002"]
    [message] = deployed.queued()
    assert json.loads(message["Body"]) == {"kind": "hand_on", "sessionId": "session_thread-42",
                                           "input": {}, "principal": SUB}
    assert message["Attributes"]["MessageGroupId"] == "session_thread-42"

    webhook = deployed.cold_start("webhook")
    event = queue_event([message])
    assert batch_failures(webhook.handler(event, context)) == []

    session = deployed.session("thread-42")
    assert session.inbox == []
    assert [e.message_id for e in session.events if e.type == "user"][-1] == "msg-0002"
    assert session.events[-1].type == "invocation_end"
    assert deployed.queued() == []  # nothing left to hand on
    assert batch_failures(webhook.handler(event, FakeLambdaContext())) == []  # a redelivery: done
