"""The package's imports run downhill: no circles, no private names borrowed across modules.

Every import counts: top level, inside a function, under ``if TYPE_CHECKING:``. The floors
themselves are ``lint-imports``'s job (the contract in pyproject.toml, docs/architecture.md);
this reads the same graph with ``ast`` alone, so a circle fails the test suite as well.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import dormant

ROOT = Path(dormant.__file__).parent
PKG = ROOT.name
REPO = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, Path]:
    """Each module by dotted name. A directory without ``__init__.py`` is data, not a package
    (the scaffold's template files are written into a new project, not imported)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        dirs = [ROOT.parent.joinpath(*parts[:i]) for i in range(1, len(parts))]
        if not all((d / "__init__.py").exists() for d in dirs):
            continue
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _owner(name: str) -> str | None:
    """The module ``name`` lives in: itself, or the nearest enclosing module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> Iterator[tuple[int, str, str | None, str | None]]:
    """(line, module imported from, name imported or None, ``as`` name or None) for every
    import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None, alias.asname
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([source] if source else [])])
            for alias in node.names:
                yield node.lineno, source, alias.name, alias.asname


def _graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports. ``from a import b`` imports ``a.b`` when
    that is a module, else ``a`` (so ``from dormant import App`` is an import of the package
    face, and ``from dormant import _head`` is not)."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for _, source, name, _as in _imports(module):
            target = f"{source}.{name}" if f"{source}.{name}" in MODULES else source
            owner = _owner(target) if target.split(".")[0] == PKG else None
            if owner is not None and owner != module:
                edges[module].add(owner)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (a path that comes back to its start), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(edges[module]):
            if found := visit(target):
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(edges):
        if found := visit(module):
            return found
    return None


def _private_names(module: str) -> Iterator[str]:
    """``from dormant.x import _y`` and ``x._y`` (``x`` an imported dormant module), where
    ``_y`` is not a module: a private name used outside the module that owns it."""
    path = MODULES[module]
    where = os.path.relpath(path, REPO)
    aliases: dict[str, str] = {}  # local name -> dormant module it is bound to
    for line, source, name, bound in _imports(module):
        if source.split(".")[0] != PKG:
            continue
        if name is None:  # import dormant.x binds dormant; import dormant.x as y binds y
            if bound is None or source in MODULES:
                aliases[bound or PKG] = source if bound else PKG
        elif f"{source}.{name}" in MODULES:
            aliases[bound or name] = f"{source}.{name}"
        elif _is_private(name) and source != module:
            yield f"{where}:{line}: from {source} import {name}"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    shadowed = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    shadowed |= {
        a.arg
        for n in ast.walk(tree)
        if isinstance(n, ast.arguments)
        for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg]
        if a
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in aliases or base.id in shadowed:
            continue
        owner = ".".join([aliases[base.id], *chain[:-1]])
        if owner in MODULES and f"{owner}.{node.attr}" not in MODULES and owner != module:
            yield f"{where}:{node.lineno}: {ast.unparse(node)}"


def test_the_package_has_modules() -> None:
    assert {"dormant", "dormant.app", "dormant._head", "dormant.stores._dynamodb"} <= set(MODULES)


def test_no_import_circles() -> None:
    edges = _graph()
    assert edges["dormant"], "the package face imports nothing: the graph was not read"
    circle = _cycle(edges)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_no_private_names_imported_across_modules() -> None:
    found = [hit for module in sorted(MODULES) for hit in _private_names(module)]
    assert not found, "private names used outside their module:\n" + "\n".join(found)
