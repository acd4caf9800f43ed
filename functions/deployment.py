"""The Bookings app as the Lambda functions serve it, built once per cold start.

Shared by ``api/app.py``, ``webhook/app.py`` and ``wake/app.py`` (Lambda puts this directory,
the functions' ``CodeUri``, on ``sys.path``). Everything comes from the environment the
template sets: the table and bucket (``DynamoDBStore.from_env``), and the model
(``OpenAIModel.from_settings``: its key is read from Secrets Manager/SSM, and the ``openai``
package imported, on the first model call, not here). Nothing else is built before a request
needs it: the scheduler's and the queue's boto3 clients come with their first use. With no
secret or parameter configured (``sam local``, tests) the sample's own default applies: OpenAI
when ``OPENAI_API_KEY`` is set, else its demo model.

Timers (SPEC §7): with ``DORMANT_WAKE_TARGET_ARN`` and ``DORMANT_SCHEDULER_ROLE_ARN`` set (the
template sets them, with ``DORMANT_SCHEDULE_GROUP`` and ``DORMANT_SCHEDULE_DLQ_ARN``), the app
hands committed timers to EventBridge Scheduler, whose schedules invoke the ``wake`` function.
Without them (tests that do not exercise timers, ``sam local``) timers stay recorded in their
session and nothing fires.

Hand-on: with ``WEBHOOK_QUEUE_URL`` set (the template sets it for every function), work a
request cannot finish in its invocation (the rest of an inbox, a turn cut by the deadline) is
sent to the webhook queue (``hand_on.QueueHandOn``) and runs in the ``webhook`` function.
Without it, ``app.hand_on`` stays None: a request drains its session's inbox itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from bookings import Bookings, build
from hand_on import deployed_hand_on

from dormant.schedulers import Scheduler
from dormant.settings import Settings
from dormant.stores import DynamoDBStore

__all__ = ["deployed_bookings", "deployed_scheduler"]


def deployed_bookings(env: Mapping[str, str] | None = None) -> tuple[Bookings, Settings]:
    """The Bookings app on the deployment's DynamoDB table, and the settings it was built from."""
    settings = Settings.from_env(env)
    store = DynamoDBStore.from_env(env)
    if settings.openai_secret or settings.openai_parameter:
        from dormant.models import OpenAIModel

        bookings = build(store=store, model=OpenAIModel.from_settings(settings), env=env)
    else:
        bookings = build(store=store, env=env)
    bookings.app.scheduler = deployed_scheduler(settings)
    bookings.app.hand_on = deployed_hand_on(env)
    return bookings, settings


def deployed_scheduler(settings: Settings) -> Scheduler | None:
    """EventBridge Scheduler targeting the wake function, when the deployment names one."""
    if not (settings.wake_target_arn and settings.scheduler_role_arn):
        return None
    from dormant.schedulers import EventBridgeScheduler

    return EventBridgeScheduler.from_settings(settings)
