"""What does pruning buy a learning-rate search? The same Optuna study with and without pruners.

Each study is the real command, `python -m ablate +sweep=lr ...`, run in its own empty directory
(its own journal and MLflow store, so that no study can reuse another's finished runs), with the
same trial count, model, data, budget and training seed. The sampler is random with one seed, so
every study proposes the same learning rates and trains each one identically until a pruner stops
it: the comparison isolates what pruning costs and saves. (With TPE the proposals depend on the
values seen, so a pruned study searches different points and the comparison mixes the two effects.)
Compared with the study without pruning, each pruned study should get within 1% of its best
validation loss while spending at most 60% of its training steps.

Writes benchmarks/results/search.json and search.png (`--replot` redraws the PNG from the JSON). 26
minutes measured on the shared 2-core machine under a load average of about 15 (less when idle).

`--schedules` instead runs the 8-trial study over the learning rate and the batch size on 2 workers
(TPE with its constant liar, median pruning), once in batches of 2 and once asynchronously, and
writes benchmarks/results/search_schedules.json: each study's busy share (the slot-seconds its
trials ran over 2 x its span, from the study's own trials.json), wall time and best value.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))

from ablate.files import write_json  # noqa: E402

PRUNERS = ("none", "median", "hyperband")
N_TRIALS = 16
OVERRIDES = [
    "model.block_size=32",
    "train.batch_size=16",
    "train.steps=150",
    "train.eval_interval=15",
    "train.eval_batches=4",
    "train.seed=0",
    "train.progress=false",
    "train.checkpoint_interval=1000",
    "data.n_words=500",
    "data.train_tokens=200000",
    "data.val_tokens=20000",
    "hydra.sweeper.params.optim.lr='tag(log, interval(1e-4, 1e-1))'",
    f"hydra.sweeper.n_trials={N_TRIALS}",
    "hydra.sweeper.n_jobs=1",
    "hydra.sweeper.seed=0",
    "hydra.sweeper.sampler=random",
    "hydra.sweeper.pruners.hyperband.min_resource=15",
    "hydra.sweeper.pruners.hyperband.max_resource=150",
]
MAX_GAP, MAX_STEPS = 0.01, 0.60
SCHEDULE_SEEDS = (0, 1, 2)
# OVERRIDES' model and data, 600 steps (each trial long against the driver's own work), the batch
# size searched. Each sampler seed is one pair of studies.
SCHEDULE_OVERRIDES = [
    *(o for o in OVERRIDES[:11] if not o.startswith(("train.batch_size=", "train.steps=", "train.eval_interval="))),
    "train.steps=600",
    "train.eval_interval=50",
    "hydra.sweeper.search=[optim.lr,train.batch_size]",
    "hydra.sweeper.n_trials=8",
    "hydra.sweeper.n_jobs=2",
    "hydra/launcher=parallel",
    "hydra.launcher.workers=2",
    "hydra.launcher.threads_per_job=1",
    "tracking=none",
]


def run_study(pruner: str, workdir: Path) -> dict:
    data, wall_s = study_command(workdir, [f"hydra.sweeper.pruner={pruner}", *OVERRIDES])
    summary = data["summary"]
    return {
        "pruner": pruner,
        "best_val_loss": summary["best"]["value"],
        "best_lr": summary["best"]["params"]["optim.lr"],
        "steps_spent": summary["steps_spent"],
        "counts": summary["counts"],
        "wall_s": wall_s,
        "trials": [{k: t[k] for k in ("number", "state", "value", "steps", "params")} for t in data["trials"]],
    }


def study_command(workdir: Path, overrides: list[str]) -> tuple[dict, float]:
    """`python -m ablate +sweep=lr OVERRIDES` in its own empty directory: (its trials.json, wall seconds)."""
    workdir.mkdir(parents=True)
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", "+sweep=lr", *overrides], cwd=workdir, capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"the study {' '.join(overrides)} failed:\n{proc.stderr[-3000:]}")
    return json.loads((workdir / "studies" / "lr" / "trials.json").read_text()), time.perf_counter() - t0


def compare_schedules() -> dict:
    """The same 8-trial study in batches and asynchronously, for each sampler seed: busy share,
    wall time, best value."""
    studies = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed, asynchronous in itertools.product(SCHEDULE_SEEDS, (False, True)):
            name = "asynchronous" if asynchronous else "batch"
            overrides = [
                *SCHEDULE_OVERRIDES,
                f"hydra.sweeper.seed={seed}",
                f"hydra.sweeper.asynchronous={str(asynchronous).lower()}",
            ]
            data, wall_s = study_command(Path(tmp) / f"{name}-{seed}", overrides)
            summary = data["summary"]
            (launch,) = summary["launches"]
            studies.append(
                {
                    "schedule": name,
                    "seed": seed,
                    "busy_share": launch["busy_share"],
                    "span_s": launch["span_s"],
                    "wall_s": wall_s,
                    "best_val_loss": summary["best"]["value"],
                    "best_params": summary["best"]["params"],
                    "steps_spent": summary["steps_spent"],
                    "counts": summary["counts"],
                }
            )
    return {"overrides": SCHEDULE_OVERRIDES, "studies": studies, "machine": {"python": platform.python_version()}}


def anytime(trials: list[dict]) -> tuple[list[int], list[float]]:
    """Best final val loss found so far against the training steps spent so far (trial order)."""
    steps, best, xs, ys = 0, float("inf"), [], []
    for t in sorted(trials, key=lambda t: t["number"]):
        steps += t["steps"] or 0
        if t["state"] == "COMPLETE" and t["value"] is not None:
            best = min(best, t["value"])
        if best < float("inf"):
            xs.append(steps)
            ys.append(best)
    return xs, ys


def plot(studies: dict, path: Path) -> Path:
    """Left: best loss so far against steps spent. Right: the steps each proposed learning rate got."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    markers = {"none": "o", "median": "s", "hyperband": "^"}
    for name, s in studies.items():
        xs, ys = anytime(s["trials"])
        left.step(
            xs,
            ys,
            where="post",
            marker=markers.get(name, "o"),
            markersize=3,
            label=f"{name}: best {s['best_val_loss']:.4f}, {s['steps_spent']:,} steps",
        )
        lrs = [t["params"]["optim.lr"] for t in s["trials"]]
        right.scatter(lrs, [t["steps"] or 0 for t in s["trials"]], marker=markers.get(name, "o"), alpha=0.7, label=name)
    left.set_xlabel("training steps spent by the study")
    left.set_ylabel("best final validation loss so far (nats/token)")
    left.set_title(f"{N_TRIALS} trials, same learning rates (random sampler, seed 0)")
    left.grid(True, alpha=0.3)
    left.legend()
    base = studies["none"]["trials"]
    twin = right.twinx()
    pts = sorted((t["params"]["optim.lr"], t["value"]) for t in base if t["value"] is not None)
    twin.plot(*zip(*pts, strict=False), color="gray", linewidth=1, linestyle="--")
    twin.set_ylabel("final val loss without pruning (dashed)", color="gray")
    right.set_xscale("log")
    right.set_xlabel("learning rate")
    right.set_ylabel("training steps the trial got")
    right.set_title("Pruners stop the bad learning rates early")
    right.grid(True, alpha=0.3)
    right.legend(loc="center left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replot", action="store_true", help="redraw search.png from search.json, run nothing")
    parser.add_argument("--schedules", action="store_true", help="batch against asynchronous trials, 8 trials")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads((RESULTS / "search.json").read_text())["studies"], RESULTS / "search.png")
        return
    if args.schedules:
        results = compare_schedules()
        write_json(RESULTS / "search_schedules.json", results)
        for s in results["studies"]:
            print(
                f"seed {s['seed']}, {s['schedule']}: slots busy {s['busy_share']:.0%} of {s['span_s']:.0f} s, "
                f"best val loss {s['best_val_loss']:.4f}, {s['steps_spent']:,} steps, {s['wall_s']:.0f} s"
            )
        return
    t0 = time.perf_counter()
    studies = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pruner in tqdm(PRUNERS, desc="bench_search", unit="study"):
            studies[pruner] = run_study(pruner, Path(tmp) / pruner)
    base = studies["none"]
    comparisons = {}
    for name in PRUNERS[1:]:
        s = studies[name]
        gap = (s["best_val_loss"] - base["best_val_loss"]) / base["best_val_loss"]
        fraction = s["steps_spent"] / base["steps_spent"]
        comparisons[name] = {
            "best_val_loss_gap": gap,
            "steps_fraction": fraction,
            "within_1pct": gap <= MAX_GAP,
            "at_most_60pct_steps": fraction <= MAX_STEPS,
        }
    results = {
        "n_trials": N_TRIALS,
        "overrides": OVERRIDES,
        "studies": studies,
        "vs_no_pruning": comparisons,
        "targets": {"best_val_loss_gap_max": MAX_GAP, "steps_fraction_max": MAX_STEPS},
        "wall_s": time.perf_counter() - t0,
        "machine": {"python": platform.python_version(), "threads_per_run": 1},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "search.json", results)
    plot(studies, RESULTS / "search.png")
    print(f"no pruning: best val loss {base['best_val_loss']:.4f} in {base['steps_spent']:,} steps")
    for name, c in comparisons.items():
        print(
            f"{name}: best {studies[name]['best_val_loss']:.4f} ({c['best_val_loss_gap']:+.2%}), "
            f"{c['steps_fraction']:.0%} of the steps"
        )
    print(f"wrote {RESULTS / 'search.json'} and search.png in {results['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
