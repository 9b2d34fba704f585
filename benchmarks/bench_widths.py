"""How far can a ladder's intervals narrow and still cover? Issue 40's third target asks, on every
public ladder and at every distance band, for coverage of at least 90% and a median half-width at most
3 times the median absolute error. A calibrated normal 95% interval about an unbiased prediction is
1.96 / 0.674 = 2.9 times its median absolute error, so the target asks each ladder's intervals to be
sized to that ladder's own errors. This benchmark measures what stands in the way, on the default
backtest (`ablate backtest`: 5 cuts, 200 resamples per fit) of the six public ladders:

- per ladder and band, the oracle factor t90: the one factor on every interval's two sides (about its
  prediction) that just holds 90% of the band's held-out runs, known from their outcomes; and the
  half-width over the error at t90, the sharpest any rescaling of these intervals can be there;
- per ladder, t90 over all its runs 0.5 to 2 decades past their cut: how much a ladder's intervals
  would have to shrink or grow, which one rule for every ladder cannot do;
- per cut, the error per decade its held-out runs show against the half-width per decade its interval
  gave, and whether anything the cut's fit sees (its law term kappa, its run scatter, its runs, its
  own interval, how far the joint form's fit below the same cut predicts its runs from the default's)
  ranks the cuts by that ratio (Spearman's rho over every cut of every ladder).

Writes benchmarks/results/widths.json and prints its tables (docs/fitting.md quotes them).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from scipy import stats

from ablate.scaling.backtest import Backtest, HeldOutRun, backtest
from ablate.scaling.predict import FitOptions
from bench_backtest import LADDER_BANDS, N_BOOT, PUBLIC, ladders

ROOT = Path(__file__).resolve().parents[1]
COVER = 0.9  # issue 40's coverage target per band
SHARP = 3.0  # issue 40's median half-width over median absolute error
MIN_RUNS = 5  # a band with fewer held-out runs is reported, not judged (backtest.MIN_BIN_RUNS)
FAR = (0.5, 2.0)  # decades past the cut over which a cut's own error scale is read


def factor_to_cover(rows: list[HeldOutRun]) -> np.ndarray:
    """Per run, the factor on its interval's side (about the prediction, in log loss) that just
    reaches its outcome: <= 1 inside the interval as stated."""
    e = np.log([r.actual / r.predicted for r in rows])
    up = np.log([r.hi / r.predicted for r in rows])
    down = np.log([r.predicted / r.lo for r in rows])
    return np.where(e >= 0, e / up, -e / down)


def rescaled_half_width(rows: list[HeldOutRun], t: float) -> np.ndarray:
    """Each run's half-width over its prediction with both sides scaled by t in log loss."""
    p = np.array([r.predicted for r in rows])
    up = np.log(np.array([r.hi for r in rows]) / p)
    down = np.log(p / np.array([r.lo for r in rows]))
    return (np.exp(t * up) - np.exp(-t * down)) / 2


def oracle(rows: list[HeldOutRun]) -> dict:
    """Coverage and sharpness as stated, and at the smallest common factor t90 holding 90% of rows."""
    need = np.sort(factor_to_cover(rows))
    t90 = float(need[int(np.ceil(COVER * len(rows))) - 1])
    abs_err = np.median(np.abs([r.rel_error for r in rows]))
    return {
        "n": len(rows),
        "cuts": len({r.cut for r in rows}),
        "coverage": float(np.mean(need <= 1.0)),
        "half_width_over_error": float(np.median([r.half_width for r in rows]) / abs_err),
        "t90": t90,
        "half_width_over_error_at_t90": float(np.median(rescaled_half_width(rows, t90)) / abs_err),
    }


def other_form(bt: Backtest) -> dict[tuple[float, float, float], float]:
    """A backtest's predictions keyed by the cut's largest fitted compute and the run's N and D."""
    return {(bt.cuts[r.cut].C_cut, r.N, r.D): r.predicted for r in bt.runs}


def cut_scales(bt: Backtest, joint: dict[tuple[float, float, float], float]) -> list[dict]:
    """Per usable cut, its held-out runs FAR past it: the RMS log error per decade, the interval's
    median half-width per decade, and what the cut's fit saw, with how far the joint form's fit
    below the same cut (`joint`, from other_form) predicts each run from this one, per decade."""
    out = []
    for k, cut in enumerate(bt.cuts):
        rows = [r for r in bt.runs if r.cut == k and FAR[0] < r.decades <= FAR[1]]
        if len(rows) < 3 or cut.kappa is None:
            continue
        d = np.array([r.decades for r in rows])
        error = float(np.sqrt(np.mean((np.log([r.actual / r.predicted for r in rows]) / d) ** 2)))
        width = float(np.median(np.log([r.hi / r.lo for r in rows]) / 2 / d))
        apart = [
            abs(np.log(r.predicted / joint[key])) / r.decades for r in rows if (key := (cut.C_cut, r.N, r.D)) in joint
        ]
        out.append(
            {
                "cut": k,
                "n_fit": cut.n_fit,
                "runs": len(rows),
                "error_per_decade": error,
                "half_width_per_decade": width,
                "error_over_width": error / width,
                "kappa": cut.kappa,
                "run_sigma": cut.run_sigma,
                "forms_apart_per_decade": float(np.median(apart)) if apart else None,
            }
        )
    return out


def ranks(cuts: list[dict]) -> dict:
    """Spearman's rho (and its two-sided p) of each statistic the fit sees against error_over_width."""
    out = {}
    for key in ("kappa", "run_sigma", "n_fit", "half_width_per_decade", "forms_apart_per_decade"):
        seen = [c for c in cuts if c[key] is not None]
        rho, p = stats.spearmanr([c[key] for c in seen], [c["error_over_width"] for c in seen])
        out[key] = {"rho": float(rho), "p": float(p)}
    return out


def main() -> None:
    results, every_cut = {}, []
    for name, points in ladders().items():
        if name not in PUBLIC:
            continue
        cpu = time.process_time()
        bt = backtest(points, FitOptions(n_boot=N_BOOT))
        bands = {}
        for lo, hi in LADDER_BANDS:
            rows = [r for r in bt.runs if lo < r.decades <= hi]
            bands[f"{lo:g}-{hi:g}"] = oracle(rows) if len(rows) >= MIN_RUNS else None
        far = [r for r in bt.runs if FAR[0] < r.decades <= FAR[1]]
        cuts = cut_scales(bt, other_form(backtest(points, FitOptions(n_boot=N_BOOT, form="joint"))))
        every_cut += cuts
        results[name] = {
            "cpu_s": round(time.process_time() - cpu, 1),
            "bands": bands,
            "far": oracle(far),
            "cuts": cuts,
        }
        print(name, table_row(bands), f"| all 0.5-2: t90 {results[name]['far']['t90']:.2f}", flush=True)
    judged = [b for r in results.values() for b in r["bands"].values() if b is not None]
    summary = {
        "bands_judged": len(judged),
        "bands_meeting_both_as_stated": sum(
            b["coverage"] >= COVER and b["half_width_over_error"] <= SHARP for b in judged
        ),
        "bands_over_sharpness_at_t90": sum(b["half_width_over_error_at_t90"] > SHARP for b in judged),
        "t90_per_ladder": {n: r["far"]["t90"] for n, r in results.items()},
        "cut_ranks": ranks(every_cut),
        "cuts": len(every_cut),
    }
    out = {
        "what": "per public ladder, the default backtest's intervals against issue 40's width target: coverage "
        "and half-width over error per band as stated, and at the oracle factor t90 that just holds 90% of the "
        "band's runs; per cut, its error per decade over its interval's half-width per decade and what ranks it",
        "n_boot": N_BOOT,
        "targets": {"coverage": COVER, "half_width_over_error": SHARP},
        "summary": summary,
        "results": results,
    }
    (ROOT / "benchmarks" / "results" / "widths.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(summary, indent=1))


def table_row(bands: dict) -> str:
    return " | ".join(
        "-"
        if b is None
        else f"{100 * b['coverage']:.0f}% {b['half_width_over_error']:.1f}x, t90 {b['t90']:.2f} "
        f"-> {b['half_width_over_error_at_t90']:.1f}x ({b['cuts']} cuts)"
        for b in bands.values()
    )


if __name__ == "__main__":
    main()
