"""Every method the data allow, at once: fit_all returns a FitReport (export it with
ablate.fit_export.export_fit). Approach 3 is required; a method the data cannot support is skipped
with its one-line reason."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ablate.scaling.approach1 import fit_approach1
from ablate.scaling.approach2 import fit_approach2
from ablate.scaling.bootstrap import DEFAULT_BOOT
from ablate.scaling.chinchilla import Approach3Fit, fit_approach3
from ablate.scaling.frontier import Frontier, FrontierFit, frontier
from ablate.scaling.points import FitInputError, Points, RunCurve
from ablate.scaling.predict import Prediction, predict
from ablate.scaling.single import SingleLawFit, fit_single_law
from ablate.scaling.validation import FloorComparison, HeldOut, compare_floor, held_out_validation


@dataclass(frozen=True)
class FitReport:
    """What fit_all found; export it with ablate.fit_export.export_fit."""

    points: Points
    approach3: Approach3Fit | None
    approach1: FrontierFit | None
    approach2: FrontierFit | None
    single: dict[str, SingleLawFit]  # keyed by variable: 'N', 'D', 'C', 'N_non_embedding'
    frontier: Frontier | None
    predictions: tuple[Prediction, ...]
    held_out: HeldOut | None
    entropy_floor: FloorComparison | None
    skipped: dict[str, str]  # method -> the one-line reason it could not run on these data


def fit_all(points: Points, *, curves: Sequence[RunCurve] | None = None, targets: Sequence[dict] = (),
            entropy_floor: float | None = None, held_out_k: int = 0, n_boot: int = DEFAULT_BOOT, seed: int = 0,
            single: Sequence[str] = ("N", "D", "C"), approach2: bool = True, n_frontier: int = 50,
            grid: np.ndarray | None = None, held_out_boot: int | None = None,
            on_stage: Callable[[str, int, int], None] | None = None) -> FitReport:
    """Approach 3 (required), then each optional method that the data allow; `targets` are predict()
    keyword dicts, e.g. {"C": 1e21} or {"N": 1.5e9, "D": 3e10}; `grid` replaces Hoffmann's 4,500 starts.
    The held-out refit draws held_out_boot resamples (default min(n_boot, 200)). on_stage(label, i, total)
    is called before each of the `total` methods and once more with i == total at the end."""
    labels = (["approach 3"] + [f"L({v})" for v in single] + (["approach 1"] if curves else [])
              + (["approach 2"] if approach2 else []) + (["held-out refit"] if held_out_k else []))
    done = iter(range(len(labels) + 1))

    def stage(label: str) -> None:
        if on_stage is not None:
            on_stage(label, next(done), len(labels))

    stage(labels[0])
    a3 = fit_approach3(points, n_boot=n_boot, seed=seed, grid=grid)
    skipped: dict[str, str] = {}

    def attempt(name, fn):
        try:
            return fn()
        except FitInputError as err:
            skipped[name] = str(err)
            return None

    singles = {}
    for v in single:
        stage(f"L({v})")
        fit = attempt(f"kaplan_{v}", lambda v=v: fit_single_law(points, v, n_boot=n_boot, seed=seed))
        if fit is not None:
            singles[v] = fit
    if curves:
        stage("approach 1")
    a1 = attempt("chinchilla_approach1", lambda: fit_approach1(curves, n_boot=n_boot, seed=seed)) if curves else None
    if approach2:
        stage("approach 2")
    a2 = attempt("chinchilla_approach2", lambda: fit_approach2(points, n_boot=n_boot, seed=seed)) if approach2 else None
    boot = min(n_boot, 200) if held_out_boot is None else held_out_boot
    if held_out_k:
        stage("held-out refit")
    held = attempt("held_out", lambda: held_out_validation(points, held_out_k, n_boot=boot, seed=seed,
                                                          grid=grid)) if held_out_k else None
    stage("done")
    predictions = tuple(predict(a3, **t) for t in targets)
    C_top = max([points.C.max() * 10] + [p.C for p in predictions])
    floor = None if entropy_floor is None else compare_floor(a3.params["E"], entropy_floor)
    return FitReport(points, a3, a1, a2, singles, frontier(a3, np.geomspace(points.C.min(), C_top, n_frontier)),
                     predictions, held, floor, skipped)
