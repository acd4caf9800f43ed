"""The webhook batch: a bad record fails itself (and the later records of its own session,
FIFO order), never the batch, never another session's record.

The exact batch that used to crash the whole invocation: two unparseable records in one
message group between two good records of other groups. Powertools' FIFO processor with a
``model`` parsed the skipped group's second record outside its error handling; the
``ValidationError`` escaped the handler and Lambda failed the batch on every receive.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.functions.conftest import Deployment, FakeLambdaContext, load_event

BATCH = "webhook_sqs_fifo_batch.json"


def _record(n: int, group: str, body: str) -> dict[str, Any]:
    record = copy.deepcopy(load_event(BATCH)["Records"][0])
    record["messageId"] = f"sqs-poison-{n}"
    record["body"] = body
    record["attributes"]["MessageGroupId"] = group
    return record


def _message(session_id: str, message_id: str, principal: str = "guest-1") -> str:
    return json.dumps({"sessionId": session_id, "messageId": message_id,
                       "text": "How long is my stay BK-1042?", "principal": principal})


def _failures(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def _landed(deployed: Deployment, session_id: str, message_id: str) -> bool:
    session = deployed.session(session_id)
    return session is not None and message_id in [
        e.message_id for e in session.events if e.type == "user"]


def test_two_poison_records_in_one_group_fail_only_themselves(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    batch = [_record(1, "session_g-a", _message("g-a", "ok-a")),
             _record(2, "session_g-p", "{bad"),
             _record(3, "session_g-p", "{bad"),
             _record(4, "session_g-b", _message("g-b", "ok-b"))]

    response = webhook.handler({"Records": batch}, context)

    assert _failures(response) == ["sqs-poison-2", "sqs-poison-3"]
    assert _landed(deployed, "g-a", "ok-a")
    assert _landed(deployed, "g-b", "ok-b")


def test_every_kind_of_bad_record_fails_alone(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    no_attributes = _record(6, "session_g-6", _message("g-6", "m-6"))
    del no_attributes["attributes"]  # not even an SQS record the parser accepts
    batch = [
        _record(1, "session_g-1", "{bad"),
        _record(2, "session_g-2", json.dumps(["a", "list"])),
        _record(3, "session_g-3", json.dumps({"kind": "hand_on", "sessionId": "g-3",
                                              "input": {"nonsense": 1}})),
        _record(4, "session_g-4", json.dumps({"sessionId": "g-4", "messageId": "m-4",
                                              "text": "no principal"})),
        _record(5, "session_g-5", _message("bad id!", "m-5")),
        no_attributes,
        _record(7, "session_g-7", "\udcff not utf-8 either"),
        _record(8, "session_ok", _message("ok", "ok-1")),
    ]

    response = webhook.handler({"Records": batch}, context)

    assert _failures(response) == [f"sqs-poison-{n}" for n in range(1, 8)]
    assert _landed(deployed, "ok", "ok-1")
    for n in (4, 6):
        assert deployed.session(f"g-{n}") is None


def test_a_batch_of_nothing_but_poison_is_reported_not_raised(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    batch = [_record(n, "session_same", "{bad") for n in range(1, 4)]

    response = webhook.handler({"Records": batch}, context)

    assert _failures(response) == ["sqs-poison-1", "sqs-poison-2", "sqs-poison-3"]


def test_a_record_for_another_principals_session_fails_alone_and_writes_nothing(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    webhook = deployed.cold_start("webhook")
    webhook.handler({"Records": [_record(1, "session_mine", _message("mine", "m-1",
                                                                     "alice"))]}, context)
    owned = deployed.session("mine")
    assert owned is not None and owned.owner == "alice"

    response = webhook.handler({"Records": [
        _record(2, "session_mine", _message("mine", "m-2", "mallory")),
        _record(3, "session_other", _message("other", "m-3", "bob"))]}, context)

    assert _failures(response) == ["sqs-poison-2"]
    after = deployed.session("mine")
    assert after is not None and after.version == owned.version
    assert _landed(deployed, "other", "m-3")
    assert deployed.session("other").owner == "bob"  # type: ignore[union-attr]


def test_a_session_the_webhook_creates_is_reachable_by_its_principal_alone(
        deployed: Deployment, context: FakeLambdaContext) -> None:
    from tests.functions.conftest import api_body, as_principal

    webhook = deployed.cold_start("webhook")
    webhook.handler({"Records": [_record(1, "session_crm-77", _message("crm-77", "c-1",
                                                                       "alice"))]}, context)
    api = deployed.cold_start("api")
    get = load_event("api_get_session.json")
    get["pathParameters"] = {"id": "crm-77"}
    get["path"] = "/sessions/crm-77"

    mallory = api.handler(as_principal(get, "mallory"), context)
    alice = api.handler(as_principal(get, "alice"), context)

    assert mallory["statusCode"] == 404
    assert "BK-1042" not in mallory["body"]
    assert alice["statusCode"] == 200
    assert api_body(alice)["sessionId"] == "session_crm-77"
