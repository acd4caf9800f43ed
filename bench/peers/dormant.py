"""dormant's scenarios, through its public API: ``dormant.App``, ``app.agent``, ``app.tool``,
``app.context.history()``, ``app.handler.rest(agent=...)``, and a fake model of its own.

Runs in the project's venv. MemoryStore unless the scenario names another store; every
request goes through the REST handler (parse, load, run, commit, respond), as a Lambda's does.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Run as a script in a framework's own venv: its folder comes off the path (it shares names
# with the packages it measures), the repository's root goes last (for bench.peers._common).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE.parents[1])]
# The dormant of this checkout first (an editable install may name another worktree's).
sys.path.insert(0, str(_HERE.parents[1] / "layers" / "dormant"))

from bench.peers._common import (  # noqa: E402
    CONTENTION_MODEL_SECONDS,
    MESSAGE,
    REPLY,
    Figures,
    contention_outcomes,
    dynamodb_checkpoints,
    median_us,
    read_history,
    run,
    samples_us,
    seeded_once,
    spread,
    timed,
)

SID = "session_bench"


def _imports() -> Any:
    import dormant

    return dormant


class Reading:
    """A model that reads the whole history it is sent first (while ``reading``; seeding a
    long session does not need to), then answers the next reply added, in one piece, as the
    peers' fake models do: its text as one ``TextDelta``, each tool call whole, its usage.
    (``ScriptedModel`` streams a reply word by word, and dormant streams each piece to the
    client as an event of its own: not what the peers are asked to do.)"""

    def __init__(self, delay: float = 0.0) -> None:
        self.replies: deque[str | dict[str, Any]] = deque()
        self.reading = True
        self.delay = delay

    def add(self, reply: str | dict[str, Any], times: int = 1) -> None:
        self.replies.extend([reply] * times)

    def stream(self, request: Any, *, signal: Any) -> Iterator[Any]:
        from dormant.models import TextDelta, ToolCallChunk, UsageChunk

        if self.reading:
            read_history([m.content if m.role == "tool" else m.text
                          for m in request.messages])
        if self.delay:
            time.sleep(self.delay)
        if not self.replies:
            raise SystemExit("the bench model was called more often than it had replies")
        reply = self.replies.popleft()
        if isinstance(reply, str):
            reply = {"text": reply}
        chunks: list[Any] = [TextDelta(reply["text"])] if reply.get("text") else []
        chunks.extend(ToolCallChunk(call_id=call.get("id") or "", name=call["name"],
                                    args=call.get("args", {}))
                      for call in reply.get("tool_calls") or ())
        chunks.append(UsageChunk())
        return iter(chunks)


def _app(store: Any = None) -> tuple[Any, Any, Reading]:
    """An app, its REST handler and its model: the agent sends the whole history."""
    from pydantic import BaseModel

    dormant = _imports()

    class Ref(BaseModel):
        ref: str

    class Answer(BaseModel):
        answer: str

    app = dormant.App(name="bench", store=store) if store is not None else dormant.App(
        name="bench")
    lookup = app.tool(name="lookup_stay", description="Look up a booking", schema=Ref,
                      execute=lambda ctx: {"ref": ctx.args.ref, "nights": 3})
    ask = app.tool(name="ask_guest", description="Ask the guest", schema=Ref,
                   yield_schema=Answer)
    model = Reading()
    agent = app.agent(name="bench", model=model,
                      context=[app.context.system("Answer booking questions."),
                               app.context.history()],
                      tools=[lookup, ask])
    return app, app.handler.rest(agent=agent), model


def _ask(rest: Any, text: str = MESSAGE) -> None:
    response = rest({"session_id": "bench", "input": {"message": text}})
    if response.status != "completed" or response.commit_status != "committed":
        raise SystemExit(f"a turn did not commit cleanly: {response}")


def _seeded(history: int, store: Any = None) -> tuple[Any, Reading]:
    _, rest, model = _app(store)
    model.reading = False
    model.add(REPLY, history)
    for n in range(history):
        _ask(rest, f"{n}: {MESSAGE}")
    model.reading = True
    gc.collect()
    return rest, model


def _per_turn(params: dict[str, Any], history: int, replies: list[Any],
              store: Any = None) -> float:
    """µs per turn (the median); a new session per sample, or (with ``store``) one seeded
    session."""
    return float(statistics.median(_samples(params, history, replies, store)))


def _samples(params: dict[str, Any], history: int, replies: list[Any],
             store: Any = None) -> list[float]:
    """µs per turn of each sample (see :func:`_per_turn`)."""
    setup = seeded_once(lambda: _seeded(history, store())) if store else (
        lambda: _seeded(history))

    def sample(turns: int) -> float:
        rest, model = setup()
        for _ in range(turns):
            for reply in replies:
                model.add(reply)
        return timed(lambda: _ask(rest), turns)

    return samples_us(sample, params["turns"], params["repeats"])


def text(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1, [REPLY])}


def tool(params: dict[str, Any]) -> Figures:
    call = {"tool_calls": [{"name": "lookup_stay", "args": {"ref": "B-1"}}]}
    return {"us_per_turn": _per_turn(params, 1, [call, REPLY])}


def pause(params: dict[str, Any]) -> Figures:
    def sample(turns: int) -> float:
        rest, model = _seeded(1)
        for n in range(turns):
            model.add({"tool_calls": [{"name": "ask_guest", "args": {"ref": "night"},
                                       "id": f"call_{n}"}]})
            model.add("Booked for Friday.")
        start = time.perf_counter()
        for n in range(turns):
            first = rest({"session_id": "bench", "input": {"message": "Book me in"}})
            second = rest({"session_id": "bench", "input": {
                "tools": [{"call_id": f"call_{n}", "input": {"answer": "Friday"}}]}})
        elapsed = time.perf_counter() - start
        if first.status != "yielded_tool" or second.status != "completed":
            raise SystemExit(f"pause + resume did not complete: {first} / {second}")
        return elapsed

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"]),
            "mechanism": "a yielding tool (yield_schema); the answer resumes it"}


def growth(params: dict[str, Any]) -> Figures:
    return {"persistence": "MemoryStore",
            **{str(h): _per_turn(params, h, [REPLY]) for h in params["histories"]}}


def sqlite(params: dict[str, Any]) -> Figures:
    from dormant.stores import SqliteStore

    folder = tempfile.mkdtemp(prefix="dormant-bench-")
    count = iter(range(10**6))

    def store() -> Any:
        return SqliteStore(os.path.join(folder, f"bench-{next(count)}.db"))

    samples = {str(h): _samples(params, h, [REPLY], store) for h in params["histories"]}
    return {"persistence": "SqliteStore",
            **{h: statistics.median(values) for h, values in samples.items()},
            "spread": {h: spread(values) for h, values in samples.items()}}


def coldstart(params: dict[str, Any]) -> Figures:
    _, rest, model = _app()
    model.add(REPLY)
    _ask(rest)
    return {}


def _dynamodb_store(table: str) -> Any:
    import boto3

    from dormant.stores import DynamoDBStore

    store = DynamoDBStore(table, client=boto3.client("dynamodb"))
    store.ensure_table()
    return store


def dynamodb(params: dict[str, Any]) -> Figures:
    _, rest, model = _app(_dynamodb_store("dormant-bench"))

    def turn(n: int) -> None:
        model.add(REPLY)
        _ask(rest, f"{n}: {MESSAGE}")

    return {"persistence": "DynamoDBStore",
            "turns": dynamodb_checkpoints(turn, params["checkpoints"], params["samples"])}


def contention(params: dict[str, Any]) -> Figures:
    """N requests on one session at once, each in its own app and store client (N Lambdas)."""
    n = params["n"]
    _dynamodb_store("dormant-contention")
    handlers = []
    for _ in range(n):
        _, rest, model = _app(_dynamodb_store("dormant-contention"))
        model.delay = CONTENTION_MODEL_SECONDS
        model.add(REPLY)
        handlers.append(rest)
    _, seed, seed_model = _app(_dynamodb_store("dormant-contention"))
    seed_model.add(REPLY)
    _ask(seed, "seed")
    sent = [f"concurrent message {i}" for i in range(n)]
    results = [""] * n
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        barrier.wait()
        try:
            response = handlers[i]({"session_id": "bench", "input": {"message": sent[i]}})
            status = response.commit_status
            results[i] = ("committed" if status in ("committed", "merged")
                          else "refused" if status in ("superseded", "failed")
                          else f"error: {status}")
        except Exception as error:  # counted, not hidden
            results[i] = f"error: {type(error).__name__}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = _dynamodb_store("dormant-contention").load(SID)
    texts = [getattr(e, "text", "") for e in stored.events if e.type == "user"]
    return {"persistence": "DynamoDBStore",
            **contention_outcomes(results, texts, sent),
            "detail": sorted(results)}


if __name__ == "__main__":
    run({"text": text, "tool": tool, "pause": pause, "growth": growth, "sqlite": sqlite,
         "coldstart": coldstart, "dynamodb": dynamodb, "contention": contention})
