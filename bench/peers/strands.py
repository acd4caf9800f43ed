# mypy: disable-error-code="import-not-found,misc,untyped-decorator"
# (the framework is installed in its own venv, not the one mypy runs in)
"""Strands Agents' scenarios: a custom model provider (a ``Model`` whose ``stream`` yields
the events of an instant answer), ``NullConversationManager`` so the whole history reaches
the model, no callback handler (nothing printed). In memory, the ``Agent`` object keeps the
session's messages (Strands has no in-memory session store of its own); on disk its
``FileSessionManager`` (Strands has no SQLite one); on DynamoDB strands-dynamodb-session-manager
(storage built once, a session manager per request). A pause is Strands' interrupt:
``tool_context.interrupt()`` in the tool, resumed with an ``interruptResponse``."""

# No ``from __future__ import annotations``: Strands reads the tools' annotations at
# definition time (``tool_context: ToolContext``), and ToolContext is imported in a function.
import itertools
import json
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
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


def _texts(messages: list[Any]) -> list[str]:
    out = []
    for message in messages:
        for block in message["content"]:
            if "text" in block:
                out.append(block["text"])
            elif "toolResult" in block:
                out.append(json.dumps(block["toolResult"].get("content", "")))
    return out


def _model(script: str = "text", delay: float = 0.0) -> Any:
    from strands.models import Model

    class Fake(Model):
        """Reads the whole history it is sent, then answers (or calls the script's tool)."""

        def update_config(self, **model_config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(self, messages: Any, tool_specs: Any = None,
                         system_prompt: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
            read_history(_texts(messages))
            if delay:
                time.sleep(delay)  # a blocking model call, as each Lambda would make
            last = messages[-1]["content"]
            yield {"messageStart": {"role": "assistant"}}
            if script == "text" or any("toolResult" in block for block in last):
                yield {"contentBlockDelta": {"delta": {"text": REPLY}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "end_turn"}}
            else:
                name = "lookup_stay" if script == "tool" else "ask_guest"
                yield {"contentBlockStart": {"start": {"toolUse": {
                    "toolUseId": f"call_{next(_ids)}", "name": name}}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {
                    "input": json.dumps({"ref": "B-1"})}}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "tool_use"}}
            yield {"metadata": {"usage": {"inputTokens": 0, "outputTokens": 0,
                                          "totalTokens": 0}, "metrics": {"latencyMs": 0}}}

    return Fake()


def _agent(script: str = "text", session_manager: Any = None, delay: float = 0.0,
           messages: list[Any] | None = None) -> Any:
    from strands import Agent, ToolContext, tool
    from strands.agent.conversation_manager import NullConversationManager

    @tool
    def lookup_stay(ref: str) -> dict[str, Any]:
        """Look up a booking."""
        return {"ref": ref, "nights": 3}

    @tool(context=True)
    def ask_guest(ref: str, tool_context: ToolContext) -> str:
        """Ask the guest."""
        return str(tool_context.interrupt("ask_guest", reason={"ask": ref}))

    return Agent(model=_model(script, delay), tools=[lookup_stay, ask_guest],
                 system_prompt="Answer booking questions.", callback_handler=None,
                 conversation_manager=NullConversationManager(),
                 session_manager=session_manager, messages=messages)


def _history(history: int) -> list[Any]:
    return [m for n in range(history) for m in (
        {"role": "user", "content": [{"text": f"{n}: {MESSAGE}"}]},
        {"role": "assistant", "content": [{"text": REPLY}]})]


def _per_turn(params: dict[str, Any], history: int, script: str = "text") -> float:
    def sample(turns: int) -> float:
        agent = _agent(script, messages=_history(history))
        return timed(lambda: agent(MESSAGE), turns)

    return median_us(sample, params["turns"], params["repeats"])


def text(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1)}


def tool(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1, "tool")}


def pause(params: dict[str, Any]) -> Figures:
    def once(agent: Any) -> None:
        first = agent("Book me in")
        if first.stop_reason != "interrupt":
            raise SystemExit(f"the tool did not interrupt: {first.stop_reason}")
        second = agent([{"interruptResponse": {"interruptId": i.id, "response": "Friday"}}
                        for i in first.interrupts])
        if str(second).strip() != REPLY.strip():
            raise SystemExit(f"the resumed run did not answer: {second}")

    def sample(turns: int) -> float:
        agent = _agent("pause", messages=_history(1))
        return timed(lambda: once(agent), turns)

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"]),
            "mechanism": "interrupt (tool_context.interrupt; an interruptResponse resumes)"}


def growth(params: dict[str, Any]) -> Figures:
    return {"persistence": "none: the Agent object keeps its messages",
            **{str(h): _per_turn(params, h) for h in params["histories"]}}


def sqlite(params: dict[str, Any]) -> Figures:
    """Strands has no SQLite session manager: its FileSessionManager, a request per turn."""
    from strands.session import FileSessionManager

    def seed(history: int) -> str:
        folder = tempfile.mkdtemp(prefix="strands-bench-")
        manager = FileSessionManager(session_id="bench", storage_dir=folder)
        agent = _agent(session_manager=manager)
        for message in _history(history):
            agent.messages.append(message)
            manager.append_message(message, agent)
        return folder

    def at(history: int) -> float:
        setup = seeded_once(lambda: seed(history))

        def sample(turns: int) -> float:
            folder = setup()

            def turn() -> None:
                agent = _agent(session_manager=FileSessionManager(session_id="bench",
                                                                  storage_dir=folder))
                agent(MESSAGE)

            return timed(turn, turns)

        return median_us(sample, params["turns"], params["repeats"])

    return {"persistence": "FileSessionManager (Strands has no SQLite session manager)",
            **{str(h): at(h) for h in params["histories"]}}


def coldstart(params: dict[str, Any]) -> Figures:
    _agent()(MESSAGE)
    return {}


TABLE = "strands-sessions"


def _storage() -> Any:
    from strands_session_dynamodb import DynamoDBSessionStorage

    return DynamoDBSessionStorage(TABLE)


def _request(storage: Any, text: str, delay: float = 0.0) -> Any:
    """One request: a session manager for the session on the shared storage, an agent that
    loads the session through it, and the turn."""
    from strands_agents_session import KeyValueSessionManager

    manager = KeyValueSessionManager(session_id="bench", storage=storage)
    return _agent(session_manager=manager, delay=delay)(text)


def dynamodb(params: dict[str, Any]) -> Figures:
    storage = _storage()
    return {"persistence": "strands-dynamodb-session-manager (a message per item)",
            "turns": dynamodb_checkpoints(lambda n: _request(storage, f"{n}: {MESSAGE}"),
                                          params["checkpoints"], params["samples"])}


def contention(params: dict[str, Any]) -> Figures:
    from strands_agents_session import KeyValueSessionManager

    n = params["n"]
    _request(_storage(), "seed")
    storages = [_storage() for _ in range(n)]
    sent = [f"concurrent message {i}" for i in range(n)]
    results = [""] * n
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        barrier.wait()
        try:
            _request(storages[i], sent[i], delay=CONTENTION_MODEL_SECONDS)
            results[i] = "committed"
        except Exception as error:  # counted, not hidden
            results[i] = f"error: {type(error).__name__}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    agent = _agent(session_manager=KeyValueSessionManager(session_id="bench",
                                                          storage=_storage()))
    texts = [block["text"] for m in agent.messages if m["role"] == "user"
             for block in m["content"] if "text" in block]
    return {"persistence": "strands-dynamodb-session-manager (a message per item)",
            **contention_outcomes(results, texts, sent)}


if __name__ == "__main__":
    run({"text": text, "tool": tool, "pause": pause, "growth": growth, "sqlite": sqlite,
         "coldstart": coldstart, "dynamodb": dynamodb, "contention": contention})
