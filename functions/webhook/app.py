"""The ``webhook`` function: SQS FIFO records -> a server-appended user message and one turn each.

Each record's body is a :class:`WebhookMessage` (``{sessionId, messageId, text}``); senders set
``MessageGroupId`` to the session id, so one session's messages run one at a time, in order.
A record whose message id is already in its session (a redelivery) counts as done, so it lands
once. A record that cannot land (bad body, a session waiting for a tool answer, a turn that did
not commit) is reported in ``batchItemFailures``: SQS retries just that record (and those after
it in its message group, to keep the order), then moves it to the dead-letter queue. The batch
itself never fails.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from deployment import deployed_bookings
from pydantic import BaseModel, ConfigDict, Field, Json
from pydantic.alias_generators import to_camel

from dormant.errors import DuplicateMessage
from dormant.handlers import HandlerInput, Input, RestResponse

__all__ = ["RecordNotLanded", "WebhookMessage", "WebhookRecord", "handler", "record_handler"]

logger = Logger()
# The library logs to the standard "dormant" logger: give it this logger's JSON format and
# Lambda context, so session and invocation ids land in the same structured records.
copy_config_to_registered_loggers(source_logger=logger, include={"dormant"})
tracer = Tracer()
metrics = Metrics()

#: Turn budget when ``DORMANT_TURN_TIMEOUT`` is unset, and the time kept for commit + reply.
DEFAULT_TURN_SECONDS = 60.0
COMMIT_MARGIN_SECONDS = 5.0

(app, concierge), settings = deployed_bookings()
turn = app.handler.rest(agent=concierge, timeout=settings.turn_timeout)
#: Time a record needs: the turn's budget plus room to commit and answer (ms).
NEEDED_MS = int(((settings.turn_timeout or DEFAULT_TURN_SECONDS) + COMMIT_MARGIN_SECONDS) * 1000)


class WebhookMessage(BaseModel):
    """A record's body: a message for a session from trusted server code."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)

    session_id: str = Field(min_length=1, description="The session (created when new).")
    message_id: str = Field(min_length=1, max_length=128,
                            description="Stable id of the message: a redelivery lands once.")
    text: str = Field(min_length=1, description="The user message to append.")


class WebhookRecord(SqsRecordModel):
    """An SQS record whose body is a JSON :class:`WebhookMessage`."""

    body: Json[WebhookMessage]


class RecordNotLanded(Exception):
    """The record's message is not in its session: report it so SQS delivers it again."""


# skip_group_on_error: a failed record holds back only the later records of its own session.
processor = SqsFifoPartialProcessor(model=WebhookRecord, skip_group_on_error=True)
# A batch whose every record failed is reported record by record too, not raised: raising
# would make the event source retry the batch as a whole (the FIFO constructor does not take
# this option, hence the attribute).
processor.raise_on_entire_batch_failure = False


@tracer.capture_method
def record_handler(record: WebhookRecord, lambda_context: LambdaContext | None = None) -> None:
    """Append the record's message and run a turn; raise unless the message is in the session."""
    message = record.body
    if lambda_context is not None and lambda_context.get_remaining_time_in_millis() < NEEDED_MS:
        # Cut off mid-turn, the record would be redelivered anyway, after the whole visibility
        # timeout; reported now, it comes back sooner and nothing half-done is left.
        raise RecordNotLanded(f"message {message.message_id}: not enough time left in this "
                              "invocation for a turn; SQS will deliver it again")
    with logger.append_context_keys(session_id=message.session_id,
                                    message_id=message.message_id):
        remaining = (lambda_context.get_remaining_time_in_millis() / 1000
                     if lambda_context is not None else None)
        reply = turn(HandlerInput(session_id=message.session_id,
                                  input=Input(message=message.text, message_id=message.message_id)),
                     remaining_time=remaining)
        _report(message, reply)


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
    raise RecordNotLanded(f"message {message.message_id} did not land in session "
                          f"{reply.session_id}: {reply.code or reply.commit_status}: "
                          f"{reply.error or reply.warning}")


def _redelivered(reply: RestResponse) -> bool:
    return reply.status == "error" and reply.code == DuplicateMessage.code


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
