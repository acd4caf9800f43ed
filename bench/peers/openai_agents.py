# mypy: disable-error-code="import-not-found,misc,untyped-decorator"
# (the framework is installed in its own venv, not the one mypy runs in)
"""OpenAI Agents SDK's scenarios: a custom ``Model`` answers instantly (tracing disabled), a
session per scenario (``SQLiteSession`` in memory or on a file, ``DynamoDBSession`` from
openai-agents-session), each turn one ``Runner.run`` with ``session=``; a pause is a tool
approval (``needs_approval=True``): the interrupted run's ``RunState`` is saved as a string,
approved and run again."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import tempfile
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

_ids = itertools.count()


def _content(item: Any) -> str:
    item = item if isinstance(item, dict) else item.model_dump()
    content = item.get("content") or item.get("output") or item.get("arguments") or ""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _model(script: str = "text", delay: float = 0.0) -> Any:
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class Fake(Model):
        """Reads the whole input it is sent, then answers (or calls the script's tool)."""

        async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                               **kwargs: Any) -> ModelResponse:
            items = input if isinstance(input, list) else [{"role": "user", "content": input}]
            read_history([_content(item) for item in items])
            if delay:
                await asyncio.sleep(delay)
            last = items[-1] if isinstance(items[-1], dict) else items[-1].model_dump()
            n = next(_ids)
            output: Any
            if script == "text" or last.get("type") == "function_call_output":
                output = ResponseOutputMessage(
                    id=f"msg_{n}", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text=REPLY,
                                                annotations=[])])
            else:
                name = "lookup_stay" if script == "tool" else "ask_guest"
                output = ResponseFunctionToolCall(
                    type="function_call", id=f"fc_{n}", call_id=f"call_{n}", name=name,
                    arguments=json.dumps({"ref": "B-1"}))
            return ModelResponse(output=[output], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Fake()


def _agent(script: str = "text", delay: float = 0.0) -> Any:
    from agents import Agent, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # no trace export: nothing leaves the machine

    @function_tool
    def lookup_stay(ref: str) -> dict[str, Any]:
        """Look up a booking."""
        return {"ref": ref, "nights": 3}

    @function_tool(needs_approval=True)
    def ask_guest(ref: str) -> str:
        """Ask the guest (a person approves first)."""
        return "Friday"

    return Agent(name="bench", instructions="Answer booking questions.",
                 model=_model(script, delay), tools=[lookup_stay, ask_guest])


def _memory_session() -> Any:
    from agents import SQLiteSession

    return SQLiteSession("bench")  # its in-memory database


def _seed(session: Any, history: int) -> None:
    items = [m for n in range(history) for m in (
        {"role": "user", "content": f"{n}: {MESSAGE}"},
        {"role": "assistant", "content": REPLY})]
    if items:
        asyncio.run(session.add_items(items))


def _turn(agent: Any, session: Any, text: str = MESSAGE) -> Any:
    from agents import Runner

    return Runner.run_sync(agent, text, session=session)


def _per_turn(params: dict[str, Any], history: int, script: str = "text",
              session: Any = None) -> float:
    """µs per turn; a new session per sample, or (with ``session``) one seeded session."""
    def seed() -> tuple[Any, Any]:
        agent, store = _agent(script), session() if session else _memory_session()
        _seed(store, history)
        return agent, store

    setup = seeded_once(seed) if session else seed

    def sample(turns: int) -> float:
        agent, store = setup()
        return timed(lambda: _turn(agent, store), turns)

    return median_us(sample, params["turns"], params["repeats"])


def text(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1)}


def tool(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1, "tool")}


def pause(params: dict[str, Any]) -> Figures:
    from agents import Runner, RunState

    def once(agent: Any, session: Any) -> None:
        first = _turn(agent, session, "Book me in")
        if not first.interruptions:
            raise SystemExit("the tool did not ask for approval")
        saved = first.to_state().to_string()  # what a request keeps between the two

        async def resume() -> Any:
            state = await RunState.from_string(agent, saved)
            for interruption in state.get_interruptions():
                state.approve(interruption)
            return await Runner.run(agent, state, session=session)

        second = asyncio.run(resume())
        if second.final_output != REPLY:
            raise SystemExit(f"the approved run did not answer: {second.final_output!r}")

    def sample(turns: int) -> float:
        agent, session = _agent("pause"), _memory_session()
        _seed(session, 1)
        return timed(lambda: once(agent, session), turns)

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"]),
            "mechanism": "tool approval (needs_approval) + RunState saved as a string"}


def growth(params: dict[str, Any]) -> Figures:
    return {"persistence": "SQLiteSession (in memory)",
            **{str(h): _per_turn(params, h) for h in params["histories"]}}


def sqlite(params: dict[str, Any]) -> Figures:
    from agents import SQLiteSession

    folder = tempfile.mkdtemp(prefix="openai-agents-bench-")
    count = itertools.count()

    def session() -> Any:
        return SQLiteSession("bench", os.path.join(folder, f"bench-{next(count)}.db"))

    return {"persistence": "SQLiteSession (file)",
            **{str(h): _per_turn(params, h, session=session) for h in params["histories"]}}


def coldstart(params: dict[str, Any]) -> Figures:
    _turn(_agent(), _memory_session())
    return {}


TABLE = "openai-agents-sessions"


async def _client(stack: Any) -> Any:
    from aiobotocore.session import get_session
    from openai_agents_session.dynamodb import create_table_if_not_exists

    client = await stack.enter_async_context(get_session().create_client("dynamodb"))
    await create_table_if_not_exists(client, TABLE, enable_ttl=False)
    return client


def dynamodb(params: dict[str, Any]) -> Figures:
    from contextlib import AsyncExitStack

    from agents import Runner
    from openai_agents_session import DynamoDBSession

    loop = asyncio.new_event_loop()
    stack = AsyncExitStack()
    client = loop.run_until_complete(_client(stack))
    agent = _agent()
    session = DynamoDBSession("bench", client, TABLE)

    def turn(n: int) -> None:
        loop.run_until_complete(Runner.run(agent, f"{n}: {MESSAGE}", session=session))

    figures = dynamodb_checkpoints(turn, params["checkpoints"], params["samples"])
    loop.run_until_complete(stack.aclose())
    return {"persistence": "DynamoDBSession (openai-agents-session)", "turns": figures}


def contention(params: dict[str, Any]) -> Figures:
    from contextlib import AsyncExitStack

    from agents import Runner
    from openai_agents_session import DynamoDBSession

    n = params["n"]
    sent = [f"concurrent message {i}" for i in range(n)]

    async def main() -> tuple[list[str], list[str]]:
        async with AsyncExitStack() as stack:
            seed = DynamoDBSession("bench", await _client(stack), TABLE)
            await Runner.run(_agent(), "seed", session=seed)
            sessions = [DynamoDBSession("bench", await _client(stack), TABLE)
                        for _ in range(n)]
            agent = _agent(delay=CONTENTION_MODEL_SECONDS)

            async def one(i: int) -> str:
                try:
                    await Runner.run(agent, sent[i], session=sessions[i])
                    return "committed"
                except Exception as error:  # counted, not hidden
                    return f"error: {type(error).__name__}"

            results = list(await asyncio.gather(*(one(i) for i in range(n))))
            items = await seed.get_items()
            texts = [_content(item) for item in items
                     if (item if isinstance(item, dict) else {}).get("role") == "user"]
            return results, texts

    results, texts = asyncio.run(main())
    return {"persistence": "DynamoDBSession (openai-agents-session)",
            **contention_outcomes(results, texts, sent)}


if __name__ == "__main__":
    run({"text": text, "tool": tool, "pause": pause, "growth": growth, "sqlite": sqlite,
         "coldstart": coldstart, "dynamodb": dynamodb, "contention": contention})
