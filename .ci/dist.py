"""The release's files, built and checked as CI and the release workflow check them.

    python .ci/dist.py [OUT]

From a copy of the checkout (its tracked files, and new ones git does not ignore; links kept
as links, so nothing is built in the checkout itself), in a temporary directory:

1. ``python -m build``: the sdist, then the wheel built from that sdist;
2. ``python -m build --wheel`` on a second copy: the wheel built from the tree;
3. the two wheels must hold the same files, byte for byte: an sdist that leaves out a file the
   wheel needs (the scaffold's data are links to repository files in a checkout) fails here;
4. ``twine check --strict`` on the sdist and the wheel (the README renders on PyPI).

With ``OUT``, the sdist and the wheel are copied there (the release workflow publishes them).
Prints the package's version (``dormant.__version__``) as the built files name it, alone on
stdout; what the tools say goes to stderr.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="dormant-dist-") as scratch:
        tmp = Path(scratch)
        dist, tree = tmp / "dist", tmp / "tree"
        _build(source_copy(tmp / "source-sdist"), dist)
        _build(source_copy(tmp / "source-wheel"), tree, "--wheel")
        [sdist] = dist.glob("dormant-*.tar.gz")
        [from_sdist] = dist.glob("dormant-*.whl")
        [from_tree] = tree.glob("dormant-*.whl")
        if from_sdist.name != from_tree.name:
            return _fail(f"the wheels differ in name: {from_sdist.name}, {from_tree.name}")
        ours, theirs = _contents(from_sdist), _contents(from_tree)
        if ours != theirs:
            missing = sorted(set(theirs) - set(ours))
            extra = sorted(set(ours) - set(theirs))
            changed = sorted(n for n in set(ours) & set(theirs) if ours[n] != theirs[n])
            return _fail(f"the wheel built from the sdist is not the one built from the tree: "
                         f"missing {missing}, extra {extra}, different {changed}")
        subprocess.run([sys.executable, "-m", "twine", "check", "--strict", sdist, from_sdist],
                       check=True, stdout=sys.stderr)  # stdout: the version alone
        if argv:
            out = Path(argv[0])
            out.mkdir(parents=True, exist_ok=True)
            for built in (sdist, from_sdist):
                shutil.copy2(built, out / built.name)
        print(from_sdist.name.split("-")[1])
    return 0


def source_copy(into: Path) -> Path:
    """The checkout's tracked files, and new ones git does not ignore, copied into ``into``
    (links as links); tests/e2e/test_packaged.py builds its wheel from this copy too."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.exists() or source.is_symlink():  # not a file deleted but not yet committed
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name, follow_symlinks=False)
    return into


def _build(source: Path, out: Path, *options: str) -> None:
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), *options, str(source)],
                   check=True, stdout=subprocess.DEVNULL)


def _contents(wheel: Path) -> dict[str, str]:
    """Each file's SHA-256 (RECORD aside: it lists these same hashes, in its own order)."""
    with zipfile.ZipFile(wheel) as zipped:
        return {name: hashlib.sha256(zipped.read(name)).hexdigest()
                for name in zipped.namelist() if not name.endswith(".dist-info/RECORD")}


def _fail(message: str) -> int:
    print(f"dist: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
