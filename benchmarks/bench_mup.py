"""Does the learning rate tuned at one width carry over to wider models, and do the wider models gain
from their width? muP against the standard parametrization (SP).

The same grid of learning rates is trained at several widths (fixed depth, heads, data, steps and
seeds), in SP and under muP with the narrowest width as the base (Yang et al. 2022, Tensor Programs
V, Fig. 1 is this experiment at scale). At the base width the two are the same network. The optimum
of each width is the grid point of lowest final validation loss, refined by a parabola through it and
its two neighbours in log2(lr). Two properties are checked:

- transfer: the optimum's drift from the base to the widest width, log2(lr*(widest) / lr*(base)), in
  octaves, is under a quarter octave under muP;
- gain: at every width muP's best loss is at most SP's best (within `--tolerance` nats).

Steps: 120-step runs (61K tokens) measured the first moments of training, where SP's wider models,
whose hidden weights keep GPT-2's std 0.02 and so grow their gain as sqrt(width), start ahead: the
default is 300 steps (2.5x the tokens). Runs go in parallel processes (`--jobs`), one thread each; CPU time is reported
(on a shared machine wall time says little).

Writes benchmarks/results/mup.json and mup.png.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ablate.files import save_figure, write_json  # noqa: E402
from support import run_config  # noqa: E402  (a run of the presets under conf/, as the tests build it)

RESULTS = ROOT / "benchmarks" / "results"
WIDTHS = (32, 64, 128, 256)
SP_OCTAVES = tuple(range(-10, -4))  # lr = 2^k: 9.8e-4 .. 3.1e-2, where SP's optimum moves
MUP_OCTAVES = tuple(range(-8, -3))  # 3.9e-3 .. 6.3e-2, around muP's
SETTINGS = {
    "model.n_layer": 1,
    "model.n_head": 4,
    "model.block_size": 32,
    "train.batch_size": 16,
    "train.eval_batches": 16,
    "optim.warmup_steps": 20,
    "optim.weight_decay": 0.0,
    "train.seed": 0,
}


def config(workdir: Path, width: int, lr: float, mup: bool, steps: int):
    """The nano preset at this width, lr and parametrization, on the small synthetic language."""
    overrides = {
        **SETTINGS,
        "model.n_embd": width,
        "model.mup": mup,
        "model.mup_base_width": WIDTHS[0],
        "optim.lr": lr,
        "train.steps": steps,
        "train.eval_interval": steps,
    }
    return run_config(workdir, **overrides)


def run_one(job: tuple) -> tuple:
    """One run in a worker process: (key, width, octave, final val loss or None, CPU seconds)."""
    import torch

    from ablate.run import train

    key, width, octave, steps = job
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(Path(tmp), width, 2.0**octave, key == "mup", steps)
        result = train.run(cfg, Path(tmp) / "out")
    loss = result.final_val_loss if result.status == "finished" else None
    return key, width, octave, loss, result.train_cpu_s


def optimum(octaves: list[int], losses: list[float | None]) -> dict:
    """Grid argmin, refined by the vertex of a parabola through it and its neighbours in log2(lr)."""
    ok = [(float(k), v) for k, v in zip(octaves, losses, strict=True) if v is not None and math.isfinite(v)]
    i = min(range(len(ok)), key=lambda j: ok[j][1])
    x, best = ok[i][0], ok[i][0]
    inside = 0 < i < len(ok) - 1
    if inside:
        (x0, y0), (x1, y1), (x2, y2) = ok[i - 1], ok[i], ok[i + 1]
        denom = (x0 - x1) * (x0 - x2) * (x1 - x2)
        a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denom
        b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denom
        if a > 0:
            best = min(max(-b / (2 * a), x0), x2)
    return {"grid_lr": 2.0**x, "lr": 2.0**best, "loss": ok[i][1], "inside_grid": inside}


def transfer_penalty(octaves: list[int], losses: list[float | None], lr: float) -> float | None:
    """What the base width's best lr costs this width: its loss there (linear in log2(lr) between grid
    points) minus its best loss on the grid."""
    pts = [(float(k), v) for k, v in zip(octaves, losses, strict=True) if v is not None]
    x = math.log2(lr)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) - min(v for _, v in pts)
    return None


def summarize(losses: dict, octaves: dict, tolerance: float) -> dict:
    out: dict = {}
    for key in ("sp", "mup"):
        opt = {str(w): optimum(list(octaves[key]), losses[key][str(w)]) for w in WIDTHS}
        drift = math.log2(opt[str(WIDTHS[-1])]["lr"] / opt[str(WIDTHS[0])]["lr"])
        base_lr = opt[str(WIDTHS[0])]["lr"]
        penalty = {str(w): transfer_penalty(list(octaves[key]), losses[key][str(w)], base_lr) for w in WIDTHS[1:]}
        out[key] = {
            "octaves": list(octaves[key]),
            "losses": losses[key],
            "optimum": opt,
            "drift_octaves": drift,
            "transfer_penalty_nats": penalty,
        }
    gap = {str(w): out["mup"]["optimum"][str(w)]["loss"] - out["sp"]["optimum"][str(w)]["loss"] for w in WIDTHS}
    out["checks"] = {
        "mup_drift_octaves": out["mup"]["drift_octaves"],
        "sp_drift_octaves": out["sp"]["drift_octaves"],
        "mup_drift_under_quarter_octave": abs(out["mup"]["drift_octaves"]) < 0.25,
        "mup_best_minus_sp_best_nats": gap,
        "tolerance_nats": tolerance,
        "mup_best_le_sp_best_every_width": all(g <= tolerance for g in gap.values()),
        "optima_inside_their_grids": all(
            o["inside_grid"] for key in ("sp", "mup") for o in out[key]["optimum"].values()
        ),
    }
    return out


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.4), sharey=True)
    colors = plt.cm.viridis([0.0, 0.3, 0.6, 0.85])
    titles = (("sp", "standard parametrization"), ("mup", f"muP (base width {WIDTHS[0]})"))
    for ax, (key, title) in zip(axes, titles, strict=True):
        part = results[key]
        for color, width in zip(colors, WIDTHS, strict=True):
            row = part["losses"][str(width)]
            pts = [(2.0**k, v) for k, v in zip(part["octaves"], row, strict=True) if v is not None]
            ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=f"width {width}")
            ax.axvline(part["optimum"][str(width)]["lr"], color=color, linestyle=":", linewidth=1.5)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate (Adam)")
        ax.set_title(f"{title}: optimum drifts {part['drift_octaves']:+.2f} octaves", fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("final validation loss (nats/token)")
    axes[0].legend()
    low = min(v for k in ("sp", "mup") for row in results[k]["losses"].values() for v in row if v is not None)
    axes[0].set_ylim(low - 0.05, low + 1.0)
    fig.suptitle(f"Best learning rate and best loss as the model widens ({results['steps']} steps; dotted: optimum)")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each")
    parser.add_argument("--tolerance", type=float, default=0.0, help="nats muP's best may exceed SP's by")
    args = parser.parse_args()
    import torch

    started, cpu0 = time.perf_counter(), time.process_time()
    octaves = {"sp": SP_OCTAVES, "mup": MUP_OCTAVES}
    jobs = [(key, w, k, args.steps) for key in ("sp", "mup") for w in WIDTHS for k in octaves[key]]
    # At the base width muP is SP: those runs are shared, not repeated.
    jobs = [j for j in jobs if not (j[0] == "mup" and j[1] == WIDTHS[0] and j[2] in SP_OCTAVES)]
    jobs.sort(key=lambda j: -j[1])  # widest first: the pool's last runs are its cheapest
    done: dict = {}
    cpu = 0.0
    with ProcessPoolExecutor(args.jobs) as pool:
        for key, width, k, loss, run_cpu in pool.map(run_one, jobs):
            done[(key, width, k)] = loss
            cpu += run_cpu
            print(f"{key:>3} width {width:>3} lr 2^{k}: {loss}", flush=True)
    for k in MUP_OCTAVES:
        if (k in SP_OCTAVES) and ("sp", WIDTHS[0], k) in done:
            done[("mup", WIDTHS[0], k)] = done[("sp", WIDTHS[0], k)]
    losses = {key: {str(w): [done.get((key, w, k)) for k in octaves[key]] for w in WIDTHS} for key in ("sp", "mup")}
    results = {
        "widths": list(WIDTHS),
        "steps": args.steps,
        "tokens_per_run": args.steps * SETTINGS["train.batch_size"] * SETTINGS["model.block_size"],
        "settings": SETTINGS,
        **summarize(losses, octaves, args.tolerance),
        "train_cpu_s": cpu,
        "wall_s": time.perf_counter() - started,
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "jobs": args.jobs},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "mup.json", results)
    plot(results, RESULTS / "mup.png")
    c = results["checks"]
    print(f"muP drift {c['mup_drift_octaves']:+.2f} octaves (SP {c['sp_drift_octaves']:+.2f})")
    print("muP best - SP best: " + ", ".join(f"w{w}: {g:+.4f}" for w, g in c["mup_best_minus_sp_best_nats"].items()))
    here = time.process_time() - cpu0
    print(f"wrote {RESULTS / 'mup.json'} and mup.png: {cpu / 60:.1f} CPU-minutes of training, {here:.0f} s here")


if __name__ == "__main__":
    main()
