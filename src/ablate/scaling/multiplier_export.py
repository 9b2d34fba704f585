"""Write a MultiplierReport (multiplier.py) like a fit: multiplier.json, multiplier.md and multiplier.png.

Every multiplier carries its verdict (multiplier.py); one that is not_determined is written as the
word and its reasons, its value and interval null in JSON, never as a number. An infinite end of an
interval (samples where the arm reaches a loss no baseline compute reaches, below the baseline's
fitted E) is null in JSON and "no compute" in Markdown.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ablate.files import figure_bytes, write_bytes
from ablate.scaling.bootstrap import Estimate
from ablate.scaling.multiplier import AtScale, Comparison, MultiplierReport
from ablate.scaling.verdict import Verdict

SCHEMA = "ablate.multiplier/1"
FORMULA = "m(C) = C_b(L_a(C)) / C, L(C) = E + A / C^alpha over each arm's compute envelope"


def export_multiplier(report: MultiplierReport, out_dir: str | Path) -> list[Path]:
    """Render everything in memory, then write each file atomically; returns the paths."""
    out = Path(out_dir)
    rendered = {
        "multiplier.json": (json.dumps(multiplier_dict(report), indent=2) + "\n").encode(),
        "multiplier.md": multiplier_markdown(report).encode(),
        "multiplier.png": plot_bytes(report),
    }
    return [write_bytes(out / name, data) for name, data in rendered.items()]


# -- JSON -----------------------------------------------------------------------------------------


def _num(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _estimate(e: Estimate) -> dict:
    ci = None if e.ci95 is None else [_num(e.ci95[0]), _num(e.ci95[1])]
    return {"value": _num(e.value), "ci95": ci, "unmatched": not math.isfinite(e.value)}


def _at(a: AtScale) -> dict:
    shown = a.shown
    return {
        "C": a.C,
        "multiplier": {"value": None, "ci95": None, "unmatched": False} if shown is None else _estimate(shown),
        "arm_loss": _num(a.arm_loss),
        "baseline_loss": _num(a.baseline_loss),
        **a.verdict.to_dict(),
    }


def _comparison(c: Comparison) -> dict:
    t = c.trend
    return {
        "arm": c.arm,
        "baseline": c.baseline,
        "scales": [_at(a) for a in c.scales],
        "trend": {
            "direction": t.direction,
            "exponent": _estimate(t.exponent) if t.verdict.usable else None,
            "ratio": _estimate(t.ratio) if t.verdict.usable else None,
            **t.verdict.to_dict(),
            "C_lo": t.C_lo,
            "C_hi": t.C_hi,
            "sentence": t.sentence(),
        },
        "target": None if c.target is None else _at(c.target),
        "bootstrap_pairs": c.n_pairs,
    }


def multiplier_dict(report: MultiplierReport) -> dict:
    arms = {}
    for name, arm in report.arms.items():
        fit = arm.law
        arms[name] = {
            "n_runs": len(arm.points),
            "law": {k: _estimate(v) for k, v in fit.params.items()},
            "envelope_points": len(fit.x),
            "C_range": list(arm.C_range),
            "converged": bool(fit.diagnostics.converged),
            "rms_log_residual": _num(fit.diagnostics.rms_residual),
            **arm.verdict.to_dict(),
        }
    return {
        "schema": SCHEMA,
        "formula": FORMULA,
        "key": report.key,
        "baseline": report.baseline,
        "target_C": report.target_C,
        "entropy_floor": report.entropy_floor,
        **report.verdict.to_dict(),
        "thresholds": report.thresholds.to_dict(),
        "dropped_unshared_runs": report.dropped,
        "arms": arms,
        "comparisons": [_comparison(c) for c in report.comparisons],
    }


# -- Markdown -------------------------------------------------------------------------------------


def _m(e: Estimate) -> str:
    """A multiplier with its interval: x0.97 (x0.91 to x1.03)."""

    def one(x: float) -> str:
        return f"x{x:.3g}" if math.isfinite(x) else "no compute"

    if e.ci95 is None:
        return one(e.value)
    return f"{one(e.value)} ({one(e.ci95[0])} to {one(e.ci95[1])})"


def _ci(e: Estimate) -> str:
    return f"{e.value:.4g}" + ("" if e.ci95 is None else f" ({e.ci95[0]:.3g} to {e.ci95[1]:.3g})")


def shown(a: AtScale) -> str:
    """A multiplier as printed: with its interval, `(wide)` after it when wide; `not_determined` alone."""
    if a.shown is None:
        return "not_determined"
    return _m(a.shown) + (" (wide)" if not a.verdict.trusted else "")


def answer(c: Comparison) -> str:
    """One sentence: what the arm costs or saves in baseline compute, and how that changes with scale.
    A cost or a gain is only called one where the 95% interval excludes x1; a not_determined
    multiplier is not counted."""
    first, last = c.scales[0], c.scales[-1]
    known = [a.shown for a in (first, last) if a.shown is not None]
    said = worth(*known) if known else "not determined at either end"
    return (
        f"{c.arm} is worth {shown(first)} of {c.baseline}'s compute at {first.C:.2g} FLOPs and "
        f"{shown(last)} at {last.C:.2g} FLOPs ({said}); the multiplier {c.trend.sentence()}."
    )


def worth(*estimates: Estimate) -> str:
    """What the multipliers at the ends of the range say together: a gain or a cost where every
    interval lies on one side of x1; nothing measurable where every interval covers it."""
    sides = {side(e) for e in estimates}
    if sides == {"gain"}:
        return "a gain"
    if sides == {"cost"}:
        return "a cost"
    if sides == {None}:
        return "neither a cost nor a gain within the 95% intervals"
    return (
        "a cost or gain depending on scale"
        if {"gain", "cost"} <= sides
        else "a measurable " + ("gain" if "gain" in sides else "cost") + " only at one end of the range"
    )


def side(e: Estimate) -> str | None:
    """gain (the interval above x1), cost (below), None (it covers x1); the value alone without one."""
    lo, hi = e.ci95 if e.ci95 is not None else (e.value, e.value)
    return "gain" if lo > 1 else "cost" if hi < 1 else None


def multiplier_markdown(report: MultiplierReport) -> str:
    lines = [
        f"# Compute multipliers of `{report.key}` against {report.baseline}",
        "",
        f"Each arm's law L(C) = E + A / C^alpha over its compute envelope; the multiplier {FORMULA.split(',')[0]}: "
        "the compute the baseline needs to reach the arm's loss, over the arm's compute (> 1: a gain, < 1: a "
        "cost). 95% intervals from each arm's bootstrap, paired.",
        "",
        "## Answer",
        "",
        *[f"- {answer(c)}" for c in report.comparisons],
        "",
        f"Verdict (the laws and every multiplier inside the data): {report.verdict.line('overall')}",
        "",
        *_dropped_line(report),
        "## Laws",
        "",
        *(
            [f"E is fitted above the data's entropy floor {report.entropy_floor:.4g}.", ""]
            if report.entropy_floor
            else []
        ),
        "| arm | runs | envelope | C range (FLOPs) | E | A | alpha | RMS log residual | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, arm in report.arms.items():
        p = arm.law.params
        lo, hi = arm.C_range
        lines.append(
            f"| {name} | {len(arm.points)} | {len(arm.law.x)} | {lo:.3g} to {hi:.3g} | {_ci(p['E'])} | "
            f"{_ci(p['A'])} | {_ci(p['alpha'])} | {arm.law.diagnostics.rms_residual:.3g} | {_cell(arm.verdict)} |"
        )
    for c in report.comparisons:
        lines += [
            "",
            f"## {c.arm} against {c.baseline}",
            "",
            "| compute (FLOPs) | multiplier | arm loss | baseline loss | verdict |",
        ]
        lines.append("|---|---|---|---|---|")
        for a in c.scales:
            lines.append(f"| {a.C:.3g} | {shown(a)} | {a.arm_loss:.4f} | {a.baseline_loss:.4f} | {_cell(a.verdict)} |")
        lines += ["", f"Trend: the multiplier {c.trend.sentence()}."]
        if c.target is not None:
            decades = math.log10(c.target.C / c.trend.C_hi)
            lines += [
                "",
                f"At the target, {c.target.C:.3g} FLOPs ({decades:.2g} decades past the largest compute both "
                f"arms reached): {shown(c.target)}; {c.target.verdict.line('verdict')}.",
            ]
    lines += ["", "![Compute multiplier against compute](multiplier.png)", ""]
    return "\n".join(lines)


def _cell(v) -> str:
    """A verdict in a table cell: the level, then its reasons."""
    return v.level + (f": {v.because()}" if v.reasons else "")


def _dropped_line(report: MultiplierReport) -> list[str]:
    dropped = {k: v for k, v in report.dropped.items() if v}
    if not dropped:
        return []
    shown = ", ".join(f"{v} of {k}" for k, v in dropped.items())
    return [f"Left out, as cells not every arm has (shared ladder): {shown} runs.", ""]


def summary_text(report: MultiplierReport) -> str:
    """The console: one line per arm against the baseline, with its verdicts (the worst inside the data,
    the target's), then one line per arm's law."""
    lines = []
    for c in report.comparisons:
        lines.append(f"{c.arm} vs {c.baseline}: {answer(c)}")
        lines.append("  " + Verdict.worst(*(a.verdict for a in c.scales)).line("inside the data", limit=2))
        if c.target is not None:
            lines.append(f"  at {c.target.C:.3g} FLOPs: {shown(c.target)}; {c.target.verdict.line('verdict', limit=2)}")
    lines += [arm.verdict.line(f"law of {name}", limit=2) for name, arm in report.arms.items()]
    return "\n".join(lines)


# -- plot -----------------------------------------------------------------------------------------


def plot_bytes(report: MultiplierReport) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    colors = plt.get_cmap("tab10")
    for i, c in enumerate(report.comparisons):
        color = colors(i % 10)
        finite = np.isfinite(c.curve)
        ax.plot(c.curve_C[finite], c.curve[finite], color=color, label=c.arm)
        lo = np.where(np.isfinite(c.curve_lo), c.curve_lo, np.nan)
        hi = np.where(np.isfinite(c.curve_hi), c.curve_hi, np.nan)
        ax.fill_between(c.curve_C, lo, hi, color=color, alpha=0.15, linewidth=0)
        xs = [a.C for a in c.scales if a.shown is not None]
        ys = [a.multiplier.value for a in c.scales if a.shown is not None]
        ax.plot(xs, ys, "o", color=color, markersize=4)
        if c.target is not None and c.target.shown is not None and math.isfinite(c.target.multiplier.value):
            err = c.target.multiplier.ci95
            y = c.target.multiplier.value
            yerr = None
            if err is not None and all(math.isfinite(v) for v in err):
                yerr = [[max(y - err[0], 0)], [max(err[1] - y, 0)]]
            ax.errorbar([c.target.C], [y], yerr=yerr, fmt="*", color=color, markersize=10, capsize=3)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    hi_data = min(c.trend.C_hi for c in report.comparisons)
    if report.target_C and report.target_C > hi_data:
        ax.axvspan(hi_data, report.target_C * 1.3, color="gray", alpha=0.08, linewidth=0)
        ax.text(hi_data * 1.1, 0.98, "extrapolated", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training FLOPs of the arm")
    ax.set_ylabel(f"compute multiplier vs {report.baseline}")
    ax.set_title(f"{report.key}: baseline compute matching each arm's loss, over the arm's compute", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    data = figure_bytes(fig)
    plt.close(fig)
    return data
