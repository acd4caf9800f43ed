"""The chart of one run (runs in the harness's own venv, which has matplotlib):

    python bench/_chart.py results.json chart.png

One panel per figure, a log-scale bar per framework, dormant first.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PANELS = (
    ("text turn, µs", "text", ("us_per_turn",)),
    ("tool turn, µs", "tool", ("us_per_turn",)),
    ("pause + resume, µs", "pause", ("us_per_turn",)),
    ("turn at history 1,000, µs", "growth", ("1000",)),
    ("SQLite turn at history 1,000, µs", "sqlite", ("1000",)),
    ("cold start, ms", "coldstart", ("ms",)),
    ("DynamoDB write units / turn (last checkpoint)", "dynamodb", ("turns", "last",
                                                                    "write_units")),
    ("DynamoDB read bytes / turn (last checkpoint)", "dynamodb", ("turns", "last",
                                                                   "read_bytes")),
    ("Lambda layer, MB", "layer", ("mb",)),
)


def figure(results: dict[str, Any], scenario: str, framework: str,
           path: tuple[str, ...]) -> float | None:
    node: Any = results.get(scenario, {}).get(framework, {}).get("figures")
    for key in path:
        if key == "last" and isinstance(node, dict) and node:
            key = str(max(int(k) for k in node))
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return float(node) if isinstance(node, int | float) else None


def _label(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


def main() -> None:
    import matplotlib  # type: ignore[import-not-found]  # the harness's own venv has it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]
    from matplotlib.ticker import NullFormatter  # type: ignore[import-not-found]

    with open(sys.argv[1]) as source:
        data = json.load(source)
    names: dict[str, str] = {key: data["names"][key] for key in data["order"]}
    results = data["results"]
    colors = plt.get_cmap("tab10")
    fig, axes = plt.subplots(3, 3, figsize=(15, 11))
    for ax, (title, scenario, path) in zip(axes.flat, PANELS, strict=True):
        labels, values, shades = [], [], []
        for index, (key, name) in enumerate(names.items()):
            value = figure(results, scenario, key, path)
            if value is not None and value > 0:
                labels.append(name.replace(" (hand-rolled ledger)", ""))
                values.append(value)
                shades.append(colors(index))
        ax.set_title(title, fontsize=10)
        if not values:
            ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
            ax.set_xticks([])
            continue
        low = min(values) / 3
        rows = range(len(values))
        bars = ax.barh(rows, [v - low for v in values], left=low, color=shades)
        ax.set_yticks(rows, labels)
        ax.invert_yaxis()  # dormant on top, in the tables' order
        ax.set_xscale("log")
        ax.set_xlim(low, max(values) * 6)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.bar_label(bars, labels=[_label(v) for v in values], fontsize=8, padding=2)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle("dormant and its peers, one run of python -m bench all (log scale, lower is "
                 "better)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
