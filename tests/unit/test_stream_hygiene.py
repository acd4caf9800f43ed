"""A turn stream its caller leaves early stops its threads, and the process exits.

Leaving a stream while the model streams (``break``, an exception, a stream dropped, one left
suspended until the interpreter exits) used to keep some processes from ever exiting: the
suspended stream was closed at exit while the control thread, a daemon frozen by the
interpreter's shutdown, held the lock its closing waited for.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent('''
    import gc, sys, time
    import dormant
    from dormant.models._base import TextDelta
    from dormant.stores import MemoryStore

    class Slow:
        def stream(self, request, *, signal):
            for i in range(400):  # a model that never looks at its signal
                time.sleep(0.05)
                yield TextDelta(f"word{i} ")

    app = dormant.App(name="early", store=MemoryStore())
    agent = app.agent(name="early", model=Slow())
    stream = app.handler.turn(agent=agent)({"session_id": "s", "input": {"message": "hi"}})
    how = sys.argv[1]
    if how == "break":
        for event in stream:
            if event.type == "assistant_delta":
                break
    elif how == "raise":
        try:
            for event in stream:
                if event.type == "assistant_delta":
                    raise RuntimeError("the caller gave up")
        except RuntimeError:
            pass
    elif how == "drop":
        events = iter(stream)
        while next(events).type != "assistant_delta":
            pass
        del events, stream
        gc.collect()
    elif how == "suspend":  # left suspended in a global until the interpreter exits
        events = iter(stream)
        while next(events).type != "assistant_delta":
            pass
    elif how == "early":  # left suspended before the model's first word, until exit
        events = iter(stream)
        next(events), next(events), next(events)
    elif how == "close":
        events = iter(stream)
        while next(events).type != "assistant_delta":
            pass
        stream.close()
    print("left", how, flush=True)
''')

WAYS = ["break", "raise", "drop", "suspend", "close", "early"]
#: Seconds every script gets to exit: generous for a loaded two-core machine; a script that
#: hangs never exits at all.
EXIT_WITHIN = 30.0


def test_six_scripts_leaving_their_streams_early_all_exit(tmp_path: Path) -> None:
    script = tmp_path / "early.py"
    script.write_text(SCRIPT, encoding="utf-8")
    started = time.monotonic()
    runs = [subprocess.Popen([sys.executable, str(script), how], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for how in WAYS]
    hung = []
    try:
        for how, run in zip(WAYS, runs, strict=True):
            left = max(EXIT_WITHIN - (time.monotonic() - started), 0.1)
            try:
                out, err = run.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                hung.append(how)
                continue
            assert run.returncode == 0, (how, err)
            assert f"left {how}" in out, (how, out, err)
    finally:
        for run in runs:
            run.kill()
            run.wait()
    assert not hung, f"still running {EXIT_WITHIN:.0f} s later: {hung}"


@pytest.mark.parametrize("how", ["break", "close"])
def test_a_stream_left_early_leaves_no_thread_of_its_turn_running(how: str) -> None:
    import threading

    import dormant
    from dormant.models._base import TextDelta
    from dormant.stores import MemoryStore

    class Slow:
        def stream(self, request: object, *, signal: dormant.tools.Signal) -> object:
            for i in range(400):
                if signal.stopped or signal.expired:
                    return
                time.sleep(0.02)
                yield TextDelta(f"word{i} ")

    app = dormant.App(name="early", store=MemoryStore())
    agent = app.agent(name="early", model=Slow())
    before = {t.ident for t in threading.enumerate()}
    stream = app.handler.turn(agent=agent)({"session_id": "s", "input": {"message": "hi"}})
    events = iter(stream)
    while next(events).type != "assistant_delta":
        pass
    if how == "close":
        stream.close()
    else:
        events.close()  # what ``break`` out of a for loop over a generator does
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        extra = [t for t in threading.enumerate() if t.ident not in before
                 and t.name != "dormant-control" and t.is_alive()]
        if not extra:
            break
        time.sleep(0.05)
    assert not extra, [t.name for t in extra]
    assert app.sessions.get("s") is None  # an abandoned turn that ran no tool writes nothing
