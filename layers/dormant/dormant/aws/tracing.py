"""Tracing for the functions: Lambda's active tracing always, the X-Ray SDK when opted into.

``template.yaml`` sets ``Tracing: Active``: Lambda itself records a segment for every
invocation (its init and invoke time, errors, the function's ARN), with no package and no
code here. Subsegments inside it (one per AWS call, one per traced method: the Powertools
``Tracer``) need the AWS X-Ray SDK, which brings botocore along and costs 80-370 ms of cold
start, so it is opt-in: set ``DORMANT_XRAY_SDK=true`` on the functions and give them the
``XRaySdkLayer`` (or install ``dormant[tracer]``). Otherwise :func:`tracer` returns
:class:`Untraced`, whose decorators return the function they are given.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, cast

from dormant.settings import ENV, Settings

__all__ = ["Tracing", "Untraced", "tracer"]

F = TypeVar("F", bound=Callable[..., Any])


class Tracing(Protocol):
    """What the functions use of Powertools' ``Tracer``."""

    def capture_lambda_handler(self, lambda_handler: F) -> F: ...

    def capture_method(self, method: F) -> F: ...


class Untraced:
    """No X-Ray SDK: Lambda's active tracing records the invocation; nothing more to do."""

    def capture_lambda_handler(self, lambda_handler: F) -> F:
        return lambda_handler

    def capture_method(self, method: F) -> F:
        return method


def tracer(env: Mapping[str, str] | None = None) -> Tracing:
    """Powertools' ``Tracer`` when ``DORMANT_XRAY_SDK`` is true, else :class:`Untraced`."""
    if not Settings.from_env(env).xray_sdk:
        return Untraced()
    if importlib.util.find_spec("aws_xray_sdk") is None:
        raise ImportError(f"{ENV.XRAY_SDK}=true needs the aws-xray-sdk package: add "
                          "XRaySdkLayer to the function's Layers in template.yaml (or pip "
                          "install 'dormant[tracer]')")
    from aws_lambda_powertools import Tracer

    return cast(Tracing, Tracer())
