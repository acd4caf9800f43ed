"""What to do about a model failure, said once whatever the provider failed: the hints every
adapter appends to its error messages for the codes whose remedy is dormant's, not the
provider's. Each adapter adds its own for the rest (which key, which quota, which console)."""

from __future__ import annotations

__all__ = ["HINTS"]

HINTS: dict[str, str] = {
    "context_overflow": "the conversation no longer fits the model's context window; bound it "
                        "with app.context.history(limit=N) or start a new session",
    "stream_incomplete": "nothing of this step was kept; the same request can be sent again",
}
