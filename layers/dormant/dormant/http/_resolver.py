"""A Powertools REST resolver that several threads can share, and the API's error answers."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from dormant.errors import HTTP_STATUS
from dormant.http._wire import ErrorBody

__all__ = ["JSON", "Resolver", "error_response", "validation_response"]

JSON = "application/json"


def error_response(code: str, message: str, **extra: Any) -> Response[Any]:
    """A JSON error with the status :data:`HTTP_STATUS` gives ``code`` (500 if unlisted)."""
    body = ErrorBody(code=code, message=message, **extra)
    return Response(status_code=HTTP_STATUS.get(code, 500), content_type=JSON,
                    body=body.model_dump(by_alias=True, mode="json", exclude_none=True))


def validation_response(error: RequestValidationError) -> Response[Any]:
    errors = list(error.errors())
    if any(item.get("type") == "json_invalid" for item in errors):
        detail = next(item for item in errors if item.get("type") == "json_invalid")
        reason = (detail.get("ctx") or {}).get("error", "malformed JSON")
        return error_response("invalid_json", f"the request body is not valid JSON: {reason}")
    fields = []
    for item in errors:
        loc = [str(part) for part in item.get("loc", ()) if part != "body"]
        fields.append({"field": ".".join(loc) or "body", "message": str(item.get("msg", ""))})
    named = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return error_response("validation_error", f"invalid request: {named}", fields=fields)


class Resolver(APIGatewayRestResolver):
    """``APIGatewayRestResolver`` with per-thread request state, and a body-size guard.

    Powertools keeps the current event on the ``BaseRouter`` class: fine in Lambda (one request
    per process), wrong in a threaded server. Here the event, context and per-request dict live
    in a ``threading.local``, so ``dormant dev`` can serve the same resolver from many threads.
    """

    def __init__(self, *, max_body_bytes: int, **kwargs: Any) -> None:
        self._local = threading.local()
        self.max_body_bytes = max_body_bytes
        #: The app and REST handler the routes serve (``build_resolver`` sets them): what a
        #: local server runs handed-on work (``App.hand_on``) with.
        self.dormant_app: Any = None
        self.dormant_rest: Callable[..., Any] | None = None
        super().__init__(**kwargs)

    @property
    def current_event(self) -> Any:
        return self._local.current_event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._local.current_event = value

    @property
    def lambda_context(self) -> Any:
        return getattr(self._local, "lambda_context", None)

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._local.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        if not hasattr(self._local, "context"):
            self._local.context = {}
        return self._local.context  # type: ignore[no-any-return]

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        self._local.context = value

    @property
    def processed_stack_frames(self) -> list[str]:
        if not hasattr(self._local, "frames"):
            self._local.frames = []
        return self._local.frames  # type: ignore[no-any-return]

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._local.frames = value

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API Gateway REST proxy event (refusing oversize bodies first)."""
        size = _body_size(event)
        if size > self.max_body_bytes:
            response = error_response(
                "payload_too_large",
                f"the request body is {size} bytes; the limit is {self.max_body_bytes}")
            return {"statusCode": response.status_code, "body": _json_text(response.body),
                    "headers": {"Content-Type": JSON}, "isBase64Encoded": False}
        self.current_event = self._to_proxy_event(_json_content(event))
        self.lambda_context = context
        try:
            return self._build_response(self._resolve())
        finally:
            self.clear_context()  # type: ignore[no-untyped-call]


def _body_size(event: Mapping[str, Any]) -> int:
    body = event.get("body")
    if not body:
        return 0
    if event.get("isBase64Encoded"):
        return len(base64.b64decode(body))
    return len(body.encode()) if isinstance(body, str) else len(body)


def _json_content(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event with a form content type read as JSON: this API speaks only JSON, and
    ``curl -d`` labels JSON bodies ``application/x-www-form-urlencoded`` by default."""
    copy = dict(event)
    for key in ("headers", "multiValueHeaders"):
        headers = copy.get(key)
        if not headers:
            continue
        fixed = dict(headers)
        for name, value in headers.items():
            first = value[0] if isinstance(value, list) and value else value
            if name.lower() == "content-type" and isinstance(first, str) \
                    and first.startswith("application/x-www-form-urlencoded"):
                fixed[name] = [JSON] if isinstance(value, list) else JSON
        copy[key] = fixed
    return copy


def _json_text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
