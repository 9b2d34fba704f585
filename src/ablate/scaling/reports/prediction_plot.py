"""prediction.png: `ablate predict`'s target drawn on the law (matplotlib, imported only when drawing).

The loss the law predicts along the target's own tokens per parameter, from the smallest fitted
compute to past the target, with its calibrated 95% band (the fitted range shaded), the target as a
star with its interval, or marked not_determined, and its verdict in the title.
"""

from __future__ import annotations

import numpy as np

from ablate.files import figure_bytes
from ablate.scaling.points import FLOPS_PER_PARAM_TOKEN
from ablate.scaling.predict import Prediction, Predictor

STEPS = 200  # points along the curve


def render_prediction(pred: Predictor, p: Prediction, level: str) -> bytes:
    """prediction.png's bytes for the prediction p of the fit pred, made with the verdict `level`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratio = p.D.value / p.N.value  # tokens per parameter, held along the curve
    C_lo, C_hi = pred.data["C"]
    C = np.geomspace(C_lo, max(C_hi, p.C) * 3, STEPS)
    N = np.sqrt(C / (FLOPS_PER_PARAM_TOKEN * ratio))
    value, lo, hi = pred.loss_band(N, ratio * N, C)
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    ax.plot(C, value, color="tab:blue", label=f"the law at {ratio:.3g} tokens per parameter")
    ax.fill_between(C, lo, hi, color="tab:blue", alpha=0.2, label="its 95% interval")
    ax.axvspan(C_lo, C_hi, color="0.85", zorder=0, label="the fitted runs' compute")
    if level != "not_determined" and p.loss is not None and p.loss.ci95 is not None:
        low, high = p.loss.ci95
        ax.errorbar(
            [p.C], [p.loss.value], yerr=[[p.loss.value - low], [high - p.loss.value]], color="crimson", capsize=4
        )
        ax.plot([p.C], [p.loss.value], marker="*", ms=14, color="crimson", mec="k", ls="", label="the target")
    else:
        ax.axvline(p.C, color="crimson", ls=":", label="the target: not_determined")
    if pred.floor:
        ax.axhline(pred.floor, color="k", ls="--", lw=1, label="the data's floor")
    ax.set_xscale("log")
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel("loss")
    ax.set_title(f"N={p.N.value:.3g}, D={p.D.value:.3g} (C={p.C:.3g}): {level}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    data = figure_bytes(fig, "png", 120)
    plt.close(fig)
    return data
