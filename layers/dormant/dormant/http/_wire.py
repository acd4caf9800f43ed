"""The API's wire types (camelCase on the wire; unknown fields refused) and who is calling."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic.alias_generators import to_camel

from dormant._decide import announced, pending_stop
from dormant._head import SessionStatus
from dormant._ids import now_ms
from dormant._inputs import (
    IfBusy,
    InputAnswer,
    InterruptRequest,
    QueueOp,
    SeedRequest,
    SteerRequest,
    StopRequest,
    message_text,
)
from dormant._turn_wire import usage_whole
from dormant.errors import InputError
from dormant.events import Usage
from dormant.handlers import HandlerInput, Input, RetryRequest, ToolAnswer
from dormant.session import MAX_SESSION_ID, Session, normalize_session_id
from dormant.types import PendingInput, QueuedMessage

__all__ = [
    "ActiveInvocation",
    "ApprovalAnswer",
    "CallAnswer",
    "ErrorBody",
    "ForkCreated",
    "ForkOf",
    "ForkRequest",
    "PendingCall",
    "PendingStop",
    "SessionLine",
    "SessionLink",
    "SessionList",
    "SessionUsage",
    "SessionView",
    "TurnRequest",
    "Waiting",
    "principal_of",
    "request_id_of",
    "waiting_on",
]

_PREFIX = "session_"
#: A session id the API accepts, as a JSON Schema (ECMA 262) pattern: 1-120 characters from
#: ``A-Z a-z 0-9 . _ : -``, optionally after the ``session_`` prefix (``thread-42`` and
#: ``session_thread-42`` are one session), and not the bare prefix itself.
SESSION_ID_PATTERN = (rf"^(?!{_PREFIX}$)({_PREFIX})?"
                      rf"[A-Za-z0-9._:-]{{1,{MAX_SESSION_ID - len(_PREFIX)}}}$")
#: The JSON Schema of every session id of the API (path parameters and body fields alike).
SESSION_ID_SCHEMA: dict[str, Any] = {"pattern": SESSION_ID_PATTERN, "minLength": 1,
                                     "maxLength": MAX_SESSION_ID}
_SESSION_ID = re.compile(SESSION_ID_PATTERN)


def checked_session_id(session_id: str) -> str:
    """The canonical form of a session id from a request, checked against exactly what the
    OpenAPI description says (:data:`SESSION_ID_PATTERN`, matched whole: no trailing
    newline slips past a ``$``). Raises :class:`InputError` (400 ``invalid_input``)."""
    if not isinstance(session_id, str) or _SESSION_ID.fullmatch(session_id) is None:
        raise InputError(f"invalid session id {session_id!r}: use 1-"
                         f"{MAX_SESSION_ID - len(_PREFIX)} characters from A-Z a-z 0-9 . _ : -")
    return normalize_session_id(session_id)


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              defer_build=True)


def _agent_path() -> Any:
    """A pending item's agent path: absent for the session agent's own (as
    ``types.PendingApproval.agent``)."""
    return Field(default=None, exclude_if=lambda value: value is None, description=(
        "A sub-agent's call (an agent used as a tool): the agents from the session's down to "
        "the one that made the call, joined by `/` (`concierge/billing`). Absent for the "
        "session's own agent's calls. It is answered like any other."))


class ApprovalAnswer(_Wire):
    """A decision on a pending approval."""

    approval_id: str = Field(min_length=1, description="The approval being decided.")
    approved: StrictBool = Field(description="Whether the tool may run: JSON true or false, "
                                             "nothing else.")
    reason: str | None = Field(default=None, description="Why (shown to the model when denied).")


class CallAnswer(ToolAnswer):
    """An answer to a yielded call, as a public client sends it: ``{callId, input}``.

    ``input`` is required and must not be ``null``: an answer that says nothing would use up
    the call (its tool's schema refuses it and the model reads ``Invalid input``), losing the
    human's question to a client's bug. Either is refused (422 ``validation_error`` naming
    ``tools.N.input``) before anything is read or written. To give up on a call, interrupt
    it (``interrupt: {owner: callId}``)."""

    input: Any = Field(description="The answer, as the call's `inputSchema` (in "
                       "`GET /sessions/{id}`) describes it. Required; `null` is refused.")

    @field_validator("input")
    @classmethod
    def _says_something(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("null is not an answer: send what the call waits for "
                             "(to give up on the call, interrupt it)")
        return value


class TurnRequest(_Wire):
    """The public body of ``POST /turns``.

    Only what a client may say: no ``principal`` (the authorizer names it) and no
    ``initialState`` or other server-only inputs. Unknown fields are refused (422);
    a ``seed`` with a role other than ``user`` is refused with ``server_only`` (422).
    """

    session_id: str | None = Field(
        default=None, description="The session (minted when absent; `thread-42` and "
        "`session_thread-42` are one session).", json_schema_extra=SESSION_ID_SCHEMA)
    message: str | None = Field(default=None, min_length=1, description="The user's message.")
    message_id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="A stable id for the message: a retried request lands it once.")
    tools: list[CallAnswer] | None = Field(
        default=None, description="Answers to yielded calls: [{callId, input}] (`input` "
        "required: an entry without one, or with `null`, is refused, nothing written). An "
        "answer to a call already answered is 409 `already_answered`.")
    approvals: list[ApprovalAnswer] | None = Field(
        default=None, description="Decisions on pending approvals.")
    state: dict[str, Any] | None = Field(
        default=None, description="Merged (shallowly) into the session state for this turn.")
    retry: RetryRequest | None = Field(
        default=None, description="Rerun a failed turn's failed model call: {retryId} (a "
        "fresh id per retry; resending one lands once). Finished tools are not run again.")
    stop: StopRequest | None = Field(
        default=None, description="Stop the running (or waiting) invocation: "
        "{invocationId, seen?}. `seen`: how many of its stream events you had received, so "
        "the stored reply ends where your screen does. Answers `stopped`, or 202 `accepted` "
        "when it runs elsewhere (it stops at its next check; with a `warning` when no turn "
        "is known to run it: it waits as the session's `pendingStop`); 409 `not_running` "
        "when that invocation already ended or cannot be running.")
    steer: SteerRequest | None = Field(
        default=None, description="A message for the running invocation, taken at its next "
        "step boundary: {text, invocationId, id?} (202 `accepted`; 409 `not_running` when "
        "it already ended: send it as a message instead).")
    pause: bool | None = Field(
        default=None, description="`true`: pause the session. Nothing runs while paused; "
        "messages queue in the inbox.")
    resume: bool | None = Field(
        default=None, description="`true`: resume a paused session (the inbox runs).")
    interrupt: InterruptRequest | None = Field(
        default=None, description="End a waiting or failed response: {owner}, exactly one "
        "id: a pending call, approval or input id, or the failed invocation's id (409 "
        "`not_pending` when the session is not waiting on it).")
    queue: list[QueueOp] | None = Field(
        default=None, description="Inbox operations, in order: [{op, id, text?, "
        "position?}] with op `edit` (needs text), `move` (needs position, 0 = next), "
        "`remove` or `send_now`, on the queued message `id` (409 `not_pending` when it is "
        "not queued).")
    inputs: list[InputAnswer] | None = Field(
        default=None, description="Responses to input requests (see the session's "
        "`pendingInputs`): [{inputId, value}].")
    seed: SeedRequest | None = Field(
        default=None, description="Add a message to the conversation without starting a "
        "turn: {text, role?, id?}. Only role `user` is public (others are `server_only`, "
        "422); `id` lands it once.")
    if_busy: IfBusy | None = Field(
        default=None, description="What `message` does when the session cannot take it "
        "now (it waits on a call, failed, or is paused): `queue` (the default: 202 "
        "`queued`, it runs when the session is free), `reject` (409), `interrupt` (end the "
        "waiting response and run this message).")

    @field_validator("message")
    @classmethod
    def _message_has_text(cls, value: str | None) -> str | None:
        return message_text(value)

    @model_validator(mode="before")
    @classmethod
    def _no_tool_results(cls, data: Any) -> Any:
        """Deferred tool results are for trusted server code: refused by name (422, nothing
        read or written), not only as an unknown field."""
        if isinstance(data, dict) and ("toolResults" in data or "tool_results" in data):
            raise ValueError("toolResults: deferred tool results are for trusted server "
                             "code (session.input.tool_result, app.sessions.append, the "
                             "webhook queue), not a public client")
        return data

    @model_validator(mode="before")
    @classmethod
    def _no_app_events(cls, data: Any) -> Any:
        """Application events are for trusted server code: refused by name (422, nothing
        read or written), not only as an unknown field."""
        if isinstance(data, dict) and "events" in data:
            raise ValueError("events: application events are for trusted server code "
                             "(session.append_event, app.sessions.append, a trusted "
                             "handler's Input(events=...)), not a public client")
        return data

    def to_handler_input(self, principal: str | None) -> HandlerInput:
        """The handler's input, marked public: the handler refuses what only trusted server
        code may send (``server_only``, nothing written) and state keys outside its
        ``client_state``."""
        return HandlerInput(
            session_id=self.session_id,
            input=Input(
                message=self.message, message_id=self.message_id,
                tools=([ToolAnswer(call_id=t.call_id, input=t.input) for t in self.tools]
                       if self.tools is not None else None),
                approvals=([a.model_dump() for a in self.approvals]
                           if self.approvals is not None else None),
                state=self.state, retry=self.retry, stop=self.stop, steer=self.steer,
                pause=self.pause, resume=self.resume, interrupt=self.interrupt,
                queue=self.queue, inputs=self.inputs, seed=self.seed, if_busy=self.if_busy,
            ),
            principal=principal,
            public=True,
        )


class PendingCall(_Wire):
    """A call a session waits on."""

    call_id: str
    name: str
    args: Any = None
    input_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema of the answer the call waits for (send it as "
        "`tools: [{callId, input}]`), as the session's ledger recorded it. Shown by "
        "`GET /sessions/{id}`; absent for calls recorded before it was.")
    tool_metadata: dict[str, Any] | None = Field(
        default=None, description="The tool's `metadata` as its definition declares it "
        "(`app.tool(..., metadata=...)`), shown by `GET /sessions/{id}`; absent when it has "
        "none. The ledger's `tool_call` events carry it too.")
    agent: str | None = _agent_path()


class Waiting(_Wire):
    """One thing a session waits on, as ``GET /sessions?detail=true`` lists it."""

    kind: Literal["yield", "approval", "input", "message", "deferred"] = Field(
        description="`yield`: a yielded call waits for its answer (`tools`); `approval`: a "
        "call waits for a decision (`approvals`); `input`: an input request waits for a "
        "response (`inputs`); `message`: the agent yielded its turn and waits for the next "
        "message; `deferred`: a deferred call waits for its result, which trusted server "
        "code supplies (not a client).")
    id: str = Field(description="The id its answer names: the call id, approval id or "
                    "input id; for `message`, the parked invocation.")
    name: str = Field(description="The tool (`yield`, `approval`), the request's prompt or "
                      "else its id (`input`), or `message`.")
    agent: str | None = _agent_path()


class Running(_Wire):
    """A claimed invocation that runs now: a request committed its claim (an approval, an
    answer, a retry, a resume, a queued message's start) and has not committed its end."""

    invocation_id: str
    lease_until: int = Field(description="When its request promised to commit by (epoch "
                             "ms). Past it the claimer is taken to have died.")
    stranded: bool = Field(description="True once the lease ran out: the next request on "
                           "the session (any, even an empty one), the inbox's hand-on or "
                           "the lease's wake-up timer takes it over and re-runs its "
                           "unfinished step under the same call ids.")
    takeovers: int | None = Field(default=None, description="How many times it was taken "
                                  "over so far (absent: never): it is being recovered.")

    @classmethod
    def of(cls, session: Session, now: int) -> Running | None:
        head = session.head
        if not head.running or head.open_invocation is None:
            return None
        return cls(invocation_id=head.open_invocation, lease_until=head.lease,
                   stranded=head.stranded(now), takeovers=head.takeovers or None)


class PendingStop(_Wire):
    """A stop sent for an invocation the session is not known to run (202 `accepted`, with a
    `warning` saying so): it waits in the session's control record and ends that invocation
    if a turn runs it (one that has not announced itself yet, say) within a minute; after
    that it is stale, shown nowhere and applied to nothing."""

    invocation_id: str
    at: int = Field(description="When it was sent (epoch ms).")

    @classmethod
    def of(cls, session: Session) -> PendingStop | None:
        held = pending_stop(session, now_ms())  # (the record is stamped by the wall clock)
        return None if held is None else cls(invocation_id=held.invocation_id, at=held.at)


class ActiveInvocation(_Wire):
    """The invocation running now, wherever it was started: what ``stop: {invocationId}``
    names. A claimed one (``running``) unless its claimer died; else one that announced
    itself in the session's control record at its first check (a turn running for more than
    about a second), while the session has not moved on from the version it started from."""

    invocation_id: str
    since: int = Field(description="When it started (epoch ms); for a claimed invocation "
                       "that has not announced itself yet, the session's last commit.")

    @classmethod
    def of(cls, session: Session, now: int) -> ActiveInvocation | None:
        head, entry = session.head, announced(session)
        if head.running and head.open_invocation is not None:
            if head.stranded(now):
                return None
            since = entry.since if entry is not None \
                and entry.invocation_id == head.open_invocation else head.updated_at
            return cls(invocation_id=head.open_invocation, since=since)
        return cls(invocation_id=entry.invocation_id, since=entry.since) \
            if entry is not None else None


class SessionUsage(Usage):
    """What a session's turns used and cost, summed over every turn the ledger timed
    (``cost``: null when no call of them had a price in the app's price table)."""

    turns: int = Field(description="How many turns the totals cover.")

    @classmethod
    def of(cls, session: Session) -> SessionUsage | None:
        usage = session.head.usage
        return cls.model_validate(usage) if usage else None


class SessionView(_Wire):
    """The body of ``GET /sessions/{id}``."""

    session_id: str
    status: SessionStatus = Field(
        description="`active`, `awaiting_input` (parked on a call, approval, input request "
        "or message), `failed` (until retried or interrupted) or `paused`.")
    version: int = Field(description="Commits so far (`events?after=` takes it).")
    yielded_tools: list[PendingCall] = Field(default_factory=list)
    pending_approvals: list[Any] = Field(default_factory=list)
    deferred_tools: list[PendingCall] = Field(
        default_factory=list, description="Deferred calls waiting for their result, which "
        "trusted server code supplies (a client cannot: `toolResults` is refused).")
    pending_inputs: list[PendingInput] = Field(
        default_factory=list, description="Input requests awaiting a response (answer with "
        "`inputs`): [{inputId, schema, prompt}].")
    waiting: list[Waiting] = Field(
        default_factory=list, description="What it waits on, in one list: its yielded calls, "
        "approvals, then input requests, or the next message (as `GET /sessions?detail=true` "
        "says it).")
    inbox: list[QueuedMessage] = Field(
        default_factory=list, description="Messages queued while the session could not take "
        "them, in the order they will run: [{id, text, queuedAt}].")
    open_invocation: str | None = Field(
        default=None, description="The invocation that is parked, failed, paused or running "
        "(what `stop` and `interrupt` name).")
    running: Running | None = Field(
        default=None, description="A claimed invocation running now, or stranded (its "
        "request died) and due to be taken over; absent otherwise.")
    active_invocation: ActiveInvocation | None = Field(
        default=None, description="The invocation running now, wherever it was started "
        "(this API, another process, a webhook): {invocationId, since}; stop it with "
        "`stop: {invocationId}` (202 `accepted`: it stops at its next check). A turn "
        "started elsewhere shows here once it has run about a second (it announces itself "
        "at its first check of the control record). `null` when none runs.")
    pending_stop: PendingStop | None = Field(
        default=None, description="A stop sent for an invocation the session is not known "
        "to run: {invocationId, at}; it ends that invocation if a turn runs it. Absent "
        "otherwise.")
    timers: list[dict[str, Any]] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    agent: str | None = Field(default=None, description="The agent that ran its latest "
                              "invocation (absent: none ran yet).")
    preview: str | None = Field(default=None, description="Its first user message, on one "
                                "line, cut to 100 characters (absent: no message yet).")
    fork_of: ForkOf | None = Field(
        default=None, description="The session and version this one was forked from.")
    parent: SessionLink | None = Field(
        default=None, description="A child session's parent (`Agent.as_delegate`): "
        "{sessionId, callId}, the call whose result its end supplies (absent: no parent).")
    children: list[SessionLink] | None = Field(
        default=None, description="The child sessions it delegated calls to, oldest first: "
        "[{sessionId, callId}] (absent: none).")
    compactions: int | None = Field(
        default=None, description="How many times older turns were folded into a summary "
        "(absent: never).")
    usage: SessionUsage | None = Field(
        default=None, description="The tokens and cost of its turns, summed: {inputTokens, "
        "outputTokens, cachedTokens, reasoningTokens, cost, turns}; `null` before its first "
        "turn ends.")
    created_at: int = 0
    updated_at: int = 0
    events: list[dict[str, Any]] | None = Field(
        default=None, description="With `events=true`: a page of the ledger, oldest first "
        "(at most `limit` events, from the start or from `cursor`).")
    next: str | None = Field(
        default=None, description="With `events=true`, when more events follow: pass it as "
        "`cursor` for the next page (absent: the page reaches the end).")

    def wire(self) -> dict[str, Any]:
        """The JSON body: empty fields left out, except those that say ``null``."""
        body = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        body.setdefault("activeInvocation", None)
        body.setdefault("usage", None)
        return usage_whole(body, self.usage)


class ForkOf(_Wire):
    """Where a fork came from: its first ``seq`` events are that session's, as of
    ``version`` (read from it, never copied)."""

    session: str
    version: int
    seq: int


class SessionLink(_Wire):
    """A delegation's link between sessions (``Agent.as_delegate``): the other session, and
    the parent's call the child runs."""

    session_id: str
    call_id: str

    @classmethod
    def of(cls, link: dict[str, Any]) -> SessionLink:
        return cls(session_id=link["session"], call_id=link["call_id"])


class ForkRequest(_Wire):
    """The body of ``POST /sessions/{id}/fork`` (an empty body forks the current version
    under a minted id)."""

    at_version: int | None = Field(
        default=None, ge=1, description="The source's version to fork at (default: its "
        "current one). Edit-and-resend: fork at the version before a message, then send the "
        "edited message to the fork.")
    session_id: str | None = Field(
        default=None, description="The fork's id (minted when absent; 409 if taken).",
        json_schema_extra=SESSION_ID_SCHEMA)


class ForkCreated(_Wire):
    """The answer of ``POST /sessions/{id}/fork`` (201)."""

    session_id: str
    version: int
    fork_of: ForkOf


class SessionLine(_Wire):
    """One session of ``GET /sessions``. The fields after ``updatedAt`` come only with
    ``detail=true``, and each only when it says something."""

    session_id: str
    status: SessionStatus = Field(
        description="`active`, `awaiting_input`, `failed` or `paused`. With `detail=true` "
        "as `GET /sessions/{id}` says it; without, as the listing has it, which sees a pause "
        "asked of an idle session only once a request has taken it up.")
    version: int
    updated_at: int
    waiting: list[Waiting] | None = Field(
        default=None, description="What the session waits on: its yielded calls, approvals, "
        "then input requests (`detail=true`; absent: nothing).")
    inbox: int | None = Field(
        default=None, description="How many messages are queued in its inbox (`detail=true`; "
        "absent: none).")
    open_invocation: str | None = Field(
        default=None, description="The invocation that is parked, failed, paused or running "
        "(`detail=true`).")
    running: Running | None = Field(
        default=None, description="A claimed invocation running now or stranded "
        "(`detail=true`; see `GET /sessions/{id}`).")
    fork_of: ForkOf | None = Field(
        default=None, description="The session and version this one was forked from "
        "(`detail=true`).")
    compactions: int | None = Field(
        default=None, description="How many times older turns were folded into a summary "
        "(`detail=true`; absent: never).")
    created_at: int | None = Field(default=None, description="When it was created "
                                   "(`detail=true`; epoch milliseconds).")
    preview: str | None = Field(default=None, description="Its first user message, on one "
                                "line, cut to 100 characters (`detail=true`; absent: no "
                                "message yet).")
    agent: str | None = Field(default=None, description="The agent that ran its latest "
                              "invocation (`detail=true`; absent: none ran yet).")
    usage: SessionUsage | None = Field(
        default=None, description="The tokens and cost of its turns, summed, as `GET "
        "/sessions/{id}` says them (`detail=true`; absent: no turn ended yet).")

    @classmethod
    def detailed(cls, session: Session, now: int) -> SessionLine:
        """The line of ``session`` as loaded (its head suffices: no ledger read)."""
        head = session.head
        waiting = waiting_on(session)
        return cls(session_id=session.session_id, status=session.status,
                   version=session.version, updated_at=head.updated_at,
                   waiting=waiting or None, inbox=len(session.inbox) or None,
                   open_invocation=session.open_invocation,
                   running=Running.of(session, now),
                   fork_of=ForkOf(**head.fork_of) if head.fork_of else None,
                   compactions=head.compactions or None, created_at=head.created_at,
                   preview=head.preview, agent=head.agent, usage=SessionUsage.of(session))


def waiting_on(session: Session) -> list[Waiting]:
    """What ``session`` waits on: its yielded calls, then its approvals, then its input
    requests; else, when its agent yielded the turn, the next message. A sub-agent's item
    names its agent's path."""
    waiting = [Waiting(kind="yield", id=c.call_id, name=c.name, agent=c.agent)
               for c in session.yielded_tools]
    waiting += [Waiting(kind="approval", id=a.approval_id, name=a.tool, agent=a.agent)
                for a in session.pending_approvals]
    waiting += [Waiting(kind="input", id=i.input_id, name=i.prompt or i.input_id)
                for i in session.pending_inputs]
    waiting += [Waiting(kind="deferred", id=c.call_id, name=c.name, agent=c.agent)
                for c in session.deferred_tools]
    invocation = session.open_invocation
    if not waiting and session.head.parked == "message" and invocation is not None:
        waiting.append(Waiting(kind="message", id=invocation, name="message"))
    return waiting


class SessionList(_Wire):
    """The body of ``GET /sessions``: the caller's sessions, most recently updated first."""

    sessions: list[SessionLine]

    def wire(self) -> dict[str, Any]:
        """The JSON body: each line's empty fields left out."""
        body = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        for line, wired in zip(self.sessions, body["sessions"], strict=True):
            usage_whole(wired, line.usage)
        return body


class ErrorBody(_Wire):
    """Every error answer: a stable ``code``, a message naming the id involved.

    A client's mistake (a 4xx) says what was wrong with its request. A failure on the server
    side (a 5xx) never carries its exception's text: ``message`` names the failure and
    ``requestId`` the id under which the server logged the detail.
    """

    code: str = Field(description="Stable machine-readable reason.")
    message: str = Field(description="What went wrong, for a person.")
    session_id: str | None = None
    pending: list[PendingCall] | None = Field(
        default=None, description="The calls a session waits on (`awaiting_input`).")
    fields: list[dict[str, str]] | None = Field(
        default=None, description="Each invalid field and what is wrong with it.")
    request_id: str | None = Field(
        default=None, description="A server-side failure: the request id its log names.")
    retryable: bool | None = Field(
        default=None, description="A failed turn: whether the same request can succeed "
                                  "later (`rate_limited`: yes; `context_overflow`: no).")
    handed_on: bool | None = Field(
        default=None, description="A turn that ran out of time (`deadline`): its input went "
                                  "on to the queue, which runs it; do not send it again.")


def principal_of(event: Mapping[str, Any]) -> str | None:
    """Who is calling, as API Gateway's authorizer established it (never the request body).

    In order: a Cognito user-pool authorizer's ``claims.sub``; a Lambda authorizer's
    ``principalId``; for IAM (SigV4) auth, ``requestContext.identity.userArn``. ``None`` when
    the API has no authorizer (then sessions are not scoped).
    """
    context = event.get("requestContext") or {}
    authorizer = context.get("authorizer") or {}
    claims = authorizer.get("claims") or {}
    for candidate in (claims.get("sub"), authorizer.get("principalId"),
                      (context.get("identity") or {}).get("userArn")):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


def request_id_of(event: Mapping[str, Any]) -> str | None:
    """The request's id as API Gateway named it (``requestContext.requestId``; ``dormant dev``
    mints one per request): what a server-side failure's answer and log record both carry."""
    context = event.get("requestContext") or {}
    value = context.get("requestId") if isinstance(context, Mapping) else None
    return value if isinstance(value, str) and value else None
