"""``dormant dev --reload``: which files are the app's, and a thread that notices a save.

The app's files are the ``.py`` files in the directory tree of its module's file, leaving out
``__pycache__``, virtual environments (a directory holding ``pyvenv.cfg``, or named like
one), ``node_modules``, version control and tool caches, and dormant's own package unless the
app lives in it (the bundled sample). :class:`Watcher` compares their modification times;
:class:`Reloader` polls it twice a second (no dependency, no file-system events to miss on a
mounted volume) and calls back with what changed. What a reload does is the caller's: the
command re-imports the app and swaps the server's resolver (:meth:`DevServer.serve_app`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["POLL_INTERVAL", "Reloader", "Watcher", "app_files", "forget_modules"]

log = logging.getLogger("dormant.dev")

#: Seconds between two looks at the files.
POLL_INTERVAL = 0.5
#: Directories that hold no code of the app's own.
SKIPPED = frozenset({"__pycache__", "node_modules", ".git", ".hg", ".svn", ".venv", "venv",
                     ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                     "site-packages", ".aws-sam", "build", "dist"})
_DORMANT = Path(__file__).resolve().parents[1]


def app_files(root: Path) -> dict[Path, int]:
    """Each ``.py`` file of the app whose module lives in ``root``, with its modification
    time (nanoseconds)."""
    root = root.resolve()
    inside_dormant = root == _DORMANT or _DORMANT in root.parents
    found: dict[Path, int] = {}
    for folder, folders, files in os.walk(root):
        here = Path(folder)
        folders[:] = [name for name in folders
                      if name not in SKIPPED and not name.endswith(".egg-info")
                      and not (here / name / "pyvenv.cfg").exists()
                      and (inside_dormant or here / name != _DORMANT)]
        for name in files:
            if name.endswith(".py"):
                path = here / name
                try:
                    found[path] = path.stat().st_mtime_ns
                except FileNotFoundError:  # removed while we looked
                    continue
    return found


class Watcher:
    """The app's files under ``root`` as last seen; :meth:`changed` says what moved since."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.seen = app_files(self.root)

    def changed(self) -> list[Path]:
        """The files saved, added or removed since the last call (or the start), sorted."""
        now = app_files(self.root)
        moved = sorted(path for path in now.keys() | self.seen.keys()
                       if now.get(path) != self.seen.get(path))
        self.seen = now
        return moved


def forget_modules(files: set[Path]) -> list[str]:
    """Drop from ``sys.modules`` every module loaded from one of ``files``, so the next import
    of the app runs their code as it now reads; returns the names dropped."""
    dropped = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() in files:
            del sys.modules[name]
            dropped.append(name)
    return dropped


class Reloader:
    """A daemon thread calling ``reload(changed)`` when the watched files change; a reload
    that raises is logged and the thread goes on watching."""

    def __init__(self, watcher: Watcher, reload: Callable[[list[Path]], None], *,
                 interval: float = POLL_INTERVAL) -> None:
        self.watcher = watcher
        self._reload = reload
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dormant-dev-reload",
                                        daemon=True)

    def start(self) -> Reloader:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        for changed in self._saves():
            try:
                self._reload(changed)
            except Exception:
                log.exception("reloading after %s changed failed", changed[0])

    def _saves(self) -> Iterator[list[Path]]:
        while not self._stop.wait(self._interval):
            changed = self.watcher.changed()
            if changed:
                yield changed
