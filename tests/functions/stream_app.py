"""The app the streaming function's tests serve (``DORMANT_APP`` names this file): one agent
whose model streams ``STREAM_TEST_WORDS`` words, each after ``STREAM_TEST_DELAY`` seconds (the
first one too, as a model's first token comes after a wait), so a test can tell events that
leave as they happen from a body sent at the end. With ``STREAM_TEST_FAIL`` set, the model
fails (its SDK raises) after its words: a turn that fails once its stream started."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import dormant
from dormant.models import ModelChunk, ModelRequest, TextDelta
from dormant.tools import Signal


class SlowModel:
    def __init__(self, words: int, delay: float, *, fail: bool = False) -> None:
        self.words = words
        self.delay = delay
        self.fail = fail

    def stream(self, request: ModelRequest, *, signal: Signal) -> Iterator[ModelChunk]:
        for index in range(self.words):
            if signal.wait(self.delay):
                return  # stopped or aborted: the run loop sees the signal
            yield TextDelta(f"w{index} ")
        if self.fail:
            raise RuntimeError("the model provider's SDK broke mid-stream")


def build(store: Any = None, model: Any = None, **_: Any) -> tuple[dormant.App, Any]:
    app = dormant.App(name="stream-test", store=store)
    agent = app.agent(name="streamer", model=SlowModel(
        int(os.environ.get("STREAM_TEST_WORDS", "5")),
        float(os.environ.get("STREAM_TEST_DELAY", "0.2")),
        fail=bool(os.environ.get("STREAM_TEST_FAIL"))))
    return app, agent
