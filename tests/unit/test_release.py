"""The release: ``.github/workflows/release.yml`` publishes a ``v*`` tag to PyPI by trusted
publishing only (no stored secret), and never a tag that is not the package's version; the
CHANGELOG has the version the code has. The workflow runs on the project's hosting, not here:
CI lints it against GitHub's schema (check-jsonschema) and these tests read what it does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import dormant

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
PUBLISH_ACTION = "pypa/gh-action-pypi-publish@"


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _publish_steps(workflow: dict[Any, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, step) for name, job in workflow["jobs"].items() for step in job["steps"]
            if str(step.get("uses", "")).startswith(PUBLISH_ACTION)]


def _tag_check(workflow: dict[Any, Any]) -> tuple[str, dict[str, Any]]:
    """The step comparing the tag (``github.ref_name``) with the built version."""
    [found] = [(name, step) for name, job in workflow["jobs"].items() for step in job["steps"]
               if "github.ref_name" in str(step.get("env", {}).get("TAG", ""))]
    return found


def test_it_runs_on_a_version_tag(workflow: dict[Any, Any]) -> None:
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as a boolean
    assert triggers == {"push": {"tags": ["v*"]}}


def test_it_uses_no_stored_secret() -> None:
    text = WORKFLOW.read_text()
    assert "secrets." not in text and "secrets[" not in text
    assert not re.search(r"^\s*(password|api[-_]token|token)\s*:", text, re.MULTILINE)


def test_it_publishes_by_trusted_publishing_from_the_pypi_environment(
        workflow: dict[Any, Any]) -> None:
    [(name, step)] = _publish_steps(workflow)
    job = workflow["jobs"][name]
    assert job["permissions"] == {"id-token": "write"}
    environment = job["environment"]
    assert (environment["name"] if isinstance(environment, dict) else environment) == "pypi"
    assert "password" not in step.get("with", {})
    # Only the publishing job may ask for an OIDC token.
    assert workflow["permissions"] == {"contents": "read"}
    others = [job for other, job in workflow["jobs"].items() if other != name]
    assert all("id-token" not in job.get("permissions", {}) for job in others)


def test_nothing_is_published_before_the_tag_is_checked(workflow: dict[Any, Any]) -> None:
    [(publisher, _)] = _publish_steps(workflow)
    checker, check = _tag_check(workflow)
    assert checker != publisher and checker in _needs(workflow["jobs"][publisher])
    steps = workflow["jobs"][checker]["steps"]
    built = next(step for step in steps if "dist.py" in str(step.get("run", "")))
    assert steps.index(built) < steps.index(check)
    assert check["env"]["VERSION"] == "${{ steps." + built["id"] + ".outputs.version }}"


@pytest.mark.parametrize(("tag", "version", "passes"), [
    (f"v{dormant.__version__}", dormant.__version__, True),
    ("v9.9.9", dormant.__version__, False),
    (dormant.__version__, dormant.__version__, False),  # no v
    (f"v{dormant.__version__}", "", False),  # the build step said no version
])
def test_the_tag_check_refuses_a_tag_that_is_not_the_version(
        workflow: dict[Any, Any], tag: str, version: str, passes: bool) -> None:
    _, check = _tag_check(workflow)
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", check["run"]],
                          env={"TAG": tag, "VERSION": version, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert (done.returncode == 0) == passes, done.stdout + done.stderr


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def test_the_changelog_has_the_codes_version() -> None:
    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert dormant.__version__ in headings
