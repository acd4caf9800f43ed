"""Configuration from the environment: one frozen object, variable names in one place.

Precedence everywhere: an explicit argument, then the environment, then the default. Tests
pass a dict to :meth:`Settings.from_env` instead of mutating ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ENV", "Settings"]

_TRUE = frozenset({"1", "true", "yes", "on"})


class ENV:
    """Environment variable names dormant reads."""

    TABLE = "DORMANT_TABLE"
    BUCKET = "DORMANT_BUCKET"
    SESSION_TTL_DAYS = "DORMANT_SESSION_TTL_DAYS"
    OFFLOAD_ABOVE = "DORMANT_OFFLOAD_ABOVE"  # bytes: larger events go to the S3 bucket
    OPENAI_MODEL = "DORMANT_OPENAI_MODEL"
    OPENAI_SECRET = "DORMANT_OPENAI_SECRET"  # Secrets Manager name/ARN holding the API key
    OPENAI_PARAMETER = "DORMANT_OPENAI_PARAMETER"  # or an SSM SecureString parameter name
    OPENAI_API_KEY = "OPENAI_API_KEY"
    OPENAI_BASE_URL = "OPENAI_BASE_URL"
    BEDROCK_MODEL = "DORMANT_BEDROCK_MODEL"  # a Bedrock model or inference profile id
    TURN_TIMEOUT = "DORMANT_TURN_TIMEOUT"
    DB_PATH = "DORMANT_DB"
    SCHEDULE_GROUP = "DORMANT_SCHEDULE_GROUP"  # EventBridge Scheduler group for timers
    WAKE_TARGET_ARN = "DORMANT_WAKE_TARGET_ARN"  # the wake function's ARN (schedules' target)
    SCHEDULER_ROLE_ARN = "DORMANT_SCHEDULER_ROLE_ARN"  # role Scheduler assumes to invoke it
    SCHEDULE_DLQ_ARN = "DORMANT_SCHEDULE_DLQ_ARN"  # SQS queue for deliveries that failed
    XRAY_SDK = "DORMANT_XRAY_SDK"  # "true": the Lambda functions trace with the X-Ray SDK
    # "true": OpenTelemetry spans carry message contents (the GenAI conventions' switch)
    OTEL_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    APP = "DORMANT_APP"  # the app the Lambda functions serve: module:attribute or file.py
    ALARM_TOPIC = "DORMANT_ALARM_TOPIC"  # SNS topic the stack's alarms notify ("" : none)


@dataclass(frozen=True)
class Settings:
    """Deployment settings (read once, at cold start)."""

    table: str | None = None
    bucket: str | None = None
    session_ttl_days: int | None = None
    #: Events whose JSON is larger than this many bytes go to the offload bucket (``bucket``)
    #: and the ledger keeps a pointer; None (``0`` or unset): only what one DynamoDB
    #: transaction cannot hold.
    offload_above: int | None = None
    openai_model: str = "gpt-5.6-luna"
    openai_secret: str | None = None
    openai_parameter: str | None = None
    #: The Bedrock model (or inference profile) ``BedrockModel.from_settings()`` serves.
    bedrock_model: str | None = None
    turn_timeout: float | None = None
    db_path: str = "dormant.db"
    schedule_group: str | None = None
    wake_target_arn: str | None = None
    scheduler_role_arn: str | None = None
    schedule_dlq_arn: str | None = None
    #: Trace with the AWS X-Ray SDK (Powertools ``Tracer``: a subsegment per AWS call and per
    #: traced method) besides Lambda's own active tracing; needs the ``aws-xray-sdk`` package.
    xray_sdk: bool = False
    #: The app the Lambda functions serve (an app spec: ``module:attribute`` or ``file.py``
    #: naming ``build(store=..., model=...) -> (app, agent)``); default: the Bookings sample.
    app: str = "dormant.samples.bookings:build"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        ttl = env.get(ENV.SESSION_TTL_DAYS)
        timeout = env.get(ENV.TURN_TIMEOUT)
        return cls(
            table=env.get(ENV.TABLE) or None,
            bucket=env.get(ENV.BUCKET) or None,
            session_ttl_days=int(ttl) if ttl else None,
            offload_above=_offload_above(env.get(ENV.OFFLOAD_ABOVE)),
            openai_model=env.get(ENV.OPENAI_MODEL) or cls.openai_model,
            openai_secret=env.get(ENV.OPENAI_SECRET) or None,
            openai_parameter=env.get(ENV.OPENAI_PARAMETER) or None,
            bedrock_model=(env.get(ENV.BEDROCK_MODEL) or "").strip() or None,
            turn_timeout=float(timeout) if timeout else None,
            db_path=env.get(ENV.DB_PATH) or cls.db_path,
            schedule_group=env.get(ENV.SCHEDULE_GROUP) or None,
            wake_target_arn=env.get(ENV.WAKE_TARGET_ARN) or None,
            scheduler_role_arn=env.get(ENV.SCHEDULER_ROLE_ARN) or None,
            schedule_dlq_arn=env.get(ENV.SCHEDULE_DLQ_ARN) or None,
            xray_sdk=(env.get(ENV.XRAY_SDK) or "").strip().lower() in _TRUE,
            app=(env.get(ENV.APP) or "").strip() or cls.app,
        )


def _offload_above(raw: str | None) -> int | None:
    """``DORMANT_OFFLOAD_ABOVE``: a whole number of bytes; ``0`` or unset: None."""
    text = (raw or "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{ENV.OFFLOAD_ABOVE} must be a whole number of bytes (0: offload "
                         f"only what one DynamoDB transaction cannot hold), got {raw!r}")
    return int(text) or None
