"""The Benchmarks page's plots, drawn from the figures recorded in ``bench/data/``.

``bench/data/*.json`` are figures transcribed from ``bench/README.md`` (each file names
the section, the date and the command of the runs it holds); this script draws them
against the docs/benchmarks.md targets into ``docs/assets/bench/*.svg``. After a new run: add its
figures to the JSON file, run this, commit both.

    bench/.venv-peers/bin/python bench/plots.py   # the bench extra has matplotlib
    python3 bench/plots.py                        # or any Python with matplotlib

It imports nothing of sluice. The SVGs keep their text as text and carry no date, so
drawing the same data again writes the same bytes.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

DATA = Path(__file__).with_name("data")
OUT = Path(__file__).resolve().parents[1] / "docs" / "assets" / "bench"
STORES = {"sqlite": ("SQLite", "#3f51b5"), "postgres": ("PostgreSQL", "#e07b39")}
TARGET = {"color": "#c62828", "linestyle": "--", "linewidth": 1.2}

plt.rcParams.update(
    {
        "svg.fonttype": "none",
        "svg.hashsalt": "sluice",
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "figure.dpi": 100,
    }
)


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / f"{name}.json").read_text()))


def save(figure: plt.Figure, name: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(OUT / f"{name}.svg", metadata={"Date": None})
    plt.close(figure)


def runs_against(axes: Axes, groups: list[tuple[str, list[float], str]], target: float) -> None:
    """Each group's runs as dots with its median as a bar, and the target as a line."""
    for x, (_, values, color) in enumerate(groups):
        axes.bar(x, statistics.median(values), color=color, alpha=0.35, width=0.6)
        axes.scatter([x] * len(values), values, color=color, s=14, zorder=3)
    axes.axhline(target, **TARGET)
    axes.set_xticks(range(len(groups)), [label for label, _, _ in groups])


def redirects() -> None:
    data = load("redirects")
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    groups = [
        (f"{STORES[r['store']][0]}\n{r['variant']}", r, STORES[r["store"]][1]) for r in data["runs"]
    ]
    runs_against(
        left,
        [(g, r["throughput_ratio"], c) for g, r, c in groups],
        data["targets"]["throughput_ratio_min"],
    )
    left.set_title("requests/s, sluice / bare handler (target ≥ 0.8)")
    runs_against(
        right, [(g, r["p99_ratio"], c) for g, r, c in groups], data["targets"]["p99_ratio_max"]
    )
    right.set_title("p99 latency, sluice / bare handler (target ≤ 1.5)")
    for axes in (left, right):
        axes.tick_params(axis="x", labelsize=8)
    figure.suptitle(f"Redirects, one API process each, five runs ({data['date']})", fontsize=11)
    save(figure, "redirects")


def peers() -> None:
    data = load("peers")
    figure, (left, middle, right) = plt.subplots(
        1, 3, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.5, 0.8, 0.8]}
    )
    systems = data["all_systems"]["systems"]
    colors = [
        STORES["sqlite"][1]
        if "SQLite" in s["system"]
        else STORES["postgres"][1]
        if "PostgreSQL" in s["system"]
        else "#8d8d8d"
        for s in systems
    ]
    left.barh([s["system"] for s in systems], [s["end_to_end"] for s in systems], color=colors)
    left.invert_yaxis()
    left.set_xlabel("jobs/s, end to end (enqueue while 2 workers consume)")
    left.set_title(
        f"Every peer, {data['all_systems']['jobs']:,} jobs ({data['all_systems']['date']})",
        fontsize=10,
    )
    bullmq, dramatiq = data["bullmq_runs"], data["dramatiq_runs"]
    runs_against(
        middle,
        [
            (
                STORES[store][0],
                [run[store] / run["bullmq"] for run in bullmq["runs"]],
                STORES[store][1],
            )
            for store in STORES
        ],
        data["targets"]["bullmq_ratio_min"],
    )
    middle.set_title(
        f"sluice / BullMQ, target ≥ 3\n"
        f"{len(bullmq['runs'])} runs of 100,000 jobs ({bullmq['date']})",
        fontsize=9,
    )
    runs_against(
        right,
        [
            (STORES[store][0], [run[store] for run in dramatiq["ratios"]], STORES[store][1])
            for store in STORES
        ],
        data["targets"]["best_python_peer_ratio_min"],
    )
    right.set_title(
        f"sluice / Dramatiq (best Python queue),\ntarget ≥ 5, "
        f"{len(dramatiq['ratios'])} runs ({dramatiq['date']})",
        fontsize=9,
    )
    save(figure, "peers")


def replay() -> None:
    data = load("replay")
    figure, axes = plt.subplots(figsize=(6, 3.4))
    for x, store in enumerate(STORES):
        values = [run[store] for run in data["runs"] if run[store] is not None]
        axes.bar(x, statistics.median(values), color=STORES[store][1], alpha=0.35, width=0.6)
        axes.scatter([x] * len(values), values, color=STORES[store][1], s=14, zorder=3)
        axes.hlines(data["targets"][store], x - 0.4, x + 0.4, **TARGET)
    axes.set_xticks(range(len(STORES)), [label for label, _ in STORES.values()])
    axes.set_ylabel("events/s")
    axes.yaxis.set_major_formatter(lambda v, _: f"{v / 1000:.0f}k")
    axes.set_title(
        f"Replay of 1,000,000 events, runs of {data['date']}\n"
        "(dashes: the targets, 300k SQLite and 100k PostgreSQL)",
        fontsize=10,
    )
    save(figure, "replay")


def append() -> None:
    data = load("append")
    figure, axes = plt.subplots(figsize=(7.5, 4.4))
    for store, (label, color) in STORES.items():
        rows = [r for r in data["runs"] if r["store"] == store]
        writers = [r["writers"] for r in rows]
        axes.plot(
            writers,
            [r["alone"] for r in rows],
            marker="o",
            color=color,
            label=f"{label}, writers alone",
        )
        axes.plot(
            writers,
            [r["with_relay"] for r in rows],
            marker="s",
            color=color,
            linestyle="--",
            label=f"{label}, with the relay beside them",
        )
    later = data["after_search_indexes"]
    for store, (label, color) in STORES.items():
        rows = [r for r in later["runs"] if r["store"] == store]
        axes.scatter(
            [r["writers"] for r in rows for _ in r["alone"]],
            [v for r in rows for v in r["alone"]],
            marker="x",
            color=color,
            s=30,
            label=f"{label}, writers alone, after the search indexes ({later['date']})",
        )
    axes.axhline(data["targets"]["postgres_4_writers_min"], **TARGET)
    axes.annotate(
        "target: 50k/s with 4 PostgreSQL writers",
        (1, 50000),
        (1.05, 52000),
        color=TARGET["color"],
        fontsize=8,
    )
    axes.set_xscale("log", base=2)
    axes.set_xticks([1, 4, 16], ["1", "4", "16"])
    axes.set_xlabel("writer processes (transactions of 500 events)")
    axes.set_ylabel("events/s committed")
    axes.yaxis.set_major_formatter(lambda v, _: f"{v / 1000:.0f}k")
    axes.set_ylim(0, None)
    axes.legend(fontsize=7, loc="lower right")
    axes.set_title(f"Append scaling ({data['date']})")
    save(figure, "append")


def main() -> None:
    for draw in (redirects, peers, replay, append):
        draw()
        print(f"wrote {OUT / draw.__name__}.svg")


if __name__ == "__main__":
    main()
