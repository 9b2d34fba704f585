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

`--seeds` runs the study without pruning for several sampler seeds, each putting its best trial
somewhere else, and replays each seed's trials through the pruners (seed 0's replay checked against
the real pruned studies of search.json): benchmarks/results/search_seeds.json.

`--anchor` runs the 8-trial study through Hydra's own hydra-optuna-sweeper, in a virtual environment
of its own that it makes once (benchmarks/.venv-optuna2: the plugin requires optuna<3), and through
this sweeper: benchmarks/results/search_anchor.json.
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
HYPERBAND = {"min_resource": 15, "max_resource": 150}
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
    *(f"hydra.sweeper.pruners.hyperband.{key}={value}" for key, value in HYPERBAND.items()),
]
MAX_GAP, MAX_STEPS = 0.01, 0.60
SCHEDULE_SEEDS = (0, 1, 2)
# Sampler seeds of --seeds: where each puts its best trial, against the median pruner's 4 startup
# trials (which it never prunes), is what decides whether pruning can lose it.
PRUNING_SEEDS = (0, 1, 2)
# The pruners each seed's trials are replayed through: the two of search.json, and the median
# pruner with one startup trial, under which any trial after the first can be pruned.
REPLAYED_PRUNERS = {
    "median": ("median", {}),
    "median_1_startup": ("median", {"n_startup_trials": 1}),
    "hyperband": ("hyperband", HYPERBAND),
}
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


def compare_seeds(reference: dict) -> dict:
    """For each sampler seed, the study without pruning through the real command, then what each
    pruner would have made of the same trials (replay_pruner). The replay of seed 0 is checked
    against the real pruned studies of `reference` (search.json) trial by trial."""
    seeds = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in tqdm(PRUNING_SEEDS, desc="bench_search --seeds", unit="study"):
            seeds.append(seed_row(seed, Path(tmp) / f"seed-{seed}"))
    check = replay_check(seeds[PRUNING_SEEDS.index(0)], reference) if 0 in PRUNING_SEEDS else None
    return {
        "n_trials": N_TRIALS,
        "overrides": seed_overrides(0),
        "median_startup_trials": MEDIAN_STARTUP,
        "seeds": seeds,
        "replay_matches_real_studies_of_seed_0": check,
        "machine": {"python": platform.python_version(), "threads_per_run": 1},
    }


MEDIAN_STARTUP = 4  # SearchConfig's default for the median pruner


def seed_overrides(seed: int) -> list[str]:
    """OVERRIDES with this sampler seed, no pruning and no tracking (which changes no loss)."""
    kept = [o for o in OVERRIDES if not o.startswith("hydra.sweeper.seed=")]
    return [*kept, f"hydra.sweeper.seed={seed}", "hydra.sweeper.pruner=none", "tracking=none"]


def seed_row(seed: int, workdir: Path) -> dict:
    """One seed: its unpruned study, where its best trial fell, and each pruner's replay against it."""
    data, wall_s = study_command(workdir, seed_overrides(seed))
    trials = data["trials"]
    curves = validation_curves(workdir / "studies" / "lr" / "journal.log")
    best = min((t for t in trials if t["state"] == "COMPLETE"), key=lambda t: t["value"])
    full_steps = sum(t["steps"] for t in trials)
    row = {
        "seed": seed,
        "best_trial": best["number"],
        "best_after_median_startup": best["number"] >= MEDIAN_STARTUP,
        "best_val_loss": best["value"],
        "steps_spent": full_steps,
        "wall_s": wall_s,
        "pruners": {},
    }
    for name, (pruner, settings) in REPLAYED_PRUNERS.items():
        replayed = replay_pruner(pruner, settings, trials, curves)
        found = min((t["value"] for t in replayed if t["state"] == "COMPLETE"), default=float("inf"))
        row["pruners"][name] = {
            "best_val_loss": found,
            "best_val_loss_gap": (found - best["value"]) / best["value"],
            "best_trial_pruned": replayed[best["number"]]["state"] == "PRUNED",
            "steps_fraction": sum(t["steps"] for t in replayed) / full_steps,
            "trials_pruned": sum(t["state"] == "PRUNED" for t in replayed),
            "trials": replayed,
        }
    row["trials"] = [{k: t[k] for k in ("number", "value", "params")} for t in trials]
    return row


def validation_curves(journal: Path) -> dict[int, dict[int, float]]:
    """Each trial's validation loss at every evaluation (step -> loss), from the study's journal."""
    import optuna

    from ablate.search.storage import open_storage

    study = optuna.load_study(study_name="lr", storage=open_storage(str(journal)))
    return {t.number: dict(t.intermediate_values) for t in study.trials}


def replay_pruner(pruner: str, settings: dict, trials: list[dict], curves: dict[int, dict[int, float]]) -> list[dict]:
    """The same trials, in the same order, through the study's own pruner (make_pruner) in a fresh
    study of the same name (Hyperband's brackets hash it): each reports its recorded curve and
    stops where the pruner says. Exact for one trial at a time under the random sampler, whose
    proposals do not depend on the values seen, with deterministic training."""
    import optuna

    from ablate.config.search import SearchConfig
    from ablate.search.storage import make_pruner

    cfg = SearchConfig(study_name="lr", pruner=pruner)
    cfg.pruners[pruner] = {**cfg.pruners[pruner], **settings}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="lr", pruner=make_pruner(cfg))
    replayed = []
    for t in sorted(trials, key=lambda t: t["number"]):
        trial, state, steps = study.ask(), "COMPLETE", t["steps"]
        for step, value in sorted(curves[t["number"]].items()):
            trial.report(value, step)
            if trial.should_prune():
                state, steps = "PRUNED", step
                break
        value = t["value"] if state == "COMPLETE" else None
        study.tell(trial, value, state=optuna.trial.TrialState[state])
        replayed.append({"number": t["number"], "state": state, "value": value, "steps": steps})
    return replayed


def replay_check(seed_zero: dict, reference: dict) -> dict:
    """Whether each replayed trial of seed 0 ended as the real pruned study's did (state, steps)."""
    out = {}
    for pruner in PRUNERS[1:]:
        replay, real = seed_zero["pruners"][pruner], reference["studies"][pruner]["trials"]
        out[pruner] = all(
            (r["state"], r["steps"]) == (t["state"], t["steps"]) for r, t in zip(replay["trials"], real, strict=True)
        )
    return out


def compare_anchor() -> dict:
    """hydra-optuna-sweeper against this sweeper on the 8-trial study of --schedules, for each
    sampler seed, the two alternating: busy share, span, wall time and best value of each."""
    python = anchor_python()
    studies = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in tqdm(ANCHOR_SEEDS, desc="bench_search --anchor", unit="seed"):
            studies.append(anchor_study(python, seed, Path(tmp) / f"anchor-{seed}"))
            studies.append(own_study(seed, Path(tmp) / f"own-{seed}"))
    return {
        "task_overrides": anchor_task_overrides(),
        "space": searched_space(),
        "anchor": {"python": str(python.relative_to(ROOT)), "packages": anchor_packages(), **anchor_versions(python)},
        "studies": studies,
        "machine": {"python": platform.python_version(), "threads_per_run": 1},
    }


ANCHOR_VENV = ROOT / "benchmarks" / ".venv-optuna2"
ANCHOR_APP = ROOT / "benchmarks" / "anchor_optuna_sweeper.py"
ANCHOR_SEEDS = (0,)
# Hydra's own Optuna sweeper, its newest release for hydra-core 1.3, which requires optuna<3, and
# the joblib launcher this project's launcher benchmark compares with (bench_sweep.py).
ANCHOR_PLUGINS = ["hydra-optuna-sweeper==1.3.0", "hydra-joblib-launcher==1.2.0"]


def anchor_packages() -> list[str]:
    """The project's own dependencies but Optuna 5 and its dashboard, with the upstream plugins."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [*(d for d in deps if not d.startswith("optuna")), *ANCHOR_PLUGINS]


def anchor_python() -> Path:
    """The anchor's virtual environment, made once. torch first: on these machines torch==2.13.0 is
    the CPU build on local disk (as the Makefile installs it), where pip's resolver would fetch
    the CUDA build. The project itself is not installed: it is put on the path alone (anchor_study)."""
    python = ANCHOR_VENV / "bin" / "python"
    installed = ANCHOR_VENV / ".installed"
    if not installed.exists():
        subprocess.run([sys.executable, "-m", "venv", str(ANCHOR_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, *anchor_packages()], check=True)
        installed.touch()
    return python


def anchor_versions(python: Path) -> dict:
    script = "import importlib.metadata as m; print(m.version('optuna'), m.version('hydra-core'))"
    optuna_version, hydra_version = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    return {"optuna": optuna_version, "hydra_core": hydra_version}


def anchor_task_overrides() -> list[str]:
    """SCHEDULE_OVERRIDES' run (model, data, steps), without the sweeper's and launcher's keys,
    on the model +sweep=lr composes."""
    task = [o for o in SCHEDULE_OVERRIDES if not o.startswith(("hydra", "tracking"))]
    return ["model=nano", *task, "tracking=none"]


def searched_space() -> dict[str, str]:
    """The catalogue entries of +sweep=lr for the keys SCHEDULE_OVERRIDES searches."""
    from omegaconf import OmegaConf

    lr = OmegaConf.load(ROOT / "src" / "ablate" / "conf" / "sweep" / "lr.yaml")
    params = OmegaConf.to_container(lr.hydra.sweeper.params)
    return {key: params[key.split(".")[0]][key.split(".")[1]] for key in ("optim.lr", "train.batch_size")}


def anchor_study(python: Path, seed: int, workdir: Path) -> dict:
    """The study through hydra-optuna-sweeper: batches of n_jobs trials on Hydra's joblib launcher
    (2 workers, one thread each), TPE with this sweeper's settings (5 startup trials, multivariate;
    the upstream plugin has no constant liar), no pruning (it has none)."""
    lib = workdir / "lib"
    lib.mkdir(parents=True)
    (lib / "ablate").symlink_to(ROOT / "src" / "ablate")
    overrides = [
        "--multirun",
        *anchor_task_overrides(),
        "hydra/sweeper=optuna",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "~hydra.callbacks.sweep",  # this project's sweep record, which the upstream sweeper does not open
        "hydra.sweeper.study_name=lr",
        "hydra.sweeper.n_trials=8",
        "hydra.sweeper.n_jobs=2",
        f"hydra.sweeper.sampler.seed={seed}",
        "hydra.sweeper.sampler.n_startup_trials=5",
        "hydra.sweeper.sampler.multivariate=true",
        *(f"{key}={value}" for key, value in searched_space().items()),  # sweeps, as upstream documents them
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(lib)}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(python), str(ANCHOR_APP), *overrides], cwd=workdir, capture_output=True, text=True, env=env
    )
    wall_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the anchor study {' '.join(overrides)} failed:\n{proc.stderr[-3000:]}")
    trials = json.loads((workdir / "anchor_trials.json").read_text())["trials"]
    ended = {job["num"]: job["ended_at"] for job in map(read_json_file, workdir.rglob("anchor_job.json"))}
    for t in trials:  # the launcher numbers its jobs in the order the trials were asked
        t["ended_at"] = ended[t["number"]]
    return study_row("hydra-optuna-sweeper", seed, trials, wall_s)


def read_json_file(path: Path) -> dict:
    return json.loads(path.read_text())


def own_study(seed: int, workdir: Path) -> dict:
    """The same study through this sweeper, asynchronous, with pruning off as upstream has none."""
    overrides = [
        *SCHEDULE_OVERRIDES,
        f"hydra.sweeper.seed={seed}",
        "hydra.sweeper.asynchronous=true",
        "hydra.sweeper.pruner=none",
    ]
    data, wall_s = study_command(workdir, overrides)
    return study_row("ablate", seed, data["trials"], wall_s)


def study_row(sweeper: str, seed: int, trials: list[dict], wall_s: float) -> dict:
    """Busy share as report.launches computes it: the slot-seconds from each trial's ask to its run's
    end, over 2 slots x the span from the first ask to the last end."""
    start, end = min(t["started_at"] for t in trials), max(t["ended_at"] for t in trials)
    busy = sum(t["ended_at"] - t["started_at"] for t in trials)
    best = min((t for t in trials if t["state"] == "COMPLETE"), key=lambda t: t["value"])
    return {
        "sweeper": sweeper,
        "seed": seed,
        "busy_share": busy / (2 * (end - start)),
        "span_s": end - start,
        "wall_s": wall_s,
        "best_val_loss": best["value"],
        "best_params": best["params"],
        "trials": [{k: t[k] for k in ("number", "state", "value", "params")} for t in trials],
    }


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


def report_anchor(results: dict) -> None:
    """The search table of `make bench`: each sweeper on the same space, trials and workers."""
    write_json(RESULTS / "search_anchor.json", results)
    print(f"{'sweeper':<22} {'seed':>4} {'slots busy':>10} {'span s':>7} {'wall s':>7} {'best val loss':>13}")
    for s in results["studies"]:
        print(
            f"{s['sweeper']:<22} {s['seed']:>4} {s['busy_share']:>10.0%} {s['span_s']:>7.0f} {s['wall_s']:>7.0f} "
            f"{s['best_val_loss']:>13.4f}"
        )


def report_seeds(results: dict) -> None:
    write_json(RESULTS / "search_seeds.json", results)
    for row in results["seeds"]:
        cells = ", ".join(
            f"{name} {p['best_val_loss']:.4f} ({p['best_val_loss_gap']:+.2%}) in {p['steps_fraction']:.0%} of the steps"
            for name, p in row["pruners"].items()
        )
        print(f"seed {row['seed']}: best trial {row['best_trial']}, {row['best_val_loss']:.4f} unpruned; {cells}")
    print(f"replay against the real pruned studies of seed 0: {results['replay_matches_real_studies_of_seed_0']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replot", action="store_true", help="redraw search.png from search.json, run nothing")
    parser.add_argument("--schedules", action="store_true", help="batch against asynchronous trials, 8 trials")
    parser.add_argument("--anchor", action="store_true", help="hydra-optuna-sweeper against this sweeper, 8 trials")
    parser.add_argument(
        "--seeds", action="store_true", help="pruning over several sampler seeds (search.json's seed 0 checks it)"
    )
    args = parser.parse_args()
    if args.replot:
        plot(json.loads((RESULTS / "search.json").read_text())["studies"], RESULTS / "search.png")
        return
    if args.anchor:
        report_anchor(compare_anchor())
        return
    if args.seeds:
        report_seeds(compare_seeds(json.loads((RESULTS / "search.json").read_text())))
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
