"""The Huber-on-log-loss objective of Hoffmann et al. 2022 (eq. 3-4, appendix D.2) and a BFGS that
minimises it from many starts at once (one numpy batch, not a Python loop of scipy calls).

The law is L_hat = E + sum_j A_j / x_j^alpha_j, fitted by minimising Huber(log L_hat - log L)
(Hoffmann et al. 2022, eq. 4: log L_hat as a log-sum-exp of the terms' logs). Every parameter is
free in theta and bounded in the law, so that plain (unconstrained) BFGS keeps the known bounds:

    theta = [e, a_1, .., a_m, p_1, .., p_g]
    E       = F + (U - F) * sigmoid(e)   in (F, U): F the data's known floor (0 when unknown),
                                          U the lowest observed loss (E is a loss no run gets below)
    A_j     = exp(a_j)                   > 0
    alpha_j = exp(p_tie[j])              > 0: loss falls with N and D; `tie` maps term j to its
                                          exponent, so tie = (0, 0) fits alpha = beta (Muennighoff et al. 2023)

Starts are given in Hoffmann's layout [e, a_1, alpha_1, .., a_m, alpha_m] with E = exp(e) and are
moved inside the bounds by LseHuber.starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

HUBER_DELTA = 1e-3  # Hoffmann et al. 2022, appendix D.2
START_MARGIN = 0.02  # a start's E is moved at least this fraction of (U - F) inside the bounds
MIN_START_EXPONENT = 0.05  # a start at alpha = 0 (Hoffmann's grid has them) begins here: exp(p) > 0


def _sigmoid(e):
    return np.exp(-np.logaddexp(0.0, -e))


@dataclass(frozen=True)
class LseHuber:
    """sum_i w_i Huber_delta(log L_hat_i - log L_i) for L_hat = E + sum_j A_j x_ji^-alpha_j (module doc).

    log_x (m, n) holds log N, log D (m = 2) or one log x (m = 1); log_loss (n,). floor F and upper U
    bound E (U defaults to the lowest loss); tie (m,) maps each term to its exponent (default: one each).
    """

    log_x: np.ndarray
    log_loss: np.ndarray
    delta: float = HUBER_DELTA
    floor: float = 0.0
    upper: float | None = None
    tie: tuple[int, ...] | None = None
    _U: float = field(init=False, repr=False)
    _tie: tuple[int, ...] = field(init=False, repr=False)  # tie resolved: one exponent per term by default

    def __post_init__(self) -> None:
        m = self.log_x.shape[0]
        tie = tuple(range(m)) if self.tie is None else tuple(int(t) for t in self.tie)
        if len(tie) != m or sorted(set(tie)) != list(range(max(tie) + 1)):
            raise ValueError(f"tie={tie} must map each of the {m} terms to exponents 0..g-1")
        object.__setattr__(self, "tie", tie)
        object.__setattr__(self, "_tie", tie)
        upper = float(np.exp(self.log_loss.min())) if self.upper is None else float(self.upper)
        if not 0.0 <= self.floor < upper:
            raise ValueError(f"floor {self.floor} must be >= 0 and below the upper bound {upper} of E")
        object.__setattr__(self, "_U", upper)

    @property
    def m(self) -> int:
        return self.log_x.shape[0]

    @property
    def n_exponents(self) -> int:
        return max(self._tie) + 1

    @property
    def n_params(self) -> int:
        return 1 + self.m + self.n_exponents

    @property
    def bounds_of_E(self) -> tuple[float, float]:
        return self.floor, self._U

    def E(self, e):
        return self.floor + (self._U - self.floor) * _sigmoid(np.asarray(e, float))

    def _log_E(self, e: np.ndarray) -> np.ndarray:
        if self.floor == 0.0:  # log(U sigmoid(e)), finite however negative e gets
            return np.log(self._U) - np.logaddexp(0.0, -e)
        return np.log(self.E(e))

    def _terms(self, theta: np.ndarray) -> np.ndarray:
        """log of each term of L_hat at one theta (k,): rows log E, a_j - alpha_j log x_j; shape (1+m, n)."""
        alpha = np.exp(theta[1 + self.m :])
        return np.stack(
            [self._log_E(theta[0]) + 0 * self.log_loss]
            + [theta[1 + j] - alpha[t] * lx for j, (t, lx) in enumerate(zip(self._tie, self.log_x, strict=True))]
        )

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        """log L_hat - log L at one theta (k,): shape (n,)."""
        u = self._terms(theta)
        top = u.max(0)
        return top + np.log(np.exp(u - top).sum(0)) - self.log_loss

    def shares(self, theta: np.ndarray) -> np.ndarray:
        """Each term's share of L_hat at each point, (1+m, n): E/L_hat, A_j x_j^-alpha_j / L_hat."""
        u = self._terms(theta)
        w = np.exp(u - u.max(0))
        return w / w.sum(0)

    def natural(self, theta: np.ndarray) -> np.ndarray:
        """theta (..., k) -> (..., k) = [E, A_1, .., A_m, alpha_1, .., alpha_g]."""
        theta = np.asarray(theta, float)
        return np.concatenate([self.E(theta[..., :1]), np.exp(theta[..., 1:])], axis=-1)

    def starts(self, grid: np.ndarray) -> np.ndarray:
        """Starts (S, 1+2m) in Hoffmann's layout [e, a_1, alpha_1, .., a_m, alpha_m] (E = exp(e)) -> theta
        (S', k): E moved START_MARGIN inside (F, U), alpha at least MIN_START_EXPONENT, tied exponents
        taken from their first term, duplicate rows dropped (order kept)."""
        grid = np.atleast_2d(np.asarray(grid, float))
        F, U = self.floor, self._U
        q = np.clip((np.exp(grid[:, 0]) - F) / (U - F), START_MARGIN, 1 - START_MARGIN)
        first = [self._tie.index(t) for t in range(self.n_exponents)]
        theta = np.column_stack(
            [np.log(q / (1 - q)), grid[:, 1::2]]
            + [np.log(np.maximum(grid[:, 2 + 2 * j], MIN_START_EXPONENT)) for j in first]
        )
        _, keep = np.unique(theta.round(12), axis=0, return_index=True)
        return theta[np.sort(keep)]

    def value_and_grad(self, theta: np.ndarray, weights: np.ndarray | None, dtype) -> tuple[np.ndarray, np.ndarray]:
        """theta (s, k), weights (s, n) or None -> objective (s,) and gradient (s, k), both float64."""
        m = self.m
        log_x, log_loss = self.log_x.astype(dtype), self.log_loss.astype(dtype)
        th = theta.astype(dtype)
        e = th[:, :1]
        sig = _sigmoid(e)
        E = self.floor + (self._U - self.floor) * sig  # (s, 1)
        log_E = self._log_E(e).astype(dtype)
        # d log E / d e; where E underflows to 0 (floor 0) the limit (1 - sigmoid) is exact
        with np.errstate(divide="ignore", invalid="ignore"):
            dlogE = np.where(E > 0, (self._U - self.floor) * sig * (1 - sig) / E, 1 - sig).astype(dtype)
        alpha = np.exp(th[:, 1 + m :])  # (s, g)
        u = [
            th[:, 1 + j, None] - alpha[:, t, None] * lx for j, (t, lx) in enumerate(zip(self._tie, log_x, strict=True))
        ]
        top = np.maximum(u[0], log_E)
        for uj in u[1:]:
            np.maximum(top, uj, out=top)
        for uj in u:
            uj -= top
            np.exp(uj, out=uj)
        x0 = np.exp(log_E - top)
        total = x0 + sum(u)  # (s, n): exp(LSE - top)
        r = np.log(total)
        r += top
        r -= log_loss  # residual of log L
        psi = np.clip(r, -self.delta, self.delta)  # Huber'(r)
        huber = np.abs(r)
        c = np.minimum(huber, self.delta)
        huber -= 0.5 * c
        huber *= c  # 0.5 r^2 if |r| <= delta else delta (|r| - delta/2)
        if weights is not None:
            huber *= weights
            psi *= weights
        psi /= total
        grad = np.zeros(theta.shape)
        grad[:, 0] = (psi * x0).sum(1) * dlogE[:, 0]
        for j, (t, uj) in enumerate(zip(self._tie, u, strict=True)):
            uj *= psi  # d LSE / d a_j times psi
            grad[:, 1 + j] = uj.sum(1)
            grad[:, 1 + m + t] -= (uj @ log_x[j]) * alpha[:, t]
        return huber.sum(1, dtype=np.float64), grad


Objective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class BatchResult:
    theta: np.ndarray  # (s, k)
    f: np.ndarray  # (s,)
    grad: np.ndarray  # (s, k)
    n_iter: np.ndarray  # (s,)
    converged: np.ndarray  # (s,) bool


def n_threads() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


# Rows x points of one thread's share of a batch: below about this much work a trip through the
# thread pool costs more than it saves (12 points: 4,500 rows take 0.4x the time as one call than as
# 18 pooled chunks of 256; 240 points: the same either way), so smaller batches are one call.
CHUNK_ELEMENTS = 32768
MIN_CHUNK_ROWS = 256


def batched_objective(loss: LseHuber, weights: np.ndarray | None, dtype, pool: ThreadPoolExecutor) -> Objective:
    """fun(theta (s, k), rows (s,)) evaluated in chunks of rows that stay in cache, over a thread pool
    (numpy releases the GIL inside ufuncs), or in one call when the batch is one chunk. weights (S, n)
    are indexed by the batch row."""
    chunk = max(MIN_CHUNK_ROWS, CHUNK_ELEMENTS // loss.log_loss.size)

    def part(theta, rows):
        # Starts that wander off to overflow are expected and dropped as non-finite; numpy's warning
        # state is per thread, so it is set here, in the worker.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return loss.value_and_grad(theta, None if weights is None else weights[rows], dtype)

    def fun(theta, rows):
        if len(rows) <= chunk:
            return part(theta, rows)
        bounds = range(0, len(rows), chunk)
        parts = list(pool.map(lambda i: part(theta[i : i + chunk], rows[i : i + chunk]), bounds))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    return fun


def bfgs(fun: Objective, theta0: np.ndarray, *, max_iter: int, gtol: float, ftol: float) -> BatchResult:
    """BFGS on every row of theta0 (s, k) at once (Nocedal & Wright 2006, alg. 6.1).

    Stops a row, like scipy's L-BFGS-B, when max |grad| <= gtol or the decrease
    (f_k - f_k+1) / max(|f_k|, |f_k+1|, 1) <= ftol; `converged` marks those rows.
    """
    S, k = theta0.shape
    theta = theta0.astype(np.float64).copy()
    f, g = fun(theta, np.arange(S))
    H = np.broadcast_to(np.eye(k), (S, k, k)).copy()  # inverse-Hessian approximations
    fresh = np.ones(S, bool)  # H still the identity: first step is scaled, then H0 by N&W eq. 6.20
    active = np.isfinite(f) & np.isfinite(g).all(1)
    converged = np.zeros(S, bool)
    n_iter = np.zeros(S, int)
    for _ in range(max_iter):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        d, slope, H[rows] = _direction(H[rows], g[rows])
        t0 = np.where(fresh[rows], np.minimum(1.0, 1.0 / np.linalg.norm(g[rows], axis=1)), 1.0)
        t, f_new, g_new, found = _backtrack(fun, rows, theta[rows], f[rows], d, slope, t0)
        s, y = t[:, None] * d, g_new - g[rows]
        H[rows] = _bfgs_update(H[rows], s, y, fresh[rows])
        decrease = (f[rows] - f_new) / np.maximum(np.maximum(np.abs(f[rows]), np.abs(f_new)), 1.0)
        theta[rows] += s
        f[rows], g[rows] = f_new, g_new
        fresh[rows] = False
        n_iter[rows] += 1
        done = (np.abs(g_new).max(1) <= gtol) | (decrease <= ftol)
        converged[rows[done & found]] = True
        active[rows[done | ~found]] = False
    return BatchResult(theta, f, g, n_iter, converged)


def _direction(H: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """d = -H g; rows where d is not a descent direction restart from steepest descent."""
    d = -np.einsum("sij,sj->si", H, g)
    slope = (d * g).sum(1)
    bad = ~(slope < 0)
    if bad.any():
        H[bad] = np.eye(H.shape[1])
        d[bad] = -g[bad]
        slope[bad] = -(g[bad] ** 2).sum(1)
    return d, slope, H


def _backtrack(fun: Objective, rows, theta, f0, d, slope, t0, c1: float = 1e-4, max_halvings: int = 40):
    """Armijo backtracking with a safeguarded quadratic step (Nocedal & Wright 2006, sec. 3.5)."""
    t = t0.copy()
    f_new = np.empty_like(f0)
    g_new = np.empty_like(theta)
    todo = np.arange(len(rows))
    for _ in range(max_halvings):
        f_new[todo], g_new[todo] = fun(theta[todo] + t[todo, None] * d[todo], rows[todo])
        ok = f_new[todo] <= f0[todo] + c1 * t[todo] * slope[todo]
        todo = todo[~ok]
        if todo.size == 0:
            return t, f_new, g_new, np.ones(len(rows), bool)
        tt = t[todo]
        curv = 2 * (f_new[todo] - f0[todo] - slope[todo] * tt)
        quad = np.where(np.isfinite(curv) & (curv > 0), -slope[todo] * tt * tt / np.where(curv > 0, curv, 1), 0.1 * tt)
        t[todo] = np.clip(quad, 0.1 * tt, 0.5 * tt)
    found = np.ones(len(rows), bool)
    found[todo] = False
    t[todo] = 0.0
    f_new[todo], g_new[todo] = f0[todo], fun(theta[todo], rows[todo])[1]
    return t, f_new, g_new, found


def _bfgs_update(H: np.ndarray, s: np.ndarray, y: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """H+ = (I - rho s y^T) H (I - rho y s^T) + rho s s^T, skipped where s^T y is not positive."""
    sy = (s * y).sum(1)
    ok = sy > 1e-10 * np.linalg.norm(s, axis=1) * np.linalg.norm(y, axis=1)
    scale = ok & fresh
    if scale.any():
        H[scale] = (sy[scale] / (y[scale] ** 2).sum(1))[:, None, None] * np.eye(H.shape[1])
    rho = np.where(ok, 1.0 / np.where(ok, sy, 1.0), 0.0)
    Hy = np.einsum("sij,sj->si", H, y)
    ss = np.einsum("si,sj->sij", s, s)
    cross = np.einsum("si,sj->sij", Hy, s)
    outer = (rho * rho * (y * Hy).sum(1) + rho)[:, None, None] * ss
    return H + outer - rho[:, None, None] * (cross + cross.transpose(0, 2, 1))
