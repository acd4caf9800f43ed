"""Agents used as tools under every path a turn can take: yields, deferred results, depth,
several calls in one step, a second call, stop, a crash and its takeover, retry, max_steps,
the store promise (one read, one write) and usage.

The session's agent is ``concierge``; ``billing`` (and, for depth, ``ledger``) are agents used
as tools. Every test goes through the REST or turn handler over a real store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import botocore.client
import pytest
from pydantic import BaseModel

import dormant
from dormant.events import Event, InvocationEnd, ModelEnd, ToolResult
from dormant.models import (
    AssistantMessage,
    ModelError,
    ModelRequest,
    ScriptedModel,
    ToolMessage,
    UserMessage,
)
from dormant.stores import DynamoDBStore, MemoryStore, Store
from tests._clock import Clock, Killed
from tests._moto import aws_env, in_process_aws

LEASE = 5
WAIT = 10


class Refund(BaseModel):
    booking: str


class Question(BaseModel):
    q: str


class Answer(BaseModel):
    answer: str


class Slow(BaseModel):
    seconds: float


class Flaky(ScriptedModel):
    """A scripted model whose calls numbered in ``fail`` (from 0) raise a retryable
    :class:`ModelError` instead of consuming a reply."""

    def __init__(self, replies: list[Any], fail: set[int]) -> None:
        super().__init__(replies)
        self.fail = fail
        self.calls = 0

    def stream(self, request: ModelRequest, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls - 1 in self.fail:
            raise ModelError("overloaded", code="throttled", retryable=True)
        return super().stream(request, **kwargs)


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def _calls(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def ask(agent: str, task: str, call_id: str) -> dict[str, Any]:
    return _call(agent, {"input": task}, call_id)


class Rig:
    """One app: ``concierge`` calling ``billing`` (which may call ``ledger``), their tools
    counting their runs in ``ran`` (call ids), over ``store``."""

    def __init__(self, concierge: list[Any], billing: list[Any], ledger: list[Any] = (), *,
                 store: Store | None = None, approval: dict[str, Any] | None = None,
                 max_steps: int = 10, billing_fails: frozenset[int] = frozenset()) -> None:
        self.clock = Clock()
        self.app = app = dormant.App(name="subagents", store=store or MemoryStore(),
                                     clock=self.clock)
        self.ran: list[str] = []
        self.kill: set[str] = set()
        self.started = threading.Event()
        tools = [
            app.tool(name="refund", description="refund", schema=Refund, execute=self._refund),
            app.tool(name="ask_guest", description="ask the guest", schema=Question,
                     yield_schema=Answer,
                     execute=lambda ctx: self._ran(ctx, {"told": ctx.input.answer})),
            app.tool(name="lookup", description="looked up elsewhere", schema=Question,
                     deferred=True),
            app.tool(name="work", description="slow work", schema=Slow, execute=self._work),
        ]
        self.ledger_model = ScriptedModel(list(ledger))
        ledger_agent = app.agent("ledger", self.ledger_model, tools=[tools[0]])
        self.billing_model = Flaky(list(billing), set(billing_fails))
        billing_agent = app.agent("billing", self.billing_model,
                                  [app.context.system("You do billing.")],
                                  tools=[*tools, ledger_agent.as_tool()],
                                  tool_approval=approval or {}, max_steps=max_steps)
        self.concierge_model = ScriptedModel(list(concierge))
        self.agent = app.agent("concierge", self.concierge_model,
                               [app.context.system("Concierge."), app.context.history()],
                               tools=[billing_agent.as_tool(description="Billing"), tools[0]])
        self.rest = app.handler.rest(agent=self.agent)
        self.turn = app.handler.turn(agent=self.agent, lease=LEASE, poll_interval=0.05)

    def _ran(self, ctx: dormant.ToolContext, result: Any) -> Any:
        self.ran.append(ctx.call_id)
        return result

    def _refund(self, ctx: dormant.ToolContext) -> dict[str, Any]:
        if ctx.call_id in self.kill:
            self.kill.discard(ctx.call_id)
            self.ran.append(ctx.call_id)
            raise Killed(ctx.call_id)
        return self._ran(ctx, {"refunded": ctx.args.booking})

    def _work(self, ctx: dormant.ToolContext) -> dict[str, Any]:
        self.started.set()
        if ctx.signal.wait(ctx.args.seconds):
            self.ran.append("cut")
            raise dormant.Aborted("stopped while working")
        return self._ran(ctx, {"slept": ctx.args.seconds})

    def send(self, given: dict[str, Any]) -> Any:
        return self.rest({"session_id": "s1", "input": given})

    def events(self) -> list[Event]:
        session = self.app.sessions.get("s1")
        assert session is not None
        return session.events

    def results(self) -> list[tuple[str, str | None, Any, str | None]]:
        """(call id, scope path, result, error) of every final tool result, in order."""
        return [(e.call_id, e.scope.path if e.scope else None, e.result, e.error)
                for e in self.events() if isinstance(e, ToolResult) and not e.preliminary]

    def consumed(self) -> None:
        for model in (self.concierge_model, self.billing_model, self.ledger_model):
            model.assert_consumed()


# --- pending items inside a sub-agent ------------------------------------------------------------


def test_a_yield_inside_a_sub_agent_is_answered_with_the_ordinary_tools_input() -> None:
    rig = Rig([_calls(ask("billing", "which card?", "c_b")), "Billing: told."],
              [_calls(_call("ask_guest", {"q": "card?"}, "c_ask")), "Told: visa."])
    parked = rig.send({"message": "pay"})
    assert parked.status == "yielded_tool"
    [waiting] = parked.yielded_tools
    assert (waiting.call_id, waiting.agent) == ("c_ask", "concierge/billing")

    done = rig.send({"tools": [{"call_id": "c_ask", "input": {"answer": "visa"}}]})

    assert done.status == "completed" and done.output.text == "Billing: told."
    assert rig.ran == ["c_ask"]
    assert rig.results() == [("c_ask", "concierge/billing", {"told": "visa"}, None),
                             ("c_b", None, "Told: visa.", None)]
    rig.consumed()


def test_a_deferred_call_inside_a_sub_agent_waits_for_its_trusted_result() -> None:
    rig = Rig([_calls(ask("billing", "look it up", "c_b")), "Billing found it."],
              [_calls(_call("lookup", {"q": "rate"}, "c_look")), "Rate is 7."])
    parked = rig.send({"message": "rate?"})
    assert parked.status == "yielded_tool"
    [deferred] = parked.deferred_tools
    assert (deferred.call_id, deferred.agent) == ("c_look", "concierge/billing")

    done = rig.send({"tool_results": [{"call_id": "c_look", "result": {"rate": 7}}]})

    assert done.status == "completed" and done.output.text == "Billing found it."
    [billing_request] = rig.billing_model.requests[1:]
    assert billing_request.messages[-1] == ToolMessage("c_look", "lookup", '{"rate": 7}',
                                                       False)
    assert rig.results() == [("c_look", "concierge/billing", {"rate": 7}, None),
                             ("c_b", None, "Rate is 7.", None)]
    rig.consumed()


def test_a_sub_agent_inside_a_sub_agent_parks_and_resumes_innermost_first() -> None:
    rig = Rig([_calls(ask("billing", "refund BK", "c_b")), "All done."],
              [_calls(ask("ledger", "refund BK", "c_l")), "Ledger refunded."],
              [_calls(_call("refund", {"booking": "BK"}, "c_r")), "Refunded BK."],
              approval={"ledger": "user-approval"})
    parked = rig.send({"message": "refund"})
    [pending] = parked.pending_approvals
    assert (pending.call_id, pending.agent) == ("c_l", "concierge/billing")

    done = rig.send({"approvals": [{"approval_id": pending.approval_id, "approved": True}]})

    assert done.status == "completed" and done.output.text == "All done."
    assert rig.ran == ["c_r"]
    assert rig.results() == [
        ("c_r", "concierge/billing/ledger", {"refunded": "BK"}, None),
        ("c_l", "concierge/billing", "Refunded BK.", None),
        ("c_b", None, "Ledger refunded.", None)]
    # each model saw its own task and events only
    [ledger_first, ledger_second] = rig.ledger_model.requests
    assert ledger_first.messages == [UserMessage("refund BK")]
    assert [type(m) for m in ledger_second.messages] == [UserMessage, AssistantMessage,
                                                         ToolMessage]
    assert rig.billing_model.requests[1].messages[-1] == ToolMessage(
        "c_l", "ledger", '"Refunded BK."', False)
    rig.consumed()


# --- several calls ------------------------------------------------------------------------------


def test_a_plain_tool_and_an_agent_tool_in_one_step_each_get_one_result() -> None:
    rig = Rig([_calls(_call("refund", {"booking": "A"}, "c_a"), ask("billing", "B?", "c_b")),
               "Both done."],
              ["B is fine."])
    done = rig.send({"message": "go"})
    assert done.status == "completed" and rig.ran == ["c_a"]
    assert rig.results() == [("c_a", None, {"refunded": "A"}, None),
                             ("c_b", None, "B is fine.", None)]
    rig.consumed()


def test_two_agent_calls_in_one_step_park_together_and_resume_in_call_order() -> None:
    rig = Rig([_calls(ask("billing", "one", "c_1"), ask("billing", "two", "c_2")), "Done."],
              [_calls(_call("ask_guest", {"q": "1?"}, "c_q1")),
               _calls(_call("ask_guest", {"q": "2?"}, "c_q2")), "One.", "Two."])
    parked = rig.send({"message": "go"})
    assert [(y.call_id, y.agent) for y in parked.yielded_tools] == [
        ("c_q1", "concierge/billing"), ("c_q2", "concierge/billing")]
    half = rig.send({"tools": [{"call_id": "c_q2", "input": {"answer": "b"}}]})
    assert half.status == "yielded_tool"  # the other still waits
    done = rig.send({"tools": [{"call_id": "c_q1", "input": {"answer": "a"}}]})

    assert done.status == "completed" and rig.ran == ["c_q1", "c_q2"]
    assert [(r[0], r[2]) for r in rig.results()] == [
        ("c_q1", {"told": "a"}), ("c_q2", {"told": "b"}), ("c_1", "One."), ("c_2", "Two.")]
    # each run of the sub-agent saw its own call's task and events only
    one, two = rig.billing_model.requests[2:]
    assert one.messages[0] == UserMessage("one") and len(one.messages) == 3
    assert one.messages[2].call_id == "c_q1"
    assert two.messages[0] == UserMessage("two") and len(two.messages) == 3
    assert two.messages[2].call_id == "c_q2"
    rig.consumed()


def test_the_same_sub_agent_called_again_starts_fresh() -> None:
    rig = Rig([_calls(ask("billing", "first", "c_1")), _calls(ask("billing", "second", "c_2")),
               "Done twice."],
              [_calls(_call("refund", {"booking": "X"}, "c_r")), "First done.",
               "Second done."])
    done = rig.send({"message": "go"})
    assert done.status == "completed" and rig.ran == ["c_r"]
    second = rig.billing_model.requests[2]
    assert second.messages == [UserMessage("second")]
    rig.consumed()


# --- stop, crash, retry, max_steps ---------------------------------------------------------------


def test_a_stop_of_the_caller_stops_the_sub_agents_running_tool() -> None:
    rig = Rig([_calls(ask("billing", "work", "c_b"))],
              [_calls(_call("work", {"seconds": 30}, "c_w"))])
    stream = rig.turn({"session_id": "s1", "input": {"message": "go"}})
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(stream.run()), daemon=True)
    thread.start()
    assert rig.started.wait(WAIT)

    stopped = rig.send({"stop": {"invocation_id": stream.invocation_id}})
    thread.join(WAIT)

    assert not thread.is_alive() and stopped.status == "accepted"
    assert outcome[0].status == "stopped" and rig.ran == ["cut"]
    assert rig.results() == [("c_w", "concierge/billing", None, "stopped"),
                             ("c_b", None, None, "stopped")]
    assert [e.status for e in rig.events() if isinstance(e, InvocationEnd)] == ["stopped"]
    session = rig.app.sessions.get("s1")
    assert session is not None and not session.head.step and session.status == "active"


def test_a_crash_while_a_sub_agents_tool_runs_is_taken_over_under_the_same_call_id() -> None:
    rig = Rig([_calls(ask("billing", "refund", "c_b")), "Done."],
              [_calls(_call("refund", {"booking": "K"}, "c_r")), "Refunded."])
    rig.kill.add("c_r")
    with pytest.raises(Killed):
        rig.turn({"session_id": "s1", "input": {"message": "go"}}).run()
    session = rig.app.sessions.get("s1")
    assert session is not None and session.head.running  # the write-ahead landed

    rig.clock.advance(LEASE + 1)
    done = rig.turn({"session_id": "s1", "input": {}}).run()

    assert done.status == "completed"
    assert rig.ran == ["c_r", "c_r"]  # died once, ran again under its call id
    assert rig.results() == [("c_r", "concierge/billing", {"refunded": "K"}, None),
                             ("c_b", None, "Refunded.", None)]
    assert [e.status for e in rig.events() if isinstance(e, InvocationEnd)] == ["completed"]
    rig.consumed()


def test_a_sub_agents_failed_model_is_retried_after_its_tool_ran() -> None:
    rig = Rig([_calls(ask("billing", "refund", "c_b")), "Done."],
              [_calls(_call("refund", {"booking": "K"}, "c_r")), "Refunded."],
              billing_fails=frozenset({1}))
    failed = rig.send({"message": "go"})
    assert failed.status == "error" and failed.retryable
    assert rig.ran == ["c_r"]
    session = rig.app.sessions.get("s1")
    assert session is not None and session.status == "failed"

    done = rig.send({"retry": {"retry_id": "r1"}})

    assert done.status == "completed" and rig.ran == ["c_r"]  # the tool did not run again
    assert rig.results() == [("c_r", "concierge/billing", {"refunded": "K"}, None),
                             ("c_b", None, "Refunded.", None)]
    rig.consumed()


def test_max_steps_inside_a_sub_agent_is_its_callers_tool_error() -> None:
    rig = Rig([_calls(ask("billing", "loop", "c_b")), "Billing gave up."],
              [_calls(_call("refund", {"booking": "1"}, "c_1")),
               _calls(_call("refund", {"booking": "2"}, "c_2"))], max_steps=2)
    done = rig.send({"message": "go"})
    assert done.status == "completed" and done.output.text == "Billing gave up."
    [*_, (call_id, path, result, error)] = rig.results()
    assert (call_id, path, result) == ("c_b", None, None)
    assert error is not None and "max_steps=2" in error
    assert [e.status for e in rig.events() if isinstance(e, InvocationEnd)] == ["completed"]
    rig.consumed()


# --- the store promise and usage ----------------------------------------------------------------


@pytest.fixture
def dynamodb() -> Iterator[DynamoDBStore]:
    with pytest.MonkeyPatch.context() as patch:
        aws_env(patch)
        with in_process_aws():
            store = DynamoDBStore("dormant-subagents")
            store.ensure_table()
            yield store


def test_an_ordinary_turn_with_a_sub_agent_is_one_read_and_one_write(
        dynamodb: DynamoDBStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(["Hello.", _calls(ask("billing", "hi", "c_b")), "Billing says hi."], ["Hi."],
              store=dynamodb)
    assert rig.send({"message": "first"}).status == "completed"  # the session exists
    sent: list[str] = []
    make_call = botocore.client.BaseClient._make_api_call

    def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
        sent.append(operation)
        return make_call(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    before, _ = dynamodb.counters()

    done = rig.send({"message": "ask billing"})

    after, _ = dynamodb.counters()
    assert done.status == "completed" and done.output.text == "Billing says hi."
    # one Query reads the session, one conditional PutItem lands the turn: the agent call is
    # not written ahead (its sub-agent only answered in text: nothing ran to protect). The
    # GetItem is the control record's read at the caller's step boundary, as in every turn
    # of more than one step (a stop, pause or steer sent meanwhile is taken up there).
    assert sent == ["Query", "GetItem", "PutItem"] and after - before == 3
    *_, end = [e for e in rig.events() if isinstance(e, InvocationEnd)]
    assert end.timing is not None
    assert [(p.name, p.requests) for p in end.timing.phases] == [("load", 1)]
    rig.consumed()


def test_a_sub_agents_tokens_are_in_the_turns_usage_and_timing() -> None:
    rig = Rig([{**_calls(ask("billing", "hi", "c_b")),
                "usage": {"input_tokens": 10, "output_tokens": 1}},
               {"text": "Done.", "usage": {"input_tokens": 20, "output_tokens": 2}}],
              [{"text": "Hi.", "usage": {"input_tokens": 300, "output_tokens": 30}}])
    stream = rig.turn({"session_id": "s1", "input": {"message": "go"}})
    seen = list(stream)
    result = stream.run()
    assert result.status == "completed"
    ends = [e for e in seen if isinstance(e, ModelEnd)]
    assert [(e.usage.input_tokens, e.scope.path if e.scope else None) for e in ends] == [
        (10, None), (300, "concierge/billing"), (20, None)]
    [end] = [e for e in rig.events() if isinstance(e, InvocationEnd)]
    assert end.timing is not None
    assert end.timing.usage.input_tokens == 330 and end.timing.usage.output_tokens == 33
    assert len(end.timing.model_calls) == 3
