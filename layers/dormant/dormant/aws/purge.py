"""Purge steps over the webhook queue: what a deleted session leaves is cleared in the background.

``DELETE /sessions/{id}`` retires the session in a fixed few calls (``DynamoDBStore.delete``)
and hands the rest of its partition to *purge steps* (``DynamoDBStore.purge``: each reads at
most 100 items, deletes those of deleted incarnations no fork reads, and returns the cursor of
the next step). :class:`QueuePurge` is the store's ``purge_later`` on the deployment: it sends
each step to the webhook SQS FIFO queue as a :class:`PurgeMessage` record::

    {"kind": "purge", "sessionId": "session_…", "after": "<cursor>" | null}

and the ``webhook`` function runs one step per record, sending the next step's record while
the step returns a cursor. ``MessageGroupId`` is the session id (a session's steps run one at
a time, behind its other records). ``MessageDeduplicationId`` is the SHA-256 of the session id
and the *origin* (the SQS record whose step sends it, or the Lambda request that deleted:
:func:`~dormant.aws.hand_on.handing_on_from`), not of the cursor: a step run again from the
same cursor returns a later one (what it deleted the first time is gone), so a redelivered
record's re-send of its next step lands once only because it is "the step after that
record"; and a session deleted again (a new one made under the id, then deleted, within the
queue's five-minute deduplication window) still gets its own purge. Without an origin (a send
outside any request) it is the SHA-256 of the body: the session id and the cursor.

A step is idempotent, so a record delivered twice, or cut half way, leaves nothing behind; and
it never deletes a live session's items, so a purge record for a session made again under the
id since clears only what the deleted incarnations left.

In the request that deletes, the session is already gone for every reader when the first step
is handed on: a failed send is logged and counted (``PurgesFailed``), never raised (the DELETE
answers as it does). What was not sent is asked for again: by a later ``DELETE`` of the id
(the store's delete of a deleted session hands the purge on again) and by ``list`` (``GET
/sessions``), which hands on the purge of a deleted session whose purge has not finished a
quarter hour after the delete.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant.aws.hand_on import QueueHandOn, origin

__all__ = ["KIND", "PurgeMessage", "QueuePurge", "sends_raise"]

#: The ``kind`` of a purge record.
KIND = "purge"

logger = Logger(child=True)
metrics = Metrics()

_raising: ContextVar[bool] = ContextVar("dormant_purge_sends_raise", default=False)


@contextmanager
def sends_raise() -> Iterator[None]:
    """Inside, a failed send raises (the webhook's step: its record fails, SQS delivers it
    again, and the step, idempotent, sends again)."""
    token = _raising.set(True)
    try:
        yield
    finally:
        _raising.reset(token)


class PurgeMessage(BaseModel):
    """A webhook record's body asking for one purge step of a deleted session's partition."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)

    kind: Literal["purge"]
    session_id: str = Field(min_length=1,
                            description="The session whose deleted incarnations to clear.")
    after: str | None = Field(default=None, min_length=1, max_length=1024,
                              description="The step's cursor (a sort key); null: from the start.")

    @classmethod
    def of(cls, session_id: str, after: str | None) -> PurgeMessage:
        return cls(kind="purge", session_id=session_id, after=after)

    def body(self) -> str:
        """The record's JSON body (compact, fields in a fixed order: equal steps, equal bytes)."""
        return json.dumps({"kind": self.kind, "sessionId": self.session_id, "after": self.after},
                          separators=(",", ":"), ensure_ascii=False)

    def deduplication_id(self, origin: str | None = None) -> str:
        """SHA-256 of the session id and ``origin`` (what sends it: a record, a request), or
        without one, of the body."""
        data = f"{self.kind}\n{self.session_id}\n{origin}" if origin else self.body()
        return hashlib.sha256(data.encode()).hexdigest()


class QueuePurge:
    """``DynamoDBStore.purge_later`` on the webhook queue (see the module docstring): the
    sending of :class:`~dormant.aws.hand_on.QueueHandOn` (its queue, its lazy client)."""

    def __init__(self, queue: QueueHandOn) -> None:
        self.queue = queue

    def send(self, session_id: str, after: str | None) -> str | None:
        """Send the step's record: its SQS message id. Raises what the send raises."""
        record = PurgeMessage.of(session_id, after)
        return self.queue.send(record.body(), group_id=session_id,
                               deduplication_id=record.deduplication_id(origin()))

    def __call__(self, session_id: str, after: str | None) -> None:
        """Send the step's record; a failure is logged and counted, never raised (but inside
        :func:`sends_raise`): the session is already deleted for every reader, and what was
        not sent is asked for again."""
        if _raising.get():
            self.send(session_id, after)
            return
        extra = {"session_id": session_id, "purge_after": after}
        try:
            sqs_id = self.send(session_id, after)
        except Exception:
            metrics.add_metric(name="PurgesFailed", unit=MetricUnit.Count, value=1)
            logger.exception("purge step not sent: the deleted session's items stay until "
                             "its purge is asked for again (DELETE, or GET /sessions)",
                             extra=extra)
            return
        metrics.add_metric(name="PurgesSent", unit=MetricUnit.Count, value=1)
        logger.info("purge step handed to the webhook queue",
                    extra={**extra, "sqs_message_id": sqs_id})
