"""What a new project's layer installs as dormant: the very dormant ``dormant new`` runs from.

A project made with no package index must still ``sam build``, so its layer (the Makefile's
``DORMANT``) installs one of, as pip recorded how the running dormant was installed
(``direct_url.json``, PEP 610):

- ``wheel``: installed from a wheel file that still exists: a copy of that file, beside the
  Makefile;
- ``packed``: installed from a directory, editable, or not installed at all (a checkout on
  ``sys.path``): the running package's own files packed as a wheel, beside the Makefile (no
  build tools needed, nothing downloaded);
- ``index``: installed from a package index (no ``direct_url.json``): ``dormant==VERSION``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

__all__ = ["DormantSource", "dormant_source", "write_wheel"]

#: How a project's Makefile names a file beside itself, wherever make runs it from.
MAKEFILE_DIR = "$(dir $(abspath $(lastword $(MAKEFILE_LIST))))"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # a zip's earliest time: the packed wheel's bytes are stable


@dataclass(frozen=True)
class DormantSource:
    """Where the running dormant came from, and so what a new project's layer installs."""

    kind: Literal["wheel", "packed", "index"]
    version: str
    #: The wheel file (``wheel``), the package directory (``packed``), else None.
    path: Path | None = None
    #: The installed distribution's metadata (``packed``: what the wheel's dist-info holds).
    distribution: metadata.Distribution | None = None

    @property
    def wheel_name(self) -> str | None:
        """The file name of the wheel a project gets (None: it gets none, ``index``)."""
        if self.kind == "wheel" and self.path is not None:
            return self.path.name
        if self.kind == "packed":
            return f"dormant-{self.version.replace('-', '_')}-py3-none-any.whl"
        return None

    @property
    def requirement(self) -> str:
        """The Makefile's default ``DORMANT``: the wheel beside it, or the release's pin."""
        name = self.wheel_name
        return f"dormant=={self.version}" if name is None else f"{MAKEFILE_DIR}{name}"

    def install(self, extras: str) -> str:
        """What the project's README has a person type to get this dormant into a venv with
        ``extras``: the wheel beside the layer's Makefile (no package index needed for
        dormant itself), or the release from the index."""
        name = self.wheel_name
        where = "dormant" if name is None else f"./layers/dormant/{name}"
        return f'pip install "{where}[{extras}]"'

    def describe(self) -> str:
        """What ``dormant new`` says it used, in one line."""
        if self.kind == "wheel":
            return f"the wheel it was installed from, {self.path}"
        if self.kind == "packed":
            return f"a wheel packed from the dormant it runs from, {self.path}"
        return f"dormant=={self.version} from the package index"


def dormant_source(distribution: metadata.Distribution | None = None,
                   package: Path | None = None) -> DormantSource:
    """Where the running dormant came from (``distribution``: its installed metadata, looked
    up when None; ``package``: its directory, the running one when None)."""
    import dormant

    __version__ = dormant.__version__
    package = (package or Path(dormant.__file__).parent).resolve()
    if distribution is None:
        try:
            distribution = metadata.distribution("dormant")
        except metadata.PackageNotFoundError:
            return DormantSource("packed", __version__, package)
    packed = DormantSource("packed", __version__, package, distribution)
    installed = Path(str(distribution.locate_file("dormant/__init__.py")))
    if installed.resolve() != package / "__init__.py" or distribution.version != __version__:
        return packed  # editable, or a checkout on sys.path ahead of an installed copy
    recorded = distribution.read_text("direct_url.json")
    if recorded is None:
        return DormantSource("index", __version__)
    wheel = _wheel_file(json.loads(recorded))
    if wheel is None or not wheel.name.startswith(f"dormant-{__version__}-"):
        return packed  # a directory, an sdist, a URL or a wheel since deleted
    return DormantSource("wheel", __version__, wheel)


def _wheel_file(direct_url: dict[str, object]) -> Path | None:
    url = urlparse(str(direct_url.get("url", "")))
    if url.scheme != "file" or "archive_info" not in direct_url:
        return None
    path = Path(unquote(url.path))
    return path if path.suffix == ".whl" and path.is_file() else None


def write_wheel(source: DormantSource, folder: Path) -> Path | None:
    """Put ``source``'s wheel in ``folder`` (the project's ``layers/dormant``): the file it
    was installed from, copied, or the running package, packed. None for ``index``."""
    name = source.wheel_name
    if name is None or source.path is None:
        return None
    target = folder / name
    if source.kind == "wheel":
        shutil.copyfile(source.path, target)
    else:
        _pack(source.path, source.version, source.distribution, target)
    return target


def _pack(package: Path, version: str, distribution: metadata.Distribution | None,
          target: Path) -> None:
    """A wheel of ``package``'s files (links followed: a checkout's scaffold data are links)
    with a dist-info of its own; pip installs it as it installs a built one."""
    files: dict[str, bytes] = {}
    for folder, dirs, names in os.walk(package, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in names:
            if not name.startswith(".") and not name.endswith((".pyc", ".pyo")):
                path = Path(folder, name)
                files[f"dormant/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    info = f"dormant-{version.replace('-', '_')}.dist-info"
    files[f"{info}/METADATA"] = _metadata(version, distribution).encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: dormant new\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = b"[console_scripts]\ndormant = dormant.cli:main\n"
    record = "".join(f"{name},sha256={_digest(data)},{len(data)}\n"
                     for name, data in sorted(files.items()))
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in sorted(files.items()):
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)


def _metadata(version: str, distribution: metadata.Distribution | None) -> str:
    """The installed distribution's METADATA (its requirements, its description), or the two
    fields a wheel needs when there is none of this version."""
    text = distribution.read_text("METADATA") if distribution is not None else None
    if text and distribution is not None and distribution.version == version:
        return text
    return f"Metadata-Version: 2.1\nName: dormant\nVersion: {version}\n"


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
