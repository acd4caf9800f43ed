"""What a new project's layer installs as dormant: the dormant ``dormant new`` runs from, decided
from how pip recorded installing it (``direct_url.json``), with no package index needed unless
it came from one."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import dormant
from dormant.scaffold import DormantSource, dormant_source
from dormant.scaffold._layer import MAKEFILE_DIR, write_wheel

VERSION = dormant.__version__
WHEEL_NAME = f"dormant-{VERSION}-py3-none-any.whl"
RUNNING = Path(dormant.__file__).resolve().parent


def _installed(site: Path, direct_url: dict[str, object] | None,
               version: str = VERSION) -> tuple[metadata.Distribution, Path]:
    """A distribution installed in ``site`` as pip leaves one: the package, its dist-info."""
    package = site / "dormant"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    info = site / f"dormant-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dormant\nVersion: {version}\n"
                                   "Requires-Dist: pydantic<3,>=2.7\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(info), package


def _wheel_url(path: Path) -> dict[str, object]:
    return {"url": path.as_uri(), "archive_info": {"hashes": {"sha256": "0" * 64}}}


def test_installed_from_a_wheel_file_the_project_gets_that_file(tmp_path: Path) -> None:
    wheel = tmp_path / "dist" / WHEEL_NAME
    wheel.parent.mkdir()
    wheel.write_bytes(b"the very wheel")
    distribution, package = _installed(tmp_path / "site", _wheel_url(wheel))

    source = dormant_source(distribution, package)

    assert (source.kind, source.path) == ("wheel", wheel)
    assert source.requirement == f"{MAKEFILE_DIR}{WHEEL_NAME}"
    assert str(wheel) in source.describe()
    layer = tmp_path / "layer"
    layer.mkdir()
    written = write_wheel(source, layer)
    assert written == layer / WHEEL_NAME and written.read_bytes() == b"the very wheel"


def test_installed_from_the_index_the_project_pins_the_release(tmp_path: Path) -> None:
    distribution, package = _installed(tmp_path / "site", None)

    source = dormant_source(distribution, package)

    assert source == DormantSource("index", VERSION)
    assert source.requirement == f"dormant=={VERSION}"
    assert "package index" in source.describe()
    assert write_wheel(source, tmp_path) is None and list(tmp_path.glob("*.whl")) == []


@pytest.mark.parametrize("how", ["a directory", "a wheel since deleted", "a remote wheel",
                                 "another version's wheel", "an sdist"])
def test_installed_otherwise_the_running_package_is_packed(tmp_path: Path, how: str) -> None:
    direct_url: dict[str, object] = {
        "a directory": {"url": (tmp_path / "checkout").as_uri(), "dir_info": {}},
        "a wheel since deleted": _wheel_url(tmp_path / WHEEL_NAME),
        "a remote wheel": {"url": f"https://example.com/{WHEEL_NAME}", "archive_info": {}},
        "another version's wheel": _wheel_url(tmp_path / "dormant-0.0.1-py3-none-any.whl"),
        "an sdist": _wheel_url(tmp_path / f"dormant-{VERSION}.tar.gz"),
    }[how]
    for name in ("dormant-0.0.1-py3-none-any.whl", f"dormant-{VERSION}.tar.gz"):
        (tmp_path / name).write_bytes(b"")
    distribution, package = _installed(tmp_path / "site", direct_url)

    source = dormant_source(distribution, package)

    assert (source.kind, source.path) == ("packed", package.resolve())
    assert source.requirement == f"{MAKEFILE_DIR}{WHEEL_NAME}"


def test_an_editable_install_or_a_checkout_on_the_path_is_packed(tmp_path: Path) -> None:
    """The distribution's files are not the running package's (an editable install's are in
    the checkout; a checkout on ``sys.path`` shadows an installed copy): pack what runs."""
    editable = {"url": (tmp_path / "checkout").as_uri(), "dir_info": {"editable": True}}
    distribution, _ = _installed(tmp_path / "site", editable)

    source = dormant_source(distribution, RUNNING)

    assert (source.kind, source.path) == ("packed", RUNNING)


def test_with_no_distribution_at_all_the_running_package_is_packed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> metadata.Distribution:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)

    assert dormant_source() == DormantSource("packed", VERSION, RUNNING)


def test_a_packed_wheel_holds_the_package_and_a_dist_info_pip_accepts(tmp_path: Path) -> None:
    distribution, package = _installed(tmp_path / "site", None)
    (package / "scaffold").mkdir()
    (tmp_path / "linked.txt").write_text("linked data")
    (package / "scaffold" / "data.txt").symlink_to(tmp_path / "linked.txt")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    (package / ".ruff_cache").mkdir()
    source = DormantSource("packed", VERSION, package, distribution)

    wheel = write_wheel(source, tmp_path)

    assert wheel == tmp_path / WHEEL_NAME
    info = f"dormant-{VERSION}.dist-info"
    with zipfile.ZipFile(wheel) as packed:
        assert sorted(packed.namelist()) == sorted([
            "dormant/__init__.py", "dormant/scaffold/data.txt", f"{info}/METADATA",
            f"{info}/WHEEL", f"{info}/entry_points.txt", f"{info}/RECORD"])
        assert packed.read("dormant/scaffold/data.txt") == b"linked data"  # a link followed
        assert b"Requires-Dist: pydantic" in packed.read(f"{info}/METADATA")
        assert b"Tag: py3-none-any" in packed.read(f"{info}/WHEEL")
        record = packed.read(f"{info}/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if name == f"{info}/RECORD":
                assert (digest, size) == ("", "")
                continue
            data = packed.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, int(size)) == (f"sha256={expected.decode()}", len(data)), name
        assert len(record) == len(packed.namelist())
    again = tmp_path / "again"
    again.mkdir()
    assert write_wheel(source, again).read_bytes() == wheel.read_bytes()  # type: ignore[union-attr]
