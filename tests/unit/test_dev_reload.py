"""Which files ``dormant dev --reload`` watches, and what it calls a change."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from dormant._devserver.reload import Watcher, app_files, forget_modules


def _touch(path: Path, text: str = "x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_apps_python_files_and_not_its_tools_caches_or_environments(tmp_path: Path) -> None:
    mine = [_touch(tmp_path / "app.py"), _touch(tmp_path / "tools" / "refund.py")]
    for other in ("__pycache__/app.cpython-311.py", "node_modules/x/y.py", ".git/hook.py",
                  ".venv/lib/site.py", "env2/lib/z.py", "notes.txt", "tools/data.json"):
        _touch(tmp_path / other)
    _touch(tmp_path / "env2" / "pyvenv.cfg", "home = /usr\n")  # a venv by any name
    assert sorted(app_files(tmp_path)) == sorted(mine)


def test_a_save_an_addition_and_a_removal_are_each_a_change(tmp_path: Path) -> None:
    app = _touch(tmp_path / "app.py")
    gone = _touch(tmp_path / "old.py")
    watcher = Watcher(tmp_path)
    assert watcher.changed() == []
    stat = app.stat()
    os.utime(app, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    added = _touch(tmp_path / "pkg" / "new.py")
    gone.unlink()
    assert watcher.changed() == sorted([app, added, gone])
    assert watcher.changed() == []


def test_forgetting_drops_only_the_modules_of_those_files(tmp_path: Path) -> None:
    file = _touch(tmp_path / "reload_me_mod.py", "VALUE = 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import reload_me_mod  # type: ignore[import-not-found]

        assert reload_me_mod.VALUE == 1
        assert forget_modules({file.resolve()}) == ["reload_me_mod"]
        assert "reload_me_mod" not in sys.modules and "json" in sys.modules
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("reload_me_mod", None)
