# mypy: disable-error-code="import-not-found,misc,untyped-decorator"
# (the framework is installed in its own venv, not the one mypy runs in)
"""Pydantic AI's scenarios: ``FunctionModel`` (its own test model) answers instantly, the
application keeps the session's messages (Pydantic AI has no persistence of its own: a turn
passes ``message_history`` in and keeps ``all_messages()``), a pause is a deferred tool
(``CallDeferred`` -> ``DeferredToolRequests`` out, ``DeferredToolResults`` in)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE.parents[1])]

from bench.peers._common import (  # noqa: E402
    MESSAGE,
    REPLY,
    Figures,
    Unsupported,
    median_us,
    read_history,
    run,
    timed,
)

NO_PERSISTENCE = ("Pydantic AI has no persistence of its own (the application stores "
                  "message_history)")


def _texts(messages: list[Any]) -> list[str]:
    return [str(getattr(part, "content", "")) for m in messages for part in m.parts]


def _build(script: str = "text") -> Any:
    from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        read_history(_texts(messages))
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(REPLY)])
        if script == "tool":
            return ModelResponse(parts=[ToolCallPart("lookup_stay", {"ref": "B-1"})])
        if script == "pause":
            return ModelResponse(parts=[ToolCallPart("ask_guest", {"ref": "night"})])
        return ModelResponse(parts=[TextPart(REPLY)])

    agent = Agent(FunctionModel(model), instructions="Answer booking questions.",
                  output_type=[str, DeferredToolRequests])

    @agent.tool_plain
    def lookup_stay(ref: str) -> dict[str, Any]:
        """Look up a booking."""
        return {"ref": ref, "nights": 3}

    @agent.tool_plain
    def ask_guest(ref: str) -> str:
        """Ask the guest."""
        raise CallDeferred

    return agent


class Sessions:
    """What an application keeps for Pydantic AI: each session's messages."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.rows: dict[str, list[Any]] = {}

    def turn(self, text: str = MESSAGE, sid: str = "bench") -> Any:
        result = self.agent.run_sync(text, message_history=self.rows.get(sid, []))
        self.rows[sid] = result.all_messages()
        return result


def _seeded(history: int, script: str = "text") -> Sessions:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    sessions = Sessions(_build(script))
    sessions.rows["bench"] = [m for n in range(history) for m in (
        ModelRequest(parts=[UserPromptPart(f"{n}: {MESSAGE}")]),
        ModelResponse(parts=[TextPart(REPLY)]))]
    return sessions


def _per_turn(params: dict[str, Any], history: int, script: str = "text") -> float:
    def sample(turns: int) -> float:
        sessions = _seeded(history, script)
        return timed(sessions.turn, turns)

    return median_us(sample, params["turns"], params["repeats"])


def text(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1)}


def tool(params: dict[str, Any]) -> Figures:
    return {"us_per_turn": _per_turn(params, 1, "tool")}


def pause(params: dict[str, Any]) -> Figures:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    def once(sessions: Sessions) -> None:
        first = sessions.turn("Book me in")
        if not isinstance(first.output, DeferredToolRequests):
            raise SystemExit(f"the deferred tool did not pause the run: {first.output!r}")
        call = first.output.calls[0]
        second = sessions.agent.run_sync(
            message_history=sessions.rows["bench"],
            deferred_tool_results=DeferredToolResults(calls={call.tool_call_id: "Friday"}))
        sessions.rows["bench"] = second.all_messages()
        if second.output != REPLY:
            raise SystemExit(f"the resumed run did not answer: {second.output!r}")

    def sample(turns: int) -> float:
        sessions = _seeded(1, "pause")
        return timed(lambda: once(sessions), turns)

    return {"us_per_turn": median_us(sample, params["turns"], params["repeats"]),
            "mechanism": "deferred tool (CallDeferred; DeferredToolResults resumes)"}


def growth(params: dict[str, Any]) -> Figures:
    return {"persistence": "the application's dict of message lists",
            **{str(h): _per_turn(params, h) for h in params["histories"]}}


def sqlite(params: dict[str, Any]) -> Figures:
    raise Unsupported(NO_PERSISTENCE)


def coldstart(params: dict[str, Any]) -> Figures:
    Sessions(_build()).turn()
    return {}


def dynamodb(params: dict[str, Any]) -> Figures:
    raise Unsupported(NO_PERSISTENCE)


def contention(params: dict[str, Any]) -> Figures:
    raise Unsupported(NO_PERSISTENCE)


if __name__ == "__main__":
    run({"text": text, "tool": tool, "pause": pause, "growth": growth, "sqlite": sqlite,
         "coldstart": coldstart, "dynamodb": dynamodb, "contention": contention})
