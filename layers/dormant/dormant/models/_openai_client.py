"""One OpenAI client per model, made once: the client an app gave, or one built on the first
call from ``api_key`` / ``base_url`` (or the standard ``OPENAI_*`` environment variables).

Free of the ``openai`` package at import: the caller passes the module in on first use, so a
cold start that never calls a model never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from dormant.models._base import ModelError

__all__ = ["LazyClient"]


class LazyClient:
    """The client of one model. ``given``: the app's own (None: build one from ``options``,
    the keyword arguments of ``openai.OpenAI``); ``own_retries``: the model retries within
    the turn's deadline itself, so a given client's own retries are turned off."""

    def __init__(self, given: Any = None, *, own_retries: bool = False,
                 **options: Any) -> None:
        self._given = given
        self._own_retries = own_retries
        self._options = options
        self._client: Any = None
        self._lock = threading.Lock()

    def get(self, openai: ModuleType, refused: Callable[[str], ModelError]) -> Any:
        """The client, made on the first call (thread-safe). ``refused(reason)``: the error
        raised when the client cannot be built (no key, say)."""
        with self._lock:
            if self._client is None:
                given = self._given
                if given is None:
                    try:
                        self._client = openai.OpenAI(**self._options)
                    except openai.OpenAIError as error:
                        raise refused(f"cannot build the OpenAI client: {error}") from error
                elif self._own_retries and isinstance(given, openai.OpenAI) \
                        and given.max_retries:
                    self._client = given.with_options(max_retries=0)  # retries are ours
                else:
                    self._client = given
            return self._client
