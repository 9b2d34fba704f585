"""Chinchilla approach 1 (Hoffmann et al. 2022, sec. 3.1): the lower envelope of the training curves,
i.e. the run with the lowest loss at each FLOP value, gives N_opt(C) and D_opt(C)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ablate.scaling.fitting.bootstrap import DEFAULT_BOOT
from ablate.scaling.laws.frontier import FrontierFit, fit_power_law
from ablate.scaling.points import FitInputError, RunCurve, require_count, require_distinct


def _curve_matrix(curves: Sequence[RunCurve], C: np.ndarray, key: str) -> np.ndarray:
    """(runs, g) values of `key` interpolated in log-log at each C; NaN outside a run's FLOP range."""
    out = np.full((len(curves), len(C)), np.nan)
    for i, run in enumerate(curves):
        inside = (C >= run.flops[0]) & (C <= run.flops[-1])
        out[i, inside] = np.exp(np.interp(np.log(C[inside]), np.log(run.flops), np.log(getattr(run, key))))
    return out


def fit_approach1(
    curves: Sequence[RunCurve], *, n_grid: int = 200, n_boot: int = DEFAULT_BOOT, seed: int = 0
) -> FrontierFit:
    """Hoffmann et al. 2022 approach 1: at each C of a log grid, the run with the lowest loss gives
    N_opt(C) and D_opt(C); fit power laws in C. The grid spans the FLOPs reached by at least two runs.
    Bootstrap: resample runs with replacement."""
    law_name = "Chinchilla approach 1"
    require_count(len(curves), 2, law_name, "training curves")
    require_distinct(np.array([r.N for r in curves]), 2, "N (params)", law_name)
    lo, hi = min(r.flops[0] for r in curves), max(r.flops[-1] for r in curves)
    grid = np.geomspace(lo, hi, n_grid)
    loss = _curve_matrix(curves, grid, "loss")
    grid_ok = np.isfinite(loss).sum(0) >= 2
    if grid_ok.sum() < 2:
        raise FitInputError(
            f"{law_name}: the runs' FLOP ranges overlap at fewer than 2 grid points; "
            "runs must share some compute range",
            "narrow_span",
        )
    grid, loss = grid[grid_ok], loss[:, grid_ok]
    tokens = _curve_matrix(curves, grid, "tokens")
    Ns = np.array([r.N for r in curves])
    win = np.nanargmin(loss, axis=0)
    cols = np.arange(len(grid))
    n_opt, d_opt, l_opt = Ns[win], tokens[win, cols], loss[win, cols]
    nb = db = mask = Cb = None
    if n_boot > 0:
        idx = np.random.default_rng(seed).integers(0, len(curves), size=(n_boot, len(curves)))
        sub = np.where(np.isfinite(loss[idx]), loss[idx], np.inf)  # (R, runs, g)
        wb = np.take_along_axis(idx, sub.argmin(1), axis=1)  # (R, g) winning run index
        mask = np.isfinite(sub.min(1))
        nb, db = Ns[wb], tokens[wb, cols]
        Cb = np.broadcast_to(grid, nb.shape)
    return FrontierFit(
        "approach1",
        fit_power_law(grid, n_opt, Cb, nb, mask),
        fit_power_law(grid, d_opt, Cb, db, mask),
        grid,
        n_opt,
        d_opt,
        l_opt,
        n_boot,
    )
