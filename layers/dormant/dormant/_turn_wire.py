"""What a turn request gets back: the run result and how it reached the store
(what a request brings is :mod:`dormant._inputs`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dormant._inputs import CommitStatus, QueuedRef, TurnStatus, landed
from dormant.events import Usage
from dormant.results import Output
from dormant.types import PendingApproval, YieldedTool

__all__ = ["RestResponse", "TurnResult", "VoiceAudio", "VoiceResponse", "usage_whole"]



class TurnResult(BaseModel):
    """A run result plus how (and whether) it reached the store."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, defer_build=True)

    session_id: str
    status: TurnStatus
    output: Output = Field(default_factory=Output)
    commit_status: CommitStatus | None = None
    invocation_id: str | None = None
    yielded_tools: list[YieldedTool] | None = None
    pending_approvals: list[PendingApproval] | None = None
    #: Deferred calls waiting for their result from trusted code.
    deferred_tools: list[YieldedTool] | None = None
    yielded_invocation_id: str | None = None
    error: str | None = None
    code: str | None = None
    usage: Usage = Field(default_factory=Usage)
    version: int | None = None
    state: dict[str, Any] | None = None
    #: For ``status == "error"``: whether a retry can succeed.
    retryable: bool | None = None
    #: For ``status == "queued"``: the message's place in the inbox.
    queued: QueuedRef | None = None
    #: True when the work was handed on (the rest of the inbox, or a deadline retry) to run
    #: in another invocation (AWS: the webhook queue; ``dormant dev``: its worker).
    handed_on: bool | None = None
    #: Ids of the queued messages this request ran after its own turn (the inbox drained).
    drained: list[str] | None = None
    #: The agent that answered, after any hand-off in the turn, when the handler's agent
    #: hands over to others (None: no turn ran, or the handler serves one agent alone).
    agent: str | None = None
    #: What the caller should know of how the request finished (the ``warning`` it gets).
    note: str | None = Field(default=None, exclude=True)

    @property
    def landed(self) -> bool:
        """Whether the turn's input is in the session now: it committed or merged (even if
        the run ended in an error the ledger records), or it was superseded after its tools
        ran (they are kept)."""
        return landed(self.commit_status, self.version)

    @property
    def warning(self) -> str | None:
        """Why the commit was not clean (merged, superseded, failed), or that a failed turn
        kept its progress, or what else the caller should know (:attr:`note`); else
        None."""
        if self.note is not None:
            return self.note
        if self.commit_status == "superseded" and self.version is not None:
            return _KEPT
        if self.status == "error" and self.commit_status in ("committed", "merged"):
            return _PROGRESS
        return _WARNINGS.get(self.commit_status or "")


_WARNINGS = {
    "merged": "merged: the session moved while this turn ran; its events were appended "
              "after the newer ones",
    "superseded": "superseded: a newer message (or answer) landed while this turn ran; "
                  "this turn was dropped and nothing of it was stored",
    "failed": "failed: the store could not be written; nothing of this turn was stored",
}
_KEPT = ("superseded: a newer message landed while this turn ran; the tools it ran and their "
         "results are kept, its reply was dropped")
_PROGRESS = ("progress saved: the turn failed after its tools ran; the finished steps are "
             "stored and the session is failed until retried (input.retry)")


class RestResponse(BaseModel):
    """The REST body. Wire form: ``model_dump(by_alias=True, mode="json",
    exclude_none=True)`` (camelCase)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, defer_build=True)

    session_id: str
    status: TurnStatus
    output: Output
    #: The turn's invocation (Python only, like ``commit_status``: a REST client names it by
    #: its message id — invocation ids derive from session and message id — or reads
    #: ``openInvocation`` from ``GET /sessions/{id}``; streams carry it from their start).
    invocation_id: str | None = Field(default=None, exclude=True)
    yielded_tools: list[YieldedTool] | None = None
    pending_approvals: list[PendingApproval] | None = None
    deferred_tools: list[YieldedTool] | None = None
    error: str | None = None
    code: str | None = None
    retryable: bool | None = None
    warning: str | None = None
    queued: QueuedRef | None = None
    handed_on: bool | None = None
    drained: list[str] | None = None
    #: The agent that answered, after any hand-off in the turn (absent: no turn ran, or the
    #: handler's agent hands over to no other).
    agent: str | None = None
    #: How the turn reached the store (also in Python; not on the wire, where ``warning``
    #: says when the commit was not clean).
    commit_status: CommitStatus | None = Field(default=None, exclude=True)
    #: The version the commit wrote (Python only, like ``commit_status``).
    version: int | None = Field(default=None, exclude=True)
    events: list[dict[str, Any]] | None = None
    usage: Usage | None = None
    state: dict[str, Any] | None = None

    @property
    def landed(self) -> bool:
        """See :attr:`TurnResult.landed`."""
        return landed(self.commit_status, self.version)

    def wire(self) -> dict[str, Any]:
        """The JSON body: empty fields left out, but ``usage`` whole (its ``cost`` null
        when no call of the turn had a price)."""
        return usage_whole(self.model_dump(by_alias=True, mode="json", exclude_none=True),
                           self.usage)


def usage_whole(body: dict[str, Any], usage: Usage | None) -> dict[str, Any]:
    """A JSON body with its ``usage`` whole: its ``cost`` says null when nothing was priced
    (the body's other empty fields are left out)."""
    if usage is not None:
        body["usage"] = usage.model_dump(by_alias=True, mode="json")
    return body


class VoiceAudio(BaseModel):
    """The spoken reply: ``data`` (base64) in ``format`` (``wav``, ``mp3``...)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, defer_build=True)

    data: str = Field(description="The audio, base64.")
    format: str = Field(description="Its format: wav, mp3, opus, aac, flac or pcm.")


class VoiceResponse(RestResponse):
    """What ``app.handler.voice`` answers: the :class:`RestResponse` fields, plus what was
    heard (``transcript``) and the reply read aloud (``audio``; absent when the turn said
    nothing). When only the speech failed the turn is kept as committed, ``audio`` is absent
    and ``audio_error`` says why (``audio_code`` its code)."""

    transcript: str | None = None
    audio: VoiceAudio | None = None
    audio_error: str | None = None
    audio_code: str | None = None
