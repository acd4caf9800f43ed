"""A griffe extension for the API reference (mkdocs.yml): Sphinx roles in docstrings as links.

dormant's docstrings name other objects with reST roles (``:class:`Model```,
``:func:`~dormant.tools.handler_context```, ``:mod:`.api```). Markdown has no roles, so each
becomes the name in code, linked to its reference entry when the reference renders the object
(an optional cross-reference: a name the reference does not show stays plain code, no warning).
It also leaves out the special members that are plumbing, not API (``__post_init__``,
``__repr__``, ``__slots__``, ``__test__``): the reference shows a class's public names and the
protocols it implements (``__iter__``, ``__enter__``, ``__call__``...).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:role:`target``` or ``:role:`title <target>```; a target may wrap onto the next line.
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`([^`]+)`")
#: Special members the reference leaves out.
_PLUMBING = frozenset({"__post_init__", "__repr__", "__slots__", "__test__"})
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^>]+)>$", re.DOTALL)


def _replace(match: re.Match[str], obj: griffe.Object) -> str:
    text = re.sub(r"\s+", "", match.group(1)) if "<" not in match.group(1) else match.group(1)
    titled = _TITLED.match(text)
    if titled:
        title, target = titled["title"].strip(), re.sub(r"\s+", "", titled["target"])
    else:
        target = text.lstrip("!")
        title = target.lstrip("~").rsplit(".", 1)[-1] if target.startswith("~") else target
    target = target.lstrip("~")
    path = _resolve(target, obj)
    code = f"<code>{title}</code>"
    if path is None:
        return code
    return f'<autoref identifier="{path}" optional>{code}</autoref>'


def _resolve(target: str, obj: griffe.Object) -> str | None:
    """The full path of ``target`` as written in ``obj``'s docstring, or None."""
    if target.startswith("."):  # relative to the module the docstring is in
        module = obj if obj.is_module else obj.module
        return f"{module.path}{target}"
    if target.startswith("dormant."):
        return target
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            base = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{base}.{rest}" if rest else base
    return None


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of the package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._rewrite(pkg, seen=set())

    def _rewrite(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = _ROLE.sub(lambda m: _replace(m, obj), obj.docstring.value)
        for name in _PLUMBING & obj.members.keys():
            del obj.members[name]
        for member in obj.members.values():
            if not member.is_alias:
                self._rewrite(member, seen)  # type: ignore[arg-type]
