"""A standard AG-UI ``RunAgentInput`` as the handler's :class:`~dormant.HandlerInput`."""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunAgentInput, TextPart, ToolMessage, UserMessage
from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from dormant._inputs import (
    ApprovalDecision,
    ClientContext,
    ClientTool,
    HandlerInput,
    IfBusy,
    Input,
    InputAnswer,
    InterruptRequest,
    QueueOp,
    RetryRequest,
    ToolAnswer,
)
from dormant.errors import InputError, ServerOnly, describe_validation

__all__ = ["DormantProps", "from_run_agent_input"]

_MAX_MESSAGE_ID = 128


def from_run_agent_input(body: dict[str, Any] | RunAgentInput, *,
                         principal: str | None = None, public: bool = True) -> HandlerInput:
    """Map an AG-UI ``RunAgentInput`` onto one turn's request.

    - ``threadId`` is the session (normalised by the handler: ``thread-42`` is
      ``session_thread-42``).
    - ``resume`` entries answer parked tool calls: ``interruptId`` is the call id and
      ``payload`` the answer (a ``cancelled`` entry answers with no input, which the tool's
      answer schema refuses, so the model reads an ``Invalid input`` result). A
      ``resolved`` entry without a payload (absent or ``null``) is refused as invalid, as
      ``POST /turns`` refuses an answer without ``input``: it would use up the call with an
      answer that says nothing, losing the human's question to a client's bug.
    - Otherwise the last message, when it is a user message, is the turn's message; its id
      becomes the message id, so a resent request lands once. Earlier messages are the
      client's copy of the conversation and are ignored: the session holds the real one.
    - A non-empty object ``state`` is merged (shallowly) into the session state at the start
      of the turn and recorded as a ``state_delta``; an empty or absent one is ignored. An
      AG-UI body is a public client's (``public``): it may change only the handler's
      ``client_state`` keys (keys sent back unchanged are not writes; any other is refused).
    - ``tools`` (the client's own tools: front-end tools, CopilotKit's frontend actions) are
      offered to the model this run beside the agent's (a name the agent's tools have is the
      agent's); a call to one parks the session as a yield. The body's trailing ``tool``
      messages answer such parked calls (``toolCallId`` the call id, ``content`` the answer,
      which becomes the call's result), as ``resume`` entries do; a call that is not parked
      for an answer is refused as any answer is (409). A deferred call's result is not a
      client's to give: a ``tool`` message or ``resume`` entry naming one is refused
      (``server_only``, 422, by the handler); deferred results come from trusted server
      code. Application events too: a public body carrying ``forwardedProps.dormant.events``
      is refused (``server_only``).
    - ``context`` items reach the model as a system part (the agent's recipe decides where
      and how: ``app.context.client``).
    - ``forwardedProps.dormant`` carries what a ``POST /turns`` body says beside a message
      and answers (:class:`DormantProps`): ``retry``, ``resume``, ``pause``, ``interrupt``,
      ``queue``, ``inputs`` and ``ifBusy``, in the same JSON, so a client streams a retry, a
      resumed inbox or an input's response as it streams a message; and ``positions``,
      which shapes the stream, not the turn (:func:`dormant.http.wants_positions`). Any
      other key there is refused (422 naming it), so a client can tell a server that runs
      them from one that would ignore them. Stop and steer act on a run going on elsewhere
      and stream nothing: they stay ``POST /turns``'s.
    - ``runId`` and ``parentRunId`` do not shape the turn (the handler echoes them in
      ``RUN_STARTED``); the rest of ``forwardedProps`` is ignored.

    ``principal`` (from the authorizer, never the body) scopes the session. A body that is
    not a ``RunAgentInput`` raises :class:`~dormant.InputError`.
    """
    if isinstance(body, RunAgentInput):
        run = body
    else:
        try:
            run = RunAgentInput.model_validate(body)
        except ValidationError as error:
            reason = describe_validation(error)
            raise InputError(f"invalid AG-UI RunAgentInput: {reason}") from error
    forwarded = run.forwarded_props if isinstance(run.forwarded_props, dict) else {}
    ours = forwarded.get("dormant")
    if public and isinstance(ours, dict) and "events" in ours:
        raise ServerOnly("forwardedProps.dormant.events: application events are for trusted "
                         "server code (session.append_event, app.sessions.append), not a "
                         "public client")
    props = DormantProps.of(ours)
    answers = _tool_messages(run)
    decisions: list[ApprovalDecision] = []
    for index, entry in enumerate(run.resume or ()):
        if entry.interrupt_id.startswith(APPROVAL_PREFIX):
            decisions.append(_decision(index, entry.interrupt_id, entry.status, entry.payload))
        elif entry.status == "resolved" and entry.payload is None:
            raise _no_answer(index, entry.interrupt_id)
        else:
            answers.append(ToolAnswer(
                call_id=entry.interrupt_id,
                input=entry.payload if entry.status == "resolved" else None))
    resuming = bool(answers or decisions)
    message, message_id = (None, None) if resuming else _last_user_message(run)
    state = run.state if isinstance(run.state, dict) and run.state else None
    return HandlerInput(
        session_id=run.thread_id,
        input=Input(message=message, message_id=message_id, tools=answers or None,
                    approvals=decisions or None, state=state, retry=props.retry,
                    resume=props.resume, pause=props.pause, interrupt=props.interrupt,
                    queue=props.queue, inputs=props.inputs, if_busy=props.if_busy,
                    client_tools=_client_tools(run), context=_context(run)),
        principal=principal,
        public=public,
    )


class DormantProps(BaseModel):
    """``forwardedProps.dormant`` of an AG-UI request: the ``POST /turns`` fields a streamed
    run may carry (each as that body spells it), and the stream's ``positions`` option."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              frozen=True)

    positions: StrictBool | None = None
    retry: RetryRequest | None = None
    resume: bool | None = None
    pause: bool | None = None
    interrupt: InterruptRequest | None = None
    queue: list[QueueOp] | None = None
    inputs: list[InputAnswer] | None = None
    if_busy: IfBusy | None = None

    @classmethod
    def of(cls, value: Any) -> DormantProps:
        """``value`` (absent, or what the body holds) checked; InputError naming the field
        (``forwardedProps.dormant.<key>``) when it does not fit."""
        if value is None:
            return _NO_PROPS
        if not isinstance(value, dict):
            raise _props_error(ValidationError.from_exception_data("DormantProps", [
                InitErrorDetails(type="dict_type", loc=(), input=value)]))
        try:
            return cls.model_validate(value)
        except ValidationError as error:
            raise _props_error(error)  # noqa: B904  (its cause is the re-rooted error)


_NO_PROPS = DormantProps()


def _props_error(error: ValidationError) -> InputError:
    """An :class:`InputError` caused by ``error`` re-rooted at ``forwardedProps.dormant``
    (the HTTP API answers 422 naming the field)."""
    cause = ValidationError.from_exception_data("RunAgentInput", [InitErrorDetails(
        type=PydanticCustomError(item["type"], item["msg"]),
        loc=("forwardedProps", "dormant", *item["loc"]), input=item.get("input"))
        for item in error.errors(include_url=False)])
    failure = InputError(f"invalid AG-UI RunAgentInput: {describe_validation(cause)}")
    failure.__cause__ = cause
    return failure


#: Approval ids are minted ``apr_…`` by the runtime: that is how a resume entry is told apart.
APPROVAL_PREFIX = "apr_"


def _decision(index: int, approval_id: str, status: str, payload: Any) -> ApprovalDecision:
    """A resume entry for an approval interrupt: ``{"approved": bool, "reason"?}``; a
    cancelled interrupt is a denial. ``approved`` is a JSON boolean and nothing else (as on
    every route): anything else is refused naming ``resume.<index>.payload.approved``."""
    if status != "resolved":
        return ApprovalDecision(approval_id=approval_id, approved=False,
                                reason="cancelled by the user")
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        value = payload.get("approved") if isinstance(payload, dict) else payload
        loc = ("resume", index, "payload", *(("approved",)
                                                    if isinstance(payload, dict) else ()))
        raise _field_error(loc, value,
                           f"resume for approval {approval_id} needs a payload "
                           '{"approved": true|false, "reason"?: "..."}', kind="bool_type")
    reason = payload.get("reason")
    return ApprovalDecision(approval_id=approval_id, approved=payload["approved"],
                            reason=reason if isinstance(reason, str) else None)


def _no_answer(index: int, call_id: str) -> InputError:
    """The refusal of a resolved resume entry with no payload: an :class:`InputError` caused
    by a validation error at ``resume.<index>.payload`` (the HTTP API answers 422 naming
    that field, as for any body that does not fit)."""
    return _field_error(("resume", index, "payload"), None,
                        f"a resolved interrupt needs a payload: the answer to call {call_id} "
                        "(to give up on the call, resume it cancelled)", kind="missing")


def _tool_messages(run: RunAgentInput) -> list[ToolAnswer]:
    """The body's trailing ``tool`` messages (after its last other message), as answers to
    the parked calls they name, in order."""
    trailing: list[ToolMessage] = []
    for message in reversed(run.messages):
        if not isinstance(message, ToolMessage):
            break
        trailing.append(message)
    return [ToolAnswer(call_id=m.tool_call_id, input=_answer(m)) for m in reversed(trailing)]


def _answer(message: ToolMessage) -> Any:
    """A tool message's content as the answer: its text (the parts' text, joined), or, for
    content that is not all text, the parts as JSON."""
    content = message.content
    if isinstance(content, str):
        return content
    if all(isinstance(part, TextPart) for part in content):
        return "".join(part.text for part in content if isinstance(part, TextPart))
    return [part.model_dump(mode="json", by_alias=True, exclude_none=True) for part in content]


def _client_tools(run: RunAgentInput) -> list[ClientTool] | None:
    """The body's ``tools`` as the turn's client tools; one that cannot be offered to a model
    (a name no provider takes, parameters that are not a JSON Schema object) is refused,
    naming it."""
    if not run.tools:
        return None
    tools: list[ClientTool] = []
    for index, tool in enumerate(run.tools):
        parameters = tool.parameters if tool.parameters is not None else {
            "type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise _field_error(("tools", index, "parameters"), parameters,
                               "a tool's parameters must be a JSON Schema object")
        try:
            tools.append(ClientTool(name=tool.name, description=tool.description,
                                    parameters=parameters))
        except ValidationError as error:
            item = error.errors(include_url=False)[0]
            refusal = _field_error(("tools", index, *item["loc"]), item.get("input"),
                                   f"{item['msg']} (a model takes tool names of 1 to 64 "
                                   "letters, digits, '_' and '-')")
            raise refusal from refusal.__cause__
    names = [tool.name for tool in tools]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise _field_error(("tools", index, "name"), name,
                               f"two tools are named {name!r}")
    return tools


def _context(run: RunAgentInput) -> list[ClientContext] | None:
    if not run.context:
        return None
    try:
        return [ClientContext(description=item.description, value=item.value)
                for item in run.context]
    except ValidationError as error:
        raise InputError(f"invalid AG-UI RunAgentInput: context: "
                         f"{describe_validation(error)}") from None


def _field_error(loc: tuple[Any, ...], value: Any, message: str, *,
                 kind: str = "value_error") -> InputError:
    """An :class:`InputError` caused by a validation error (``kind``) at ``loc`` of the body
    (the HTTP API answers 422 naming the field)."""
    cause = ValidationError.from_exception_data("RunAgentInput", [InitErrorDetails(
        type=PydanticCustomError(kind, message),
        loc=loc, input=value)])
    error = InputError(f"invalid AG-UI RunAgentInput: {describe_validation(cause)}")
    error.__cause__ = cause
    return error


def _last_user_message(run: RunAgentInput) -> tuple[str | None, str | None]:
    if not run.messages:
        return None, None
    last = run.messages[-1]
    if not isinstance(last, UserMessage):
        return None, None
    if isinstance(last.content, str):
        text = last.content
    else:
        text = "\n".join(part.text for part in last.content if isinstance(part, TextPart))
    message_id = last.id if 0 < len(last.id) <= _MAX_MESSAGE_ID else None
    return (text or None), (message_id if text else None)


