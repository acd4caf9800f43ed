"""The OpenAI key in Lambda: Secrets Manager or SSM through Powertools parameters.

Free of the ``openai`` package, so deployment code can read the key without importing it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from dormant.models._base import ModelError
from dormant.settings import Settings

__all__ = ["deployment_key", "openai_api_key_from_settings"]

_KEY_FIELDS = ("OPENAI_API_KEY", "openai_api_key", "api_key", "apiKey", "key")


def openai_api_key_from_settings(settings: Settings | None = None, *,
                                 max_age: int | None = None) -> str | None:
    """The OpenAI key from Secrets Manager (``DORMANT_OPENAI_SECRET``) or SSM
    (``DORMANT_OPENAI_PARAMETER``, a SecureString), or None when neither is configured.

    Read through Powertools parameters, which cache the value in the execution environment
    (``max_age`` seconds; default ``POWERTOOLS_PARAMETERS_MAX_AGE`` or 5 minutes), so warm
    invocations make no AWS call. The secret may be the bare key or a JSON object holding it
    under ``OPENAI_API_KEY`` / ``api_key`` (or as its only value).
    """
    settings = settings or Settings.from_env()
    if not settings.openai_secret and not settings.openai_parameter:
        return None
    from aws_lambda_powertools.utilities import parameters
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

    _share_the_library_session("secrets" if settings.openai_secret else "ssm")
    try:
        if settings.openai_secret:
            where = f"secret {settings.openai_secret}"
            raw = parameters.get_secret(settings.openai_secret, max_age=max_age)
        else:
            where = f"SSM parameter {settings.openai_parameter}"
            raw = parameters.get_parameter(cast(str, settings.openai_parameter), decrypt=True,
                                           max_age=max_age)
    except GetParameterError as error:
        raise ModelError(f"cannot read the OpenAI key from {where}: {error}",
                         code="auth_failed") from error
    return _key_from(raw if isinstance(raw, str) else bytes(raw).decode(), where)


def deployment_key(settings: Settings | None, options: dict[str, Any]) -> Settings:
    """Give an OpenAI adapter's ``options`` the deployment's key when the deployment names a
    secret or parameter and the caller gave neither ``client`` nor ``api_key``: a callable,
    so the key is read on the first call (not at import) and Powertools' cache serves the
    warm ones. Returns the settings it read."""
    settings = settings or Settings.from_env()
    if (options.get("client") is None and options.get("api_key") is None
            and (settings.openai_secret or settings.openai_parameter)):
        read = settings

        def key() -> str:
            value = openai_api_key_from_settings(read)
            assert value is not None
            return value

        options["api_key"] = key
    return settings


def _share_the_library_session(kind: str) -> None:
    """Give Powertools' default ``kind`` provider a client of the session every other client
    of the function comes from (``dormant._clients``): Powertools would otherwise build a
    session of its own, loading botocore's endpoint data and handlers a second time (tens of
    milliseconds of the first model call). Its providers stay Powertools' own, in its
    ``DEFAULT_PROVIDERS``, so its cache and ``parameters.clear_caches()`` work as before."""
    from aws_lambda_powertools.utilities import parameters
    from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS

    from dormant._clients import aws_client

    if kind in DEFAULT_PROVIDERS:
        return
    if kind == "secrets":
        DEFAULT_PROVIDERS[kind] = parameters.SecretsProvider(
            boto3_client=aws_client("secretsmanager"))
    else:
        DEFAULT_PROVIDERS[kind] = parameters.SSMProvider(boto3_client=aws_client("ssm"))


def _key_from(raw: str, where: str) -> str:
    text = raw.strip()
    if not text.startswith("{"):
        if not text:
            raise ModelError(f"the {where} is empty", code="auth_failed")
        return text
    try:
        data: Mapping[str, Any] = json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelError(f"the {where} looks like JSON but does not parse: {error.msg}",
                         code="auth_failed") from error
    for name in _KEY_FIELDS:
        if isinstance(data.get(name), str) and data[name]:
            return str(data[name])
    values = [v for v in data.values() if isinstance(v, str) and v]
    if len(values) == 1:
        return values[0]
    raise ModelError(f"the {where} is a JSON object without a key field: expected one of "
                     f"{', '.join(_KEY_FIELDS)} (found {', '.join(sorted(data)) or 'none'})",
                     code="auth_failed")
