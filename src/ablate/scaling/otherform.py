"""Approach 3 in its other form, as a suggestion beside a verdict whose runs break the law.

When the runs scatter about the fitted law by more than the noise allows, or with a pattern
(checks.breaks_law), the form itself may be what is wrong: the additive form E + A/N^alpha + B/D^beta
cannot describe runs whose N and D interact, which the joint form (joint.py) can, and the other way
round. So the other form of chinchilla.FORMS is fitted to the same points, with the same floor, and
judged by the same checks; its verdict and its scatter are printed (console, fit.md, fit.json's
`other_form`), never applied: which form to predict with is the user's choice (`form=`), made with
both in view.

The refit draws REFIT_BOOT resamples, enough for the verdict's interval checks, not for intervals to
predict with; the refit with `form=` gives those.
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.scaling.checks import RunNoise, Thresholds, approach3_facts, breaks_law, law_verdict
from ablate.scaling.laws.chinchilla import FORMS, Approach3Fit, fit_approach3, law_text
from ablate.scaling.offlaw import REFIT_BOOT
from ablate.scaling.verdict import Verdict


@dataclass(frozen=True)
class OtherForm:
    """Approach 3 refitted in the other form: the fit, its verdict, and the scatter of both forms."""

    fit: Approach3Fit
    verdict: Verdict
    noise: float  # the run-to-run noise both are judged by
    rms_fitted: float  # the RMS log residual of the form that was fitted

    @property
    def form(self) -> str:
        return self.fit.form

    @property
    def rms(self) -> float:
        return self.fit.diagnostics.rms_residual

    def scatter_line(self) -> str:
        """'leaves 0.0118 in log loss, 1.05 times the noise (form=additive: 0.0228, 2.02 times)'."""
        return (
            f"leaves {self.rms:.3g} in log loss, {self.rms / self.noise:.3g} times the noise "
            f"(the form fitted: {self.rms_fitted:.3g}, {self.rms_fitted / self.noise:.3g} times)"
        )

    def to_dict(self) -> dict:
        return {
            "form": self.form,
            "law": law_text(self.fit.law),
            **self.verdict.to_dict(),
            "rms_log_residual": self.rms if self.fit.converged else None,
            "rms_log_residual_fitted": self.rms_fitted,
            "noise": self.noise,
            "params": {k: v.to_dict() for k, v in self.fit.params.items()} if self.fit.converged else None,
            "n_boot": 0 if self.fit.bootstrap is None else self.fit.bootstrap.n_resamples,
            "applied": False,
        }


def other_form(
    fit: Approach3Fit, verdict: Verdict, noise: RunNoise, th: Thresholds, seed: int = 0, n_boot: int = REFIT_BOOT
) -> OtherForm | None:
    """The other form fitted to fit.points when the fitted form's verdict says the runs break the law
    (None otherwise, or when the fit did not converge)."""
    if not fit.converged or not breaks_law(verdict):
        return None
    form = next(f for f in FORMS if f != fit.form)
    refit = fit_approach3(fit.points, floor=fit.floor, n_boot=n_boot, seed=seed, form=form)
    judged = law_verdict(approach3_facts(refit), noise, th)
    return OtherForm(refit, judged, noise.sigma, fit.diagnostics.rms_residual)
