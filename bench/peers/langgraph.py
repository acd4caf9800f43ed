# mypy: disable-error-code="import-not-found,misc,untyped-decorator"
# (the framework is installed in its own venv, not the one mypy runs in)
"""LangGraph's scenarios: its prebuilt ReAct agent (``create_react_agent``) over a custom
``BaseChatModel`` that answers instantly, a checkpointer per scenario (``InMemorySaver``,
``SqliteSaver``, ``DynamoDBSaver`` from langgraph-checkpoint-aws), each turn one ``invoke`` on
the session's ``thread_id``; a pause is ``interrupt()`` in a tool, resumed by
``Command(resume=...)``."""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import sys
import tempfile
import threading
import time
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

CONFIG = {"configurable": {"thread_id": "bench"}}
_ids = itertools.count()


def _model(script: str = "text", delay: float = 0.0) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Fake(BaseChatModel):
        """Reads the whole history it is sent, then answers (or calls the script's tool)."""

        @property
        def _llm_type(self) -> str:
            return "bench-fake"

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            read_history([str(m.content) for m in messages])
            if delay:
                time.sleep(delay)
            if script == "text" or isinstance(messages[-1], ToolMessage):
                message = AIMessage(REPLY)
            else:
                name = "lookup_stay" if script == "tool" else "ask_guest"
                message = AIMessage("", tool_calls=[{"name": name, "args": {"ref": "B-1"},
                                                     "id": f"call_{next(_ids)}"}])
            return ChatResult(generations=[ChatGeneration(message=message)])

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return Fake()


def _graph(checkpointer: Any, script: str = "text", delay: float = 0.0) -> Any:
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent
    from langgraph.types import interrupt

    @tool
    def lookup_stay(ref: str) -> dict[str, Any]:
        """Look up a booking."""
        return {"ref": ref, "nights": 3}

    @tool
    def ask_guest(ref: str) -> str:
        """Ask the guest."""
        return str(interrupt({"ask": ref}))

    return create_react_agent(_model(script, delay), [lookup_stay, ask_guest],
                              prompt="Answer booking questions.", checkpointer=checkpointer)


def _turn(graph: Any, text: str = MESSAGE) -> Any:
    from langchain_core.messages import HumanMessage

    return graph.invoke({"messages": [HumanMessage(text)]}, CONFIG)


def _seed(graph: Any, history: int) -> None:
    """The session's first ``history`` turns, written as one state update."""
    from langchain_core.messages import AIMessage, HumanMessage

    messages = [m for n in range(history)
                for m in (HumanMessage(f"{n}: {MESSAGE}"), AIMessage(REPLY))]
    graph.update_state(CONFIG, {"messages": messages})


def _memory() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


def _per_turn(params: dict[str, Any], history: int, script: str = "text",
              saver: Any = None) -> float:
    """µs per turn; a new session per sample, or (with ``saver``) one seeded session."""
    def seed() -> Any:
        graph = _graph(saver() if saver else _memory(), script)
        _seed(graph, history)
        return graph

    setup = seeded_once(seed) if saver else seed

    def sample(turns: int) -> float:
        graph = setup()
        return timed(lambda: _turn(graph), turns)

    return median_us(sample, params["turns"], params["repeats"])


def text(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1)}


def tool(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1, "tool")}


def pause(params: dict[str, Any]) -> Figures:
    from langgraph.types import Command

    def once(graph: Any) -> None:
        first = _turn(graph, "Book me in")
        if "__interrupt__" not in first:
            raise SystemExit("the tool did not interrupt the run")
        second = graph.invoke(Command(resume="Friday"), CONFIG)
        if second["messages"][-1].content != REPLY:
            raise SystemExit("the resumed run did not answer")

    def sample(turns: int) -> float:
        graph = _graph(_memory(), "pause")
        _seed(graph, 1)
        return timed(lambda: once(graph), turns)

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"]),
            "mechanism": "interrupt() in the tool + checkpointer; Command(resume=...)"}


def growth(params: dict[str, Any]) -> Figures:
    return {"persistence": "InMemorySaver",
            **{str(h): _per_turn(params, h) for h in params["histories"]}}


def sqlite(params: dict[str, Any]) -> Figures:
    from langgraph.checkpoint.sqlite import SqliteSaver

    folder = tempfile.mkdtemp(prefix="langgraph-bench-")
    count = itertools.count()

    def saver() -> Any:
        path = os.path.join(folder, f"bench-{next(count)}.db")
        return SqliteSaver(sqlite3.connect(path, check_same_thread=False))

    return {"persistence": "SqliteSaver (langgraph-checkpoint-sqlite)",
            **{str(h): _per_turn(params, h, saver=saver) for h in params["histories"]}}


def coldstart(params: dict[str, Any]) -> Figures:
    _turn(_graph(_memory()))
    return {}


TABLE = "langgraph-checkpoints"


def _dynamodb_saver() -> Any:
    import boto3
    from langgraph_checkpoint_aws import DynamoDBSaver

    client = boto3.client("dynamodb")
    with contextlib.suppress(client.exceptions.ResourceInUseException):
        client.create_table(
            TableName=TABLE, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"},
                       {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                  {"AttributeName": "SK", "AttributeType": "S"}])
    return DynamoDBSaver(table_name=TABLE)


def dynamodb(params: dict[str, Any]) -> Figures:
    graph = _graph(_dynamodb_saver())
    return {"persistence": "DynamoDBSaver (langgraph-checkpoint-aws)",
            "turns": dynamodb_checkpoints(lambda n: _turn(graph, f"{n}: {MESSAGE}"),
                                          params["checkpoints"], params["samples"])}


def contention(params: dict[str, Any]) -> Figures:
    n = params["n"]
    _turn(_graph(_dynamodb_saver()), "seed")
    graphs = [_graph(_dynamodb_saver(), delay=CONTENTION_MODEL_SECONDS) for _ in range(n)]
    sent = [f"concurrent message {i}" for i in range(n)]
    results = [""] * n
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        barrier.wait()
        try:
            _turn(graphs[i], sent[i])
            results[i] = "committed"
        except Exception as error:  # counted, not hidden
            results[i] = f"error: {type(error).__name__}"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    state = _graph(_dynamodb_saver()).get_state(CONFIG)
    texts = [str(m.content) for m in state.values["messages"] if m.type == "human"]
    return {"persistence": "DynamoDBSaver (langgraph-checkpoint-aws)",
            **contention_outcomes(results, texts, sent)}


if __name__ == "__main__":
    run({"text": text, "tool": tool, "pause": pause, "growth": growth, "sqlite": sqlite,
         "coldstart": coldstart, "dynamodb": dynamodb, "contention": contention})
