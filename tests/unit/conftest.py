"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.openai_fake import FakeOpenAI


@pytest.fixture()
def fake() -> Iterator[FakeOpenAI]:
    """A local server speaking OpenAI's wire format; every scripted reply must be used."""
    server = FakeOpenAI()
    yield server
    server.close()
    assert server.unused == 0, "scripted replies were left unused"
