"""Backtests: does the printed 95% interval hold the truth about 95% of the time when the fit is asked
to extrapolate? For each cut point in compute, the whole procedure (approach 3 with its bootstrap, its
verdict and its own calibration, predict.fit_predictor) sees only the runs below the cut and predicts
every run above it; the held-out runs are then grouped by their distance past the largest fitted run
(decades of compute) and counted: how many fell inside their interval, how far off the prediction was,
how wide the interval was. `held_out` is the same with one cut: all but the k largest-compute runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ablate.scaling.points import FitInputError, Points
from ablate.scaling.predict import FitOptions, fit_predictor, predict
from ablate.scaling.verdict import LEVELS, NOT_DETERMINED, Verdict

COVERAGE_TARGET = 0.9  # the share of held-out runs a stated 95% interval must hold at every distance
SHARPNESS_TARGET = 4.0  # median half-width over median absolute error, within SHARP_WITHIN decades
SHARP_WITHIN = 1.5  # decades of compute past the data over which sharpness is judged
MIN_BIN_RUNS = 5  # a distance band with fewer held-out runs is reported, not judged
# printed predictions judged from 20: an exact 95% interval misses one of 7 (86%) three times in ten
MIN_PRINTED_RUNS = 20
BACKTEST_CUTS = (0.25, 0.375, 0.5, 0.625, 0.75)  # cut points as fractions of the runs' log-C span
DISTANCE_BINS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, np.inf)  # decades of compute past the largest fitted run


@dataclass(frozen=True)
class Finding:
    """One thing the backtest found against its targets: a code (under_covers, too_wide, no_runs)
    and a clause."""

    code: str
    text: str

    def to_dict(self) -> dict:
        return {"code": self.code, "text": self.text}


@dataclass(frozen=True)
class HeldOutRun:
    """One run above a cut, predicted by the fit below it. The interval is evaluated whatever the
    verdict (a not_determined prediction prints no number, but its interval is still tested)."""

    cut: int  # index into Backtest.cuts
    N: float
    D: float
    C: float
    actual: float
    decades: float  # past the largest fitted run
    predicted: float
    lo: float
    hi: float
    verdict: Verdict

    @property
    def inside(self) -> bool:
        return bool(self.lo <= self.actual <= self.hi)

    @property
    def rel_error(self) -> float:
        return (self.predicted - self.actual) / self.actual

    @property
    def rel_width(self) -> float:
        return (self.hi - self.lo) / self.predicted

    @property
    def half_width(self) -> float:
        """The interval's half-width over the prediction, (hi - lo) / (2 predicted)."""
        return self.rel_width / 2

    def to_dict(self) -> dict:
        return {
            "cut": self.cut,
            "N": self.N,
            "D": self.D,
            "C": self.C,
            "actual": self.actual,
            "decades_past_data": self.decades,
            "predicted": self.predicted,
            "ci95": [self.lo, self.hi],
            "inside_ci95": self.inside,
            "rel_error": self.rel_error,
            **self.verdict.to_dict(),
        }


@dataclass(frozen=True)
class BacktestCut:
    """One cut: fitted on n_fit runs with C <= C_cut; `note` says why it could not be used."""

    C_cut: float
    n_fit: int
    n_held: int
    law: Verdict | None = None
    kappa: float | None = None
    reach: float | None = None
    note: str = ""
    run_sigma: float | None = None
    drift: float | None = None  # the calibration's shared drift per decade (calibration.py)

    def to_dict(self) -> dict:
        return {
            "C_cut": self.C_cut,
            "n_fit": self.n_fit,
            "n_held": self.n_held,
            "law": None if self.law is None else self.law.to_dict(),
            "kappa_per_decade": self.kappa,
            "drift_per_decade": self.drift,
            "reach_decades": self.reach,
            "run_sigma": self.run_sigma,
            "note": self.note,
        }


@dataclass(frozen=True)
class DistanceBin:
    """The held-out runs at one range of distance (decades of compute past the largest fitted run).
    `printed`: those whose verdict lets a number be printed (trusted or wide)."""

    lo: float
    hi: float
    n: int
    coverage: float  # share of all runs inside their 95% interval
    median_abs_error: float  # median |predicted - actual| / actual
    levels: dict  # verdict level -> count
    printed_coverage: float | None  # share of the printed runs inside their interval; None: none printed
    printed_median_width: float | None  # median (hi - lo) / predicted of the printed intervals
    median_half_width: float = float("nan")  # median (hi - lo) / (2 predicted) over all runs

    @property
    def printed(self) -> int:
        return self.n - self.levels.get(NOT_DETERMINED, 0)

    @property
    def sharpness(self) -> float:
        """Median half-width over median absolute error: about 2.9 for a calibrated normal interval
        (1.96 / 0.674), more for one wider than the errors need."""
        return self.median_half_width / self.median_abs_error if self.median_abs_error > 0 else math.inf

    def to_dict(self) -> dict:
        return {
            "decades": [self.lo, None if np.isinf(self.hi) else self.hi],
            "n": self.n,
            "coverage": self.coverage,
            "median_abs_rel_error": self.median_abs_error,
            "verdicts": self.levels,
            "printed": self.printed,
            "printed_coverage": self.printed_coverage,
            "printed_median_rel_width": self.printed_median_width,
            "median_rel_half_width": self.median_half_width,
            "sharpness": self.sharpness,
        }


@dataclass(frozen=True)
class Backtest:
    cuts: tuple[BacktestCut, ...]
    runs: tuple[HeldOutRun, ...]

    @property
    def coverage(self) -> float | None:
        return float(np.mean([r.inside for r in self.runs])) if self.runs else None

    @property
    def printed_coverage(self) -> float | None:
        shown = [r.inside for r in self.runs if r.verdict.usable]
        return float(np.mean(shown)) if shown else None

    @property
    def mean_abs_rel_error(self) -> float | None:
        return float(np.mean([abs(r.rel_error) for r in self.runs])) if self.runs else None

    def bins(self, edges=DISTANCE_BINS) -> tuple[DistanceBin, ...]:
        """Coverage, error and width by distance; bins without runs are left out."""
        out = []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            rows = [r for r in self.runs if (lo < r.decades <= hi) or (lo == 0 and r.decades == 0)]
            if not rows:
                continue
            shown = [r for r in rows if r.verdict.usable]
            out.append(
                DistanceBin(
                    lo,
                    hi,
                    len(rows),
                    float(np.mean([r.inside for r in rows])),
                    float(np.median([abs(r.rel_error) for r in rows])),
                    {level: sum(r.verdict.level == level for r in rows) for level in LEVELS},
                    float(np.mean([r.inside for r in shown])) if shown else None,
                    float(np.median([r.rel_width for r in shown])) if shown else None,
                    float(np.median([r.half_width for r in rows])),
                )
            )
        return tuple(out)

    def within(self, decades: float = SHARP_WITHIN) -> list[HeldOutRun]:
        return [r for r in self.runs if r.decades <= decades]

    def sharpness(self, decades: float = SHARP_WITHIN) -> float | None:
        """Median half-width over median absolute error of the held-out runs within `decades`."""
        rows = self.within(decades)
        if not rows:
            return None
        err = float(np.median([abs(r.rel_error) for r in rows]))
        return float(np.median([r.half_width for r in rows])) / err if err > 0 else math.inf

    def findings(self, min_runs: int = MIN_BIN_RUNS) -> tuple[Finding, ...]:
        """What the backtest says against its targets (COVERAGE_TARGET at every distance with at least
        min_runs held-out runs, SHARPNESS_TARGET within SHARP_WITHIN decades), worst first."""
        out = []
        for b in self.bins():
            if b.n < min_runs:
                continue
            span = f"{b.lo:g} to {b.hi:g} decades" if np.isfinite(b.hi) else f"over {b.lo:g} decades"
            if b.coverage < COVERAGE_TARGET:
                out.append(
                    Finding(
                        "under_covers",
                        f"{span}: {100 * b.coverage:.0f}% of {b.n} held-out runs inside (under "
                        f"{100 * COVERAGE_TARGET:.0f}%)",
                    )
                )
            printed = b.printed_coverage  # None only when the bin printed no run
            if b.printed >= MIN_PRINTED_RUNS and printed is not None and printed < COVERAGE_TARGET:
                out.append(
                    Finding(
                        "under_covers",
                        f"{span}: {100 * printed:.0f}% of the {b.printed} printed "
                        f"predictions inside (under {100 * COVERAGE_TARGET:.0f}%)",
                    )
                )
        sharp = self.sharpness()
        if sharp is not None and sharp > SHARPNESS_TARGET:
            out.append(
                Finding(
                    "too_wide",
                    f"within {SHARP_WITHIN:g} decades the median half-width is {sharp:.1f} times the "
                    f"median error (over {SHARPNESS_TARGET:g}; a calibrated normal interval is 2.9)",
                )
            )
        if not self.runs:
            out.append(Finding("no_runs", "no cut left a fit that could predict the runs above it"))
        return tuple(out)

    def decision(self) -> str:
        """One line: whether the printed intervals can be relied on, from the findings."""
        coverage = self.coverage
        if coverage is None:  # no runs
            return "Not determined: no cut left a fit that could predict the runs above it."
        codes = {f.code for f in self.findings()}
        sharp = self.sharpness()
        judged = [b.coverage for b in self.bins() if b.n >= MIN_BIN_RUNS] or [coverage]
        tail = (
            f"{100 * min(judged):.0f}% to {100 * max(judged):.0f}% of held-out runs inside by distance; within "
            f"{SHARP_WITHIN:g} decades the half-width is {'-' if sharp is None else f'{sharp:.1f}'} times the "
            "median error"
        )
        if not any(b.n >= MIN_BIN_RUNS for b in self.bins()):
            return self._count_only()
        if not any(r.verdict.usable for r in self.runs):
            return f"No prediction above a cut is printed (every one is not_determined); evaluated anyway, {tail}."
        if "under_covers" in codes:
            return f"The 95% intervals under-cover: {tail}."
        if "too_wide" in codes:
            return f"The 95% intervals cover but are wider than the errors need: {tail}."
        return f"The 95% intervals are calibrated and sharp: {tail}."

    def _count_only(self) -> str:
        """The decision when no distance has MIN_BIN_RUNS runs: what happened to each, and no judgment."""
        n, inside = len(self.runs), sum(r.inside for r in self.runs)
        if n == 1:
            where = "inside" if inside else "outside"
            told = f"1 held-out run, {where} its 95% interval"
        else:
            told = f"{inside} of {n} held-out runs inside their 95% interval"
        return (
            f"{told} (error {self._errors()}): too few runs to judge the interval (it takes {MIN_BIN_RUNS} at one "
            "distance; `ablate backtest` refits below several cuts)."
        )

    def _errors(self) -> str:
        errors = [100 * r.rel_error for r in self.runs]
        if len(errors) == 1:
            return f"{errors[0]:+.2f}%"
        return f"{min(errors):+.2f}% to {max(errors):+.2f}%"

    def to_dict(self) -> dict:
        return {
            "decision": self.decision(),
            "findings": [f.to_dict() for f in self.findings()],
            "sharpness_within_1.5_decades": self.sharpness(),
            "method": "for each cut: fit (with its own bootstrap and calibration) on the runs with C <= C_cut, "
            "predict every run above; coverage = share of held-out runs inside their 95% interval",
            "coverage": self.coverage,
            "printed_coverage": self.printed_coverage,
            "mean_abs_rel_error": self.mean_abs_rel_error,
            "by_distance": [b.to_dict() for b in self.bins()],
            "cuts": [c.to_dict() for c in self.cuts],
            "runs": [r.to_dict() for r in self.runs],
        }


def backtest(
    points: Points,
    opts: FitOptions,
    cuts: tuple[float, ...] = BACKTEST_CUTS,
    progress: Callable[[str, int, int], None] | None = None,
) -> Backtest:
    """Fit below each cut (fractions of the runs' log-C span, each cut at the largest run below it)
    and predict the runs above it. progress(label, done, total) as each cut's fit starts and when the
    last one ends (each is a whole fit with its bootstrap: a few seconds to a minute apiece)."""
    for f in cuts:
        if not 0 < f < 1:
            raise FitInputError(f"backtest cut {f:g} is not a fraction of the compute span (valid: 0 < cut < 1)")
    logC = np.log10(points.C)
    lo, hi = float(logC.min()), float(logC.max())
    masks, seen = [], set()
    for f in sorted(cuts):
        below = logC <= lo + f * (hi - lo) + 1e-12
        if 0 < below.sum() < len(points) and int(below.sum()) not in seen:
            seen.add(int(below.sum()))
            masks.append(below)
    if not masks:  # one run, or every run at one compute: nothing below a cut predicts anything above it
        raise FitInputError(
            f"backtest: {len(points)} run(s) at {len(np.unique(logC))} compute budget(s) leave no run above any cut "
            "to predict (valid: runs at several compute budgets, the more the better)"
        )
    return _run(points, opts, masks, progress)


def held_out(points: Points, k: int, opts: FitOptions) -> Backtest:
    """One cut: fit on all but the k largest-compute runs, predict those k."""
    if not 0 < k < len(points):
        raise FitInputError(f"held-out validation: k={k} must be between 1 and {len(points) - 1}")
    below = np.zeros(len(points), bool)
    below[np.argsort(points.C, kind="stable")[:-k]] = True
    return _run(points, opts, [below])


def _run(
    points: Points,
    opts: FitOptions,
    masks: list[np.ndarray],
    progress: Callable[[str, int, int], None] | None = None,
) -> Backtest:
    cuts, runs = [], []
    for k, below in enumerate(masks):
        fitted = points.subset(np.flatnonzero(below))
        if progress is not None:
            progress(f"fit below cut {k + 1} of {len(masks)} ({len(fitted)} runs)", k, len(masks))
        held = np.flatnonzero(~below)
        C_cut = float(fitted.C.max())
        try:
            forecast = fit_predictor(fitted, opts)
        except FitInputError as exc:
            cuts.append(BacktestCut(C_cut, len(fitted), held.size, note=str(exc)))
            continue
        pred = forecast.predictor
        cal = pred.calibration
        cuts.append(
            BacktestCut(
                C_cut,
                len(fitted),
                held.size,
                pred.verdict,
                cal.kappa,
                cal.reach,
                run_sigma=cal.run_sigma,
                drift=cal.drift if cal.calibrated else None,
            )
        )
        if not forecast.fit.converged:
            continue
        value, lo_, hi_ = pred.loss_band(points.N[held], points.D[held], points.C[held])
        for j, i in enumerate(held):
            p = predict(pred, N=float(points.N[i]), D=float(points.D[i]), C=float(points.C[i]))
            runs.append(
                HeldOutRun(
                    len(cuts) - 1,
                    float(points.N[i]),
                    float(points.D[i]),
                    float(points.C[i]),
                    float(points.L[i]),
                    float(pred.decades_past(points.C[i])),
                    float(value[j]),
                    float(lo_[j]),
                    float(hi_[j]),
                    p.verdict,
                )
            )
    if progress is not None:
        progress("done", len(masks), len(masks))
    return Backtest(tuple(cuts), tuple(runs))
