"""``python -m bench``: the smoke run (what CI runs) produces every headline row, the ratio
arithmetic, and well-formed markdown. No peer is installed: the smoke run measures dormant
and the floor only."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import _report
from bench._report import Column
from tests._timing import scaled

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\|.*\|$")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench-smoke")
    done = subprocess.run([sys.executable, "-m", "bench", "all", "--smoke", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _tables(markdown: str) -> list[list[list[str]]]:
    """Each table of a markdown text, as rows of cells (the separator row included)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*markdown.splitlines(), ""]:
        if ROW.match(line):
            current.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif current:
            tables.append(current)
            current = []
    return tables


def _assert_well_formed(markdown: str) -> None:
    tables = _tables(markdown)
    assert tables, "no table"
    for rows in tables:
        header, separator, *body = rows
        assert all(re.fullmatch(r"---:?", cell) for cell in separator), separator
        assert len(separator) == len(header)
        assert body, f"a table with no rows under {header}"
        for row in body:
            assert len(row) == len(header), f"{row} under {header}"


def test_smoke_run_produces_every_headline_row(smoke: Path) -> None:
    rows = _tables((smoke / "headline.md").read_text())[0][2:]
    assert [row[0] for row in rows] == [h.label for h in _report.HEADLINES]
    measured = {row[0]: row[1] for row in rows}
    # Everything but the layer (pip downloads wheels: not in a smoke run) and the rows paired
    # with a peer (a smoke run installs none) has dormant's figure.
    for headline in _report.HEADLINES:
        if headline.scenario != "layer" and not headline.needs_peer:
            assert measured[headline.label] != "—", headline.label
        if headline.needs_peer:
            assert measured[headline.label] == "—", headline.label
    assert all(row[5] in ("met", "missed", "not measured") for row in rows)


def test_smoke_run_writes_a_table_per_scenario_and_the_raw_figures(smoke: Path) -> None:
    from bench.__main__ import SCENARIOS

    assert {p.stem for p in smoke.glob("*.md")} == {*SCENARIOS, "headline"}
    raw = json.loads((smoke / "results.json").read_text())
    assert set(raw["results"]) == set(SCENARIOS)
    assert set(raw["names"]) == {"dormant", "floor"}
    contention = raw["results"]["contention"]["dormant"]["figures"]
    assert contention["lost"] == 0 and contention["duplicated"] == 0


def test_every_results_file_is_well_formed_markdown(smoke: Path) -> None:
    for path in smoke.glob("*.md"):
        text = path.read_text()
        assert text.startswith("# "), path.name
        _assert_well_formed(text)


def test_committed_results_are_well_formed_markdown() -> None:
    for path in (ROOT / "bench" / "results").glob("*.md"):
        _assert_well_formed(path.read_text())


def test_ratio_is_the_figure_over_dormants() -> None:
    assert _report.ratio(300.0, 150.0) == 2.0
    assert _report.ratio(75.0, 150.0) == 0.5
    assert _report.ratio(None, 150.0) is None
    assert _report.ratio(3.0, None) is None
    assert _report.ratio(3.0, 0.0) is None  # no multiple of nothing
    assert _report.fmt(2.0, "x") == "2.00×"  # noqa: RUF001


def _results(**figures: Any) -> dict[str, dict[str, Any]]:
    return {key: {"figures": value} if value is not None else {"unsupported": "none here"}
            for key, value in figures.items()}


def test_scenario_table_shows_each_figure_with_its_ratio_to_dormant() -> None:
    results = {"text": _results(dormant={"us_per_turn": 100.0},
                                peer={"us_per_turn": 250.0}, other=None)}
    names = {"dormant": "dormant", "peer": "Peer 1.0", "other": "Other 2.0"}
    table = _report.scenario_table(results, "text", names, [Column("µs", ("us_per_turn",))])
    _assert_well_formed(table)
    rows = {row[0]: row for row in _tables(table)[0][2:]}
    assert rows["dormant"][1:] == ["100", "1.00×"]  # noqa: RUF001
    assert rows["Peer 1.0"][1:] == ["250", "2.50×"]  # noqa: RUF001
    assert rows["Other 2.0"][1] == "n/a: none here"


def test_a_figure_reported_with_its_samples_shows_their_lowest_and_highest() -> None:
    results = {"sqlite": _results(
        dormant={"1": 200.0, "spread": {"1": [180.0, 260.0]}},
        floor={"1": 100.0, "spread": {"1": [95.0, 104.0]}},
        peer={"1": 900.0}, other=None)}
    names = {"dormant": "dormant", "floor": "floor", "peer": "Peer 1.0", "other": "Other 2.0"}
    table = _report.scenario_table(results, "sqlite", names, [Column("history 1", ("1",))])
    _assert_well_formed(table)
    header, _, *body = _tables(table)[0]
    rows = {row[0]: row for row in body}
    assert header[1:] == ["history 1", "× dormant", "samples, low–high"]  # noqa: RUF001
    assert rows["dormant"][1:] == ["200", "1.00×", "180–260"]  # noqa: RUF001
    assert rows["floor"][1:] == ["100", "0.50×", "95–104"]  # noqa: RUF001
    assert rows["Peer 1.0"][3] == "—"  # a framework that reported no samples
    assert rows["Other 2.0"][1:] == ["n/a: none here", "—", "—"]


def test_headline_takes_the_lowest_peer_and_judges_dormant_against_the_target() -> None:
    results: dict[str, dict[str, Any]] = {
        "text": _results(dormant={"us_per_turn": 20.0}, floor={"us_per_turn": 5.0},
                         a={"us_per_turn": 900.0}, b={"us_per_turn": 300.0}),
        "dynamodb": _results(
            dormant={"turns": {"10": {"read_bytes": 1000.0, "write_units": 3.0},
                               "500": {"read_bytes": 9000.0, "write_units": 3.0}}},
            floor={"turns": {"10": {"read_bytes": 800.0, "write_units": 1.0},
                             "500": {"read_bytes": 8000.0, "write_units": 1.0}}},
            a=None, b=None),
    }
    names = {"dormant": "dormant", "floor": "floor", "a": "A", "b": "B"}
    rows = {row["label"]: row for row in _report.headline_rows(results, names, {})}
    text = rows["text turn µs (memory store)"]
    assert (text["dormant"], text["peer"], text["peer_name"], text["floor"]) == (20, 300, "B", 5)
    assert text["target"] == 5 * 5.0 and text["met"] is True  # 20 <= 5x the floor's 5
    reads = rows["DynamoDB read bytes per turn, full history, turn 500"]
    assert reads["target"] == 1.5 * 8000 and reads["dormant"] == 9000 and reads["met"] is True
    assert reads["peer"] is None  # no peer measured it
    writes = rows["DynamoDB write units per ordinary text turn"]
    assert writes["met"] is False  # 3 > 2
    assert rows["Lambda layer MB (python3.13 x86_64)"]["met"] is None
    _assert_well_formed(_report.headline_table(list(rows.values())))


def test_a_table_refuses_a_row_that_does_not_fit_its_header() -> None:
    with pytest.raises(ValueError, match="2 cells under 3 columns"):
        _report.table(["a", "b", "c"], [["1", "2"]])


def test_paired_cold_start_rows_are_ratios_judged_against_their_own_target() -> None:
    names = {"dormant": "dormant", "floor": "floor", "strands": "Strands"}
    results = {"coldstart": _results(dormant={"ms": 900.0}, floor={"ms": 60.0},
                                     strands={"ms": 1000.0})}
    rows = _report.headline_rows(results, names,
                                 {"api_vs_floor": 2.2, "api_vs_strands": 0.45,
                                  "stream_vs_floor": 1.4, "stream_vs_strands": 0.7})
    floor_row, strands_row, stream_floor, stream_strands = rows[:4]
    assert (floor_row["dormant"], floor_row["target"], floor_row["met"]) == (2.2, 1.5, False)
    assert (strands_row["dormant"], strands_row["target"], strands_row["met"]) == (0.45, 0.5,
                                                                                   True)
    assert "stream" in stream_floor["label"] and stream_floor["met"] is True
    assert "stream" in stream_strands["label"] and stream_strands["met"] is False
    # A ratio has no peer or floor column of its own: the pair is in the figure.
    assert floor_row["peer"] is None and floor_row["floor"] is None
    table = _report.headline_table(rows)
    assert "| 2.20× |" in table and "≤ 0.5×" in table  # noqa: RUF001
    _assert_well_formed(table)


def test_cold_start_pairs_each_round_with_the_same_round() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import coldstart

    # Round 2 ran on a slow moment for the api row only: a ratio of medians would say 3.87x;
    # each round against its own floor says 1.87, 3.87 and 1.96: the median is 1.96.
    walls = {coldstart.API: [300.0, 600.0, 900.0], coldstart.PASS: [20.0, 20.0, 20.0],
             coldstart.FLOOR: [170.0, 170.0, 470.0]}
    ratios = coldstart.paired_ratios(walls)
    assert ratios.keys() == {"api ÷ floor (paired)"}  # Strands did not run: no such ratio
    assert ratios["api ÷ floor (paired)"] == pytest.approx(880 / 450)
    walls |= {coldstart.STRANDS: [1020.0, 1020.0, 1020.0],
              coldstart.STRANDS_IDLE: [20.0, 20.0, 20.0]}
    assert coldstart.paired_ratios(walls)["api ÷ Strands (paired)"] == pytest.approx(0.58)
