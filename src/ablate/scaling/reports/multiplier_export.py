"""Write a MultiplierReport (multiplier.py) like a fit: multiplier.json, multiplier.md and multiplier.png.

The report leads with one line per arm (arm_line: its multiplier at the centre of the compute range,
95% interval, what that amounts to, verdict, trend with scale, and the method: paired or unpaired),
then the reasons as a short list with their codes, each once, then the details (laws, the multiplier
at each scale, the target). Every multiplier carries its verdict (multiplier.py); one that is
not_determined is written as the word and its codes, its value and interval null in JSON, never as
a number. An infinite end of an interval (samples where the arm reaches a loss no baseline compute
reaches, below the baseline's fitted E) is null in JSON and "no compute" in Markdown.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ablate.files import figure_bytes, write_files
from ablate.scaling.fitting.bootstrap import Estimate
from ablate.scaling.multiplier import AtScale, Comparison, MultiplierReport
from ablate.scaling.multiplier_paired import PairedFit
from ablate.scaling.verdict import Verdict

SCHEMA = "ablate.multiplier/2"
FORMULA = "m(C) = C_b(L_a(C)) / C, L(C) = E + A / C^alpha over each arm's compute envelope"
PAIRED_FORMULA = (
    "log m_i = log C_b(L_b(C_i) e^{d_i}) - log C_a,i ~ d_i / s_b(C_i) - log(C_a,i / C_i), "
    "d_i = log L_a,i - log L_b,i, s_b = d log L_b / d log C = -alpha_b (L_b - E_b) / L_b"
)


def export_multiplier(report: MultiplierReport, out_dir: str | Path) -> list[Path]:
    """Render everything in memory, then write the files as one set (files.write_files); returns the paths."""
    out = Path(out_dir)
    rendered = {
        "multiplier.json": (json.dumps(multiplier_dict(report), indent=2) + "\n").encode(),
        "multiplier.md": multiplier_markdown(report).encode(),
        "multiplier.png": plot_bytes(report),
    }
    return write_files({out / name: data for name, data in rendered.items()})


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
        "headline": _at(c.headline),
        "method": c.method,
        "why_unpaired": c.why_unpaired or None,
        "paired": None if c.paired is None else _paired(c.paired),
        "bootstrap_pairs": c.n_pairs,
        "line": arm_line(c),
    }


def _paired(f: PairedFit) -> dict:
    return {
        "formula": PAIRED_FORMULA,
        "runs": len(f.runs),
        "instances": f.n_units,
        "offset_log_loss": _estimate(f.offset),
        "law_sd_log_m": {"mean": _num(f.law_sd[0]), "k": _num(f.law_sd[1])},
        "instance_scatter_log_m": _num(f.scatter),
        "C_centre": f.C_c,
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
    """A multiplier with its interval: x0.97 (x0.91 to x1.03), with as many digits as tell its ends apart."""
    digits = _digits(e)

    def one(x: float) -> str:
        return f"x{x:.{digits}f}" if math.isfinite(x) else "no compute"

    if e.ci95 is None:
        return one(e.value)
    return f"{one(e.value)} ({one(e.ci95[0])} to {one(e.ci95[1])})"


def _digits(e: Estimate) -> int:
    """Decimals for a multiplier: 3, or more (up to 6) where its interval is narrower than 0.01."""
    finite = [x for x in (e.ci95 or ()) if math.isfinite(x)]
    width = max(finite) - min(finite) if len(finite) == 2 else 0.0
    return 3 if width <= 0 or width >= 0.01 else min(6, 2 + math.ceil(-math.log10(width)))


def _ci(e: Estimate) -> str:
    return f"{e.value:.4g}" + ("" if e.ci95 is None else f" ({e.ci95[0]:.3g} to {e.ci95[1]:.3g})")


def shown(a: AtScale) -> str:
    """A multiplier as printed: with its interval, `(wide)` after it when wide; `not_determined` alone."""
    if a.shown is None:
        return "not_determined"
    return _m(a.shown) + (" (wide)" if not a.verdict.trusted else "")


def amounts_to(e: Estimate) -> str:
    """What a multiplier says: a cost or a gain of so much where its interval excludes x1, else no
    measurable difference."""
    said = side(e)
    if said is None:
        return "no measurable difference"
    return f"a {said} of {100 * abs(e.value - 1):.2g}%"


def side(e: Estimate) -> str | None:
    """gain (the interval above x1), cost (below), None (it covers x1); the value alone without one."""
    lo, hi = e.ci95 if e.ci95 is not None else (e.value, e.value)
    return "gain" if lo > 1 else "cost" if hi < 1 else None


def _verdict_codes(v: Verdict) -> str:
    """A verdict as its level and codes: `wide [law, interval_width]`."""
    codes = list(dict.fromkeys(v.codes()))
    return v.level + (f" [{', '.join(codes)}]" if codes else "")


def _trend_words(c: Comparison) -> str:
    t = c.trend
    if not t.verdict.usable:
        return "not determined with scale"
    k = t.exponent
    ci = "" if k.ci95 is None else f", {k.ci95[0]:+.3f} to {k.ci95[1]:+.3f}"
    return f"{t.direction} with scale (m ~ C^{k.value:+.3f}{ci})"


def _method_words(c: Comparison) -> str:
    if c.paired is not None:
        return f"paired: {len(c.paired.runs)} runs of {c.paired.n_units} model instances"
    return f"unpaired: each arm's law ({c.why_unpaired})" if c.why_unpaired else "unpaired: each arm's law"


def _in_data(c: Comparison) -> Verdict:
    return Verdict.worst(c.headline.verdict, *(a.verdict for a in c.scales))


def arm_line(c: Comparison) -> str:
    """One line: multiplier at the centre of the range, 95% interval, what it amounts to, verdict
    (level and codes), trend with scale, method."""
    h = c.headline
    verdict = _verdict_codes(_in_data(c))
    if h.shown is None:
        value = f"not_determined at {h.C:.2g} FLOPs"
    else:
        e = h.shown
        value = f"{_m(e)} at {h.C:.2g} FLOPs: {amounts_to(e)}"
    return f"{c.arm} vs {c.baseline}: {value}; {verdict}; {_trend_words(c)}; {_method_words(c)}"


def _reasons(report: MultiplierReport) -> list[str]:
    """Every reason once, with its code and where it applies (the comparisons inside the data and at
    the target, the laws): one line per distinct reason, naming every place it holds."""
    places: dict[tuple[str, str, str], list[str]] = {}

    def add(where: str, v: Verdict) -> None:
        for r in v.reasons:
            spots = places.setdefault((r.code, r.level, r.text), [])
            if where not in spots:
                spots.append(where)

    for c in report.comparisons:
        add(f"{c.arm} inside the data", _in_data(c))
        if c.target is not None:
            add(f"{c.arm} at {c.target.C:.3g} FLOPs", c.target.verdict)
    for name, arm in report.arms.items():
        add(f"law of {name}", arm.verdict)
    return [f"- `{code}` ({level}), {', '.join(spots)}: {text}" for (code, level, text), spots in places.items()]


def multiplier_markdown(report: MultiplierReport) -> str:
    paired = [c for c in report.comparisons if c.paired is not None]
    lines = [
        f"# Compute multipliers of `{report.key}` against {report.baseline}",
        "",
        f"The multiplier {FORMULA.split(',')[0]}: the compute the baseline needs to reach the arm's loss, over "
        "the arm's compute (> 1: a gain, < 1: a cost), at the centre of the compute range the arms share.",
        "",
        "## Answer",
        "",
        "| arm | multiplier | 95% interval | verdict | trend with scale | method |",
        "|---|---|---|---|---|---|",
        *[_answer_row(c) for c in report.comparisons],
        "",
        f"Overall (every multiplier inside the data): {_verdict_codes(report.verdict)}.",
        "",
        *_dropped_line(report),
        "## Method",
        "",
        *_method_lines(report, paired),
        "",
        "## Reasons",
        "",
        *(_reasons(report) or ["None: every multiplier and law is trusted."]),
        "",
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
            f"{_ci(p['A'])} | {_ci(p['alpha'])} | {arm.law.diagnostics.rms_residual:.3g} | "
            f"{_verdict_codes(arm.verdict)} |"
        )
    for c in report.comparisons:
        lines += _comparison_lines(c)
    lines += ["", "![Compute multiplier against compute](multiplier.png)", ""]
    return "\n".join(lines)


def _answer_row(c: Comparison) -> str:
    h = c.headline
    if h.shown is None:
        value, ci = f"not_determined (at {h.C:.2g} FLOPs)", ""
    else:
        e = h.shown
        value = f"{_m(Estimate(e.value, e.ci95)).split(' (')[0]} at {h.C:.2g} FLOPs: {amounts_to(e)}"
        ci = "" if e.ci95 is None else _m(e).split(" (")[1].rstrip(")")
    return f"| {c.arm} | {value} | {ci} | {_verdict_codes(_in_data(c))} | {_trend_words(c)} | {_method_words(c)} |"


def _method_lines(report: MultiplierReport, paired: list[Comparison]) -> list[str]:
    lines = []
    if paired:
        lines.append(
            f"Paired ({', '.join(c.arm for c in paired)}): run against run on the runs both arms share (same "
            f"size, tokens, data and seed): {PAIRED_FORMULA}, with {report.baseline}'s law; the mean over model "
            "instances (one size, data and seed: its budgets share its initialisation) with Student's t "
            "interval, the law's own uncertainty added in quadrature (scaling/multiplier_paired.py)."
        )
    unpaired = [c for c in report.comparisons if c.paired is None]
    if unpaired:
        lines.append(
            f"Unpaired ({', '.join(c.arm for c in unpaired)}): each arm's law L(C) = E + A / C^alpha over its "
            "compute envelope, the 95% intervals from the two laws' bootstrap samples paired index by index."
        )
    return lines


def _comparison_lines(c: Comparison) -> list[str]:
    lines = [
        "",
        f"## {c.arm} against {c.baseline}",
        "",
        f"{arm_line(c)}.",
        "",
    ]
    if c.paired is not None:
        f = c.paired
        ci = f.offset.ci95  # a t interval: fit_paired needs 2+ instances, and mean_interval gives one from 2
        interval = "" if ci is None else f" (95% {ci[0]:+.2g} to {ci[1]:+.2g})"
        lines += [
            f"Log-loss offset {f.offset.value:+.2g}{interval} over "
            f"{f.n_units} instances; their mean log multiplier scatters by {f.scatter:.2g} about the trend, "
            f"{c.baseline}'s law adds {f.law_sd[0]:.2g} (sd of the mean log multiplier over its bootstrap).",
            "",
        ]
    lines += ["| compute (FLOPs) | multiplier | arm loss | baseline loss | verdict |", "|---|---|---|---|---|"]
    for a in c.scales:
        lines.append(
            f"| {a.C:.3g} | {shown(a)} | {a.arm_loss:.4f} | {a.baseline_loss:.4f} | {_verdict_codes(a.verdict)} |"
        )
    lines += ["", f"Trend: the multiplier {c.trend.sentence()}."]
    if c.target is not None:
        decades = math.log10(c.target.C / c.trend.C_hi)
        lines += [
            "",
            f"At the target, {c.target.C:.3g} FLOPs ({decades:.2g} decades past the largest compute both "
            f"arms reached): {shown(c.target)}; {_verdict_codes(c.target.verdict)}.",
        ]
    return lines


def _dropped_line(report: MultiplierReport) -> list[str]:
    dropped = {k: v for k, v in report.dropped.items() if v}
    if not dropped:
        return []
    shown = ", ".join(f"{v} of {k}" for k, v in dropped.items())
    return [f"Left out, as cells not every arm has (shared ladder): {shown} runs.", ""]


def summary_text(report: MultiplierReport) -> str:
    """The console: one line per arm (arm_line), its target's verdict, then each law's verdict."""
    lines = []
    for c in report.comparisons:
        lines.append(arm_line(c))
        if c.target is not None:
            lines.append(f"  at {c.target.C:.3g} FLOPs: {shown(c.target)}; {_verdict_codes(c.target.verdict)}")
    lines += [f"law of {name}: {_verdict_codes(arm.verdict)}" for name, arm in report.arms.items()]
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
