"""Hand-on over the webhook queue: work a request cannot finish runs in another invocation.

``App.hand_on`` receives a :class:`~dormant.handlers.HandlerInput` for work the request could
not finish in its own invocation: the rest of a session's inbox (an empty ``input``), a turn
cut by the deadline (``input.retry``), or a message whose turn was cut before anything was
written (``input.message`` + ``input.messageId``). :class:`QueueHandOn` sends it to the webhook
SQS FIFO queue as a :class:`HandOnMessage` record, which the ``webhook`` function runs as one
more turn request::

    {"kind": "hand_on", "sessionId": "session_…", "input": {…camelCase…}, "principal": "…"}

``MessageGroupId`` is the canonical session id (``session_…``: one session's work runs one at
a time, in order, behind its earlier records). ``MessageDeduplicationId`` is the SHA-256 of the
body, which a retry id or a message id makes stable: a repeated send of the same work lands
once. A drain has no id of its own, so its hash also takes the *origin* (the Lambda request id,
or the SQS record being processed: :func:`handing_on_from`): the same drain sent again by one
invocation, or by a redelivery of one record, lands once, while the next drain of a busy inbox
(the same body, handed on by the invocation that ran the previous drain, maybe within the
queue's five-minute deduplication window) is not dropped. An extra drain is harmless (it runs
the next queued message, or finds nothing to run); a dropped one would strand the inbox.

The sender is built on cold start from ``WEBHOOK_QUEUE_URL`` (the template sets it); its boto3
SQS client is made on the first hand-on, not at import. By the time a request hands on, its
turn has committed: a failed send is logged and counted (``HandOnsFailed``), never raised into
the response.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant._clients import aws_client
from dormant.handlers import HandlerInput, Input
from dormant.session import normalize_session_id

__all__ = ["KIND", "QUEUE_URL_ENV", "HandOnMessage", "QueueHandOn", "deployed_hand_on",
           "handing_on_from", "origin", "work_of"]

#: The environment variable naming the webhook queue (set by template.yaml).
QUEUE_URL_ENV = "WEBHOOK_QUEUE_URL"
#: The ``kind`` of a hand-on record (a webhook message has no ``kind``).
KIND = "hand_on"

logger = Logger(child=True)
metrics = Metrics()

Work = Literal["drain", "retry", "message", "input"]

_origin: ContextVar[str | None] = ContextVar("dormant_hand_on_origin", default=None)


@contextmanager
def handing_on_from(origin: str | None) -> Iterator[None]:
    """Hand-ons made inside come from ``origin`` (a Lambda request id, an SQS message id)."""
    token = _origin.set(origin)
    try:
        yield
    finally:
        _origin.reset(token)


def origin() -> str | None:
    """Where the work being done now comes from (see :func:`handing_on_from`)."""
    return _origin.get()


def work_of(request_input: Input) -> Work:
    """What a hand-on carries: the rest of an inbox, a retry, a message, or other input."""
    if request_input.retry is not None:
        return "retry"
    if request_input.message is not None:
        return "message"
    if not request_input.model_dump(exclude_none=True):
        return "drain"
    return "input"


class HandOnMessage(BaseModel):
    """A webhook record's body that hands a request on: run it as one more turn request."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)

    kind: Literal["hand_on"]
    session_id: str = Field(min_length=1, description="The session the work belongs to.")
    input: Input = Field(description="The request's input; empty: run the next queued message.")
    principal: str | None = Field(default=None,
                                  description="Whose session it is (the request's principal).")

    @classmethod
    def of(cls, request: HandlerInput) -> HandOnMessage:
        """The record for a handed-on request (its session id in canonical form)."""
        if not request.session_id:
            raise ValueError("a hand-on needs the request's session id")
        return cls(kind="hand_on", session_id=normalize_session_id(request.session_id),
                   input=request.input, principal=request.principal)

    @property
    def work(self) -> Work:
        return work_of(self.input)

    def request(self) -> HandlerInput:
        """The turn request this record hands on."""
        return HandlerInput(session_id=self.session_id, input=self.input,
                            principal=self.principal)

    def body(self) -> str:
        """The record's JSON body (compact, fields in a fixed order: equal work, equal bytes)."""
        return json.dumps({
            "kind": self.kind,
            "sessionId": self.session_id,
            "input": self.input.model_dump(by_alias=True, mode="json", exclude_none=True),
            "principal": self.principal,
        }, separators=(",", ":"), ensure_ascii=False)

    def deduplication_id(self, origin: str | None = None) -> str:
        """SHA-256 of the body; a drain (no id of its own) also hashes its ``origin``."""
        data = self.body()
        if self.work == "drain" and origin:
            data += "\n" + origin
        return hashlib.sha256(data.encode()).hexdigest()


class QueueHandOn:
    """``App.hand_on`` on the webhook SQS FIFO queue (see the module docstring).

    ``client``: an SQS client (boto3's or botocore's); None builds one on the first hand-on.
    """

    def __init__(self, queue_url: str, *, client: Any = None) -> None:
        if not queue_url:
            raise ValueError("QueueHandOn needs the webhook queue's URL")
        self.queue_url = queue_url
        self._client = client

    @property
    def client(self) -> Any:
        """The ``sqs`` client (built on first use: nothing at cold start)."""
        if self._client is None:
            self._client = aws_client("sqs", retries={"mode": "standard", "max_attempts": 5})
        return self._client

    def send(self, body: str, *, group_id: str, deduplication_id: str) -> str | None:
        """Send one record to the queue (``SendMessage``): its SQS message id. Raises what the
        client raises; callers decide what a failed send means."""
        sent = self.client.send_message(QueueUrl=self.queue_url, MessageBody=body,
                                        MessageGroupId=group_id,
                                        MessageDeduplicationId=deduplication_id)
        return sent.get("MessageId")  # type: ignore[no-any-return]

    def send_message_params(self, request: HandlerInput) -> dict[str, Any]:
        """The ``SendMessage`` parameters for a handed-on request."""
        record = HandOnMessage.of(request)
        return {
            "QueueUrl": self.queue_url,
            "MessageBody": record.body(),
            "MessageGroupId": record.session_id,
            "MessageDeduplicationId": record.deduplication_id(_origin.get()),
        }

    def __call__(self, request: HandlerInput) -> None:
        """Send ``request`` to the queue; a failure is logged and counted, never raised."""
        work = work_of(request.input)
        keys = {"session_id": request.session_id, "hand_on": work,
                "retry_id": request.input.retry.retry_id if request.input.retry else None,
                "message_id": request.input.message_id}
        extra = {k: v for k, v in keys.items() if v is not None}
        try:
            params = self.send_message_params(request)
            sqs_id = self.send(params["MessageBody"], group_id=params["MessageGroupId"],
                               deduplication_id=params["MessageDeduplicationId"])
        except Exception:  # the turn has committed: report the loss, keep the response
            metrics.add_metric(name="HandOnsFailed", unit=MetricUnit.Count, value=1)
            logger.exception("hand-on not sent: the work stays undone until the session is "
                             "asked again", extra=extra)
            return
        metrics.add_metric(name="HandOnsSent", unit=MetricUnit.Count, value=1)
        logger.info("handed on to the webhook queue",
                    extra={**extra, "sqs_message_id": sqs_id})


def deployed_hand_on(env: Mapping[str, str] | None = None) -> QueueHandOn | None:
    """The webhook queue sender, when the deployment names the queue (``WEBHOOK_QUEUE_URL``)."""
    env = os.environ if env is None else env
    queue_url = env.get(QUEUE_URL_ENV)
    return QueueHandOn(queue_url) if queue_url else None
