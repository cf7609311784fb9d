"""The report's figure: claim throughput by concurrency, scale, and the store's overhead.

matplotlib is a bench-only dependency; :func:`available` lets the smoke mode
skip the figure when the ``bench`` extra is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw(data: dict[str, Any], path: Path) -> bool:
    """Write the PNG; False when no plotted scenario ran."""
    if not any(name in data for name in ("claim", "scale", "latency")):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    if "claim" in data:
        _throughput(axes[0][0], data["claim"], indexed=True)
        _throughput(axes[0][1], data["claim"], indexed=False)
    if "scale" in data:
        _scale(axes[1][0], data["scale"])
    if "latency" in data:
        _latency(axes[1][1], data["latency"])
    fig.suptitle("airflow-atomic-store vs hand-written SQL and queue libraries")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _throughput(ax: Any, claim: dict[str, Any], *, indexed: bool) -> None:
    entries = [e for e in claim["store_vs_sql"] if e["index"] == indexed]
    for batch in sorted({e["batch"] for e in entries}):
        rows = sorted((e for e in entries if e["batch"] == batch), key=lambda e: e["processes"])
        procs = [e["processes"] for e in rows]
        line = ax.plot(
            procs, [e["store"]["rate"] for e in rows], marker="o", label=f"store, batch {batch}"
        )
        ax.plot(
            procs,
            [e["sql"]["rate"] for e in rows],
            marker="x",
            linestyle="--",
            color=line[0].get_color(),
            label=f"hand-written, batch {batch}",
        )
    if indexed:
        best: dict[int, float] = {}
        for e in claim["read_delete"]:
            best[e["processes"]] = max(best.get(e["processes"], 0.0), e["rate"])
        if best:
            ax.plot(
                sorted(best),
                [best[p] for p in sorted(best)],
                marker="s",
                color="grey",
                label="read+delete queue (best batch)",
            )
        if "procrastinate" in claim:
            rows = claim["procrastinate"]
            ax.plot(
                [r["processes"] for r in rows],
                [r["fetch"]["rate"] for r in rows],
                marker="^",
                color="black",
                label="procrastinate fetch",
            )
    ax.set_title(f"Claim throughput, {'with' if indexed else 'without'} the claim index")
    ax.set_xlabel("claimer processes")
    ax.set_ylabel("rows/s")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _scale(ax: Any, scale: dict[str, Any]) -> None:
    sizes = scale["sizes"]
    rows = [e["rows"] for e in sizes]
    for key, label, style in (
        ("store_no_index_ms", "store, no claim index", "o-"),
        ("sql_no_index_ms", "hand-written, no claim index", "x--"),
        ("store_index_ms", "store, claim index", "o-"),
        ("sql_index_ms", "hand-written, claim index", "x--"),
    ):
        ax.plot(rows, [e[key] for e in sizes], style, label=label)
    ax.set_title("Claim 10 rows; 1% of the table pending")
    ax.set_xlabel("rows in the table")
    ax.set_ylabel("ms per claim (median)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _latency(ax: Any, latency: dict[str, Any]) -> None:
    ops = latency["operations"]
    names = [e["operation"].replace(" (", "\n(") for e in ops]
    ratios = [e["store"]["p50_ms"] / e["sql"]["p50_ms"] for e in ops]
    ax.barh(names, ratios, color="tab:blue")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(1.25, color="red", linestyle="--", linewidth=0.8, label="target 1.25x")
    ax.set_title("Single-op p50 latency, store ÷ hand-written")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7)
