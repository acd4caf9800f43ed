"""The ``webhook`` function: SQS FIFO records -> one turn request (or purge step) each.

A record's body is one of three kinds. A :class:`WebhookMessage` (``{sessionId, messageId,
text, principal}``) from trusted server code: a user message appended to its session, and a
turn. It may carry (or, without ``text`` and ``messageId``, be) ``toolResults: [{callId,
result, isError}]``: the results of deferred calls the session waits on (a job that finished,
a provider's callback), landed once each, after which the parked turn resumes.
``principal`` names the user the session belongs to (the Cognito ``sub`` the API knows
them by): a new session is created owned by them, and a message for a session another
principal owns does not land (it ends in the dead-letter queue). A
:class:`~hand_on.HandOnMessage` (``{"kind": "hand_on", sessionId, input, principal}``): work
another invocation handed on (``App.hand_on``: the rest of a session's inbox, a retry of a turn
cut by the deadline, a message whose turn was cut before anything was written), run as the turn
request it is. Senders set ``MessageGroupId`` to the session id (hand-ons use its canonical
form, ``session_…``), so one session's records run one at a time, in order. A
:class:`~purge.PurgeMessage` (``{"kind": "purge", sessionId, after}``): one step of clearing
what a deleted session left (``DynamoDBStore.purge``, see ``purge.py``); a step that returns a
cursor sends the next step's record before its own is done.

A message record lands when its turn committed, or when the session could not take it now
(waiting for a tool answer, failed, paused) and it went to the inbox (``queued``). One whose
message id is already in its session (a redelivery) counts as done, so it lands once.

A hand-on record is done when its turn landed or ended without needing another try: the run's
statuses (completed, yielded, queued, recorded, stopped, paused, interrupted), its message or
retry already in the session (``duplicate_message``, ``duplicate_retry``), a delegated
child's result its parent's call has already (``already_answered``), a retry whose
session no longer has a failed invocation (``nothing_to_retry``: it was retried or interrupted
meanwhile), a stop for an invocation that ended (``not_running``), and for a drain (empty
input) an inbox with nothing to run (``not_pending``) or a failed session
(``session_failed``: the inbox waits for the retry, which must not queue behind this record).
The turns' own drains and deadline cuts hand on through the same queue (``app.hand_on``).

A purge record is done when its step ran and the next step's record (if any) was sent; a
step that failed, or whose next record was not sent, fails the record: the step is idempotent,
and its redelivery sends the next record again under the same deduplication id (it lands once).

A record that cannot land (bad body, a turn or inbox write that did not commit, a session of
another principal) is reported in ``batchItemFailures``: SQS retries just that record (and
those after it in its message group, to keep the order), then moves it to the dead-letter
queue. The batch itself never fails: every record's body is parsed inside its own handling
(not by the batch processor, whose FIFO group-skipping would otherwise parse a skipped
record outside its error handling and let one bad body fail every record of the batch).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Json, Tag, model_validator
from pydantic.alias_generators import to_camel

from dormant._inputs import ToolResultInput
from dormant.aws import initialised
from dormant.aws.deployment import deployed_app
from dormant.aws.hand_on import KIND, HandOnMessage, handing_on_from
from dormant.aws.purge import KIND as PURGE
from dormant.aws.purge import PurgeMessage, QueuePurge, sends_raise
from dormant.aws.tracing import tracer as make_tracer
from dormant.errors import (
    AlreadyAnswered,
    DuplicateMessage,
    NotPending,
    NotRunning,
    RetryRefused,
    SessionFailed,
)
from dormant.handlers import HandlerInput, Input, RestResponse
from dormant.stores import DynamoDBStore

__all__ = ["HandOnMessage", "PurgeMessage", "RecordNotLanded", "WebhookMessage", "WebhookRecord",
           "handler", "record_handler"]

logger = Logger()
# The library logs to the standard "dormant" logger: give it this logger's JSON format and
# Lambda context, so session and invocation ids land in the same structured records.
copy_config_to_registered_loggers(source_logger=logger, include={"dormant"})
# Lambda's active tracing records every invocation; the X-Ray SDK only when opted into.
tracer = make_tracer()
metrics = Metrics()

#: Turn budget when ``DORMANT_TURN_TIMEOUT`` is unset, and the time kept for commit + reply.
DEFAULT_TURN_SECONDS = 60.0
COMMIT_MARGIN_SECONDS = 5.0

app, agent, settings = deployed_app()
turn = app.handler.rest(agent=agent, timeout=settings.turn_timeout)
#: Time a record needs: the turn's budget plus room to commit and answer (ms).
NEEDED_MS = int(((settings.turn_timeout or DEFAULT_TURN_SECONDS) + COMMIT_MARGIN_SECONDS) * 1000)


class WebhookMessage(BaseModel):
    """A record's body: a message for a session from trusted server code."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)

    session_id: str = Field(min_length=1, description="The session (created when new).")
    message_id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="Stable id of the message: a redelivery lands once (required with text).")
    text: str | None = Field(default=None, min_length=1,
                             description="The user message to append.")
    principal: str = Field(
        min_length=1, max_length=256,
        description="Whom the session belongs to (the user's Cognito sub): a new session is "
        "created owned by them; another principal's session is not touched.")
    tool_results: list[ToolResultInput] | None = Field(
        default=None, min_length=1,
        description="Results of deferred calls the session waits on: [{callId, result, "
        "isError}]; each lands once (a redelivery is done), then the parked turn resumes.")

    @model_validator(mode="after")
    def _something(self) -> WebhookMessage:
        if self.text is None and not self.tool_results:
            raise ValueError("a webhook message needs text (with messageId) or toolResults")
        if self.text is not None and self.message_id is None:
            raise ValueError("a webhook message with text needs a messageId")
        return self


def _kind(body: Any) -> Literal["hand_on", "message", "purge"]:
    """A body of ``kind`` purge is a purge step; one of any other ``kind`` a hand-on (an
    unknown kind fails as one); else a message."""
    if isinstance(body, PurgeMessage) or (isinstance(body, dict) and body.get("kind") == PURGE):
        return "purge"
    has_kind = "kind" in body if isinstance(body, dict) else isinstance(body, HandOnMessage)
    return "hand_on" if has_kind else "message"


#: A record's body: a message, (``"kind": "hand_on"``) a handed-on request, or (``"kind":
#: "purge"``) a purge step.
Body = Annotated[Annotated[HandOnMessage, Tag(KIND)] | Annotated[PurgeMessage, Tag(PURGE)]
                 | Annotated[WebhookMessage, Tag("message")], Discriminator(_kind)]


class WebhookRecord(SqsRecordModel):
    """An SQS record whose body is a JSON :class:`WebhookMessage`, :class:`HandOnMessage` or
    :class:`PurgeMessage`."""

    body: Json[Body]


class RecordNotLanded(Exception):
    """The record's message is not in its session: report it so SQS delivers it again."""


# skip_group_on_error: a failed record holds back only the later records of its own session.
# No model: the processor would validate the records of a skipped group outside its error
# handling (one bad body would fail the whole batch); record_handler validates each itself.
processor = SqsFifoPartialProcessor(skip_group_on_error=True)
# A batch whose every record failed is reported record by record too, not raised: raising
# would make the event source retry the batch as a whole (the FIFO constructor does not take
# this option, hence the attribute).
processor.raise_on_entire_batch_failure = False


@tracer.capture_method
def record_handler(record: SQSRecord | WebhookRecord,
                   lambda_context: LambdaContext | None = None) -> None:
    """Parse the record, run its turn request; raise unless its work is in the session (or
    done). A body that does not parse raises here, failing this record alone."""
    if isinstance(record, SQSRecord):
        record = WebhookRecord.model_validate(record.raw_event)
    body = record.body
    if isinstance(body, PurgeMessage):  # a bounded step (100 items): no turn budget to keep
        with handing_on_from(record.messageId):
            _purge(body)
        return
    if lambda_context is not None and lambda_context.get_remaining_time_in_millis() < NEEDED_MS:
        # Cut off mid-turn, the record would be redelivered anyway, after the whole visibility
        # timeout; reported now, it comes back sooner and nothing half-done is left.
        raise RecordNotLanded(f"{_describe(body)}: not enough time left in this invocation for "
                              "a turn; SQS will deliver it again")
    remaining = (lambda_context.get_remaining_time_in_millis() / 1000
                 if lambda_context is not None else None)
    # A redelivery of this record hands on what it hands on again: the same origin.
    with handing_on_from(record.messageId):
        if isinstance(body, HandOnMessage):
            _hand_on(body, remaining)
        else:
            _message(body, remaining)


def _message(message: WebhookMessage, remaining: float | None) -> None:
    with logger.append_context_keys(session_id=message.session_id,
                                    message_id=message.message_id):
        reply = turn(HandlerInput(session_id=message.session_id,
                                  input=Input(message=message.text, message_id=message.message_id,
                                              tool_results=message.tool_results),
                                  principal=message.principal),
                     remaining_time=remaining)
        _report(message, reply)


def _hand_on(record: HandOnMessage, remaining: float | None) -> None:
    request = record.request()
    ids = {"retry_id": request.input.retry.retry_id if request.input.retry else None,
           "message_id": request.input.message_id}
    with logger.append_context_keys(session_id=record.session_id, hand_on=record.work,
                                    **{k: v for k, v in ids.items() if v is not None}):
        reply = turn(request, remaining_time=remaining)
        _report_hand_on(record, reply)


def _purge(record: PurgeMessage) -> None:
    """One purge step; the next step's record sent before this one is done. Whatever fails
    raises: the record is delivered again, and the step (idempotent) runs again."""
    store = app.store
    if not isinstance(store, DynamoDBStore) or not isinstance(store.purge_later, QueuePurge):
        raise RecordNotLanded(f"purge record for session {record.session_id}: this deployment's "
                              "app does not purge over the webhook queue (a DynamoDBStore "
                              "with the queue as its purge_later)")
    with logger.append_context_keys(session_id=record.session_id, purge_after=record.after), \
            sends_raise():
        after = store.purge(record.session_id, record.after)
        if after is not None:
            store.purge_later.send(record.session_id, after)
    if after is None:
        metrics.add_metric(name="PurgesDone", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="PurgeSteps", unit=MetricUnit.Count, value=1)
    logger.info("purge step ran", extra={"session_id": record.session_id,
                                         "purge_after": record.after, "next": after})


def _describe(body: WebhookMessage | HandOnMessage) -> str:
    if isinstance(body, HandOnMessage):
        return f"hand-on ({body.work}) for session {body.session_id}"
    if body.message_id is None:
        calls = ", ".join(r.call_id for r in body.tool_results or ())
        return f"tool results for {calls}"
    return f"message {body.message_id}"


def _report(message: WebhookMessage, reply: RestResponse) -> None:
    if reply.landed:
        metrics.add_metric(name="WebhookMessagesLanded", unit=MetricUnit.Count, value=1)
        logger.info("webhook message landed", extra={"status": reply.status,
                                                     "commit_status": reply.commit_status})
        return
    if _redelivered(reply):
        metrics.add_metric(name="WebhookRedeliveries", unit=MetricUnit.Count, value=1)
        logger.info("webhook message already in session: redelivery, nothing to do")
        return
    raise RecordNotLanded(f"{_describe(message)} did not land in session "
                          f"{reply.session_id}: {reply.code or reply.commit_status}: "
                          f"{reply.error or reply.warning}")


def _redelivered(reply: RestResponse) -> bool:
    """The record's work is in the session already: its message id, or (a tool result
    delivered again) its call's result."""
    return reply.status == "error" and reply.code in (DuplicateMessage.code,
                                                      AlreadyAnswered.code)


#: Refusals that mean a hand-on's work is already done (or moot): nothing to try again. (A
#: delegated child's result handed on again finds its parent's call answered already.)
DONE_CODES = frozenset({DuplicateMessage.code, "duplicate_retry", RetryRefused.code,
                        NotRunning.code, AlreadyAnswered.code})
#: For a drain (empty input) also: nothing left in the inbox, or a failed session (its
#: queued messages wait for the retry, whose turn runs them).
DRAIN_DONE_CODES = frozenset({NotPending.code, SessionFailed.code})


def hand_on_done(record: HandOnMessage, reply: RestResponse) -> bool:
    """Whether a hand-on record's turn leaves nothing for a redelivery to do."""
    if reply.landed:
        return True
    if reply.status == "error":
        return reply.code in DONE_CODES or (
            record.work == "drain" and reply.code in DRAIN_DONE_CODES)
    # A run that ended without landing: done unless its commit failed or was dropped.
    return reply.commit_status not in ("failed", "superseded")


def _report_hand_on(record: HandOnMessage, reply: RestResponse) -> None:
    extra = {"status": reply.status, "commit_status": reply.commit_status, "code": reply.code}
    if not hand_on_done(record, reply):
        raise RecordNotLanded(f"{_describe(record)} did not land: "
                              f"{reply.code or reply.commit_status}: "
                              f"{reply.error or reply.warning}")
    if reply.landed:
        metrics.add_metric(name="HandOnsLanded", unit=MetricUnit.Count, value=1)
        logger.info("hand-on landed", extra=extra)
    else:
        metrics.add_metric(name="HandOnsAlreadyDone", unit=MetricUnit.Count, value=1)
        logger.info("hand-on had nothing (more) to do", extra=extra)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """An SQS FIFO batch -> ``{"batchItemFailures": [...]}`` (ReportBatchItemFailures)."""
    response = process_partial_response(event=event, record_handler=record_handler,
                                        processor=processor, context=context)
    metrics.add_metric(name="WebhookRecordsFailed", unit=MetricUnit.Count,
                       value=len(response["batchItemFailures"]))
    return dict(response)


initialised()  # last: what the cold start built is kept, collection resumes
