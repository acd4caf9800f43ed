"""The app as the Lambda functions serve it, built once per cold start.

Shared by :mod:`dormant.aws.api`, :mod:`~dormant.aws.webhook` and :mod:`~dormant.aws.wake`.
Which app is the one setting ``DORMANT_APP`` (an app spec, see :mod:`dormant._appspec`:
``module:attribute`` or ``file.py``, naming ``build(store=..., model=...) -> (app, agent)``;
default: the Bookings sample, ``dormant.samples.bookings:build``). Everything else comes from
the environment the template sets: the table and bucket (``DynamoDBStore.from_env``), and the
model (:func:`deployed_model`: ``BedrockModel.from_settings`` when ``DORMANT_BEDROCK_MODEL``
names one, its bedrock-runtime client made on the first model call; else
``OpenAIModel.from_settings``, its key read from Secrets Manager/SSM, and the ``openai``
package imported, on the first model call, not here). Nothing else is built before a request
needs it: the scheduler's and the queue's boto3 clients come with their first use. With no
model configured (a keyless deploy: the template's ``OpenAISecretName`` and
``BedrockModelId`` left empty; ``sam local``; tests) the app's own default model applies (the
sample's: OpenAI when ``OPENAI_API_KEY`` is set, else its demo model), and the cold start logs
a warning saying so.

Timers: with ``DORMANT_WAKE_TARGET_ARN`` and ``DORMANT_SCHEDULER_ROLE_ARN`` set (the
template sets them, with ``DORMANT_SCHEDULE_GROUP`` and ``DORMANT_SCHEDULE_DLQ_ARN``), the app
hands committed timers to EventBridge Scheduler, whose schedules invoke the ``wake`` function.
Without them (tests that do not exercise timers, ``sam local``) timers stay recorded in their
session and nothing fires.

Metrics: every request a function serves is counted (:class:`~dormant.aws.metrics.TurnMetrics`,
the app's meter): turns by outcome, failures by code, claims refused, commit conflicts, tool
errors, model latency and tokens, printed with the function's own metrics.

Hand-on: with ``WEBHOOK_QUEUE_URL`` set (the template sets it for every function), work a
request cannot finish in its invocation (the rest of an inbox, a turn cut by the deadline) is
sent to the webhook queue (``hand_on.QueueHandOn``) and runs in the ``webhook`` function.
Without it, ``app.hand_on`` stays None: a request drains its session's inbox itself.
With it, a deleted session's purge steps go there too (``store.purge_later``, see
``purge.QueuePurge``); without it they run in the request that deletes.

Alarms: the template passes its ``AlarmTopicArn`` as ``DORMANT_ALARM_TOPIC``; set but empty,
the stack's alarms notify nobody, and each cold start logs a warning saying so (unset, as in
tests and ``sam local``, nothing is said).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import NamedTuple

from dormant._appspec import build_app
from dormant.agent import Agent
from dormant.app import App
from dormant.aws.hand_on import deployed_hand_on
from dormant.aws.metrics import TurnMetrics
from dormant.aws.purge import QueuePurge
from dormant.models import Model
from dormant.schedulers import Scheduler
from dormant.settings import ENV, Settings
from dormant.stores import DynamoDBStore

__all__ = ["Deployed", "deployed_app", "deployed_model", "deployed_scheduler",
           "warn_if_alarms_notify_nobody"]

log = logging.getLogger("dormant.aws")


class Deployed(NamedTuple):
    """What a function serves: ``app, agent, settings = deployed_app()``."""

    app: App
    agent: Agent
    settings: Settings


def deployed_app(env: Mapping[str, str] | None = None) -> Deployed:
    """The app ``DORMANT_APP`` names on the deployment's DynamoDB table, its scheduler and
    hand-on wired, with the settings it was built from."""
    settings = Settings.from_env(env)
    warn_if_alarms_notify_nobody(os.environ if env is None else env)
    store = DynamoDBStore.from_env(env)
    model = deployed_model(settings)
    app, agent = build_app(settings.app, store=store, model=model)
    if model is None:
        log.warning("no model configured (DORMANT_BEDROCK_MODEL, DORMANT_OPENAI_SECRET and "
                    "DORMANT_OPENAI_PARAMETER are empty): %s serves on its own default model, "
                    "%s", settings.app, type(agent.model).__name__)
    app.scheduler = deployed_scheduler(settings)
    app.meter = TurnMetrics()  # every turn, as CloudWatch metrics (EMF)
    app.hand_on = deployed_hand_on(env)
    if app.hand_on is not None:  # a deleted session's purge steps run in the webhook function
        store.purge_later = QueuePurge(app.hand_on)
    return Deployed(app, agent, settings)


def deployed_model(settings: Settings) -> Model | None:
    """The model the deployment names: Bedrock when ``DORMANT_BEDROCK_MODEL`` is set (the
    template's ``BedrockModelId``; the functions' role is its credential), else OpenAI when a
    key's secret or parameter is named, else None (the app's own default). Built here, it
    opens no connection: its client is made on the first model call."""
    if settings.bedrock_model:
        from dormant.models import BedrockModel

        return BedrockModel.from_settings(settings)
    if settings.openai_secret or settings.openai_parameter:
        from dormant.models import OpenAIModel

        return OpenAIModel.from_settings(settings)
    return None


def deployed_scheduler(settings: Settings) -> Scheduler | None:
    """EventBridge Scheduler targeting the wake function, when the deployment names one."""
    if not (settings.wake_target_arn and settings.scheduler_role_arn):
        return None
    from dormant.schedulers import EventBridgeScheduler

    return EventBridgeScheduler.from_settings(settings)


def warn_if_alarms_notify_nobody(env: Mapping[str, str]) -> bool:
    """Log a warning when the deployment names no alarm topic (``DORMANT_ALARM_TOPIC`` set
    and empty: the template's ``AlarmTopicArn`` left empty); True if it did."""
    if env.get(ENV.ALARM_TOPIC, None) != "":
        return False
    log.warning("the stack's CloudWatch alarms notify nobody (%s is empty): a failing turn, a "
                "stuck queue or a throttled function changes an alarm's state and tells no one; "
                "deploy with AlarmTopicArn set to an SNS topic", ENV.ALARM_TOPIC)
    return True
