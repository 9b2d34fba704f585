"""backtest.png: what `ablate backtest` measured, drawn (matplotlib, imported only when drawing).

Left: every held-out run at its distance past the largest fitted run (decades of compute), its 95%
interval and the prediction as errors relative to the loss the run reached (0 is the truth), coloured
by the prediction's verdict, a run outside its interval ringed. Right: the share of held-out runs
inside their interval by distance band, against the 90% every band must hold.
"""

from __future__ import annotations

import numpy as np

from ablate.files import figure_bytes
from ablate.scaling.backtest import COVERAGE_TARGET, Backtest
from ablate.scaling.verdict import LEVELS

LEVEL_COLORS = {"trusted": "tab:green", "wide": "tab:orange", "not_determined": "0.6"}


def render_backtest(bt: Backtest) -> bytes:
    """backtest.png's bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (runs_ax, cover_ax) = plt.subplots(
        1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [2, 1]}, layout="constrained"
    )
    _draw_runs(runs_ax, bt)
    _draw_coverage(cover_ax, bt)
    data = figure_bytes(fig, "png", 120)
    plt.close(fig)
    return data


def _draw_runs(ax, bt: Backtest) -> None:
    if not bt.runs:
        ax.text(0.5, 0.5, "no held-out run", transform=ax.transAxes, ha="center", color="crimson")
        return
    # runs of one cut side by side: a small offset per cut keeps their intervals apart
    shift = 0.012 * (np.array([r.cut for r in bt.runs]) - np.mean([r.cut for r in bt.runs]))
    x = np.array([r.decades for r in bt.runs]) + shift
    actual = np.array([r.actual for r in bt.runs])
    lo, hi = (100 * (np.array([getattr(r, k) for r in bt.runs]) / actual - 1) for k in ("lo", "hi"))
    predicted = 100 * (np.array([r.predicted for r in bt.runs]) / actual - 1)
    for level in LEVELS:
        m = np.array([r.verdict.level == level for r in bt.runs])
        if m.any():
            ax.vlines(x[m], lo[m], hi[m], color=LEVEL_COLORS[level], lw=1, alpha=0.6)
            ax.scatter(x[m], predicted[m], s=12, color=LEVEL_COLORS[level], label=f"{level} ({int(m.sum())})")
    outside = ~np.array([r.inside for r in bt.runs])
    if outside.any():
        ax.scatter(
            x[outside],
            predicted[outside],
            s=60,
            facecolors="none",
            edgecolors="crimson",
            lw=1.2,
            label=f"outside its interval ({int(outside.sum())})",
        )
    ax.axhline(0.0, color="k", lw=1)
    ax.set_xlabel("decades of compute past the largest fitted run")
    ax.set_ylabel("predicted / actual - 1 (%), with the 95% interval")
    ax.set_title("each held-out run: prediction and interval against the loss it reached")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def _draw_coverage(ax, bt: Backtest) -> None:
    bins = bt.bins()
    if not bins:
        return
    labels = [f"{b.lo:g}-{b.hi:g}" if np.isfinite(b.hi) else f">{b.lo:g}" for b in bins]
    ax.bar(labels, [100 * b.coverage for b in bins], color="tab:blue", alpha=0.7)
    for i, b in enumerate(bins):
        ax.text(i, 100 * b.coverage + 1, f"n={b.n}", ha="center", fontsize=8)
    ax.axhline(100 * COVERAGE_TARGET, color="crimson", ls="--", lw=1, label=f"{100 * COVERAGE_TARGET:.0f}% target")
    ax.set_ylim(0, 110)
    ax.set_xlabel("decades past the largest fitted run")
    ax.set_ylabel("held-out runs inside their 95% interval (%)")
    ax.set_title("coverage by distance")
    ax.legend(fontsize=8, loc="lower left")
