"""Every turn a function runs, as CloudWatch metrics (Powertools Metrics, EMF log lines).

:func:`~dormant.aws.deployment.deployed_app` sets :class:`TurnMetrics` as the app's meter, so
each request, once it ended (:mod:`dormant._measure`), adds to the metric set the function's
``@metrics.log_metrics`` prints at the end of its invocation. A streamed turn ends inside
the invocation too, so its counts are printed with it, whatever its response's trailers
said (Lambda counts a stream that ends in an error as a success: these are what see it).

Namespace ``POWERTOOLS_METRICS_NAMESPACE`` (the template's: ``Dormant``); dimensions
``service`` (``POWERTOOLS_SERVICE_NAME``) and ``FunctionName`` (the function's), which the
template's turn-failure alarms name. Per request:

- ``Turns``: a turn ran (or failed trying); one of ``TurnsCompleted``, ``TurnsYielded``,
  ``TurnsStopped``, ``TurnsPaused``, ``TurnsInterrupted``, ``TurnsDeadline`` (cut by its
  deadline, progress kept), ``TurnsAborted`` (its caller hung up) or ``TurnsFailed`` (a
  failure on the server side), and, for a failure, ``TurnsFailedByCode`` with a ``code``
  dimension (``model_error``, ``store_error``, ``run_error``…); ``RequestsRefused``: the
  client's mistake (a 4xx); ``TurnsHandedOn``: work went on to another invocation;
  ``TurnsDrained``: queued messages it ran after its own;
- ``ClaimsRefused``: claims another writer's progress refused first; ``CommitConflicts``: a
  commit another writer landed before (merged onto it, or superseded);
- ``ToolErrors``: tool calls that failed; ``ModelLatency`` (ms, one value per model call),
  ``ModelInputTokens`` and ``ModelOutputTokens``.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from dormant._measure import TurnMeasure

__all__ = ["FUNCTION_DIMENSION", "TurnMetrics"]

#: The dimension that names the function a metric came from.
FUNCTION_DIMENSION = "FunctionName"
_COUNT = MetricUnit.Count
#: The metric counting each outcome of a turn that ran.
_OUTCOME_METRIC = {"completed": "TurnsCompleted", "yielded": "TurnsYielded",
                   "stopped": "TurnsStopped", "paused": "TurnsPaused",
                   "interrupted": "TurnsInterrupted", "deadline": "TurnsDeadline",
                   "aborted": "TurnsAborted", "failed": "TurnsFailed"}


class TurnMetrics:
    """The app's meter on the deployed functions: each request's counts added to
    ``metrics`` (a Powertools ``Metrics``; its metric set is the function's)."""

    def __init__(self, metrics: Metrics | None = None, *,
                 function_name: str | None = None) -> None:
        self.metrics = metrics or Metrics()
        self.function_name = function_name or os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        if self.function_name:
            self.metrics.set_default_dimensions(**{FUNCTION_DIMENSION: self.function_name})

    def record(self, measure: TurnMeasure) -> None:
        add = self.metrics.add_metric
        if measure.outcome == "refused":
            add(name="RequestsRefused", unit=_COUNT, value=1)
        if measure.ran:
            add(name="Turns", unit=_COUNT, value=1)
            add(name=_OUTCOME_METRIC.get(measure.outcome, "TurnsCompleted"), unit=_COUNT,
                value=1)
        if measure.outcome == "failed":
            self._failed(measure.code or "run_error")
        for name, value in (("TurnsHandedOn", int(measure.handed_on)),
                            ("TurnsDrained", measure.drained),
                            ("ClaimsRefused", measure.claims_refused),
                            ("CommitConflicts", int(measure.commit_conflict)),
                            ("ToolErrors", measure.tool_errors)):
            if value:
                add(name=name, unit=_COUNT, value=value)
        for call in measure.model_calls:
            add(name="ModelLatency", unit=MetricUnit.Milliseconds, value=call.latency_ms)
        if measure.model_calls:
            add(name="ModelInputTokens", unit=_COUNT,
                value=sum(c.input_tokens for c in measure.model_calls))
            add(name="ModelOutputTokens", unit=_COUNT,
                value=sum(c.output_tokens for c in measure.model_calls))

    def _failed(self, code: str) -> None:
        """``TurnsFailedByCode`` for ``code``: a line of its own (its ``code`` dimension is
        not the function's other metrics')."""
        with single_metric(name="TurnsFailedByCode", unit=_COUNT, value=1,
                           namespace=self.metrics.namespace,
                           default_dimensions=self.metrics.default_dimensions) as metric:
            metric.add_dimension(name="code", value=code)
