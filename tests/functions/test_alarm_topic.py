"""A stack whose alarms notify nobody says so at every cold start: the template passes its
``AlarmTopicArn`` as ``DORMANT_ALARM_TOPIC`` and ``dormant.aws.deployment`` warns when it is
empty (template.yaml's ``AlarmNotifications`` output says the same)."""

from __future__ import annotations

import logging

import pytest

from dormant.aws.deployment import warn_if_alarms_notify_nobody
from dormant.settings import ENV
from tests.functions.conftest import Deployment

TOPIC = "arn:aws:sns:us-east-1:123456789012:dormant-alarms"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "alarms notify nobody" in r.getMessage()]


@pytest.mark.parametrize("function", ["api", "stream", "webhook", "wake"])
def test_a_cold_start_warns_once_when_the_alarm_topic_is_empty(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, function: str) -> None:
    monkeypatch.setenv(ENV.ALARM_TOPIC, "")
    deployed.cold_start(function)
    [warning] = _warnings(caplog)
    assert warning.levelname == "WARNING"
    assert "AlarmTopicArn" in warning.getMessage()


@pytest.mark.parametrize("function", ["api", "stream", "webhook", "wake"])
def test_a_cold_start_says_nothing_when_the_alarms_notify_a_topic(
        deployed: Deployment, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, function: str) -> None:
    monkeypatch.setenv(ENV.ALARM_TOPIC, TOPIC)
    deployed.cold_start(function)
    assert _warnings(caplog) == []


def test_outside_a_stack_that_names_the_setting_nothing_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    # tests, sam local, a deployment of its own: no DORMANT_ALARM_TOPIC at all
    assert warn_if_alarms_notify_nobody({}) is False
    assert warn_if_alarms_notify_nobody({ENV.ALARM_TOPIC: TOPIC}) is False
    assert warn_if_alarms_notify_nobody({ENV.ALARM_TOPIC: ""}) is True
    assert len(_warnings(caplog)) == 1
