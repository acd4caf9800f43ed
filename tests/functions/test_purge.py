"""A deleted session's purge steps over the webhook queue: ``DELETE /sessions/{id}`` hands the
first step on, the ``webhook`` function runs each (events/webhook_sqs_fifo_purge.json) and sends
the next, against moto."""

from __future__ import annotations

import copy
import hashlib
import json
import time
from typing import Any

import boto3
import pytest

import dormant
from dormant.events import AssistantEvent, UserEvent
from dormant.stores import DynamoDBStore
from dormant.stores._dynamodb import deletes
from tests.functions.conftest import Deployment, FakeLambdaContext, api_body, load_event

PURGE = "webhook_sqs_fifo_purge.json"
#: The Cognito user of the api events (events/api_*.json), who owns the sample's sessions.
SUB = "7d9c2a5e-4f1b-4c3a-9e8d-1a2b3c4d5e6f"
SESSION = "session_thread-42"  # events/api_delete_session.json's, and the purge sample's
#: Turns of the seeded session: its items span two purge pages.
TURNS = 150


def _seed(deployed: Deployment, name: str = "thread-42", turns: int = TURNS,
          text: str = "turn") -> None:
    app = dormant.App(store=DynamoDBStore(deployed.table, bucket=deployed.bucket))
    session = app.sessions.get(name) or app.sessions.create(name, owner=SUB)
    for n in range(turns):
        session.input.message(f"{text} {n:05d}", id=f"{text}-{n}")  # a guard each
        session.add_event(AssistantEvent(text=f"reply {n:05d}"))
        assert app.sessions.commit(session).ok


def _keys(deployed: Deployment, session_id: str = SESSION) -> list[str]:
    client = boto3.client("dynamodb")
    request: dict[str, Any] = {"TableName": deployed.table, "ConsistentRead": True,
                               "KeyConditionExpression": "pk = :pk",
                               "ExpressionAttributeValues": {":pk": {"S": session_id}}}
    keys: list[str] = []
    while True:
        page = client.query(**request)
        keys += [item["sk"]["S"] for item in page["Items"]]
        if "LastEvaluatedKey" not in page:
            return keys
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _as_event(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What the SQS event source hands the webhook function for these queued messages."""
    template = load_event(PURGE)["Records"][0]
    records = []
    for message in messages:
        record = copy.deepcopy(template)
        record.update(messageId=message["MessageId"], receiptHandle=message["ReceiptHandle"],
                      body=message["Body"], md5OfBody=message["MD5OfBody"])
        record["attributes"].update(message["Attributes"])
        records.append(record)
    return {"Records": records}


def _failures(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def _drain(deployed: Deployment, webhook: Any) -> list[dict[str, Any]]:
    """Run what the queue holds through the webhook until it holds nothing: the bodies run."""
    ran: list[dict[str, Any]] = []
    for _ in range(50):
        queued = deployed.queued()
        if not queued:
            return ran
        assert _failures(webhook.handler(_as_event(queued), FakeLambdaContext())) == []
        ran += [json.loads(m["Body"]) for m in queued]
    raise AssertionError("the purge never ended")


def test_a_delete_hands_its_purge_to_the_queue_and_the_webhook_runs_it_to_the_end(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _seed(deployed)
    api = deployed.cold_start("api")
    assert api.app.hand_on._client is None  # still nothing built at cold start

    deleted = api.handler(load_event("api_delete_session.json"), context)

    assert (deleted["statusCode"], api_body(deleted)) == (200, {"sessionId": SESSION,
                                                                "deleted": True})
    assert deployed.session("thread-42") is None  # gone for every reader at once
    [first] = deployed.queued()
    assert json.loads(first["Body"]) == {"kind": "purge", "sessionId": SESSION, "after": None}
    assert first["Attributes"]["MessageGroupId"] == SESSION
    assert first["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(
        f"purge\n{SESSION}\n{context.aws_request_id}".encode()).hexdigest()
    assert len(_keys(deployed)) > deletes.PURGE_PAGE  # nothing purged in the request

    webhook = deployed.cold_start("webhook")
    assert _failures(webhook.handler(_as_event([first]), FakeLambdaContext())) == []
    ran = [json.loads(first["Body"]), *_drain(deployed, webhook)]

    # one record per step, each sent by the one before, in key order
    afters = [body["after"] for body in ran]
    assert afters[0] is None and all(a is not None for a in afters[1:])
    assert afters[1:] == sorted(afters[1:]) and len(afters) == len(set(afters)) >= 3
    assert _keys(deployed) == [f"e#v{TURNS + 2:010d}"]  # the deletion marker alone
    assert api.app.sessions.list(principal=SUB) == []


def test_the_sample_purge_record_runs_one_step_and_sends_the_next(
        deployed: Deployment) -> None:
    _seed(deployed)
    store = DynamoDBStore(deployed.table, bucket=deployed.bucket)
    store.purge_later = lambda *step: None  # delete here; the sample record is the first step
    assert store.delete(SESSION)
    webhook = deployed.cold_start("webhook")
    event = load_event(PURGE)
    before = _keys(deployed)

    assert _failures(webhook.handler(event, FakeLambdaContext())) == []

    assert _keys(deployed) == before[deletes.PURGE_PAGE:]  # one page, all of it retired
    [step] = deployed.queued()
    assert json.loads(step["Body"]) == {"kind": "purge", "sessionId": SESSION,
                                        "after": before[deletes.PURGE_PAGE - 1]}
    assert step["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(
        f"purge\n{SESSION}\n{event['Records'][0]['messageId']}".encode()).hexdigest()


def test_a_redelivered_step_sends_its_next_step_once(deployed: Deployment) -> None:
    _seed(deployed)
    store = DynamoDBStore(deployed.table, bucket=deployed.bucket)
    store.purge_later = lambda *step: None
    assert store.delete(SESSION)
    webhook = deployed.cold_start("webhook")
    event = load_event(PURGE)

    assert _failures(webhook.handler(event, FakeLambdaContext())) == []
    assert _failures(webhook.handler(event, FakeLambdaContext())) == []  # the redelivery

    [step] = deployed.queued()  # the queue took the second send of the same step as a duplicate
    assert json.loads(step["Body"])["after"] is not None
    assert _failures(webhook.handler(_as_event([step]), FakeLambdaContext())) == []
    _drain(deployed, webhook)  # nothing lost either
    assert _keys(deployed) == [f"e#v{TURNS + 2:010d}"]


def test_a_step_whose_next_record_is_not_sent_fails_and_its_redelivery_goes_on(
        deployed: Deployment, caplog: pytest.LogCaptureFixture) -> None:
    _seed(deployed)
    store = DynamoDBStore(deployed.table, bucket=deployed.bucket)
    store.purge_later = lambda *step: None
    assert store.delete(SESSION)
    webhook = deployed.cold_start("webhook")
    event = load_event(PURGE)
    queue = webhook.app.hand_on
    queue.queue_url = deployed.queue_url + "-gone"

    response = webhook.handler(event, FakeLambdaContext())

    assert _failures(response) == [event["Records"][0]["messageId"]]  # SQS delivers it again
    assert deployed.queued() == []
    queue.queue_url = deployed.queue_url
    assert _failures(webhook.handler(event, FakeLambdaContext())) == []  # the redelivery
    _drain(deployed, webhook)
    assert _keys(deployed) == [f"e#v{TURNS + 2:010d}"]


def test_a_purge_of_a_session_made_again_meanwhile_spares_the_new_one(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    _seed(deployed)
    api = deployed.cold_start("api")
    assert api.handler(load_event("api_delete_session.json"), context)["statusCode"] == 200
    queued = deployed.queued()
    # a new session under the id before any step ran
    _seed(deployed, turns=3, text="again")
    webhook = deployed.cold_start("webhook")

    assert _failures(webhook.handler(_as_event(queued), FakeLambdaContext())) == []
    _drain(deployed, webhook)

    reborn = deployed.session("thread-42")
    assert reborn is not None
    assert [e.text for e in reborn.events if isinstance(e, UserEvent)] == [
        "again 00000", "again 00001", "again 00002"]
    versions = [k for k in _keys(deployed) if k.startswith("e#v")]
    # the deletion marker (the new incarnation numbers its items after it), then its own 4
    assert versions == [f"e#v{TURNS + 2 + v:010d}" for v in range(5)]


def _metric(out: str, name: str) -> list[float]:
    """The values of metric ``name`` in the EMF lines a handler printed."""
    return [v for line in out.splitlines() if line.startswith('{"_aws"')
            for v in json.loads(line).get(name, [])]


def test_a_failed_send_keeps_the_delete_s_answer_and_a_later_listing_asks_again(
        deployed: Deployment, context: FakeLambdaContext,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(deployed, turns=20)
    api = deployed.cold_start("api")
    api.app.hand_on.queue_url = deployed.queue_url + "-gone"
    deleted = api.handler(load_event("api_delete_session.json"), context)

    assert (deleted["statusCode"], api_body(deleted)) == (200, {"sessionId": SESSION,
                                                                "deleted": True})
    [failure] = [r for r in caplog.records
                 if r.getMessage().startswith("purge step not sent")]
    assert (failure.levelname, getattr(failure, "session_id", None)) == ("ERROR", SESSION)
    assert _metric(capsys.readouterr().out, "PurgesFailed") == [1.0]
    assert deployed.queued() == []
    api.app.hand_on.queue_url = deployed.queue_url

    store = api.app.store
    assert store.list(principal=SUB) == []  # just deleted: a step may still be on its way
    assert deployed.queued() == []
    store._clock = lambda: time.time() + 16 * 60  # a quarter hour on, still not purged
    assert store.list(principal=SUB) == []
    [again] = deployed.queued()
    assert json.loads(again["Body"]) == {"kind": "purge", "sessionId": SESSION, "after": None}

    webhook = deployed.cold_start("webhook")
    assert _failures(webhook.handler(_as_event([again]), FakeLambdaContext())) == []
    _drain(deployed, webhook)
    assert _keys(deployed) == ["e#v0000000022"]
    assert store.list(principal=SUB) == []
    assert deployed.queued() == []  # purged: out of the index, nothing asked again


def test_a_bad_purge_body_fails_its_record_alone(deployed: Deployment) -> None:
    webhook = deployed.cold_start("webhook")
    event = load_event(PURGE)
    good = copy.deepcopy(event["Records"][0])
    bad = copy.deepcopy(good)
    bad.update(messageId="bad-purge", body=json.dumps({"kind": "purge", "after": None}))
    bad["attributes"]["MessageGroupId"] = "session_other"
    event["Records"] = [bad, good]

    assert _failures(webhook.handler(event, FakeLambdaContext())) == ["bad-purge"]
