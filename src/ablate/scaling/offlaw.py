"""Approach 3 refitted without the runs furthest off the law, as a suggestion beside its verdict.

When runs break the law (a `residual_size` or `residual_trend` reason, checks.breaks_law), the
runs with the largest standardized residuals (checks.runs_off_law: beyond 3 s, at most 3) are
named; this module refits approach 3 without them and gives the refit its own verdict. It is
printed (console, fit.md, fit.json's `without_outliers`), never applied: a run far off the law may
be a broken run or the law's form failing there (e.g. very short runs, few tokens per parameter),
and only a person who knows the runs can tell which.

The refit costs a fraction of the fit: it starts from the full fit's law on calibration's coarse
grid (calibration.warm_grid, 433 starts instead of the 4,500 or 6,125 of the full grid) and draws REFIT_BOOT
bootstrap resamples, enough for the verdict's interval checks, not for intervals to predict with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ablate.scaling.calibration import warm_grid
from ablate.scaling.checks import (
    OffLawRun,
    RunNoise,
    Thresholds,
    approach3_facts,
    breaks_law,
    law_verdict,
    off_law_runs,
    run_noise,
)
from ablate.scaling.laws.chinchilla import Approach3Fit, fit_approach3, require_approach3
from ablate.scaling.points import FitInputError, Points
from ablate.scaling.verdict import Verdict

REFIT_BOOT = 100  # resamples of the refit: its exponents' and E's intervals, which the verdict checks


@dataclass(frozen=True)
class WithoutRuns:
    """Approach 3 refitted on the points less `runs`, its verdict, and the noise it was judged by."""

    runs: tuple[OffLawRun, ...]
    fit: Approach3Fit
    verdict: Verdict
    noise: RunNoise

    def params_line(self) -> str:
        """'E 1.69, A 406, B 411, alpha 0.34, beta 0.28' (beta omitted when tied to alpha)."""
        names = self.fit.law.NAMES[:4] if self.fit.tied else self.fit.law.NAMES
        values = dict(zip(self.fit.law.NAMES, self.fit.law.as_array(), strict=True))
        return ", ".join(f"{k} {values[k]:.4g}" for k in names)

    def to_dict(self) -> dict:
        return {
            "runs": [r.to_dict() for r in self.runs],
            **self.verdict.to_dict(),
            "params": {k: v.to_dict() for k, v in self.fit.params.items()} if self.fit.converged else None,
            "n_points": len(self.fit.points),
            "bootstrap": None if self.fit.bootstrap is None else self.fit.bootstrap.to_dict(),
            "applied": False,
        }


def named_runs(fit: Approach3Fit, verdict: Verdict, noise: RunNoise) -> tuple[OffLawRun, ...]:
    """The runs a broken law's verdict names (empty when the residuals do not break it)."""
    if not fit.converged or not breaks_law(verdict):
        return ()
    return off_law_runs(approach3_facts(fit), noise)


def removable(points: Points, runs: tuple[OffLawRun, ...]) -> tuple[OffLawRun, ...]:
    """The most of `runs` (largest residual first) whose removal leaves points approach 3 can fit:
    6 runs, 3 distinct N and D (chinchilla.require_approach3)."""
    for k in range(len(runs), 0, -1):
        keep = np.setdiff1d(np.arange(len(points)), [r.index for r in runs[:k]])
        try:
            require_approach3(points.subset(keep))
        except FitInputError:
            continue
        return runs[:k]
    return ()


def refit_without(
    fit: Approach3Fit,
    runs: tuple[OffLawRun, ...],
    th: Thresholds,
    noise: float | None = None,
    seed: int = 0,
    n_boot: int = REFIT_BOOT,
) -> WithoutRuns | None:
    """Approach 3 on fit.points less the removable of `runs`, with the fit's floor and variant and
    its verdict against the run-to-run noise of the points kept (`noise`: the one given, if any).
    None when no run can be removed and leave a law to fit."""
    drop = removable(fit.points, runs)
    if not drop:
        return None
    keep = np.setdiff1d(np.arange(len(fit.points)), [r.index for r in drop])
    sub = fit.points.subset(keep)
    law = fit.law
    start = warm_grid(law, fit.floor)
    refit = fit_approach3(
        sub, floor=fit.floor, tie_exponents=fit.tied, n_boot=n_boot, seed=seed, grid=start, form=fit.form
    )
    sub_noise = run_noise(sub.N, sub.D, sub.L, noise, sub.seeds)
    return WithoutRuns(drop, refit, law_verdict(approach3_facts(refit), sub_noise, th), sub_noise)
