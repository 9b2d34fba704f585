"""Does the learning rate tuned at one width carry over to wider models? muP against SP.

The same learning-rate grid is trained at three widths (fixed depth, heads, data, steps and
seeds), once in the standard parametrization (SP) and once under muP with the narrowest width
as the base (Yang et al. 2022, Tensor Programs V, Fig. 1 is this experiment at scale). The
optimum is the grid point of lowest final validation loss, refined by a parabola through it and
its two neighbours in log2(lr). Transfer holds when the optimum stays put across widths: the
drift is log2(lr*(widest) / lr*(narrowest)), in octaves (factors of 2), and what matters in
practice is the transfer penalty: the loss a wider model loses when trained at the base width's
best learning rate instead of its own.

Writes benchmarks/results/mup.json and mup.png. 42 runs, one thread each: 27 minutes measured on
the shared 2-core machine under a load average of about 15 (much less on an idle one).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import run_config  # noqa: E402  (the tests' preset loader)

from ablate import train  # noqa: E402
from ablate.sweep import write_json  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WIDTHS = (64, 128, 256)
LRS = tuple(2.0**k for k in range(-10, -3))  # 9.8e-4 .. 6.3e-2, one octave apart
SETTINGS = {
    "model": "nano", "model.n_layer": 1, "model.n_head": 4, "model.block_size": 32,
    "train.batch_size": 16, "train.steps": 120, "train.eval_interval": 120, "train.eval_batches": 8,
    "optim.warmup_steps": 10, "optim.weight_decay": 0.0, "train.seed": 0,
}


def run_one(tmp: Path, width: int, lr: float, mup: bool) -> float | None:
    overrides = {**SETTINGS, "model.n_embd": width, "optim.lr": lr, "model.mup": mup, "model.mup_base_width": WIDTHS[0]}
    name = overrides.pop("model")
    cfg = run_config(tmp / f"{'mup' if mup else 'sp'}-{width}-{lr:g}", model=name, **overrides)
    result = train.run(cfg, tmp / "out")
    return result.final_val_loss if result.status == "finished" else None


def optimum(lrs: list[float], losses: list[float | None]) -> dict:
    """Grid argmin, refined by the vertex of a parabola through it and its neighbours in log2(lr)."""
    ok = [(math.log2(lr), loss) for lr, loss in zip(lrs, losses) if loss is not None and math.isfinite(loss)]
    i = min(range(len(ok)), key=lambda j: ok[j][1])
    x, best = ok[i][0], ok[i][0]
    if 0 < i < len(ok) - 1:
        (x0, y0), (x1, y1), (x2, y2) = ok[i - 1], ok[i], ok[i + 1]
        denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
        a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
        b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denom
        if a > 0:
            best = min(max(-b / (2 * a), x0), x2)
    return {"grid_lr": 2.0**x, "lr": 2.0**best, "loss": ok[i][1]}


def transfer_penalty(lrs: list[float], base: list[float | None], wide: list[float | None], lr: float) -> float | None:
    """What using the base width's best lr costs a wider model: its loss at that lr (linear in
    log2(lr) between grid points) minus its best loss on the grid."""
    pts = [(math.log2(x), y) for x, y in zip(lrs, wide) if y is not None]
    x = math.log2(lr)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) - min(y for _, y in pts)
    return None


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    colors = plt.cm.viridis([0.0, 0.45, 0.85])
    for ax, (key, title) in zip(axes, (("sp", "standard parametrization"), ("mup", f"muP (base width {WIDTHS[0]})"))):
        part = results[key]
        for color, width in zip(colors, WIDTHS):
            row = part["losses"][str(width)]
            pts = [(lr, v) for lr, v in zip(results["lrs"], row) if v is not None]
            ax.plot(*zip(*pts), marker="o", color=color, label=f"width {width}")
            ax.axvline(part["optimum"][str(width)]["lr"], color=color, linestyle=":", linewidth=1.5)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate (Adam)")
        ax.set_title(f"{title}: optimum drifts {part['drift_octaves']:+.2f} octaves")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("final validation loss (nats/token)")
    axes[0].legend()
    low = min(v for k in ("sp", "mup") for row in results[k]["losses"].values() for v in row if v is not None)
    axes[0].set_ylim(low - 0.05, low + 1.0)
    fig.suptitle("Where is the best learning rate as the model widens? (dotted: optimum per width)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    results: dict = {"widths": list(WIDTHS), "lrs": list(LRS), "settings": SETTINGS}
    jobs = [(mup, w, lr) for mup in (False, True) for w in WIDTHS for lr in LRS]
    losses: dict = {"sp": {str(w): [] for w in WIDTHS}, "mup": {str(w): [] for w in WIDTHS}}
    with tempfile.TemporaryDirectory() as tmp:
        for mup, width, lr in tqdm(jobs, desc="bench_mup", unit="run"):
            losses["mup" if mup else "sp"][str(width)].append(run_one(Path(tmp), width, lr, mup))
    for key in ("sp", "mup"):
        opt = {str(w): optimum(list(LRS), losses[key][str(w)]) for w in WIDTHS}
        drift = math.log2(opt[str(WIDTHS[-1])]["lr"] / opt[str(WIDTHS[0])]["lr"])
        penalty = {str(w): transfer_penalty(list(LRS), losses[key][str(WIDTHS[0])], losses[key][str(w)],
                                            opt[str(WIDTHS[0])]["lr"]) for w in WIDTHS[1:]}
        results[key] = {"losses": losses[key], "optimum": opt, "drift_octaves": drift,
                        "transfer_penalty_nats": penalty}
    results["transfer"] = {
        "mup_drift_octaves": results["mup"]["drift_octaves"],
        "sp_drift_octaves": results["sp"]["drift_octaves"],
        "mup_stays_put": abs(results["mup"]["drift_octaves"]) <= 0.5,
        "sp_drifts": abs(results["sp"]["drift_octaves"]) >= 1.0,
    }
    results["wall_s"] = time.perf_counter() - t0
    results["machine"] = {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "mup.json", results)
    plot(results, RESULTS / "mup.png")
    for key in ("sp", "mup"):
        best = ", ".join(f"w{w}: {results[key]['optimum'][str(w)]['lr']:.2e}" for w in WIDTHS)
        cost = ", ".join(f"w{w}: {v:+.3f}" for w, v in results[key]["transfer_penalty_nats"].items() if v is not None)
        print(f"{key:>3}: best lr {best}; drift {results[key]['drift_octaves']:+.2f} octaves; "
              f"loss cost of the base width's lr {cost}")
    print(f"wrote {RESULTS / 'mup.json'} and mup.png in {results['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
