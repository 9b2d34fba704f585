"""Write a FitReport (ablate.scaling.analysis.fit_all) to a folder: fit.json, fit.md, predictions.csv and
PNG plots (report.py renders fit.md and the terminal summary, plots.py the pictures; this module writes).

Every law, allocation and prediction carries its verdict (verdict.py): `verdict` and `reasons` beside
its numbers. A prediction or allocation that is `not_determined` has no number (null; empty in the CSV),
and says which runs would determine it. A fit whose optimiser did not converge is written as
"DID NOT CONVERGE" with its diagnostics, never as numbers that look usable.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np

from ablate.files import write_files
from ablate.scaling.analysis import APPROACH3, FitReport
from ablate.scaling.backtest import Backtest
from ablate.scaling.fitting.bootstrap import Bootstrap, Estimate
from ablate.scaling.laws.chinchilla import Approach3Fit, law_text
from ablate.scaling.laws.frontier import Frontier, FrontierFit
from ablate.scaling.laws.single import SingleLawFit
from ablate.scaling.reports.plots import render_plots
from ablate.scaling.reports.report import NOT_CONVERGED, decade_frontier, fit_markdown
from ablate.scaling.verdict import NOT_DETERMINED, Verdict

SCHEMA = "ablate.fit/2"
CSV_COLUMNS = ("C", "N_opt", "D_opt", "tokens_per_param", "loss", "lo", "hi", "N_opt_lo", "N_opt_hi", "verdict")
PLOT_FILES = ("fit_curves.png", "frontier.png", "residuals.png", "isoflop.png")


def export_fit(result: FitReport, out_dir: str | Path) -> list[Path]:
    """Write fit.json, fit.md, predictions.csv and the plots into out_dir; return the paths written.

    Everything is rendered in memory first and then written as one set (files.write_files), so a
    failure while rendering or writing (a full disk) leaves the previous export whole; a plot the
    previous export had and this one has not (isoflop.png) is then removed rather than left beside
    numbers it does not belong to."""
    out = Path(out_dir)
    rendered = {
        "fit.json": (json.dumps(fit_dict(result), indent=2) + "\n").encode(),
        "fit.md": fit_markdown(result).encode(),
        "predictions.csv": predictions_csv(result).encode(),
        **render_plots(result),
    }
    written = write_files({out / name: data for name, data in rendered.items()})
    for name in set(PLOT_FILES) - set(rendered):
        (out / name).unlink(missing_ok=True)
    return written


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


def status(converged: bool) -> str:
    return "converged" if converged else NOT_CONVERGED


def _estimates(d: dict[str, Estimate]) -> dict:
    return {k: v.to_dict() for k, v in d.items()}


def _approach3_dict(result: FitReport) -> dict:
    fit, verdict = result.approach3, result.verdicts[APPROACH3]
    if fit is None:
        return {"status": "not fitted", **verdict.to_dict(), "params": None}
    ok = fit.converged
    opts = result.options
    doc = {
        "status": status(ok),
        **verdict.to_dict(),
        "law": law_text(fit.law, fit.tied),
        "method": f"{fit.law.SOURCE}: Huber(delta={fit.delta:g}) on log L, best of {fit.diagnostics.n_starts} starts",
        "variant": {"params": opts.params, "tie_exponents": fit.tied, "form": fit.form},
        "bounds": {
            "E": [fit.floor, fit.upper],
            "E_lower": "the data's entropy floor" if fit.floor > 0 else "0 (no floor known)",
            "E_upper": "the lowest loss in the data",
            "exponents": "> 0",
        },
        "params": _estimates(fit.params) if ok else None,
        "exponents": _estimates(fit.exponents) if ok else None,
        "frontier": {"formula": fit.law.FRONTIER, "G": fit.law.G} if ok else None,
        "calibration": None if result.predictor is None else result.predictor.calibration.to_dict(),
        "run_noise": result.noise.to_dict(),
        "thresholds": opts.thresholds.to_dict(),
        "diagnostics": fit.diagnostics.to_dict(),
        "bootstrap": None if fit.bootstrap is None else _with_samples(fit, fit.bootstrap),
        # the runs the verdict names as breaking the law, and the law refitted without them (offlaw.py)
        "off_law_runs": [r.to_dict() for r in result.off_law],
        "without_outliers": None if result.without_off_law is None else result.without_off_law.to_dict(),
        # the law's other form fitted to the same runs when they break this one (otherform.py)
        "other_form": None if result.other_form is None else result.other_form.to_dict(),
    }
    if not ok:
        doc["last_iterate"] = dict(zip(fit.law.NAMES, fit.law.as_array().tolist(), strict=True))
    return doc


def _with_samples(fit: Approach3Fit, boot: Bootstrap) -> dict:
    """The converged resamples as rows in NAMES order: the planner (fitfile.py) takes the percentiles
    of L(N, D) over them, the joint interval (A and alpha, B and beta are correlated)."""
    return {
        **boot.to_dict(),
        "sample_columns": list(fit.law.NAMES),
        "samples": [[float(f"{v:.6g}") for v in row] for row in boot.usable()],
    }


def _single_dict(fit: SingleLawFit, verdict: Verdict) -> dict:
    ok = fit.diagnostics.converged
    used = (
        "compute envelope (best loss at or below each C)"
        if fit.variable == "C"
        else f"best loss per distinct {fit.variable}"
    )
    doc = {
        "status": status(ok),
        **verdict.to_dict(),
        "law": f"L({fit.variable}) = E + A / {fit.variable}^alpha",
        "points_used": used,
        "n_points_used": len(fit.x),
        "bounds": {"E": [fit.floor, fit.upper]},
        "params": _estimates(fit.params) if ok else None,
        "diagnostics": fit.diagnostics.to_dict(),
        "bootstrap": None if fit.bootstrap is None else fit.bootstrap.to_dict(),
    }
    if not ok:
        doc["last_iterate"] = {"E": fit.law.E, "A": fit.law.A, "alpha": fit.law.alpha}
    return doc


def _frontier_fit_dict(fit: FrontierFit, verdict: Verdict) -> dict:
    doc = {
        "status": "converged",
        **verdict.to_dict(),
        "method": f"Hoffmann et al. 2022 {fit.method}: least squares on log N_opt, log D_opt",
        "N_opt": {"law": "k C^a", "k": fit.n_opt.k.to_dict(), "a": fit.n_opt.exponent.to_dict()},
        "D_opt": {"law": "k C^b", "k": fit.d_opt.k.to_dict(), "b": fit.d_opt.exponent.to_dict()},
        "n_boot": fit.n_boot,
        "notes": list(fit.notes),
        "optima": [
            {"C": c, "N_opt": n, "D_opt": d, "loss": loss}
            for c, n, d, loss in zip(fit.C, fit.N, fit.D, fit.L, strict=True)
        ],
    }
    if fit.budgets:
        doc["budgets"] = [
            {
                "C": b.C,
                "n_points": b.n_points,
                "n_used": int(b.used.sum()),
                "N_opt": None if b.N_opt_ci is None else b.N_opt_ci.to_dict(),
                "loss_at_min": b.L_opt,
                "parabola_in_logN": None
                if b.coef is None
                else {"c0": b.coef[0], "c1": b.coef[1], "c2": b.coef[2], "logN_center": b.x_mid},
                "note": b.note,
            }
            for b in fit.budgets
        ]
    return doc


def frontier_rows(f: Frontier) -> list[dict]:
    """One dict per C; not_determined rows carry no numbers but C and the verdict."""

    def est(v, lo, hi, i):
        return Estimate(float(v[i]), None if np.isnan(lo[i]) else (float(lo[i]), float(hi[i]))).to_dict()

    rows = []
    for i, c in enumerate(f.C):
        row = {"C": float(c), "verdict": f.levels[i]}
        if f.levels[i] != NOT_DETERMINED:
            row.update(
                N_opt=est(f.N_opt, f.N_lo, f.N_hi, i),
                D_opt=est(f.D_opt, f.D_lo, f.D_hi, i),
                tokens_per_param=float(f.tokens_per_param[i]),
                loss=est(f.loss, f.loss_lo, f.loss_hi, i),
            )
        rows.append(row)
    return rows


def backtest_dict(h: Backtest | None) -> dict | None:
    return None if h is None else h.to_dict()


def fit_dict(result: FitReport) -> dict:
    """The content of fit.json."""
    p = result.points
    data = {
        **p.summary(),
        "entropy_floor": p.entropy_floor,
        "flops_per_second": p.flops_per_second,
        "params": result.options.params,
        "tokenizer": p.tokenizer,
    }
    doc: dict = {"schema": SCHEMA, "data": data, APPROACH3: _approach3_dict(result)}
    decades = decade_frontier(result)
    if decades is not None:
        doc[APPROACH3]["frontier"]["at"] = frontier_rows(decades)
    for name, fit in (("chinchilla_approach1", result.approach1), ("chinchilla_approach2", result.approach2)):
        if fit is not None:
            doc[name] = _frontier_fit_dict(fit, result.verdicts[name])
    for var, single in result.single.items():
        doc[f"kaplan_{var}"] = _single_dict(single, result.verdicts[f"kaplan_{var}"])
    for name in result.skipped:
        if name != APPROACH3 and name in result.verdicts:
            doc[name] = {"status": "not fitted", **result.verdicts[name].to_dict()}
    doc["predictions"] = [pr.to_dict() for pr in result.predictions]
    doc["held_out"] = backtest_dict(result.held_out)
    floor = result.entropy_floor
    doc["entropy_floor"] = (
        None
        if floor is None
        else {
            "floor": floor.floor,
            "fitted_E": floor.fitted.to_dict(),
            "difference": floor.difference,
            "floor_inside_ci95": floor.floor_inside_ci,
        }
    )
    doc["skipped"] = dict(result.skipped)
    return _clean(doc)


# ---------------------------------------------------------------------------------------------
# predictions.csv
# ---------------------------------------------------------------------------------------------


def predictions_csv(result: FitReport) -> str:
    """The approach-3 frontier over the report's compute grid, one row per C; a not_determined row
    has its C and verdict only."""
    fh = io.StringIO()
    if not result.converged:
        why = result.verdicts[APPROACH3].because() or NOT_CONVERGED
        fh.write(f"# chinchilla_approach3 gives no predictions: {why}\n")
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    f = result.frontier
    if f is not None and result.converged:
        for i, c in enumerate(f.C):
            if f.levels[i] == NOT_DETERMINED:
                writer.writerow([f"{c:.6g}"] + [""] * (len(CSV_COLUMNS) - 2) + [f.levels[i]])
                continue
            loss = (f.loss[i], f.loss_lo[i], f.loss_hi[i])
            row = (c, f.N_opt[i], f.D_opt[i], f.tokens_per_param[i], *loss, f.N_lo[i], f.N_hi[i])
            writer.writerow(["" if np.isnan(v) else f"{v:.6g}" for v in row] + [f.levels[i]])
    return fh.getvalue()
