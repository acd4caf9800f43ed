"""The ``api`` function: API Gateway REST events -> the routes of ``dormant.http``.

Built once per cold start, and only what a first request needs (no ``openai``: the model
imports it on its first call; no Swagger UI until ``/docs`` is asked for; no X-Ray SDK unless
opted into, see ``tracing.py``); ``handler`` is the resolver, wrapped in Powertools' Logger
(Lambda context, API Gateway request id as correlation id) and Metrics (cold start, and a
count of responses per status class: ``Responses2xx``/``4xx``/``5xx``).
The principal is the Cognito user (``claims.sub``) the API's authorizer established.
Work a request cannot finish within API Gateway's 29 s (the rest of a session's inbox, a turn
cut by the deadline) is handed on to the webhook queue (``app.hand_on``, see ``hand_on.py``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from dormant.aws import initialised
from dormant.aws.deployment import deployed_app
from dormant.aws.hand_on import handing_on_from
from dormant.aws.tracing import tracer as make_tracer
from dormant.http import build_resolver

__all__ = ["handler", "resolver"]

logger = Logger()
# The library logs to the standard "dormant" logger: give it this logger's JSON format and
# Lambda context, so session and invocation ids land in the same structured records.
copy_config_to_registered_loggers(source_logger=logger, include={"dormant"})
# Lambda's active tracing records every invocation; the X-Ray SDK only when opted into.
tracer = make_tracer()
metrics = Metrics()

app, agent, settings = deployed_app()
resolver = build_resolver(app, agent, require_principal=True, timeout=settings.turn_timeout)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One API Gateway REST proxy event -> one proxy response."""
    with handing_on_from(context.aws_request_id):
        response = resolver.resolve(event, context)
    metrics.add_metric(name=f"Responses{response['statusCode'] // 100}xx",
                       unit=MetricUnit.Count, value=1)
    return response


initialised()  # last: what the cold start built is kept, collection resumes
