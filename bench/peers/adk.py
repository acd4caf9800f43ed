# mypy: disable-error-code="import-not-found,misc,untyped-decorator"
# (the framework is installed in its own venv, not the one mypy runs in)
"""Google ADK's scenarios: a custom ``BaseLlm`` answers instantly, an ``LlmAgent`` run by a
``Runner`` over a session service per scenario (``InMemorySessionService``,
``DatabaseSessionService`` on SQLite, ``DynamoDBSessionService`` from adk-dynamodb-session),
each turn one ``run_async`` on the session; a pause is a long-running tool
(``LongRunningFunctionTool``): the run stops at the call, and the client's function response
resumes it."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE.parents[1])]

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
    seeded_once,
    timed,
)

APP, USER, SID = "bench", "user", "bench"
_ids = itertools.count()


def _part_text(part: Any) -> str:
    if part.text:
        return str(part.text)
    if part.function_response is not None:
        return json.dumps(part.function_response.response)
    return ""


def _model(script: str = "text", delay: float = 0.0) -> Any:
    from google.adk.models import BaseLlm, LlmResponse
    from google.genai import types

    class Fake(BaseLlm):
        """Reads the whole history it is sent, then answers (or calls the script's tool)."""

        model: str = "bench-fake"

        async def generate_content_async(self, llm_request: Any,
                                         stream: bool = False) -> Any:
            contents = llm_request.contents
            read_history([_part_text(p) for c in contents for p in (c.parts or [])])
            if delay:
                await asyncio.sleep(delay)
            last = contents[-1].parts[-1]
            answer = last.function_response.response if last.function_response else None
            if answer and answer.get("status") == "pending":
                part = types.Part(text="I have asked the guest.")  # the call waits
            elif script == "text" or answer is not None:
                part = types.Part(text=REPLY)
            else:
                name = "lookup_stay" if script == "tool" else "ask_guest"
                part = types.Part(function_call=types.FunctionCall(
                    name=name, args={"ref": "B-1"}, id=f"call_{next(_ids)}"))
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    return Fake()


def _runner(service: Any, script: str = "text", delay: float = 0.0) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.tools import LongRunningFunctionTool

    def lookup_stay(ref: str) -> dict[str, Any]:
        """Look up a booking."""
        return {"ref": ref, "nights": 3}

    def ask_guest(ref: str) -> dict[str, Any]:
        """Ask the guest (the answer comes later, from the client)."""
        return {"status": "pending", "ask": ref}

    agent = LlmAgent(name="bench", model=_model(script, delay),
                     instruction="Answer booking questions.",
                     tools=[lookup_stay, LongRunningFunctionTool(func=ask_guest)])
    return Runner(agent=agent, app_name=APP, session_service=service)


def _user(text: str) -> Any:
    from google.genai import types

    return types.Content(role="user", parts=[types.Part(text=text)])


async def _run(runner: Any, message: Any) -> list[Any]:
    return [event async for event in runner.run_async(user_id=USER, session_id=SID,
                                                       new_message=message)]


async def _seed(service: Any, history: int) -> Any:
    """A new session holding ``history`` turns (written as events, the agent not run)."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
    for n in range(history):
        await _append_turn(service, session, n)
    return session


async def _append_turn(service: Any, session: Any, n: int) -> None:
    from google.adk.events import Event
    from google.genai import types

    await service.append_event(session, Event(author="user", invocation_id=f"seed{n}",
                                              content=_user(f"{n}: {MESSAGE}")))
    await service.append_event(session, Event(
        author="bench", invocation_id=f"seed{n}",
        content=types.Content(role="model", parts=[types.Part(text=REPLY)])))


def _memory() -> Any:
    from google.adk.sessions import InMemorySessionService

    return InMemorySessionService()


def _per_turn(params: dict[str, Any], history: int, script: str = "text",
              service: Any = None) -> float:
    """µs per turn; a new session per sample, or (with ``service``) one seeded session."""
    def seed() -> tuple[Any, Any]:
        loop = asyncio.new_event_loop()
        store = service() if service else _memory()
        loop.run_until_complete(_seed(store, history))
        return loop, _runner(store, script)

    setup = seeded_once(seed) if service else seed

    def sample(turns: int) -> float:
        loop, runner = setup()
        return timed(lambda: loop.run_until_complete(_run(runner, _user(MESSAGE))), turns)

    return median_us(sample, params["turns"], params["repeats"])


def text(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1)}


def tool(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1, "tool")}


def pause(params: dict[str, Any]) -> Figures:
    from google.genai import types

    def once(loop: Any, runner: Any) -> None:
        first = loop.run_until_complete(_run(runner, _user("Book me in")))
        waiting = [e for e in first if e.long_running_tool_ids]
        if not waiting:
            raise SystemExit("the long-running tool did not pause the run")
        call = next(p.function_call for p in waiting[-1].content.parts if p.function_call)
        answer = types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(id=call.id, name=call.name,
                                                     response={"answer": "Friday"}))])
        second = loop.run_until_complete(_run(runner, answer))
        if second[-1].content.parts[0].text != REPLY:
            raise SystemExit("the resumed run did not answer")

    def sample(turns: int) -> float:
        loop = asyncio.new_event_loop()
        store = _memory()
        loop.run_until_complete(_seed(store, 1))
        runner = _runner(store, "pause")
        elapsed = timed(lambda: once(loop, runner), turns)
        loop.close()
        return elapsed

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"]),
            "mechanism": "long-running tool (LongRunningFunctionTool); a function response "
                         "resumes"}


def growth(params: dict[str, Any]) -> Figures:
    return {"persistence": "InMemorySessionService",
            **{str(h): _per_turn(params, h) for h in params["histories"]}}


def sqlite(params: dict[str, Any]) -> Figures:
    from google.adk.sessions import DatabaseSessionService

    folder = tempfile.mkdtemp(prefix="adk-bench-")
    count = itertools.count()

    def service() -> Any:
        path = os.path.join(folder, f"bench-{next(count)}.db")
        return DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")

    return {"persistence": "DatabaseSessionService (SQLite, aiosqlite)",
            **{str(h): _per_turn(params, h, service=service) for h in params["histories"]}}


def coldstart(params: dict[str, Any]) -> Figures:
    loop = asyncio.new_event_loop()
    store = _memory()
    loop.run_until_complete(_seed(store, 0))
    loop.run_until_complete(_run(_runner(store), _user(MESSAGE)))
    return {}


def _dynamodb_service() -> Any:
    from adk_dynamodb_session import DynamoDBSessionService

    service = DynamoDBSessionService()
    service.create_table_if_not_exists(billing_mode="PAY_PER_REQUEST")
    return service


def dynamodb(params: dict[str, Any]) -> Figures:
    loop = asyncio.new_event_loop()
    service = _dynamodb_service()
    session = loop.run_until_complete(_seed(service, 0))
    runner = _runner(service)

    def turn(n: int) -> None:
        loop.run_until_complete(_run(runner, _user(f"{n}: {MESSAGE}")))

    def seed(n: int) -> None:
        loop.run_until_complete(_append_turn(service, session, n))

    return {"persistence": "DynamoDBSessionService (adk-dynamodb-session, an event per item; "
                           "turns before a checkpoint written as events)",
            "turns": dynamodb_checkpoints(turn, params["checkpoints"], params["samples"],
                                          seed=seed)}


def contention(params: dict[str, Any]) -> Figures:
    n = params["n"]
    service = _dynamodb_service()
    asyncio.run(_seed(service, 0))
    asyncio.run(_run(_runner(service), _user("seed")))
    runners = [_runner(_dynamodb_service(), delay=CONTENTION_MODEL_SECONDS) for _ in range(n)]
    sent = [f"concurrent message {i}" for i in range(n)]
    results = [""] * n
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        barrier.wait()
        try:
            asyncio.run(_run(runners[i], _user(sent[i])))
            results[i] = "committed"
        except ValueError as error:
            results[i] = "refused" if "stale" in str(error) else f"error: {error}"[:80]
        except Exception as error:  # counted, not hidden
            results[i] = f"error: {type(error).__name__}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    session = asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id=SID))
    texts = [_part_text(p) for e in session.events if e.author == "user" and e.content
             for p in (e.content.parts or [])]
    return {"persistence": "DynamoDBSessionService (adk-dynamodb-session)",
            **contention_outcomes(results, texts, sent)}


if __name__ == "__main__":
    run({"text": text, "tool": tool, "pause": pause, "growth": growth, "sqlite": sqlite,
         "coldstart": coldstart, "dynamodb": dynamodb, "contention": contention})
