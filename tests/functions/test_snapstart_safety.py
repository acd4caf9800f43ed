"""What SnapStart snapshots is a function's initialized environment: its imports and the app
built at import. Nothing made there may be unique to one environment or tied to a network
connection, so initializing a function makes no AWS call (boto3 clients are made, and connect
on their first call); ids are re-seeded after a restore (tests/unit/test_ids_snapstart.py)."""

from __future__ import annotations

import pytest

from tests.functions.conftest import Deployment, FakeLambdaContext, Recording, load_event


@pytest.mark.parametrize("function", ["api", "webhook", "wake", "cleanup"])
def test_initializing_a_function_calls_no_aws_api(
        deployed: Deployment, iam_recorded: Recording, function: str) -> None:
    before = len(iam_recorded.recorder.of(function))
    deployed.cold_start(function)
    assert iam_recorded.recorder.of(function)[before:] == []


def test_the_recorder_does_see_a_function_s_calls(
        deployed: Deployment, iam_recorded: Recording, context: FakeLambdaContext) -> None:
    # The check above could not fail if calls went unrecorded: a request's calls are recorded.
    api = deployed.cold_start("api")
    api.handler(load_event("api_post_turn.json"), context)
    assert iam_recorded.recorder.of("api")
