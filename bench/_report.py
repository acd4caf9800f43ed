"""Markdown tables of one run: a table per scenario, every figure with its ratio to dormant's
figure in the same run, and the headline table (dormant against its targets)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

DORMANT, FLOOR = "dormant", "floor"
Results = dict[str, dict[str, dict[str, Any]]]


def ratio(value: float | None, dormant: float | None) -> float | None:
    """``value`` as a multiple of dormant's figure (None: either is missing, or dormant's is 0
    so no multiple exists)."""
    if value is None or dormant is None or dormant == 0:
        return None
    return value / dormant


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if unit == "x":
        return f"{value:.2f}×"  # noqa: RUF001
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]],
          align: Sequence[str] | None = None) -> str:
    """A GitHub markdown table; ``align``: one of ``l``/``r`` per column (default: first
    column left, the rest right)."""
    align = align or ["l", *["r"] * (len(header) - 1)]
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    for row in rows:
        cells = [str(c).replace("|", "\\|").replace("\n", " ") for c in row]
        if len(cells) != len(header):
            raise ValueError(f"a row of {len(cells)} cells under {len(header)} columns: {row}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def get(results: Results, scenario: str, framework: str, *path: str) -> float | None:
    """A figure, or None when the scenario is unsupported or the figure is absent."""
    node: Any = results.get(scenario, {}).get(framework, {}).get("figures")
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node) if isinstance(node, int | float) else None


def why(results: Results, scenario: str, framework: str) -> str | None:
    entry = results.get(scenario, {}).get(framework, {})
    return str(entry["unsupported"]) if "unsupported" in entry else None


def _note(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


@dataclass(frozen=True)
class Column:
    """One figure of a scenario's table: its heading and where it is in the figures."""

    heading: str
    path: tuple[str, ...]


def spread_of(results: Results, scenario: str, framework: str,
              path: Sequence[str]) -> tuple[float, float] | None:
    """The lowest and highest sample of a figure, when its scenario reported them (under
    ``figures["spread"]``, at the figure's own path), else None."""
    node: Any = results.get(scenario, {}).get(framework, {}).get("figures", {}).get("spread")
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, list) or len(node) != 2:
        return None
    return float(node[0]), float(node[1])


def _spread_cell(found: tuple[float, float] | None) -> str:
    return "—" if found is None else f"{fmt(found[0])}–{fmt(found[1])}"  # noqa: RUF001


def scenario_table(results: Results, scenario: str, names: dict[str, str],
                   columns: Sequence[Column], notes: Sequence[str] = (),
                   ratios: bool = True) -> str:
    """A row per framework: each column's figure and (``ratios``) its multiple of dormant's,
    and the samples' lowest and highest beside a column some framework reported them for;
    ``notes``: figures shown as text in a last column. A framework that cannot do the
    scenario says why in its row."""
    per = 2 if ratios else 1
    spreads = [any(spread_of(results, scenario, key, column.path) is not None
                   for key in names) for column in columns]
    header = ["framework"]
    for column, spread in zip(columns, spreads, strict=True):
        header += [column.heading, "× dormant"][:per]  # noqa: RUF001
        header += ["samples, low–high"] if spread else []  # noqa: RUF001
    if notes:
        header.append("how")
    width = per * len(columns) + sum(spreads)
    rows = []
    for key, name in names.items():
        reason = why(results, scenario, key)
        cells = [name]
        if reason is not None:
            cells += [f"n/a: {reason}", *["—"] * (width - 1)]
        else:
            for column, spread in zip(columns, spreads, strict=True):
                value = get(results, scenario, key, *column.path)
                base = get(results, scenario, DORMANT, *column.path)
                cells += [fmt(value), fmt(ratio(value, base), "x")][:per]
                if spread:
                    cells.append(_spread_cell(spread_of(results, scenario, key,
                                                        column.path)))
        if notes:
            figures = results.get(scenario, {}).get(key, {}).get("figures", {})
            cells.append("; ".join(_note(figures[n]) for n in notes if figures.get(n)))
        rows.append(cells)
    return table(header, rows, ["l", *["r"] * width, *(["l"] if notes else [])])


# --- the headline --------------------------------------------------------------------------


@dataclass(frozen=True)
class Headline:
    label: str
    #: (scenario, path) of dormant's figure and of each peer's and the floor's.
    scenario: str
    path: tuple[str, ...]
    target: float
    unit: str
    #: The target is this multiple of the floor's figure (the floor row), not a number.
    of_floor: bool = False
    #: A figure of dormant's from another place (its Lambda function rows), by name.
    dormant_key: str | None = None
    #: Whether the floor's figure means anything for this row.
    floor: bool = True
    #: dormant's figure is already a ratio measured pair by pair (no peer or floor column).
    paired: bool = False
    #: The row needs a peer's venv (a smoke run, which installs none, leaves it unmeasured).
    needs_peer: bool = False


HEADLINES: tuple[Headline, ...] = (
    Headline("functions/api import + first turn ÷ bare `import boto3, pydantic`, paired run "
             "by run (python3.13)", "coldstart", (), 1.5, "×", dormant_key="api_vs_floor",  # noqa: RUF001
             paired=True),
    Headline("functions/api import + first turn ÷ Strands' import + agent + first turn, "
             "paired run by run (python3.13)", "coldstart", (), 0.5, "×",  # noqa: RUF001
             dormant_key="api_vs_strands", paired=True, needs_peer=True),
    Headline("functions/stream import + first streamed turn ÷ bare `import boto3, pydantic`, "
             "paired run by run (python3.13)", "coldstart", (), 1.5, "×",  # noqa: RUF001
             dormant_key="stream_vs_floor", paired=True),
    Headline("functions/stream import + first streamed turn ÷ Strands' import + agent + first "
             "turn, paired run by run (python3.13)", "coldstart", (), 0.5, "×",  # noqa: RUF001
             dormant_key="stream_vs_strands", paired=True, needs_peer=True),
    Headline("DynamoDB write units per ordinary text turn", "dynamodb",
             ("turns", "last", "write_units"), 2, "WU"),
    Headline("DynamoDB read bytes per turn, full history, turn 500", "dynamodb",
             ("turns", "last", "read_bytes"), 1.5, "B", of_floor=True),
    Headline("text turn µs (memory store)", "text", ("us_per_turn",), 5, "µs", of_floor=True),
    Headline("tool turn µs (memory store)", "tool", ("us_per_turn",), 5, "µs", of_floor=True),
    Headline("SQLite store text turn µs (history 1)", "sqlite", ("1",), 2, "µs",
             of_floor=True),
    Headline("per-turn µs at history 1,000, full history, model reads history", "growth",
             ("1000",), 200, "µs"),
    Headline("SQLite store per-turn µs at history 1,000", "sqlite", ("1000",), 300, "µs"),
    Headline("Lambda layer MB (python3.13 x86_64)", "layer", ("mb",), 60, "MB", floor=False),
)


def _resolve(path: tuple[str, ...], results: Results, scenario: str,
             framework: str) -> tuple[str, ...]:
    """``last``: the scenario's last checkpoint (turn 500 in a full run)."""
    if "last" not in path:
        return path
    turns = results.get(scenario, {}).get(framework, {}).get("figures", {}).get("turns", {})
    last = str(max((int(t) for t in turns), default=0))
    return tuple(last if part == "last" else part for part in path)


def headline_rows(results: Results, names: dict[str, str],
                  dormant_extra: dict[str, float | None]) -> list[dict[str, Any]]:
    """Each headline: dormant's figure, the fastest (lowest) peer's, the floor's, the target
    and whether dormant meets it."""
    rows = []
    peers = [k for k in names if k not in (DORMANT, FLOOR)]
    for h in HEADLINES:
        def figure(framework: str, h: Headline = h) -> float | None:
            return get(results, h.scenario, framework,
                       *_resolve(h.path, results, h.scenario, framework))

        mine = dormant_extra.get(h.dormant_key) if h.dormant_key else figure(DORMANT)
        peer_figures = [] if h.paired else [(figure(k), names[k]) for k in peers]
        known = [(v, n) for v, n in peer_figures if v is not None]
        best = min(known, default=None)
        floor = figure(FLOOR) if h.floor and not h.paired else None
        target = h.target * floor if h.of_floor and floor is not None else (
            None if h.of_floor else h.target)
        met = None if mine is None or target is None else mine <= target
        rows.append({"label": h.label, "dormant": mine, "peer": best[0] if best else None,
                     "peer_name": best[1] if best else None, "floor": floor,
                     "target": target, "target_text": (f"≤ {h.target:g}× floor"  # noqa: RUF001
                                                       if h.of_floor else
                                                       f"≤ {h.target:g}{h.unit}" if h.paired
                                                       else f"≤ {h.target:g}"),
                     "met": met, "paired": h.paired})
    return rows


def headline_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for row in rows:
        peer = "—" if row["peer"] is None else f"{fmt(row['peer'])} ({row['peer_name']})"
        target = row["target_text"]
        if row["target"] is not None and "floor" in target:
            target += f" = {fmt(row['target'])}"
        verdict = {True: "met", False: "missed", None: "not measured"}[row["met"]]
        mine = fmt(row["dormant"], "x" if row.get("paired") else "")
        body.append([row["label"], mine, peer, fmt(row["floor"]), target, verdict])
    return table(["headline", "dormant", "fastest peer", "floor", "target", "met/missed"],
                 body, ["l", "r", "r", "r", "r", "l"])
