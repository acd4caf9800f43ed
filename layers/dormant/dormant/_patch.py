"""RFC 6902 JSON Patch: the diff dormant records as ``state_delta`` and the apply that replays it.

Only what state needs: objects are diffed key by key (recursively), anything else that changed
is replaced whole. ``apply_patch`` accepts every operation the diff writes plus ``move``,
``copy`` and ``test`` so patches from other producers (AG-UI clients) apply too.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic_core import to_jsonable_python

__all__ = ["PatchError", "apply_patch", "json_copy", "make_patch", "to_json_value"]

_ATOMS = (str, int, float, bool, type(None))


class PatchError(ValueError):
    """A patch does not apply to the document."""


def to_json_value(value: Any) -> Any:
    """The JSON form of ``value`` (pydantic models, dates, sets… become plain JSON)."""
    return to_jsonable_python(value)


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, atoms), several times faster than
    ``copy.deepcopy`` on the hot path (state, call arguments); anything else is deep-copied
    the slow way."""
    if isinstance(value, dict):
        return {k: v if type(v) in _ATOMS else json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _ATOMS else json_copy(v) for v in value]
    if type(value) in _ATOMS:
        return value
    return copy.deepcopy(value)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def make_patch(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Operations that turn ``before`` into ``after`` (values in JSON form)."""
    ops: list[dict[str, Any]] = []
    _diff(before, after, "", ops)
    return ops


def _diff(
    before: dict[str, Any], after: dict[str, Any], path: str, ops: list[dict[str, Any]]
) -> None:
    for key in before:
        if key not in after:
            ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
    for key, new in after.items():
        where = f"{path}/{_escape(key)}"
        if key not in before:
            ops.append({"op": "add", "path": where, "value": to_json_value(new)})
            continue
        old = before[key]
        if isinstance(old, dict) and isinstance(new, dict):
            _diff(old, new, where, ops)
        elif type(old) is not type(new) or old != new:
            ops.append({"op": "replace", "path": where, "value": to_json_value(new)})


def _split(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [_unescape(token) for token in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        try:
            node = node[int(token)] if isinstance(node, list) else node[token]
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise PatchError(f"path {path!r} does not exist") from error
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _split(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    try:
        return parent[int(tokens[-1])] if isinstance(parent, list) else parent[tokens[-1]]
    except (KeyError, IndexError, ValueError, TypeError) as error:
        raise PatchError(f"path {path!r} does not exist") from error


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _split(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise PatchError(f"index out of range in {path!r}")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise PatchError(f"cannot add below a scalar at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _split(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    try:
        if isinstance(parent, list):
            del parent[int(tokens[-1])]
        else:
            del parent[tokens[-1]]
    except (KeyError, IndexError, ValueError, TypeError) as error:
        raise PatchError(f"path {path!r} does not exist") from error
    return doc


def apply_patch(doc: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply ``patch`` to ``doc`` in place and return it (raises :class:`PatchError`)."""
    result: Any = doc
    for op in patch:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            result = _add(result, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            result = _remove(result, path)
        elif kind == "replace":
            _get(result, path)
            result = _add(_remove(result, path) if _split(path) else result, path,
                          copy.deepcopy(op.get("value")))
        elif kind == "move":
            value = _get(result, op["from"])
            result = _add(_remove(result, op["from"]), path, value)
        elif kind == "copy":
            result = _add(result, path, copy.deepcopy(_get(result, op["from"])))
        elif kind == "test":
            if _get(result, path) != op.get("value"):
                raise PatchError(f"test failed at {path!r}")
        else:
            raise PatchError(f"unknown patch operation {kind!r}")
    if not isinstance(result, dict):
        raise PatchError("state must stay a JSON object")
    return result
