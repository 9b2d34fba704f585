"""The joint form of Kaplan et al. 2020 (eq. 1.5), with an offset: L(N, D) = E + [(N_c/N)^(alpha_N/alpha_D)
+ D_c/D]^alpha_D, fitted by approach 3's procedure (chinchilla.py: Huber on log L, best of many starts,
the bootstrap) as `form=joint`.

Why a second form: the additive one, E + A/N^alpha + B/D^beta, says that each doubling of D buys every
size the same. Small runs on real text do not behave so (experiments/text_ladder_long): the smallest
size gains less and less from more data while a larger one still gains, because N and D interact.
The joint form has that interaction: the data term is raised, with the size term, to one power.

Its compute-optimal allocation under C = 6ND has a closed form, as the additive one does: with
r = alpha_N/alpha_D, argmin_N of (N_c/N)^r + 6 D_c N / C is

    N_opt = G (C/6)^a,   a = alpha_D / (alpha_N + alpha_D),   G = (r N_c^r / D_c)^(1/(1+r)),

which is Hoffmann's G and a for A = N_c^r, B = D_c, alpha = r, beta = 1 (the outer power does not move
the minimum).

Fitted on log L as log L_hat = LSE(log E, alpha_D * LSE(r (n_c - log N), d_c - log D)), with every
parameter free in theta and bounded in the law, as optimizer.py does for the additive form:

    theta = [e, n_c, d_c, p_N, p_D]:  E in (F, U) by a sigmoid of e, N_c = exp(n_c), D_c = exp(d_c),
                                      alpha_N = exp(p_N), alpha_D = exp(p_D)

Starts are in the additive form's layout [e, n_c, alpha_N, d_c, alpha_D] (LseHuber.starts), so the
same multistart, bootstrap and warm starts serve both forms.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ablate.scaling.fitting.optimizer import LseHuber, _sigmoid
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN

FORMULA = "L(N, D) = E + [(N_c / N)^(alpha_N / alpha_D) + D_c / D]^alpha_D"


@dataclass(frozen=True)
class KaplanLaw:
    """L(N, D) = E + [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D  (Kaplan et al. 2020, eq. 1.5, with E)."""

    E: float
    N_c: float
    D_c: float
    alpha_N: float
    alpha_D: float

    NAMES: ClassVar[tuple[str, ...]] = ("E", "N_c", "D_c", "alpha_N", "alpha_D")
    FORM: ClassVar[str] = "joint"
    FORMULA: ClassVar[str] = FORMULA
    SOURCE: ClassVar[str] = "Kaplan et al. 2020, eq. 1.5, with an offset E; fitted by approach 3's procedure"
    EXPONENTS: ClassVar[str] = (
        "a = alpha_D/(alpha_N+alpha_D) is the exponent of N_opt(C); b = alpha_N/(alpha_N+alpha_D) that of D_opt(C)"
    )
    FRONTIER: ClassVar[str] = (
        "N_opt = G (C/6)^a, D_opt = (C/6) / N_opt, G = (r N_c^r / D_c)^(1/(1+r)), r = alpha_N/alpha_D"
    )
    # Coarse starts for refits near a known optimum (calibration.warm_grid), in the layout
    # [e, n_c, alpha_N, d_c, alpha_D]: 3 x 3 x 3 x 4 x 4 = 432.
    COARSE: ClassVar[np.ndarray] = np.array(
        [
            (e, nc, an, dc, ad)
            for an, ad, e, nc, dc in itertools.product(
                (0.25, 0.5, 1.0), (0.25, 0.5, 1.0), (-1.0, 0.0, 0.5), (0, 10, 20, 30), (0, 10, 20, 30)
            )
        ],
        float,
    )

    def loss(self, N, D):
        """L at N, D (broadcast together): sample_loss with this law as the one sample."""
        shape = np.broadcast_shapes(np.shape(N), np.shape(D))
        return self.sample_loss(self.as_array()[None], N, D).reshape(shape)

    @property
    def a(self) -> float:
        """N_opt ∝ C^a with a = alpha_D / (alpha_N + alpha_D) (module doc)."""
        return self.alpha_D / (self.alpha_N + self.alpha_D)

    @property
    def b(self) -> float:
        """D_opt ∝ C^b with b = alpha_N / (alpha_N + alpha_D)."""
        return self.alpha_N / (self.alpha_N + self.alpha_D)

    @property
    def G(self) -> float:
        """G = (r N_c^r / D_c)^(1/(1+r)), r = alpha_N/alpha_D, so that N_opt = G (C/6)^a."""
        r = self.alpha_N / self.alpha_D
        return float(np.exp((np.log(r) + r * np.log(self.N_c) - np.log(self.D_c)) / (1 + r)))

    def n_opt(self, C):
        return self.G * (np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN) ** self.a

    def d_opt(self, C):
        return np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN / self.n_opt(C)

    def as_array(self) -> np.ndarray:
        return np.array([self.E, self.N_c, self.D_c, self.alpha_N, self.alpha_D])

    def start(self) -> np.ndarray:
        """This law as one start in the starts' layout [e, n_c, alpha_N, d_c, alpha_D]."""
        return np.array([np.log(max(self.E, 1e-12)), np.log(self.N_c), self.alpha_N, np.log(self.D_c), self.alpha_D])

    @staticmethod
    def sample_loss(samples: np.ndarray, N, D) -> np.ndarray:
        """L(N, D) under each law of samples (R, 5) in NAMES order: (R, g) for N, D broadcastable to (g,)
        or (R, g). Computed in logs, so a law with exponents far past its data gives inf, not a warning."""
        E, Nc, Dc, aN, aD = samples.T[:, :, None] if samples.size else np.empty((5, 0, 1))
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            u_n = aN / aD * (np.log(Nc) - np.log(np.asarray(N, float)))
            u_d = np.log(Dc) - np.log(np.asarray(D, float))
            return E + np.exp(aD * np.logaddexp(u_n, u_d))

    @staticmethod
    def sample_n_opt(samples: np.ndarray, C) -> np.ndarray:
        """N_opt(C) under each law of samples (R, 5): (R, g)."""
        E, Nc, Dc, aN, aD = samples.T[:, :, None] if samples.size else np.empty((5, 0, 1))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            r = aN / aD
            log_G = (np.log(r) + r * np.log(Nc) - np.log(Dc)) / (1 + r)
            return np.exp(log_G + np.log(np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN) / (1 + r))


def joint_grid() -> np.ndarray:
    """6,125 starts in the layout [e, n_c, alpha_N, d_c, alpha_D]: alpha_N, alpha_D in
    {0.1, 0.25, 0.5, 1, 2}, e in {-1, .., 1}, n_c and d_c (natural logs of N_c, D_c) in {0, 5, .., 30}."""
    exps = (0.1, 0.25, 0.5, 1.0, 2.0)
    logs = np.arange(0, 31, 5.0)
    return np.array(
        [
            (e, nc, an, dc, ad)
            for an, ad, e, nc, dc in itertools.product(exps, exps, np.arange(-1, 1.01, 0.5), logs, logs)
        ]
    )


@dataclass(frozen=True)
class JointLseHuber(LseHuber):
    """sum_i w_i Huber_delta(log L_hat_i - log L_i) for the joint form (module doc). log_x (2, n) holds
    log N and log D; theta as in the module doc, so natural() and starts() are LseHuber's."""

    def __post_init__(self) -> None:
        if self.log_x.shape[0] != 2 or self.tie not in (None, (0, 1)):
            raise ValueError("the joint form takes log N and log D and two free exponents")
        super().__post_init__()

    def _parts(self, theta: np.ndarray, dtype=np.float64):
        """For thetas (s, 5): log E (s, 1), u_N and u_D (s, n), log of the interaction term t (s, n)."""
        th = theta.astype(dtype)
        log_n, log_d = self.log_x.astype(dtype)
        a_n, a_d = np.exp(th[:, 3:4]), np.exp(th[:, 4:5])
        u_n = a_n / a_d * (th[:, 1:2] - log_n)
        u_d = th[:, 2:3] - log_d
        return self._log_E(th[:, :1]).astype(dtype), u_n, u_d, a_d * np.logaddexp(u_n, u_d)

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        log_E, _, _, t = self._parts(np.asarray(theta, float)[None])
        return (np.logaddexp(log_E, t) - self.log_loss)[0]

    def shares(self, theta: np.ndarray) -> np.ndarray:
        """(3, n): E / L_hat, and the interaction term's share split by its N and D parts."""
        log_E, u_n, u_d, t = self._parts(np.asarray(theta, float)[None])
        log_hat = np.logaddexp(log_E, t)
        q = np.exp(t - log_hat)
        w_n = np.exp(u_n - np.logaddexp(u_n, u_d))
        return np.concatenate([1 - q, q * w_n, q * (1 - w_n)])

    def value_and_grad(self, theta: np.ndarray, weights: np.ndarray | None, dtype) -> tuple[np.ndarray, np.ndarray]:
        """theta (s, 5), weights (s, n) or None -> objective (s,) and gradient (s, 5), both float64.

        With q = (L_hat - E) / L_hat and w_N = the N part's share of the inner sum:
        d log L_hat / d e = (1 - q) dlogE/de, / d n_c = q alpha_N w_N, / d d_c = q alpha_D (1 - w_N),
        / d p_N = q alpha_D w_N u_N, / d p_D = q (t - alpha_D w_N u_N)."""
        log_E, u_n, u_d, t = self._parts(theta, dtype)
        e = theta[:, :1].astype(dtype)
        sig = _sigmoid(e)
        E = self.floor + (self._U - self.floor) * sig
        with np.errstate(divide="ignore", invalid="ignore"):
            dlogE = np.where(E > 0, (self._U - self.floor) * sig * (1 - sig) / E, 1 - sig).astype(dtype)
        log_hat = np.logaddexp(log_E, t)
        q = np.exp(t - log_hat)
        w_n = np.exp(u_n - np.logaddexp(u_n, u_d))
        r = log_hat - self.log_loss.astype(dtype)
        psi = np.clip(r, -self.delta, self.delta)
        c = np.minimum(np.abs(r), self.delta)
        huber = (np.abs(r) - 0.5 * c) * c
        if weights is not None:
            huber = huber * weights
            psi = psi * weights
        a_n, a_d = np.exp(theta[:, 3:4]).astype(dtype), np.exp(theta[:, 4:5]).astype(dtype)
        pq = psi * q
        grad = np.zeros(theta.shape)
        grad[:, 0] = (psi * (1 - q)).sum(1) * dlogE[:, 0]
        grad[:, 1] = (pq * w_n).sum(1) * a_n[:, 0]
        grad[:, 2] = (pq * (1 - w_n)).sum(1) * a_d[:, 0]
        inner = a_d * w_n * u_n
        grad[:, 3] = (pq * inner).sum(1)
        grad[:, 4] = (pq * (t - inner)).sum(1)
        return huber.sum(1, dtype=np.float64), grad
