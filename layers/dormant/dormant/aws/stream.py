"""The ``stream`` function: ``POST /turns`` and ``POST /agui`` streamed through API Gateway.

API Gateway invokes it with ``InvokeWithResponseStream`` (the integration's response transfer
mode ``STREAM``), behind the same Cognito authorizer and with the same proxy event as the
``api`` function; it serves the same routes (:func:`dormant.http.build_resolver`). What differs
is the way out: under the streaming runtime loop (:mod:`dormant.aws.runtime`, started by
``bootstrap-stream`` as the function's ``AWS_LAMBDA_EXEC_WRAPPER``), each AG-UI event, or each
turn event of ``POST /turns`` with ``Accept: text/event-stream``, leaves as it happens, and a
turn may run past API Gateway's 29 s buffered limit up to the function's timeout (it ends as a
retryable ``deadline`` failure, progress kept and handed on, before the platform would cut it).
JSON answers (a refusal, ``POST /turns`` without the ``Accept``) go out whole, in the same
stream.

``handler`` is the buffered twin (what the managed runtime calls when no wrapper is set, and
what ``sam local invoke`` runs): the same routes, the whole body at the end, like ``api``.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from dormant.aws import initialised
from dormant.aws.deployment import deployed_app
from dormant.aws.hand_on import handing_on_from
from dormant.aws.tracing import tracer as make_tracer
from dormant.http import SSE_WRITER_ATTRIBUTE, build_resolver

if TYPE_CHECKING:
    from dormant.aws.runtime import ResponseStream

__all__ = ["handler", "resolver", "stream_handler"]

logger = Logger()
copy_config_to_registered_loggers(source_logger=logger, include={"dormant"})
tracer = make_tracer()
metrics = Metrics()

app, agent, settings = deployed_app()
resolver = build_resolver(app, agent, require_principal=True, timeout=settings.turn_timeout)

#: The headers of a streamed answer (API Gateway adds none to a streamed proxy response).
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "Access-Control-Allow-Origin": "*"}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One API Gateway REST proxy event -> one proxy response (streamed ones already sent)."""
    with handing_on_from(context.aws_request_id):
        response = resolver.resolve(event, context)
    metrics.add_metric(name=f"Responses{response['statusCode'] // 100}xx",
                       unit=MetricUnit.Count, value=1)
    return response


def stream_handler(event: dict[str, Any], context: Any, stream: ResponseStream) -> None:
    """The streaming runtime loop's handler: an SSE route writes each event to ``stream`` as
    it is produced (a write that finds the stream broken stops the turn); any other answer is
    sent whole."""
    setattr(context, SSE_WRITER_ATTRIBUTE, _EventWriter(stream))
    response = handler(event, context)
    if stream.started:
        stream.finish()
        return
    multi = response.get("multiValueHeaders") or {}
    headers = {k: v for k, v in (response.get("headers") or {}).items() if k not in multi}
    stream.start(int(response["statusCode"]), headers, multi, response.get("cookies"))
    body = response.get("body") or ""
    stream.write(base64.b64decode(body) if response.get("isBase64Encoded") else body)
    stream.finish()


class _EventWriter:
    """What an SSE route calls with each chunk: the first one starts the 200 response."""

    def __init__(self, stream: ResponseStream) -> None:
        self._stream = stream

    def __call__(self, text: str) -> None:
        if not self._stream.started:
            self._stream.start(200, SSE_HEADERS)
        self._stream.write(text)


initialised()  # last: what the cold start built is kept, collection resumes
