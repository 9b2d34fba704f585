"""Write a FitReport (ablate.scaling.report.fit_all) to a folder: fit.json, fit.md, predictions.csv and PNG plots.

A fit that did not converge is written as "DID NOT CONVERGE" with its diagnostics, never as numbers
that look usable: its params are null in fit.json, absent from fit.md, and predictions.csv has no rows.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ablate.scaling.bootstrap import Estimate
from ablate.scaling.chinchilla import Approach3Fit
from ablate.scaling.frontier import Frontier, FrontierFit, frontier
from ablate.scaling.report import FitReport
from ablate.scaling.single import SingleLawFit

NOT_CONVERGED = "DID NOT CONVERGE"
SCHEMA = "ablate.fit/1"
FRONTIER_FORMULA = "N_opt = G (C/6)^a, D_opt = (C/6) / N_opt, G = (alpha A / (beta B))^(1/(alpha+beta))"
CSV_COLUMNS = ("C", "N_opt", "D_opt", "tokens_per_param", "loss", "lo", "hi", "N_opt_lo", "N_opt_hi")


PLOT_FILES = ("fit_curves.png", "frontier.png", "residuals.png", "isoflop.png")


def export_fit(result: FitReport, out_dir: str | Path) -> list[Path]:
    """Write fit.json, fit.md, predictions.csv and the plots into out_dir; return the paths written.

    Everything is written into a staging folder inside out_dir first and then moved into place, so
    a failure leaves the previous export whole; a plot the previous export had and this one has not
    (isoflop.png) is removed rather than left beside numbers it does not belong to."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".fit-", dir=out))
    try:
        staged = [stage / "fit.json", stage / "fit.md", stage / "predictions.csv"]
        staged[0].write_text(json.dumps(fit_dict(result), indent=2) + "\n")
        staged[1].write_text(fit_markdown(result))
        write_predictions_csv(result, staged[2])
        staged += write_plots(result, stage)
        for name in set(PLOT_FILES) - {f.name for f in staged}:
            (out / name).unlink(missing_ok=True)
        for f in staged:
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [out / f.name for f in staged]


# ---------------------------------------------------------------------------------------------
# fit.json
# ---------------------------------------------------------------------------------------------


def _clean(x):
    """JSON-safe: numpy scalars to Python, NaN/inf to null."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return _clean(x.tolist())
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    return x


def _status(converged: bool) -> str:
    return "converged" if converged else NOT_CONVERGED


def _estimates(d: dict[str, Estimate]) -> dict:
    return {k: v.to_dict() for k, v in d.items()}


def _approach3_dict(fit: Approach3Fit) -> dict:
    ok = fit.diagnostics.converged
    doc = {"status": _status(ok), "law": "L(N, D) = E + A / N^alpha + B / D^beta",
           "method": f"Hoffmann et al. 2022 approach 3: Huber(delta={fit.delta:g}) on log L, "
                     f"best of {fit.diagnostics.n_starts} starts",
           "params": _estimates(fit.params) if ok else None,
           "exponents": _estimates(fit.exponents) if ok else None,
           "frontier": {"formula": FRONTIER_FORMULA,
                        "G": fit.law.G} if ok else None,
           "diagnostics": fit.diagnostics.to_dict(),
           "bootstrap": None if fit.bootstrap is None else _with_samples(fit.bootstrap, fit.law.NAMES)}
    if not ok:
        doc["last_iterate"] = dict(zip(fit.law.NAMES, fit.law.as_array().tolist()))
    return doc


def _with_samples(boot, names) -> dict:
    """The converged resamples as rows in `names` order: `python -m ablate.plan fit=` takes the
    percentiles of L(N, D) over them, the joint interval (A and alpha, B and beta are correlated)."""
    return {**boot.to_dict(), "sample_columns": list(names),
            "samples": [[float(f"{v:.6g}") for v in row] for row in boot.usable()]}


def _single_dict(fit: SingleLawFit) -> dict:
    ok = fit.diagnostics.converged
    used = "compute envelope (best loss at or below each C)" if fit.variable == "C" else \
        f"best loss per distinct {fit.variable}"
    doc = {"status": _status(ok), "law": f"L({fit.variable}) = E + A / {fit.variable}^alpha",
           "points_used": used, "n_points_used": len(fit.x), "params": _estimates(fit.params) if ok else None,
           "diagnostics": fit.diagnostics.to_dict(),
           "bootstrap": None if fit.bootstrap is None else fit.bootstrap.to_dict()}
    if not ok:
        doc["last_iterate"] = {"E": fit.law.E, "A": fit.law.A, "alpha": fit.law.alpha}
    return doc


def _frontier_fit_dict(fit: FrontierFit) -> dict:
    doc = {"status": "converged", "method": f"Hoffmann et al. 2022 {fit.method}: least squares on log N_opt, log D_opt",
           "N_opt": {"law": "k C^a", "k": fit.n_opt.k.to_dict(), "a": fit.n_opt.exponent.to_dict()},
           "D_opt": {"law": "k C^b", "k": fit.d_opt.k.to_dict(), "b": fit.d_opt.exponent.to_dict()},
           "n_boot": fit.n_boot, "notes": list(fit.notes),
           "optima": [{"C": c, "N_opt": n, "D_opt": d, "loss": l} for c, n, d, l in zip(fit.C, fit.N, fit.D, fit.L)]}
    if fit.budgets:
        doc["budgets"] = [{"C": b.C, "n_points": b.n_points, "N_opt": b.N_opt, "loss_at_min": b.L_opt,
                           "parabola_in_logN": None if b.coef is None else
                           {"c0": b.coef[0], "c1": b.coef[1], "c2": b.coef[2], "logN_center": b.x_mid},
                           "note": b.note} for b in fit.budgets]
    return doc


def _decade_frontier(result: FitReport) -> Frontier | None:
    """The frontier at each power of ten inside the report's frontier grid."""
    f = result.frontier
    if f is None or not result.approach3.diagnostics.converged:
        return None
    powers = range(int(np.ceil(np.log10(f.C.min()))), int(np.floor(np.log10(f.C.max()))) + 1)
    return frontier(result.approach3, [float(f"1e{k}") for k in powers]) if len(powers) else None


def _frontier_rows(f: Frontier) -> list[dict]:
    def est(v, lo, hi, i):
        return Estimate(float(v[i]), None if np.isnan(lo[i]) else (float(lo[i]), float(hi[i]))).to_dict()

    return [{"C": float(c), "N_opt": est(f.N_opt, f.N_lo, f.N_hi, i), "D_opt": est(f.D_opt, f.D_lo, f.D_hi, i),
             "tokens_per_param": float(f.tokens_per_param[i]), "loss": est(f.loss, f.loss_lo, f.loss_hi, i)}
            for i, c in enumerate(f.C)]


def _held_out_dict(result: FitReport) -> dict | None:
    h = result.held_out
    if h is None:
        return None
    ok = h.fit.diagnostics.converged
    doc = {"status": _status(ok), "k": h.k, "fit_without_them": _approach3_dict(h.fit)}
    if ok:
        doc.update(mean_abs_rel_error=h.mean_abs_rel_error, coverage_ci95=h.coverage,
                   run_coverage_ci95=h.run_coverage,
                   points=[{"N": r.N, "D": r.D, "C": r.C, "actual": r.actual, "predicted": r.predicted.to_dict(),
                            "rel_error": r.rel_error, "inside_ci95": r.inside_ci,
                            "run_ci95": None if r.run_ci95 is None else list(r.run_ci95),
                            "inside_run_ci95": r.inside_run_ci} for r in h.rows])
    return doc


def fit_dict(result: FitReport) -> dict:
    """The content of fit.json."""
    a3 = result.approach3
    ok = a3.diagnostics.converged
    doc: dict = {"schema": SCHEMA, "data": result.points.summary(), "chinchilla_approach3": _approach3_dict(a3)}
    decades = _decade_frontier(result)
    if decades is not None:
        doc["chinchilla_approach3"]["frontier"]["at"] = _frontier_rows(decades)
    for name, fit in (("chinchilla_approach1", result.approach1), ("chinchilla_approach2", result.approach2)):
        if fit is not None:
            doc[name] = _frontier_fit_dict(fit)
    for var, fit in result.single.items():
        doc[f"kaplan_{var}"] = _single_dict(fit)
    doc["predictions"] = [p.to_dict() for p in result.predictions] if ok else NOT_CONVERGED
    doc["held_out"] = _held_out_dict(result)
    floor = result.entropy_floor
    doc["entropy_floor"] = None if floor is None else (
        {"floor": floor.floor, "fitted_E": floor.fitted.to_dict(), "difference": floor.difference,
         "floor_inside_ci95": floor.floor_inside_ci} if ok else NOT_CONVERGED)
    doc["skipped"] = dict(result.skipped)
    return _clean(doc)


# ---------------------------------------------------------------------------------------------
# predictions.csv
# ---------------------------------------------------------------------------------------------


def write_predictions_csv(result: FitReport, path: Path) -> None:
    """The approach-3 frontier over the report's compute grid, one row per C."""
    with path.open("w", newline="") as fh:
        a3 = result.approach3
        if not a3.diagnostics.converged:
            fh.write(f"# {a3.diagnostics.message}; chinchilla_approach3 gives no predictions\n")
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        f = result.frontier
        if f is None or not a3.diagnostics.converged:
            return
        for row in zip(f.C, f.N_opt, f.D_opt, f.tokens_per_param, f.loss, f.loss_lo, f.loss_hi, f.N_lo, f.N_hi):
            writer.writerow(["" if np.isnan(v) else f"{v:.6g}" for v in row])


# ---------------------------------------------------------------------------------------------
# fit.md
# ---------------------------------------------------------------------------------------------


def _g(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.4g}"


def _ci(e: Estimate) -> str:
    return "n/a (no bootstrap)" if e.ci95 is None else f"{_g(e.ci95[0])} to {_g(e.ci95[1])}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _diag_line(d) -> str:
    return (f"Optimiser: objective {d.objective:.6g}, max |gradient| {d.grad_norm:.2g}, {d.n_iter} iterations, "
            f"{d.n_starts_at_best} of {d.n_starts} starts reached the best; RMS log residual {d.rms_residual:.3g}.")


def _md_data(result: FitReport) -> list[str]:
    s = result.points.summary()
    rows = [[k, _g(s[k]["min"]), _g(s[k]["max"])] for k in ("N", "D", "C", "L")]
    return [f"{s['n_points']} points, {s['distinct_N']} distinct sizes.", ""] + _table(["", "min", "max"], rows)


def _md_approach3(fit: Approach3Fit, title: str) -> list[str]:
    d = fit.diagnostics
    if not d.converged:
        return [f"## {title}: {NOT_CONVERGED}", "", d.message + ".", "", _diag_line(d)]
    lines = [f"## {title}", "", "L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022, approach 3).", ""]
    rows = [[k, _g(v.value), _ci(v)] for k, v in {**fit.params, **fit.exponents}.items()]
    lines += _table(["parameter", "value", "95% CI"], rows)
    lines += ["", "a = beta/(alpha+beta) is the exponent of N_opt(C); b = alpha/(alpha+beta) that of D_opt(C).",
              "", _diag_line(d)]
    lines += [f"**Warning:** {w}." for w in d.warnings]
    if fit.bootstrap is not None:
        b = fit.bootstrap
        lines.append(f"Bootstrap: {int(b.converged.sum())} of {b.n_resamples} resamples converged (seed {b.seed}).")
    return lines


def _md_frontier(result: FitReport) -> list[str]:
    f = _decade_frontier(result)
    if f is None:
        return []
    rows = [[_g(c), _g(n), _g(d), _g(r), _g(l), f"{_g(lo)} to {_g(hi)}"]
            for c, n, d, r, l, lo, hi in zip(f.C, f.N_opt, f.D_opt, f.tokens_per_param, f.loss, f.loss_lo, f.loss_hi)]
    return ["## Compute-optimal frontier (approach 3, C = 6ND)", ""] + _table(
        ["C (FLOPs)", "N_opt", "D_opt", "D/N", "loss", "loss 95% CI"], rows)


def _md_predictions(result: FitReport) -> list[str]:
    if not result.predictions:
        return []
    if not result.approach3.diagnostics.converged:
        return ["## Predictions", "", f"{NOT_CONVERGED}: no predictions."]
    rows = [[_g(p.N.value), _g(p.D.value), _g(p.C), "yes" if p.compute_optimal else "no", _g(p.loss.value),
             _ci(p.loss), p.warning or "inside the data"] for p in result.predictions]
    return ["## Predictions", ""] + _table(["N", "D", "C", "compute-optimal", "loss", "95% CI", "extrapolation"], rows)


def _held_out_title(k: int) -> str:
    return "the largest-compute point" if k == 1 else f"the {k} largest-compute points"


def _span(ci) -> str:
    return "n/a (no bootstrap)" if ci is None else f"{_g(ci[0])} to {_g(ci[1])}"


YES_NO = {True: "yes", False: "no", None: "n/a"}


def _md_held_out(result: FitReport) -> list[str]:
    h = result.held_out
    if h is None:
        return []
    title = f"## Held-out validation (fit without {_held_out_title(h.k)})"
    if not h.fit.diagnostics.converged:
        return [title, "", f"{NOT_CONVERGED}: {h.fit.diagnostics.message}."]
    rows = [[_g(r.N), _g(r.D), _g(r.C), _g(r.actual), _g(r.predicted.value), f"{100 * r.rel_error:+.2f}%",
             _ci(r.predicted), YES_NO[r.inside_ci], _span(r.run_ci95), YES_NO[r.inside_run_ci]] for r in h.rows]

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.0f}%"

    return [title, ""] + _table(["N", "D", "C", "actual", "predicted", "rel. error", "curve 95% CI", "inside",
                                 "one-run 95% CI", "inside"], rows) + [
        "", f"Mean |relative error| {100 * h.mean_abs_rel_error:.2f}%. The curve's interval (bootstrap over points) "
        f"holds the actual loss for {pct(h.coverage)} of the held-out points; it leaves out how single runs "
        f"scatter around the curve (RMS log residual {h.fit.diagnostics.rms_residual:.2g}). The one-run interval adds "
        f"that scatter (residual bootstrap) and holds {pct(h.run_coverage)} of them."]


def _md_floor(result: FitReport) -> list[str]:
    f = result.entropy_floor
    if f is None:
        return []
    if not result.approach3.diagnostics.converged:
        return ["## Entropy floor", "", f"{NOT_CONVERGED}: no fitted E to compare."]
    inside = {True: "inside", False: "outside", None: "n/a"}[f.floor_inside_ci]
    return ["## Entropy floor", "", f"Known floor {_g(f.floor)}; fitted E {_g(f.fitted.value)} "
            f"(95% CI {_ci(f.fitted)}); E - floor = {f.difference:+.4g}; the floor is {inside} the interval."]


def _md_frontier_fit(fit: FrontierFit) -> list[str]:
    title = {"approach1": "Chinchilla approach 1 (training-curve envelope)",
             "approach2": "Chinchilla approach 2 (iso-FLOP parabolas)"}[fit.method]
    rows = [["N_opt = k C^a", _g(fit.n_opt.k.value), _ci(fit.n_opt.k), _g(fit.n_opt.exponent.value),
             _ci(fit.n_opt.exponent)],
            ["D_opt = k C^b", _g(fit.d_opt.k.value), _ci(fit.d_opt.k), _g(fit.d_opt.exponent.value),
             _ci(fit.d_opt.exponent)]]
    lines = [f"## {title}", ""] + _table(["law", "k", "k 95% CI", "exponent", "exponent 95% CI"], rows)
    lines += ["", f"{len(fit.C)} optima from C = {_g(fit.C.min())} to {_g(fit.C.max())}."]
    return lines + [f"- {n}" for n in fit.notes]


def _md_single(fits: dict[str, SingleLawFit]) -> list[str]:
    if not fits:
        return []
    lines = ["## Single-variable laws L(x) = E + A / x^alpha (Kaplan et al. 2020 form, Huber on log L)", ""]
    rows = []
    for var, fit in fits.items():
        if not fit.diagnostics.converged:
            rows.append([var, NOT_CONVERGED, "", "", "", ""])
            continue
        p = fit.params
        rows.append([var] + [f"{_g(p[k].value)} ({_ci(p[k])})" for k in ("E", "A", "alpha")]
                    + [str(len(fit.x)), f"{fit.diagnostics.rms_residual:.3g}"])
    lines += _table(["x", "E (95% CI)", "A (95% CI)", "alpha (95% CI)", "points used", "RMS log resid."], rows)
    warned = [f"- L({var}): {w}." for var, fit in fits.items() for w in fit.diagnostics.warnings]
    return lines + ([""] + warned if warned else [])


def fit_markdown(result: FitReport) -> str:
    """fit.md: the same results as fit.json, as tables for people."""
    sections = [["# Scaling-law fit", ""] + _md_data(result),
                _md_approach3(result.approach3, "Chinchilla approach 3"),
                _md_frontier(result), _md_predictions(result), _md_held_out(result), _md_floor(result)]
    sections += [_md_frontier_fit(f) for f in (result.approach1, result.approach2) if f is not None]
    sections.append(_md_single(result.single))
    if result.skipped:
        sections.append(["## Not run on these data", ""] + [f"- {k}: {v}" for k, v in result.skipped.items()])
    return "\n\n".join("\n".join(s) for s in sections if s) + "\n"


# ---------------------------------------------------------------------------------------------
# The terminal summary
# ---------------------------------------------------------------------------------------------


def _rows(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def summary_text(result: FitReport) -> str:
    """A few lines for the terminal: approach 3 with intervals, the held-out check, the entropy
    floor, the other methods' exponents, the predictions. Numbers of a fit that did not converge
    are never shown."""
    a3 = result.approach3
    d = a3.diagnostics
    if not d.converged:
        return f"Chinchilla approach 3: {d.message}.\n" + _diag_line(d)
    boot = "no bootstrap" if a3.bootstrap is None else \
        f"{int(a3.bootstrap.converged.sum())} of {a3.bootstrap.n_resamples} bootstrap resamples converged"
    lines = [f"Chinchilla approach 3: L(N, D) = E + A / N^alpha + B / D^beta (converged; {boot})"]
    names = {"a": "a (N_opt ~ C^a)", "b": "b (D_opt ~ C^b)"}
    lines += _rows([["", "value", "95% CI"]] + [[names.get(k, k), _g(v.value), _ci(v)]
                                                for k, v in {**a3.params, **a3.exponents}.items()])
    lines.append(f"  RMS log residual {d.rms_residual:.3g} over {len(d.residuals)} points")
    lines += [f"  warning: {w}" for w in d.warnings]
    lines += _summary_held_out(result) + _summary_floor(result) + _summary_others(result)
    for p in result.predictions:
        at = (f"C={_g(p.C)} at its compute-optimal N={_g(p.N.value)} (95% CI {_ci(p.N)}), D={_g(p.D.value)}"
              if p.compute_optimal else f"N={_g(p.N.value)}, D={_g(p.D.value)} (C={_g(p.C)})")
        lines.append(f"prediction for {at}: loss {_g(p.loss.value)} (95% CI {_ci(p.loss)}); "
                     f"{p.warning or 'inside the data'}")
    lines += [f"not run: {k}: {v}" for k, v in result.skipped.items()]
    return "\n".join(lines)


def _summary_held_out(result: FitReport) -> list[str]:
    h = result.held_out
    if h is None:
        return []
    what = _held_out_title(h.k)
    if not h.fit.diagnostics.converged:
        return [f"held-out refit (without {what}): {h.fit.diagnostics.message}"]
    inside = {True: "inside", False: "OUTSIDE", None: "-"}
    lines = [f"held-out: refit without {what}, then predicted {'it' if h.k == 1 else 'them'}"]
    lines += _rows([["N", "D", "actual", "predicted", "error", "curve 95% CI", "", "one-run 95% CI", ""]] + [
        [_g(r.N), _g(r.D), _g(r.actual), _g(r.predicted.value), f"{100 * r.rel_error:+.2f}%", _ci(r.predicted),
         inside[r.inside_ci], _span(r.run_ci95), inside[r.inside_run_ci]] for r in h.rows])
    return lines


def _summary_floor(result: FitReport) -> list[str]:
    f = result.entropy_floor
    if f is None:
        return []
    where = {True: "inside", False: "outside", None: "no interval for"}[f.floor_inside_ci]
    return [f"entropy floor {_g(f.floor)}: fitted E {_g(f.fitted.value)} (95% CI {_ci(f.fitted)}), "
            f"E - floor = {f.difference:+.4g}; the floor is {where} the interval"]


def _summary_others(result: FitReport) -> list[str]:
    lines = []
    for fit in (result.approach1, result.approach2):
        if fit is not None:
            lines.append(f"{fit.method}: N_opt ~ C^{fit.n_opt.exponent.value:.3f} (95% CI {_ci(fit.n_opt.exponent)}), "
                         f"D_opt ~ C^{fit.d_opt.exponent.value:.3f} (95% CI {_ci(fit.d_opt.exponent)}), "
                         f"from {len(fit.C)} optima")
    for var, fit in result.single.items():
        if not fit.diagnostics.converged:
            lines.append(f"L({var}): {fit.diagnostics.message}")
            continue
        p = fit.params
        lines.append(f"L({var}) = E + A / {var}^alpha: alpha {_g(p['alpha'].value)} (95% CI {_ci(p['alpha'])}), "
                     f"E {_g(p['E'].value)} (95% CI {_ci(p['E'])}), {len(fit.x)} points"
                     + ("; E at its lower bound" if fit.diagnostics.warnings else ""))
    return lines


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def write_plots(result: FitReport, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    plots = [("fit_curves.png", _plot_curves), ("frontier.png", _plot_frontier), ("residuals.png", _plot_residuals)]
    if result.approach2 is not None:
        plots.append(("isoflop.png", _plot_isoflop))
    for name, draw in plots:
        fig = draw(result, plt)
        fig.savefig(out / name, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(out / name)
    return written


def _stamp_not_converged(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}\n{NOT_CONVERGED}", transform=ax.transAxes, ha="center", va="center",
            fontsize=16, color="crimson", weight="bold")


def _grid(ax) -> None:
    """Major grid; minor log ticks only on an x axis of at most two decades, where they are the only
    labels between powers of ten (over many decades they make each PNG take seconds to lay out)."""
    lo, hi = ax.get_xlim()
    keep_x = ax.get_xscale() == "log" and lo > 0 and hi / lo <= 100
    ax.minorticks_off()
    if keep_x:
        from matplotlib.ticker import LogLocator

        ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    ax.grid(True, alpha=0.25)


def _plain_y(ax) -> None:
    """Loss ticks as plain numbers: a log axis over less than a decade otherwise reads '2 x 10^0'.
    Over more than a decade matplotlib's own ticks (10^k) read better, and these would crowd out."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    lo, hi = ax.get_ylim()
    if lo <= 0 or hi / lo > 10:
        return
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _size_colors(plt, N: np.ndarray):
    norm = plt.Normalize(np.log10(N.min()), np.log10(N.max()))
    return norm, plt.get_cmap("viridis")


def _plot_curves(result: FitReport, plt):
    """Loss against C with approach-3 curves at a few sizes, and each single-variable law."""
    p, a3 = result.points, result.approach3
    panels = ["C"] + [v for v in ("N", "N_non_embedding", "D") if v in result.single]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    norm, cmap = _size_colors(plt, p.N)
    for ax, var in zip(axes[0], panels):
        sc = ax.scatter(p.variable(var), p.L, c=np.log10(p.N), cmap=cmap, norm=norm, s=12, alpha=0.8)
        ax.set(xscale="log", yscale="log", xlabel={"C": "training FLOPs C", "N": "parameters N", "D": "tokens D",
                                                    "N_non_embedding": "non-embedding parameters"}[var], ylabel="loss")
        single = result.single.get(var)
        if single is not None and single.diagnostics.converged:
            x = np.geomspace(single.x.min(), single.x.max(), 100)
            ax.plot(x, single.law.loss(x), "k--", lw=1.5, label=f"E + A/x^α, α={single.law.alpha:.3g}")
            ax.set_title(f"L({var})")
            ax.scatter(single.x, single.L, facecolors="none", edgecolors="k", s=30, lw=0.8, label="points fitted")
        _grid(ax)
        _plain_y(ax)
    ax = axes[0][0]
    if a3.diagnostics.converged:
        for N in np.quantile(p.N, [0.05, 0.3, 0.55, 0.8, 0.98]):
            C = np.geomspace(max(p.C.min(), 6 * N * p.D.min()), min(p.C.max(), 6 * N * p.D.max()), 100)
            ax.plot(C, a3.law.loss(N, C / (6 * N)), color=cmap(norm(np.log10(N))), lw=1.2)
        if result.frontier is not None:
            f = result.frontier
            inside = f.C <= p.C.max()
            ax.plot(f.C[inside], f.loss[inside], color="crimson", lw=2, label="approach 3 at N_opt(C)")
        ax.plot([], [], color="grey", lw=1.2, label="approach 3 at fixed N (colour = size)")
    else:
        _stamp_not_converged(ax, "approach 3")
    ax.set_title("loss vs compute")
    for a in axes[0]:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8, loc="upper right")
    fig.colorbar(sc, ax=axes[0].tolist(), label="log10 N")
    return fig


def _plot_frontier(result: FitReport, plt):
    """N_opt(C), D_opt(C) and D/N with 95% bands (approach 3), beside approaches 1 and 2."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    a3, f = result.approach3, result.frontier
    if not a3.diagnostics.converged or f is None:
        _stamp_not_converged(ax, "approach 3")
        return fig
    for y, lo, hi, color, name in ((f.N_opt, f.N_lo, f.N_hi, "tab:blue", "N_opt"),
                                   (f.D_opt, f.D_lo, f.D_hi, "tab:orange", "D_opt")):
        ax.plot(f.C, y, color=color, lw=2, label=f"{name} (approach 3)")
        if np.isfinite(lo).any():
            ax.fill_between(f.C, lo, hi, color=color, alpha=0.2, label=f"{name} 95% CI")
    # approach 1 gives an optimum per grid FLOP value (many, small marks); approach 2 one per budget
    styles = {"approach1": {"marker": "s", "s": 6, "alpha": 0.5},
              "approach2": {"marker": "^", "s": 40, "edgecolors": "k"}}
    for fit in (result.approach1, result.approach2):
        if fit is None:
            continue
        style = styles[fit.method]
        ax.scatter(fit.C, fit.N, color="tab:blue", label=f"N_opt ({fit.method})", **style)
        ax.scatter(fit.C, fit.D, color="tab:orange", label=f"D_opt ({fit.method})", **style)
        ax.plot(f.C, fit.n_opt(f.C), ls=":", color="tab:blue", lw=1)
        ax.plot(f.C, fit.d_opt(f.C), ls=":", color="tab:orange", lw=1)
    ax.axvspan(result.points.C.min(), result.points.C.max(), color="grey", alpha=0.1, label="C range of the data")
    ax.set(xscale="log", yscale="log", xlabel="training FLOPs C", ylabel="parameters / tokens",
           title=f"compute-optimal allocation: a={a3.law.a:.3f}, b={a3.law.b:.3f}")
    _grid(ax)
    ax.legend(fontsize=7)
    ratio_lo, ratio_hi = f.C / 6 / f.N_hi ** 2, f.C / 6 / f.N_lo ** 2
    ax2.plot(f.C, f.tokens_per_param, color="tab:green", lw=2, label="D_opt / N_opt (approach 3)")
    if np.isfinite(ratio_lo).any():
        ax2.fill_between(f.C, ratio_lo, ratio_hi, color="tab:green", alpha=0.2, label="95% CI")
    ax2.axvspan(result.points.C.min(), result.points.C.max(), color="grey", alpha=0.1)
    ax2.set(xscale="log", yscale="log", xlabel="training FLOPs C", ylabel="tokens per parameter",
            title="tokens per parameter at the optimum")
    _grid(ax2)
    _plain_y(ax2)
    ax2.legend(fontsize=8)
    return fig


def _plot_residuals(result: FitReport, plt):
    """log L_hat - log L of approach 3 against C and against N."""
    p, d = result.points, result.approach3.diagnostics
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    norm, cmap = _size_colors(plt, p.N)
    for ax, x, label in ((axes[0], p.C, "training FLOPs C"), (axes[1], p.N, "parameters N")):
        sc = ax.scatter(x, d.residuals, c=np.log10(p.N), cmap=cmap, norm=norm, s=12)
        ax.axhline(0, color="k", lw=1)
        ax.set(xscale="log", xlabel=label, ylabel="log predicted − log actual loss")
        _grid(ax)
    axes[0].set_title(f"approach 3 residuals (RMS {d.rms_residual:.3g})")
    fig.colorbar(sc, ax=axes.tolist(), label="log10 N")
    if not d.converged:
        _stamp_not_converged(axes[0], "approach 3")
    return fig


def _plot_isoflop(result: FitReport, plt):
    """Approach 2: each budget's loss against N with its parabola, then N_opt against C."""
    fit = result.approach2
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    cmap = plt.get_cmap("plasma")
    Cs = np.log10([b.C for b in fit.budgets])
    span = max(Cs.max() - Cs.min(), 1e-9)
    for b in fit.budgets:
        color = cmap(0.85 * (np.log10(b.C) - Cs.min()) / span)
        ax.scatter(b.N, b.L, color=color, s=16, label=f"C={b.C:.2g}")
        if b.coef is not None and b.coef[2] > 0:
            x = np.linspace(np.log(b.N).min(), np.log(b.N).max(), 100) - b.x_mid
            ax.plot(np.exp(x + b.x_mid), b.coef[0] + b.coef[1] * x + b.coef[2] * x * x, color=color, lw=1.2)
            ax.plot(b.N_opt, b.L_opt, marker="*", color=color, markeredgecolor="k", ms=12)
    ax.set(xscale="log", xlabel="parameters N", ylabel="loss", title="iso-FLOP parabolas (★ = minimum)")
    _grid(ax)
    ax.legend(fontsize=7, ncol=2)
    C = np.geomspace(fit.C.min(), fit.C.max(), 50)
    ax2.scatter(fit.C, fit.N, color="k", label="N_opt per budget")
    ax2.plot(C, fit.n_opt(C), color="k", label=f"k C^a, a={fit.n_opt.exponent.value:.3f}")
    if result.approach3.diagnostics.converged:
        ax2.plot(C, result.approach3.law.n_opt(C), color="crimson", ls="--",
                 label=f"approach 3, a={result.approach3.law.a:.3f}")
    ax2.set(xscale="log", yscale="log", xlabel="training FLOPs C", ylabel="N_opt", title="approach 2 frontier")
    _grid(ax2)
    ax2.legend(fontsize=8)
    return fig
