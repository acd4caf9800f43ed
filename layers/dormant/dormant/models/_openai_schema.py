"""Tool schemas for OpenAI's strict mode, or ``None`` when a schema cannot be strict.

Strict function calling makes the model's arguments match the schema exactly, but only for a
subset of JSON Schema: every object closed (``additionalProperties: false``) with every
property listed in ``required``, and a limited set of keywords. The conversion here never
changes what a tool accepts: an optional property becomes required only when it is nullable
with a ``None`` default (the model then sends ``null``, which validates to the same value). A
schema that would need a semantic change (an optional ``int = 5``, a free-form ``dict``, a
``minLength``, a ``oneOf``) is sent non-strict instead, as written.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["strict_schema"]

#: Keywords strict mode accepts (anything else makes the schema non-strict).
_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum",
    "const", "$ref", "$defs", "definitions", "description", "title", "default", "pattern",
    "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minItems", "maxItems",
})
#: String formats strict mode accepts.
_FORMATS = frozenset({
    "date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid",
})
#: OpenAI's limit on object nesting in a strict schema.
_MAX_DEPTH = 10


class _NotStrict(Exception):
    pass


def strict_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The strict form of ``schema`` (a new dict), or ``None`` if it cannot be strict."""
    if schema.get("type") != "object":
        return None
    try:
        return _Converter(schema).node(copy.deepcopy(schema), 0)
    except _NotStrict:
        return None


class _Converter:
    def __init__(self, root: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = {**root.get("definitions", {}), **root.get("$defs", {})}

    def node(self, node: Any, depth: int) -> dict[str, Any]:
        if isinstance(node, dict) and "$ref" in node and len(node) > 1:
            node = self._inline(node)
        if not isinstance(node, dict) or set(node) - _KEYWORDS:
            raise _NotStrict
        if node.get("format") is not None and node["format"] not in _FORMATS:
            raise _NotStrict
        if node.get("default") is not None:
            raise _NotStrict  # only a None default survives (see _object)
        node.pop("default", None)
        if node.get("type") == "object" or "properties" in node:
            if depth >= _MAX_DEPTH:
                raise _NotStrict
            self._object(node, depth + 1)
        if "items" in node:
            node["items"] = self.node(node["items"], depth)
        if "anyOf" in node:
            if not isinstance(node["anyOf"], list):
                raise _NotStrict
            node["anyOf"] = [self.node(branch, depth) for branch in node["anyOf"]]
        for key in ("$defs", "definitions"):
            if key in node:
                node[key] = {name: self.node(sub, depth) for name, sub in node[key].items()}
        return node

    def _object(self, node: dict[str, Any], depth: int) -> None:
        if node.get("additionalProperties", False) is not False:
            raise _NotStrict  # a free-form mapping cannot be closed without changing it
        properties = node.get("properties", {})
        required = set(node.get("required", ()))
        for name, prop in properties.items():
            if name not in required and not self._nullable(prop):
                raise _NotStrict  # omitting it and sending null would validate differently
            properties[name] = self.node(prop, depth)
        node["properties"] = properties
        node["required"] = list(properties)
        node["additionalProperties"] = False

    def _nullable(self, prop: Any) -> bool:
        if not isinstance(prop, dict):
            return False
        if "$ref" in prop and len(prop) == 1:
            return self._nullable(self._resolve(prop["$ref"]))
        kind = prop.get("type")
        if kind == "null" or (isinstance(kind, list) and "null" in kind):
            return True
        if None in prop.get("enum", ()) or ("const" in prop and prop["const"] is None):
            return True
        return any(self._nullable(branch) for branch in prop.get("anyOf", ()))

    def _inline(self, node: dict[str, Any]) -> dict[str, Any]:
        """A ``$ref`` with siblings (a described sub-model): strict mode wants it inlined."""
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return {**copy.deepcopy(self._resolve(node["$ref"])), **siblings}

    def _resolve(self, ref: Any) -> Any:
        prefix = next((p for p in ("#/$defs/", "#/definitions/")
                       if isinstance(ref, str) and ref.startswith(p)), None)
        if prefix is None or ref[len(prefix):] not in self.defs:
            raise _NotStrict
        return self.defs[ref[len(prefix):]]
