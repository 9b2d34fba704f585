"""Does the learning rate tuned at one width carry over to wider models, and do the wider models gain
from their width? muP against the standard parametrization (SP).

µTransfer (Yang et al. 2022, Tensor Programs V) tunes a model's hyperparameters once, at a narrow
base width, and carries them to wider models. Here the base width is 32 and two hyperparameters are
tuned there: the learning rate and the init scale `model.init_std` (sigma: the std of the embeddings,
and of the hidden matrices at the base width; under muP a hidden matrix's std is sigma / sqrt(m)).
Then the same grid of learning rates is trained at every width (fixed depth, heads, data, steps and
seed): under muP with the base width's sigma, and under SP twice: with the same sigma (the same
tuning effort: at the base width muP is the SP network, so one init-scale search serves both) and
with GPT-2's 0.02, the default (TP5's Fig. 1 is this experiment at scale). The optimum of each
width is the grid point of lowest final validation loss, refined by a parabola through it and its
two neighbours in log2(lr). Two properties are checked:

- transfer: the optimum's drift from the base to the widest width, log2(lr*(widest) / lr*(base)), in
  octaves, is under a quarter octave under muP;
- gain: at every width muP's best loss is at most SP's best (within `--tolerance` nats), SP with the
  base width's sigma and SP with 0.02 each.

Steps: muP's defaults untuned (sigma = 0.02) lost to SP at every width past the base, by 0.11 to 0.35
nats at 300 steps: SP's hidden std stays 0.02 as the model widens, so its init gain grows as
sqrt(width), while muP holds the base width's, and at width 32 a std of 0.02 is far below the best
(measured: 0.08). 300-step runs also leave the optimum's position to the first moments of
training: the default is 1,000 steps (512K tokens). Runs go in parallel processes (`--jobs`), one
thread each; CPU time is reported (on a shared machine wall time says little).

Writes benchmarks/results/mup.json and mup.png.
"""

from __future__ import annotations

import argparse
import json
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
BASE = WIDTHS[0]
SP_STD = 0.02  # GPT-2's init std, the preset's default
INIT_STDS = (0.02, 0.04, 0.08, 0.16)  # sigma, tuned at the base width with the learning rate
SP_OCTAVES = tuple(range(-11, -3))  # lr = 2^k: 4.9e-4 .. 6.3e-2, where SP's optimum moves
MUP_OCTAVES = tuple(range(-8, -3))  # 3.9e-3 .. 6.3e-2, around muP's
# The standard parametrization with GPT-2's std, and with the std the base width's search chose
SP_ARMS = ("sp", "sp_tuned")
ARMS = (*SP_ARMS, "mup")
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


def config(workdir: Path, width: int, lr: float, mup: bool, steps: int, init_std: float = SP_STD):
    """The nano preset at this width, lr, init scale and parametrization, on the small synthetic language."""
    overrides = {
        **SETTINGS,
        "model.n_embd": width,
        "model.mup": mup,
        "model.mup_base_width": BASE,
        "model.init_std": init_std,
        "optim.lr": lr,
        "train.steps": steps,
        "train.eval_interval": steps,
    }
    return run_config(workdir, **overrides)


def run_one(job: tuple) -> tuple:
    """One run in a worker process: job (key, width, octave, init std, steps) -> (job, final val loss
    or None, CPU seconds). Keys in SP_ARMS are the standard parametrization, any other muP."""
    import torch

    from ablate.run import train

    key, width, octave, init_std, steps = job
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(Path(tmp), width, 2.0**octave, key not in SP_ARMS, steps, init_std)
        result = train.run(cfg, Path(tmp) / "out")
    loss = result.final_val_loss if result.status == "finished" else None
    return job, loss, result.train_cpu_s


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


def base_tuning(losses: dict) -> dict:
    """At the base width, each sigma's optimum over the learning-rate grid; the chosen sigma is the one
    whose best loss is lowest."""
    rows = {f"{std:g}": optimum(list(MUP_OCTAVES), losses[std]) for std in INIT_STDS}
    chosen = min(INIT_STDS, key=lambda std: rows[f"{std:g}"]["loss"])
    return {
        "width": BASE,
        "octaves": list(MUP_OCTAVES),
        "losses": {f"{std:g}": losses[std] for std in INIT_STDS},
        "optimum": rows,
        "init_std": chosen,
    }


def summarize(losses: dict, octaves: dict, tolerance: float) -> dict:
    out: dict = {}
    for key in ARMS:
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
    gap = {sp: mup_minus(out, sp) for sp in SP_ARMS}
    out["checks"] = {
        "mup_drift_octaves": out["mup"]["drift_octaves"],
        "sp_drift_octaves": out["sp"]["drift_octaves"],
        "sp_tuned_drift_octaves": out["sp_tuned"]["drift_octaves"],
        "mup_drift_under_quarter_octave": abs(out["mup"]["drift_octaves"]) < 0.25,
        "mup_best_minus_sp_best_nats": gap["sp"],
        "mup_best_minus_sp_tuned_best_nats": gap["sp_tuned"],
        "tolerance_nats": tolerance,
        "mup_best_le_sp_best_every_width": all(g <= tolerance for g in gap["sp"].values()),
        "mup_best_le_sp_tuned_best_every_width": all(g <= tolerance for g in gap["sp_tuned"].values()),
        "optima_inside_their_grids": all(o["inside_grid"] for key in ARMS for o in out[key]["optimum"].values()),
    }
    return out


def mup_minus(out: dict, sp: str) -> dict:
    """muP's best loss minus this SP arm's, by width."""
    return {str(w): out["mup"]["optimum"][str(w)]["loss"] - out[sp]["optimum"][str(w)]["loss"] for w in WIDTHS}


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.4), sharey=True)
    colors = plt.cm.viridis([0.0, 0.3, 0.6, 0.85])
    tuning = results["base_tuning"]
    ax = axes[0]
    for color, (std, row) in zip(colors, tuning["losses"].items(), strict=True):
        pts = [(2.0**k, v) for k, v in zip(tuning["octaves"], row, strict=True) if v is not None]
        ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=f"init std {std}")
    ax.set_title(f"width {BASE}: the base width's init std and lr (chosen: {tuning['init_std']:g})", fontsize=10)
    ax.legend()
    std = tuning["init_std"]
    titles = (
        ("sp", f"SP (init std {SP_STD:g})"),
        ("sp_tuned", f"SP (init std {std:g})"),
        ("mup", f"muP (base {BASE}, init std {std:g})"),
    )
    for ax, (key, title) in zip(axes[1:], titles, strict=True):
        part = results[key]
        for color, width in zip(colors, WIDTHS, strict=True):
            row = part["losses"][str(width)]
            pts = [(2.0**k, v) for k, v in zip(part["octaves"], row, strict=True) if v is not None]
            ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=f"width {width}")
            ax.axvline(part["optimum"][str(width)]["lr"], color=color, linestyle=":", linewidth=1.5)
        ax.set_title(f"{title}: optimum drifts {part['drift_octaves']:+.2f} octaves", fontsize=10)
        ax.legend()
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate (Adam)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("final validation loss (nats/token)")
    low = min(v for k in ARMS for row in results[k]["losses"].values() for v in row if v is not None)
    axes[0].set_ylim(low - 0.05, low + 1.0)
    fig.suptitle(f"Best learning rate and best loss as the model widens ({results['steps']} steps; dotted: optimum)")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


# Jobs trained again under --reuse, their new loss set beside the recorded one: one SP and one muP
# run at the second width (key, width, octave).
RECHECKS = {("sp", WIDTHS[1], -6), ("mup", WIDTHS[1], -6)}


def train_all(jobs: list[tuple], workers: int, recorded: dict) -> tuple[dict, float, list]:
    """{job: final val loss}, the runs' CPU seconds and the rechecks; widest first, so that the
    pool's last runs are its cheapest. A job `recorded` holds is taken from it, not trained, unless
    it is in RECHECKS."""
    fresh = [j for j in jobs if j not in recorded or j[:3] in RECHECKS]
    done, cpu, rechecks = {j: recorded[j] for j in jobs if j in recorded}, 0.0, []
    with ProcessPoolExecutor(workers) as pool:
        for job, loss, run_cpu in pool.map(run_one, sorted(fresh, key=lambda j: -j[1])):
            if job in recorded:
                rechecks.append({"job": list(job), "recorded": recorded[job], "trained_again": loss})
            done[job] = loss
            cpu += run_cpu
            key, width, k, std, _ = job
            print(f"{key:>8} width {width:>3} init std {std:g} lr 2^{k}: {loss}", flush=True)
    return done, cpu, rechecks


def recorded_losses(path: Path, steps: int) -> dict:
    """{job: final val loss} of the SP, base-tuning and muP runs a previous mup.json holds, when it
    was made with these settings and steps (the training is deterministic: RECHECKS shows how far)."""
    old = json.loads(path.read_text())
    if old["steps"] != steps or old["settings"] != SETTINGS or old["widths"] != list(WIDTHS):
        raise SystemExit(f"{path} was made with other settings, steps or widths: nothing to reuse")
    tuning, std = old["base_tuning"], old["base_tuning"]["init_std"]
    jobs = {}
    for w, row in old["sp"]["losses"].items():
        jobs |= {("sp", int(w), k, SP_STD, steps): v for k, v in zip(old["sp"]["octaves"], row, strict=True)}
    for s, row in tuning["losses"].items():
        runs = zip(tuning["octaves"], row, strict=True)
        jobs |= {("base", BASE, k, float(s), steps): v for k, v in runs if not (float(s) == SP_STD and k in SP_OCTAVES)}
    for w, row in old["mup"]["losses"].items():
        if int(w) != BASE:
            jobs |= {("mup", int(w), k, std, steps): v for k, v in zip(old["mup"]["octaves"], row, strict=True)}
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each")
    parser.add_argument("--reuse", type=Path, help="a previous mup.json: its runs are not trained again (but RECHECKS)")
    parser.add_argument("--tolerance", type=float, default=0.0, help="nats muP's best may exceed SP's by")
    args = parser.parse_args()
    import torch

    started, cpu0 = time.perf_counter(), time.process_time()
    n = args.steps
    # Stage 1, with SP at every width: the base width's sigma and lr. muP at the base width with
    # SP's std is the SP network, so those runs are SP's, not repeated.
    sp_jobs = [("sp", w, k, SP_STD, n) for w in WIDTHS for k in SP_OCTAVES]
    base_jobs = [
        ("base", BASE, k, std, n) for std in INIT_STDS for k in MUP_OCTAVES if not (std == SP_STD and k in SP_OCTAVES)
    ]
    recorded = recorded_losses(args.reuse, n) if args.reuse else {}
    done, cpu, rechecks = train_all(sp_jobs + base_jobs, args.jobs, recorded)

    def base_loss(std: float, k: int) -> float | None:
        if std == SP_STD and k in SP_OCTAVES:
            return done[("sp", BASE, k, SP_STD, n)]
        return done[("base", BASE, k, std, n)]

    tuning = base_tuning({std: [base_loss(std, k) for k in MUP_OCTAVES] for std in INIT_STDS})
    std = tuning["init_std"]
    # Stage 2: the base width's sigma carried to the wider models, over the same lr grids, under
    # muP and under SP; SP's runs at the base width that the tuning grid already has are not repeated.
    tuned = [("sp_tuned", w, k, std, n) for w in WIDTHS for k in SP_OCTAVES if w != BASE or k not in MUP_OCTAVES]
    mup = [("mup", w, k, std, n) for w in WIDTHS[1:] for k in MUP_OCTAVES]
    wide, more_cpu, more_rechecks = train_all(mup + (tuned if std != SP_STD else []), args.jobs, recorded)
    done.update(wide)
    cpu += more_cpu
    rechecks += more_rechecks

    def sp_tuned_loss(w: int, k: int) -> float | None:
        if std == SP_STD:
            return done[("sp", w, k, SP_STD, n)]
        return base_loss(std, k) if w == BASE and k in MUP_OCTAVES else done[("sp_tuned", w, k, std, n)]

    losses = {
        "sp": {str(w): [done[("sp", w, k, SP_STD, n)] for k in SP_OCTAVES] for w in WIDTHS},
        "sp_tuned": {str(w): [sp_tuned_loss(w, k) for k in SP_OCTAVES] for w in WIDTHS},
        "mup": {
            str(w): [base_loss(std, k) if w == BASE else done[("mup", w, k, std, n)] for k in MUP_OCTAVES]
            for w in WIDTHS
        },
    }
    octaves = {"sp": SP_OCTAVES, "sp_tuned": SP_OCTAVES, "mup": MUP_OCTAVES}
    results = {
        "widths": list(WIDTHS),
        "steps": n,
        "tokens_per_run": n * SETTINGS["train.batch_size"] * SETTINGS["model.block_size"],
        "settings": SETTINGS,
        "sp_init_std": SP_STD,
        "base_tuning": tuning,
        **summarize(losses, octaves, args.tolerance),
        "reused": {
            "from": str(args.reuse.resolve().relative_to(ROOT)) if args.reuse else None,
            "runs": sum(j in recorded for j in done),
            "rechecks": rechecks,
        },
        "train_cpu_s": cpu,
        "wall_s": time.perf_counter() - started,
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "jobs": args.jobs},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "mup.json", results)
    plot(results, RESULTS / "mup.png")
    c = results["checks"]
    print(f"base width {BASE}: init std {std:g} (of {', '.join(f'{s:g}' for s in INIT_STDS)})")
    print(
        f"muP drift {c['mup_drift_octaves']:+.2f} octaves (SP at {SP_STD:g} {c['sp_drift_octaves']:+.2f}, "
        f"SP at {std:g} {c['sp_tuned_drift_octaves']:+.2f})"
    )
    for sp, label in (("sp", f"SP at {SP_STD:g}"), ("sp_tuned", f"SP at {std:g}")):
        gaps = c[f"mup_best_minus_{sp}_best_nats"]
        print(f"muP best - {label} best: " + ", ".join(f"w{w}: {g:+.4f}" for w, g in gaps.items()))
    here = time.process_time() - cpu0
    print(f"wrote {RESULTS / 'mup.json'} and mup.png: {cpu / 60:.1f} CPU-minutes of training, {here:.0f} s here")


if __name__ == "__main__":
    main()
