"""plan.png: the planned run drawn on the fit's compute-optimal frontier (matplotlib, imported only
when drawing), so that where the plan stands against what its compute could reach is seen at once.

x is training compute as the law counts it, C = 6 N D. The frontier is the law's loss at the
compute-optimal split of each C (N_opt = G (C/6)^a, D_opt = C / (6 N_opt); Hoffmann et al. 2022,
approach 3) with its calibrated 95% band, from the smallest fitted compute to past the plan; the
fitted runs' compute is shaded. The planned run is a star with its 95% interval (or a line marked
not_determined), and the compute-optimal split of the same compute a diamond.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ablate.files import figure_bytes
from ablate.plan.make import Plan

if TYPE_CHECKING:
    from ablate.scaling import FitLaw

PLOT_FILE = "plan.png"
STEPS = 200  # points along the frontier
FLOPS_PER_PARAM_TOKEN = 6  # C = 6 N D, the compute the law is fitted against


def render_plan_plot(p: Plan, fit: FitLaw) -> bytes:
    """plan.png's bytes for the plan p and the fit it was priced with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    predictor, law = fit.predictor, fit.law()
    C_plan = FLOPS_PER_PARAM_TOKEN * float(p.params) * float(p.tokens)
    C_lo, C_hi = predictor.data["C"]
    C = np.geomspace(C_lo, max(C_hi, C_plan) * 3, STEPS)
    N = law.G * (C / FLOPS_PER_PARAM_TOKEN) ** law.a
    value, lo, hi = predictor.loss_band(N, C / (FLOPS_PER_PARAM_TOKEN * N), C)
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    ax.plot(C, value, color="tab:blue", label="compute-optimal frontier of the fit")
    ax.fill_between(C, lo, hi, color="tab:blue", alpha=0.2, label="its 95% interval")
    ax.axvspan(C_lo, C_hi, color="0.85", zorder=0, label="the fitted runs' compute")
    pred = p.prediction
    level = pred.verdict.level if pred is not None else "not_determined"
    if pred is not None and pred.value is not None and pred.lo is not None and pred.hi is not None:
        ax.errorbar(
            [C_plan], [pred.value], yerr=[[pred.value - pred.lo], [pred.hi - pred.value]], color="crimson", capsize=4
        )
        ax.plot([C_plan], [pred.value], marker="*", ms=14, color="crimson", mec="k", ls="", label="the planned run")
    else:
        ax.axvline(C_plan, color="crimson", ls=":", label="the planned run: not_determined")
    alt = p.alternative
    if alt.loss is not None and alt.loss.value is not None:
        ax.plot(
            [C_plan], [alt.loss.value], marker="D", color="tab:green", mec="k", ls="",
            label=f"compute-optimal at its compute: N={alt.N_opt:.3g}, D={alt.D_opt:.3g}",
        )  # fmt: skip
    if predictor.floor:
        ax.axhline(predictor.floor, color="k", ls="--", lw=1, label="the data's floor")
    ax.set_xscale("log")
    ax.set_xlabel("training compute C = 6ND (FLOPs)")
    ax.set_ylabel("loss")
    ax.set_title(f"{p.model.name}: N={p.params:.3g}, D={p.tokens:.3g} (C={C_plan:.3g}): {level}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    data = figure_bytes(fig, "png", 120)
    plt.close(fig)
    return data
