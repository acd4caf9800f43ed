"""The ``wake`` function: an EventBridge Scheduler firing -> the timer's delivery + one turn.

Every schedule :class:`~dormant.schedulers.EventBridgeScheduler` creates targets this function
with the timer's :class:`~dormant.schedulers.TimerDelivery` as its input, and EventBridge
Scheduler passes a Lambda target's input as the event: the event *is* the delivery
(``{sessionId, name, fireAt, message | toolInput, messageId}``, see events/wake-timer.json).
The library's wake handler appends the timer's message (or tool answer) and runs the
agent's turn.

Outcomes. A delivery whose turn committed (or merged) is done, and so is one the session could
not take now (waiting for a tool answer, failed, paused): its message waits in the inbox
(``queued``). A ``stale_timer`` refusal is success too: the firing was already delivered
(Scheduler delivers at least once), or the timer was cancelled or replaced after this schedule
was made; nothing was written. Two deliveries of one firing may also run at once: the one
that loses the race (its message already in the session, or the timer gone from the head when
it commits) gets that same refusal from the library's wake handler, so a duplicate delivery
is never retried or dead-lettered. A claim's lease wake-up that finds nothing stranded to
take over (``recorded``, nothing written) is done as well. Anything else raises: a malformed
event, a turn that did not commit (superseded by a newer message, store failure), a bug.
Scheduler invokes Lambda asynchronously, so a raise is retried by Lambda's asynchronous invocation
(``EventInvokeConfig``), then lands in the wake dead-letter queue; that is safe because a
delivery that did not commit wrote nothing and its timer is still pending in the session.
(Scheduler's own retry policy and dead-letter queue cover invocations it could not make:
throttling, permissions, a missing function.)

Work the firing's request cannot finish in this invocation (the rest of the session's inbox, a
turn cut by the deadline) is handed on to the webhook queue (``app.hand_on``, see
``hand_on.py``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from dormant.aws import initialised
from dormant.aws.deployment import deployed_app
from dormant.aws.hand_on import handing_on_from
from dormant.aws.tracing import tracer as make_tracer
from dormant.errors import StaleTimer, describe_validation
from dormant.handlers import TurnResult
from dormant.schedulers import TimerDelivery, is_lease_timer

__all__ = ["InvalidTimerEvent", "TimerNotDelivered", "handler"]

logger = Logger()
# The library logs to the standard "dormant" logger: give it this logger's JSON format and
# Lambda context, so session and invocation ids land in the same structured records.
copy_config_to_registered_loggers(source_logger=logger, include={"dormant"})
# Lambda's active tracing records every invocation; the X-Ray SDK only when opted into.
tracer = make_tracer()
metrics = Metrics()

app, agent, settings = deployed_app()
wake = app.handler.wake(agent=agent, timeout=settings.turn_timeout)


class InvalidTimerEvent(ValueError):
    """The event is not a timer delivery (it did not come from a dormant schedule)."""


class TimerNotDelivered(Exception):
    """The firing's turn did not commit: raised so Lambda retries it, then dead-letters it."""


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One timer delivery -> a summary (``sessionId``, ``status``, ``commitStatus``, ``code``)."""
    try:
        delivery = TimerDelivery.model_validate(event)
    except ValidationError as error:
        metrics.add_metric(name="TimerEventsInvalid", unit=MetricUnit.Count, value=1)
        raise InvalidTimerEvent(f"not a timer delivery: {describe_validation(error)}") from error
    with (logger.append_context_keys(session_id=delivery.session_id, timer=delivery.name,
                                     fire_at=delivery.fire_at),
          handing_on_from(context.aws_request_id)):
        result = wake(delivery)
        return _report(delivery, result)


def _report(delivery: TimerDelivery, result: TurnResult) -> dict[str, Any]:
    summary = {"sessionId": result.session_id, "status": result.status,
               "commitStatus": result.commit_status, "code": result.code}
    if result.landed:
        metrics.add_metric(name="TimersDelivered", unit=MetricUnit.Count, value=1)
        logger.info("timer delivered", extra={"status": result.status,
                                              "commit_status": result.commit_status})
        return summary
    if result.status == "error" and result.code == StaleTimer.code:
        metrics.add_metric(name="TimersStale", unit=MetricUnit.Count, value=1)
        logger.info("timer no longer pending (a repeat firing, perhaps one that ran beside "
                    "this one and landed first, or cancelled/replaced): nothing to do")
        return summary
    if is_lease_timer(delivery.name) and result.status == "recorded" \
            and result.commit_status is None:  # a lease wake-up, nothing stranded: a no-op
        metrics.add_metric(name="TimersStale", unit=MetricUnit.Count, value=1)
        logger.info("lease wake-up: nothing to take over, nothing written")
        return summary
    metrics.add_metric(name="TimersNotDelivered", unit=MetricUnit.Count, value=1)
    raise TimerNotDelivered(f"timer {delivery.name!r} of session {delivery.session_id} did not "
                            f"land: {result.code or result.commit_status}: "
                            f"{result.error or result.warning}")


initialised()  # last: what the cold start built is kept, collection resumes
