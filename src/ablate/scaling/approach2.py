"""Chinchilla approach 2 (Hoffmann et al. 2022, sec. 3.2): a parabola of loss in log N per iso-FLOP
budget gives N_opt per budget; power laws over the budgets give N_opt(C) and D_opt(C)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ablate.scaling.bootstrap import DEFAULT_BOOT, resample_counts
from ablate.scaling.frontier import FrontierFit, fit_power_law
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN, FitInputError, Points


@dataclass(frozen=True)
class IsoFlopBudget:
    """One iso-FLOP budget of approach 2: L = c0 + c1 x + c2 x^2 with x = log N - x_mid."""

    C: float  # geometric mean of the group's FLOPs
    n_points: int
    coef: tuple[float, float, float] | None  # (c0, c1, c2); None when the budget was skipped
    x_mid: float
    N_opt: float | None
    L_opt: float | None
    note: str | None  # why skipped, or that the minimum lies outside the sampled sizes
    N: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))
    L: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))


def group_budgets(C: np.ndarray, gap_decades: float = 0.1) -> np.ndarray:
    """Group ids (n,) for FLOP values: a new group starts where sorted log10 C jumps by more than gap_decades."""
    order = np.argsort(C)
    ids = np.empty(len(C), int)
    ids[order] = np.concatenate([[0], np.cumsum(np.diff(np.log10(C[order])) > gap_decades)])
    return ids


def _parabola(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares quadratic per row: x, y (n,), w (R, n) -> coef (R, 3) = (c0, c1, c2)."""
    X = np.stack([np.ones_like(x), x, x * x], axis=1)  # (n, 3)
    XtWX = np.einsum("ni,rn,nj->rij", X, w, X)
    XtWy = np.einsum("ni,rn,n->ri", X, w, y)
    return np.einsum("rij,rj->ri", np.linalg.pinv(XtWX), XtWy)


def _budget(N: np.ndarray, L: np.ndarray, C: np.ndarray, max_spread_decades: float) -> IsoFlopBudget:
    Cg = float(np.exp(np.log(C).mean()))
    x = np.log(N)
    mid = float((x.min() + x.max()) / 2)
    spread = float(np.log10(C.max() / C.min()))
    if spread > max_spread_decades:
        note = f"FLOPs span {spread:.2f} decades (> {max_spread_decades:g}): not one iso-FLOP budget"
        return IsoFlopBudget(Cg, len(N), None, mid, None, None, note, N, L)
    if len(np.unique(N)) < 3:
        return IsoFlopBudget(Cg, len(N), None, mid, None, None, f"{len(np.unique(N))} distinct sizes, needs 3", N, L)
    c0, c1, c2 = _parabola(x - mid, L, np.ones((1, len(N))))[0]
    if not c2 > 0:
        return IsoFlopBudget(Cg, len(N), (c0, c1, c2), mid, None, None, "loss not convex in log N: no minimum", N, L)
    xo = -c1 / (2 * c2)
    note = None if x.min() - mid <= xo <= x.max() - mid else "minimum outside the sampled sizes (extrapolated)"
    return IsoFlopBudget(Cg, len(N), (c0, c1, c2), mid, float(np.exp(mid + xo)), float(c0 - c1 * c1 / (4 * c2)),
                         note, N, L)


def _budget_boot(b: IsoFlopBudget, w: np.ndarray) -> np.ndarray:
    """N_opt (R,) of one budget under resampling weights w (R, n_b); NaN where no minimum exists."""
    x = np.log(b.N) - b.x_mid
    c = _parabola(x, b.L, w)
    distinct = np.array([len(np.unique(x[row > 0])) for row in w])
    ok = (c[:, 2] > 0) & (distinct >= 3)
    return np.where(ok, np.exp(b.x_mid - c[:, 1] / (2 * np.where(ok, c[:, 2], 1))), np.nan)


def fit_approach2(points: Points, *, budgets: np.ndarray | None = None, gap_decades: float = 0.1,
                  max_spread_decades: float = 0.1, n_boot: int = DEFAULT_BOOT, seed: int = 0) -> FrontierFit:
    """Hoffmann et al. 2022 approach 2: per iso-FLOP budget a parabola of L in log N gives N_opt(C);
    D_opt = C/(6 N_opt); then power laws over budgets. `budgets` (n,) labels the groups; by default
    FLOPs are grouped by group_budgets. A group whose FLOPs span more than max_spread_decades is not
    an iso-FLOP budget and is skipped. Bootstrap: resample points within each budget."""
    law_name = "Chinchilla approach 2"
    ids = group_budgets(points.C, gap_decades) if budgets is None else np.unique(np.asarray(budgets),
                                                                                  return_inverse=True)[1]
    groups = [np.flatnonzero(ids == g) for g in np.unique(ids)]
    fitted = tuple(_budget(points.N[g], points.L[g], points.C[g], max_spread_decades) for g in groups)
    usable = [b for b in fitted if b.N_opt is not None]
    if len(usable) < 3:
        raise FitInputError(f"{law_name}: {len(usable)} iso-FLOP budgets with a parabola minimum "
                            f"(of {len(fitted)} FLOP groups); needs at least 3 budgets of 3 or more sizes each")
    C = np.array([b.C for b in usable])
    N = np.array([b.N_opt for b in usable])
    D = C / FLOPS_PER_PARAM_TOKEN / N
    nb = db = mask = Cb = None
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        nb = np.column_stack([_budget_boot(b, resample_counts(len(b.N), n_boot, int(rng.integers(2**31))))
                              for b in usable])
        mask = np.isfinite(nb)
        Cb = np.broadcast_to(C, nb.shape)
        db = Cb / FLOPS_PER_PARAM_TOKEN / np.where(mask, nb, 1.0)
    notes = tuple(f"C={b.C:.3g}: {b.note}" for b in fitted if b.note)
    return FrontierFit("approach2", fit_power_law(C, N, Cb, nb, mask), fit_power_law(C, D, Cb, db, mask),
                       C, N, D, np.array([b.L_opt for b in usable]), n_boot, notes, fitted)
