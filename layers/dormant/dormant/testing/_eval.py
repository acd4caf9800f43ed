"""Replay a set of recorded sessions against an agent and check each: :func:`evaluate`, what
``dormant eval`` runs. Its :class:`EvalReport` prints as a table and writes JUnit XML, so one
command in CI says which conversations a change would alter, and fails when one fails its
checks.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from dormant.agent import Agent
from dormant.testing._checks import DEFAULT_CHECKS, Check, CheckResult, run_checks
from dormant.testing._outcomes import ReplayDiff
from dormant.testing._replay import ModelChoice, replay

__all__ = ["CaseResult", "EvalReport", "evaluate"]


class CaseResult(BaseModel):
    """One recorded session replayed and checked."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    turns: int = 0
    tools_changed: int = 0
    new_approvals: list[str] = []
    questions_changed: int = 0
    orphans: int = 0
    text_score: float = 1.0
    checks: list[CheckResult] = []
    #: The replay raised (the agent's code failing): the case fails with it.
    error: str | None = None
    seconds: float = 0.0
    diff: ReplayDiff | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and all(check.passed for check in self.checks)

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.passed]


class EvalReport(BaseModel):
    """Every case's result: :meth:`table` to read, :meth:`junit` for CI."""

    model_config = ConfigDict(frozen=True)

    name: str = "dormant eval"
    cases: list[CaseResult]

    @property
    def passed(self) -> bool:
        return all(case.passed for case in self.cases)

    @property
    def failed(self) -> list[CaseResult]:
        return [case for case in self.cases if not case.passed]

    def table(self) -> str:
        """The cases as a table, then why each failing one failed."""
        head = ("case", "turns", "tools changed", "new approvals", "questions changed",
                "orphans", "text score", "result")
        rows = [head] + [(case.name, str(case.turns), str(case.tools_changed),
                          ", ".join(case.new_approvals) or "-", str(case.questions_changed),
                          str(case.orphans), f"{case.text_score:.2f}", _verdict(case))
                         for case in self.cases]
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = ["  ".join(cell.ljust(width) if i in (0, 3, 7) else cell.rjust(width)
                           for i, (cell, width) in enumerate(zip(row, widths, strict=True)))
                 .rstrip() for row in rows]
        failed = self.failed
        count = len(self.cases)
        lines.append(f"{count} case{'' if count == 1 else 's'}: {count - len(failed)} passed, "
                     f"{len(failed)} failed")
        for case in failed:
            lines.append(f"\nFAIL {case.name}")
            if case.error is not None:
                lines.append(f"  error: {case.error}")
            for check in case.failed_checks:
                lines.extend(f"  {check.name}: {reason}" for reason in check.reasons)
        return "\n".join(lines)

    def junit(self, path: str | Path) -> None:
        """Write the report as JUnit XML: a test case per session, a failure per failing
        check (an error where the replay raised), the turn-by-turn diff as its output."""
        suite = ET.Element("testsuite", name=self.name, tests=str(len(self.cases)),
                           failures=str(sum(1 for c in self.cases
                                            if c.error is None and not c.passed)),
                           errors=str(sum(1 for c in self.cases if c.error is not None)),
                           time=f"{sum(c.seconds for c in self.cases):.3f}")
        for case in self.cases:
            element = ET.SubElement(suite, "testcase", classname=self.name.replace(" ", "."),
                                    name=case.name, time=f"{case.seconds:.3f}")
            if case.error is not None:
                ET.SubElement(element, "error", message=case.error, type="replay").text = \
                    case.error
            elif not case.passed:
                failing = case.failed_checks
                ET.SubElement(element, "failure",
                              message=", ".join(check.name for check in failing),
                              type="check").text = "\n".join(
                    f"{check.name}: {reason}" for check in failing for reason in check.reasons)
            if case.diff is not None:
                ET.SubElement(element, "system-out").text = str(case.diff)
        root = ET.Element("testsuites")
        root.append(suite)
        ET.indent(root)
        Path(path).write_text(ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n",
                              encoding="utf-8")


def _verdict(case: CaseResult) -> str:
    if case.error is not None:
        return "ERROR"
    if case.passed:
        return "pass"
    return f"FAIL ({', '.join(check.name for check in case.failed_checks)})"


def evaluate(cases: Iterable[Any], agent: Agent, *, model: ModelChoice = None,
             tools: Literal["recorded", "real"] = "recorded",
             checks: Sequence[Check] | None = None, name: str = "dormant eval",
             progress: Callable[[str], None] | None = None) -> EvalReport:
    """Replay each recorded session in ``cases`` against ``agent`` (:func:`replay`, with
    ``model`` and ``tools``) and run ``checks`` on it (default: no orphans, the same tools,
    no new approvals, the same questions, the same statuses). A case is anything
    :func:`replay` takes; its name is its ``session_id`` (or its position). ``progress``
    hears a line per case."""
    chosen = list(checks) if checks is not None else [make() for make in DEFAULT_CHECKS]
    results = []
    listed = list(cases)
    for position, case in enumerate(listed, 1):
        named = getattr(case, "session_id", None) or f"case {position}"
        started = time.perf_counter()
        try:
            replayed = replay(case, agent, model=model, tools=tools)
        except Exception as error:
            result = CaseResult(name=named, error=f"{type(error).__name__}: {error}",
                                seconds=time.perf_counter() - started)
        else:
            diff = replayed.diff
            result = CaseResult(
                name=named, turns=len(diff.turns), tools_changed=diff.tools_changed,
                new_approvals=diff.new_approvals,
                questions_changed=sum(1 for t in diff.turns if t.replayed is not None
                                      and t.replayed.questions != t.recorded.questions),
                orphans=len(diff.orphans), text_score=diff.text_score,
                checks=run_checks(replayed, chosen), diff=diff,
                seconds=time.perf_counter() - started)
        results.append(result)
        if progress is not None:
            progress(f"[{position}/{len(listed)}] {named}: {_verdict(result)} "
                     f"({result.seconds:.2f} s)")
    return EvalReport(name=name, cases=results)
