"""The names an MCP server's tools are offered under: each model takes only
``[a-zA-Z0-9_-]{1,64}`` (:data:`dormant.tools.TOOL_NAME`), which MCP does not require."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from dormant.errors import ConfigError
from dormant.tools import NOT_IN_NAME, TOOL_NAME


def model_tool_name(name: str, prefix: str | None = None,
                    rename: Mapping[str, str] | None = None) -> str:
    """The name the model sees for the server's tool ``name``: ``rename[name]`` if given (as
    it is), else ``prefix_name`` (or ``name``) with every character outside
    ``[a-zA-Z0-9_-]`` made ``_`` and, past 64 characters, cut to 55 plus ``_`` and 8 hex
    digits of the name's SHA-256 (so two long names stay apart, the same way every time)."""
    if rename and name in rename:
        return rename[name]
    full = f"{prefix}_{name}" if prefix else name
    mapped = NOT_IN_NAME.sub("_", full) or "_"
    if len(mapped) > 64:
        mapped = f"{mapped[:55]}_{hashlib.sha256(full.encode()).hexdigest()[:8]}"
    return mapped


def checked_prefix(server: str, prefix: object) -> str | None:
    """``prefix`` if it is one a model name may start with (``server`` names the MCP server in
    the error)."""
    if prefix is None:
        return None
    if not isinstance(prefix, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,32}", prefix):
        raise ConfigError(f"{server}: prefix= must be 1 to 32 characters of "
                          f"[a-zA-Z0-9_-], got {prefix!r}")
    return prefix


def checked_rename(server: str, rename: object) -> dict[str, str]:
    """``rename`` as a dict, if each new name is one a model takes and no two are the same."""
    if rename is None:
        return {}
    if not isinstance(rename, Mapping):
        raise ConfigError(f"{server}: rename= takes a dict of the server's tool name -> "
                          "the name the model sees")
    owner: dict[str, str] = {}
    for name, new in rename.items():
        if not isinstance(name, str) or not isinstance(new, str) or not TOOL_NAME.fullmatch(new):
            raise ConfigError(f"{server}: rename= maps {name!r} to {new!r}; a model accepts "
                              "only 1 to 64 characters of [a-zA-Z0-9_-]")
        if new in owner:
            raise ConfigError(clash(server, new, owner[new], name))
        owner[new] = name
    return dict(rename)


def clash(server: str, mapped: str, first: str, second: str) -> str:
    """The error for two of ``server``'s tools that would be offered under one name."""
    return (f"{server}: its tools {first!r} and {second!r} would both be named {mapped!r} "
            "for the model; give one another name (rename={...}) or leave one out (tools=[...])")
