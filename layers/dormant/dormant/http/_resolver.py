"""A Powertools REST resolver that several threads can share, and the API's error answers."""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder, Route
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from dormant.errors import HTTP_STATUS, public_message
from dormant.http._wire import ErrorBody

__all__ = ["JSON", "MAX_JSON_DEPTH", "Resolver", "error_response", "strict_json",
           "validation_response"]

JSON = "application/json"

#: Deepest nesting of arrays and objects a request body may have (deeper is ``invalid_json``):
#: far past any real request, well short of what makes Python's recursion give out later.
MAX_JSON_DEPTH = 64

log = logging.getLogger("dormant.http")


def error_response(code: str, message: str, *, request_id: str | None = None,
                   headers: Mapping[str, str] | None = None, **extra: Any) -> Response[Any]:
    """A JSON error with the status :data:`HTTP_STATUS` gives ``code`` (500 if unlisted).

    A server-side failure (5xx) is logged here, in full, with ``request_id``; its answer says
    only what failed and under which request id (see :func:`dormant.errors.public_message`).
    """
    status = HTTP_STATUS.get(code, 500)
    if status >= 500:
        log.error("request %s failed: %s: %s", request_id, code, message,
                  extra={"request_id": request_id, "error_code": code})
        message = public_message(code, message, request_id)
        extra = {"session_id": extra.get("session_id"), "request_id": request_id,
                 "retryable": extra.get("retryable"), "handed_on": extra.get("handed_on")}
    body = ErrorBody(code=code, message=message, **extra)
    return Response(status_code=status, content_type=JSON, headers=dict(headers or {}),
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


def strict_json(text: str) -> Any:
    """``json.loads`` for request bodies, refusing (``JSONDecodeError``, so: 400
    ``invalid_json``) what Python would parse but nothing downstream can hold: ``NaN`` and
    ``Infinity``, numbers out of float range or past Python's digit limit, nesting deeper than
    :data:`MAX_JSON_DEPTH`, and ``\\u`` escapes naming half a surrogate pair (not a character:
    no store could encode it)."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError:
        raise
    except _Refused as error:
        raise json.JSONDecodeError(str(error), text, 0) from error
    except ValueError as error:  # an integer past Python's digit limit
        raise json.JSONDecodeError("a number has too many digits", text, 0) from error
    except RecursionError as error:
        raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels", text,
                                   0) from error
    if _depth(value) > MAX_JSON_DEPTH:
        raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels", text, 0)
    if "\\u" in text.lower():
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError as error:
            raise json.JSONDecodeError("a \\u escape names half of a surrogate pair, not a "
                                       "character", text, 0) from error
    return value


class _Refused(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _Refused(f"the number {text[:40]} is out of range")
    return number


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item \
            if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_JSON_DEPTH:
            stack.extend((child, level + 1) for child in children)
    return deepest


class Resolver(APIGatewayRestResolver):
    """``APIGatewayRestResolver`` with per-thread request state, and the transport checks.

    Powertools keeps the current event on the ``BaseRouter`` class: fine in Lambda (one request
    per process), wrong in a threaded server. Here the event, context and per-request dict live
    in a ``threading.local``, so ``dormant dev`` can serve the same resolver from many threads.

    Before a request reaches its route, :meth:`resolve` refuses what no route should see: a
    body past ``max_body_bytes`` (413 ``payload_too_large``), a body in another media type
    than JSON (415 ``unsupported_media_type``; no content type at all is read as JSON, as
    ``curl --json`` and most clients send it), and a body that is not UTF-8 text, or not
    valid base64 when marked so (400 ``invalid_body``). A known path asked with a method it
    does not serve is 405 ``method_not_allowed`` with ``Allow`` (see :meth:`allowed_methods`).

    Swagger UI (:meth:`enable_swagger`) is set up by the first request to its path: Powertools'
    set-up imports its OpenAPI models, which no other request needs (tens of milliseconds of
    every Lambda cold start otherwise).
    """

    def __init__(self, *, max_body_bytes: int, **kwargs: Any) -> None:
        self._local = threading.local()
        self.max_body_bytes = max_body_bytes
        #: Paths whose routes also read binary bodies of these media type prefixes (``POST
        #: /voice``: ``audio/``); such a body reaches its route base64-encoded.
        self.binary_bodies: dict[str, tuple[str, ...]] = {}
        #: The app and REST handler the routes serve (``build_resolver`` sets them): what a
        #: local server runs handed-on work (``App.hand_on``) with.
        self.dormant_app: Any = None
        self.dormant_rest: Callable[..., Any] | None = None
        #: Completes the generated OpenAPI description (a dict, changed in place) with what
        #: the route signatures cannot say; ``/``, ``/docs`` and any other reader see it.
        self.describe: Callable[[dict[str, Any]], None] | None = None
        kwargs.setdefault("json_body_deserializer", strict_json)
        super().__init__(**kwargs)
        self._swagger: tuple[str, dict[str, Any]] | None = None
        self._swagger_lock = threading.Lock()

    def enable_swagger(self, *, path: str = "/swagger", **options: Any) -> None:
        """Serve Swagger UI at ``path`` (Powertools' ``enable_swagger``, ``options`` as there),
        set up when a request first asks for ``path``."""
        with self._swagger_lock:
            self._swagger = (path.rstrip("/") or "/", options)

    def _swagger_for(self, path: str) -> None:
        """Set Swagger UI up now if ``path`` is its path and it is not yet."""
        pending = self._swagger
        if pending is None or (path.rstrip("/") or "/") != pending[0]:
            return
        with self._swagger_lock:
            if self._swagger is pending:
                super().enable_swagger(path=pending[0], **pending[1])
                self._swagger = None

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        if self.describe is None:
            return schema
        data = schema.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.describe(data)
        return type(schema).model_validate(data)

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

    def allowed_methods(self, path: str) -> list[str]:
        """The methods the routes serve at ``path`` (empty: an unknown path), sorted."""
        self._swagger_for(self._remove_prefix(path))
        return sorted({route.method for route in self._routes()
                       if route.rule.match(self._remove_prefix(path))})

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Answer one API Gateway REST proxy event (after the transport checks)."""
        self.lambda_context = context
        try:
            route = self._route_of(event)
            binary = self.binary_bodies.get(self._remove_prefix(str(event.get("path") or "/")),
                                            ())
            refusal = None if route is None else _refusal(event, self.max_body_bytes, binary)
            if isinstance(refusal, Response):
                self.current_event = self._to_proxy_event(dict(event, body=None))
                assert route is not None
                return self._build_response(ResponseBuilder(refusal, self._serializer, route))
            self.current_event = self._to_proxy_event(refusal if refusal is not None
                                                      else dict(event))
            return self._build_response(self._resolve())
        finally:
            self.clear_context()  # type: ignore[no-untyped-call]

    def _routes(self) -> list[Route]:
        # Powertools keeps its route table in these two lists and offers no lookup by path.
        return [*self._static_routes, *self._dynamic_routes]

    def _route_of(self, event: Mapping[str, Any]) -> Route | None:
        method = str(event.get("httpMethod") or "").upper()
        path = self._remove_prefix(str(event.get("path") or "/"))
        self._swagger_for(path)
        return next((route for route in self._routes()
                     if route.method == method and route.rule.match(path)), None)


def _refusal(event: Mapping[str, Any], limit: int, binary: tuple[str, ...] = ()
             ) -> Response[Any] | dict[str, Any] | None:
    """Why a routed request's body is refused (a response), or the event with its body as
    checked text (a dict), or None when it has no body. A body whose media type starts with
    one of ``binary`` is checked for size only and passed on base64-encoded."""
    body = event.get("body")
    if not body:
        return None
    if event.get("isBase64Encoded"):
        try:
            data = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return error_response("invalid_body", "the request body is marked base64 but is "
                                  "not valid base64")
    elif isinstance(body, str):
        try:
            data = body.encode()
        except UnicodeEncodeError:  # lone surrogates: not text any store can hold
            return error_response("invalid_body", "the request body is not UTF-8 text")
    else:
        data = bytes(body)
    if len(data) > limit:
        return error_response("payload_too_large",
                              f"the request body is {len(data)} bytes; the limit is {limit}")
    media = _content_type(event)
    kind = media.split(";", 1)[0].strip().lower()
    if binary and kind.startswith(binary):
        return dict(event, body=base64.b64encode(data).decode(), isBase64Encoded=True)
    if media and kind != JSON:
        return error_response("unsupported_media_type",
                              f"this API reads only {JSON} request bodies, not {media[:80]}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return error_response("invalid_body", f"the request body is not UTF-8 text (byte "
                              f"{error.start} is not part of a UTF-8 character)")
    checked = dict(event, body=text, isBase64Encoded=False)
    if media:  # media types are case-insensitive; Powertools compares them as written
        for key in ("headers", "multiValueHeaders"):
            headers = event.get(key)
            if headers:
                checked[key] = {name: ([JSON] if isinstance(value, list) else JSON)
                                if name.lower() == "content-type" else value
                                for name, value in headers.items()}
    return checked


def _content_type(event: Mapping[str, Any]) -> str:
    for key in ("headers", "multiValueHeaders"):
        for name, value in (event.get(key) or {}).items():
            if name.lower() == "content-type":
                first = value[0] if isinstance(value, list) and value else value
                return first.strip() if isinstance(first, str) else ""
    return ""
