"""Chinchilla approach 2 (Hoffmann et al. 2022, sec. 3.2): a parabola of loss in log N per iso-FLOP
budget gives N_opt per budget; power laws over the budgets give N_opt(C) and D_opt(C).

It applies only to an iso-FLOP design, and says so otherwise instead of printing an exponent: several
budgets (runs whose FLOPs agree within budget_tol_decades), each with several sizes, each budget's
lowest loss inside its arm (not at its smallest or largest size, where a parabola would extrapolate
its minimum). The parabola is fitted near each budget's minimum, on the sizes within window_decades of
the lowest-loss run (at least the 3 nearest), so that far-off, under- or over-trained sizes do not move
the optimum; the minimum's uncertainty comes from the bootstrap (resampling the runs of each budget).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ablate.scaling.fitting.bootstrap import DEFAULT_BOOT, Estimate, estimate, resample_counts
from ablate.scaling.laws.frontier import FrontierFit, fit_power_law
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN, FitInputError, Points

BUDGET_TOL_DECADES = 0.02  # runs of one budget agree in FLOPs within 5%
WINDOW_DECADES = 0.5  # the parabola uses sizes within this many decades of the budget's lowest loss
MIN_BUDGETS = 3
MIN_SIZES = 4  # a parabola's 3 coefficients and at least one run to spare, so that resamples vary


@dataclass(frozen=True)
class IsoFlopBudget:
    """One iso-FLOP budget of approach 2: L = c0 + c1 x + c2 x^2 with x = log N - x_mid, fitted on the
    runs in `used` (the window around the lowest loss)."""

    C: float  # geometric mean of the group's FLOPs
    n_points: int
    coef: tuple[float, float, float] | None  # (c0, c1, c2); None when the budget was not used
    x_mid: float
    N_opt: float | None
    L_opt: float | None
    note: str | None  # why the budget was not used
    N: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))
    L: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))
    used: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0, bool))
    N_opt_ci: Estimate | None = None  # N_opt with its bootstrap interval

    @property
    def usable(self) -> bool:
        return self.N_opt is not None


def group_budgets(C: np.ndarray, tol_decades: float = BUDGET_TOL_DECADES) -> np.ndarray:
    """Group ids (n,) for FLOP values: a new group starts where sorted log10 C jumps by more than tol_decades."""
    order = np.argsort(C)
    ids = np.empty(len(C), int)
    ids[order] = np.concatenate([[0], np.cumsum(np.diff(np.log10(C[order])) > tol_decades)])
    return ids


def _parabola(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares quadratic per row: x, y (n,), w (R, n) -> coef (R, 3) = (c0, c1, c2)."""
    X = np.stack([np.ones_like(x), x, x * x], axis=1)  # (n, 3)
    XtWX = np.einsum("ni,rn,nj->rij", X, w, X)
    XtWy = np.einsum("ni,rn,n->ri", X, w, y)
    return np.einsum("rij,rj->ri", np.linalg.pinv(XtWX), XtWy)


def _window(logN: np.ndarray, best: int, window: float) -> np.ndarray:
    """The runs within `window` decades of run `best`, or the MIN_SIZES nearest distinct sizes if fewer."""
    dist = np.abs(logN - logN[best])
    used = dist <= window + 1e-12
    sizes = np.unique(np.round(logN, 9))
    if len(np.unique(np.round(logN[used], 9))) < MIN_SIZES:
        nearest = sizes[np.argsort(np.abs(sizes - logN[best]), kind="stable")[:MIN_SIZES]]
        used = np.isin(np.round(logN, 9), nearest)
    return used


def _budget(N: np.ndarray, L: np.ndarray, C: np.ndarray, tol: float, window: float) -> IsoFlopBudget:
    Cg = float(np.exp(np.log(C).mean()))
    logN = np.log10(N)
    mid = float(np.log((N.min() * N.max()) ** 0.5))

    def skip(note, coef=None, used=None):
        return IsoFlopBudget(
            Cg, len(N), coef, mid, None, None, note, N, L, np.zeros(len(N), bool) if used is None else used
        )

    spread = float(np.log10(C.max() / C.min()))
    if spread > 2 * tol:
        return skip(f"FLOPs span {spread:.2f} decades (> {2 * tol:g}): not one iso-FLOP budget")
    n_sizes = len(np.unique(N))
    if n_sizes < MIN_SIZES:
        return skip(f"{n_sizes} distinct sizes (needs {MIN_SIZES})")
    best = int(np.argmin(L))
    if N[best] in (N.min(), N.max()):
        end = "smallest" if N[best] == N.min() else "largest"
        return skip(f"lowest loss at the arm's {end} size N={N[best]:.3g}: the arm does not bracket the optimum")
    used = _window(logN, best, window)
    x = np.log(N[used])
    mid = float((x.min() + x.max()) / 2)
    c0, c1, c2 = _parabola(x - mid, L[used], np.ones((1, int(used.sum()))))[0]
    if not c2 > 0:
        return skip("loss not convex in log N near its minimum: no parabola minimum", (c0, c1, c2), used)
    xo = -c1 / (2 * c2)
    if not x.min() - mid <= xo <= x.max() - mid:
        return skip("the parabola's minimum lies outside the sizes it was fitted on", (c0, c1, c2), used)
    return IsoFlopBudget(
        Cg, len(N), (c0, c1, c2), mid, float(np.exp(mid + xo)), float(c0 - c1 * c1 / (4 * c2)), None, N, L, used
    )


def _budget_boot(b: IsoFlopBudget, w: np.ndarray) -> np.ndarray:
    """N_opt (R,) of one budget under resampling weights w (R, n_used) of its window; NaN where no minimum exists."""
    x = np.log(b.N[b.used]) - b.x_mid
    c = _parabola(x, b.L[b.used], w)
    distinct = np.array([len(np.unique(x[row > 0])) for row in w])
    ok = (c[:, 2] > 0) & (distinct >= 3)
    with np.errstate(over="ignore"):  # a resample whose parabola is nearly flat puts its minimum far off
        return np.where(ok, np.exp(b.x_mid - c[:, 1] / (2 * np.where(ok, c[:, 2], 1))), np.nan)


def fit_approach2(
    points: Points,
    *,
    budgets: np.ndarray | None = None,
    budget_tol_decades: float = BUDGET_TOL_DECADES,
    window_decades: float = WINDOW_DECADES,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
) -> FrontierFit:
    """Hoffmann et al. 2022 approach 2 on an iso-FLOP design (module docstring); otherwise a
    FitInputError that says why the points are not one. `budgets` (n,) labels the groups; by default
    FLOPs are grouped by group_budgets. Bootstrap: resample the runs of each budget's window."""
    law_name = "Chinchilla approach 2"
    ids = (
        group_budgets(points.C, budget_tol_decades)
        if budgets is None
        else np.unique(np.asarray(budgets), return_inverse=True)[1]
    )
    groups = [np.flatnonzero(ids == g) for g in np.unique(ids)]
    arms = [g for g in groups if len(np.unique(points.N[g])) >= MIN_SIZES]
    fitted = tuple(_budget(points.N[g], points.L[g], points.C[g], budget_tol_decades, window_decades) for g in arms)
    usable = [b for b in fitted if b.usable]
    if len(usable) < MIN_BUDGETS:
        why = (
            "; ".join(dict.fromkeys(b.note for b in fitted if b.note))
            or f"no FLOP budget holds {MIN_SIZES} or more sizes"
        )
        raise FitInputError(
            f"{law_name}: not an iso-FLOP design: {len(usable)} budgets with {MIN_SIZES}+ sizes and the lowest loss "
            f"inside the arm (needs {MIN_BUDGETS}; {len(groups)} distinct FLOP values within "
            f"{budget_tol_decades:g} decades, {len(arms)} with {MIN_SIZES}+ sizes: {why})",
            "few_sizes",
        )
    C = np.array([b.C for b in usable])
    N = np.array([b.N_opt for b in usable])
    D = C / FLOPS_PER_PARAM_TOKEN / N
    nb = db = mask = Cb = None
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        nb = np.column_stack(
            [_budget_boot(b, resample_counts(int(b.used.sum()), n_boot, int(rng.integers(2**31)))) for b in usable]
        )
        mask = np.isfinite(nb)
        Cb = np.broadcast_to(C, nb.shape)
        db = Cb / FLOPS_PER_PARAM_TOKEN / np.where(mask, nb, 1.0)
        # every usable budget has an N_opt (IsoFlopBudget.usable); the test says so to mypy
        with_ci = {id(b): estimate(b.N_opt, nb[:, j]) for j, b in enumerate(usable) if b.N_opt is not None}
        fitted = tuple(replace(b, N_opt_ci=with_ci[id(b)]) if id(b) in with_ci else b for b in fitted)
    notes = tuple(f"C={b.C:.3g}: {b.note}" for b in fitted if b.note)
    return FrontierFit(
        "approach2",
        fit_power_law(C, N, Cb, nb, mask),
        fit_power_law(C, D, Cb, db, mask),
        C,
        N,
        D,
        np.array([b.L_opt for b in usable]),
        n_boot,
        notes,
        fitted,
    )
