"""Two versions of the code against each other, as the user waits, in one run of this script.

Each version is a git worktree of its commit under benchmarks/.versions/SHA (ignored), run with this
checkout's .venv and PYTHONPATH=TREE/src, which puts that tree's `ablate` and Hydra plugins ahead of
the editable install's (checked before anything is timed, and again on every run through the commit
its result.json records). The figures, each a whole command's wall time and the CPU time of all its
processes (resource.getrusage(RUSAGE_CHILDREN)), every process on one thread (OMP_NUM_THREADS=1):
on 2 cores shared with other work, a run on two threads slowed 4 to 14 times whenever another
process took a core, one on one thread about twice.

    one_run    python -m ablate model=tiny model.n_embd=128 train.progress=false train.steps=270
               tracking=none (bench_train.py's 270-step run), and the trainer's own tokens/s that the
               run's result.json records (tokens over the training steps' wall time), and over
               their CPU time (train_cpu_s), which such load inflates less
    one_step   the same command with train.steps=1: start-up, composing and parsing the config,
               preparing the run, a step, the final evaluation and checkpoint
    sweep      8 one-step nano runs as one sweep under hydra/launcher=parallel, one thread each,
               into an existing store (bench_sweep.py's one-step arm)

Rounds alternate which version goes first (before, after; then after, before; ...), each figure's
two runs back to back, so that the load of a shared machine falls on both. Per round, the speed of
after over before (before's time / after's time; after's tokens/s / before's); over the rounds, the
median of those ratios and its distribution-free interval (bench_train.median_interval). A figure is
kept (`met`) where the interval reaches 1, or its lower end is at least 0.95.

    .venv/bin/python benchmarks/bench_versions.py --before REF [--after REF] [--rounds N] [--quick]
        -> benchmarks/results/versions.json (quick: benchmarks/results/quick/versions.json), and its table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ablate.files import write_json
from bench_sweep import ONE_STEP, ONE_THREAD, ablate, launcher_args, store_args
from bench_train import RUN, median_interval

ROOT = Path(__file__).resolve().parents[1]
TREES = ROOT / "benchmarks" / ".versions"
ONE_RUN_STEPS = 270
SWEEP_JOBS = 8
KEPT = 0.95  # the lowest speed ratio a figure's interval may end at and still count as no worse

# Printed by each tree's interpreter: where its ablate and Hydra plugins were imported from.
WHERE = """
import importlib, json, pkgutil
import ablate, hydra_plugins
names = sorted(m.name for m in pkgutil.iter_modules(hydra_plugins.__path__))
print(json.dumps([ablate.__file__] + [importlib.import_module(f"hydra_plugins.{n}").__file__ for n in names]))
"""


@dataclass(frozen=True)
class Version:
    name: str  # "before" or "after"
    ref: str
    sha: str
    tree: Path

    @property
    def env(self) -> dict:
        return {"PYTHONPATH": str(self.tree / "src")}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def checkout(name: str, ref: str) -> Version:
    """A worktree of `ref` (made once per commit), its code checked to be what a run imports."""
    try:
        sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"--{name} {ref} is not a commit of this repository (valid: a sha, branch or tag)") from None
    tree = TREES / sha
    if not tree.exists():
        git("worktree", "add", "--detach", str(tree), sha)
    version = Version(name, ref, sha, tree)
    imported = json.loads(
        subprocess.run(
            [sys.executable, "-c", WHERE], capture_output=True, text=True, check=True, env={**os.environ, **version.env}
        ).stdout
    )
    strays = [p for p in imported if not Path(p).is_relative_to(tree)]
    if strays:
        raise SystemExit(f"--{name} {ref}: PYTHONPATH={tree / 'src'} imports {', '.join(strays)} from outside its tree")
    return version


def finished(result: dict, version: Version, steps: int, where: Path) -> dict:
    """The run's result.json, checked to be a finished run of `steps` steps made by `version`'s code."""
    made_by = (result.get("environment") or {}).get("ablate_commit")
    if result["status"] != "finished" or result["steps"] != steps or made_by != version.sha:
        raise SystemExit(
            f"{where}: {result['status']} after {result['steps']} steps by ablate {made_by} "
            f"(expected {steps} steps finished by {version.name}'s {version.sha})"
        )
    return result


def one_run(version: Version, steps: int, work: Path) -> dict:
    """The 270-step (or one-step) command, tracking=none, a state dir of its own (nothing to resume)."""
    work.mkdir(parents=True)
    args = [
        *RUN,
        f"train.steps={steps}",
        "tracking=none",
        f"state_dir={work / 'state'}",
        f"hydra.run.dir={work / 'run'}",
    ]
    load = os.getloadavg()[0]
    wall, cpu = ablate(args, work, {**ONE_THREAD, **version.env})
    result = finished(json.loads((work / "run" / "result.json").read_text()), version, steps, work)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "tokens_per_s": result["tokens_per_s"],
        "train_s": result["train_s"],
        # the steps' CPU time, which a loaded machine inflates less than their wall time
        "tokens_per_cpu_s": result["tokens"] / result["train_cpu_s"],
        "load": load,
    }


def sweep(version: Version, seeds: range, store: Path, work: Path) -> dict:
    """bench_sweep.py's one-step sweep of len(seeds) nano runs, parallel launcher, into `store`'s store."""
    args = ["--multirun", *ONE_STEP, f"train.seed={','.join(map(str, seeds))}", *launcher_args("parallel")]
    load = os.getloadavg()[0]
    wall, cpu = ablate([*args, *store_args(store), f"hydra.sweep.dir={work}"], store, {**ONE_THREAD, **version.env})
    runs = json.loads((work / "summary.json").read_text())["runs"]
    if len(runs) != len(seeds):
        raise SystemExit(f"{work}: {len(runs)} runs in the summary (expected {len(seeds)})")
    for run in runs:
        finished(run, version, 1, work / str(run["job"]))
    return {"wall_s": wall, "cpu_s": cpu, "load": load}


# Run by each tree's interpreter: a one-step run under cProfile timed in CPU seconds, then the CPU
# (profiled, so inflated alike in both) of the whole command, of composing its config (Hydra's
# compose, wherever the version keeps it) and of the run's task (parse, prepare, train, record).
PROFILED = """
import cProfile, json, pstats, runpy, sys, time
sys.argv = ["ablate", *sys.argv[1:]]
profile = cProfile.Profile(time.process_time)
try:
    profile.runcall(runpy.run_module, "ablate", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
stats = pstats.Stats(profile).stats
def cumulative(name, file=""):
    return sum(v[3] for k, v in stats.items() if k[2] == name and k[0].endswith(file))
total = sum(v[2] for v in stats.values())
parts = {"compose": cumulative("_compose_master"), "task": cumulative("task", "cli/train.py")}
print(json.dumps({"total": total, **parts}))
"""


def profile_one_step(versions: tuple[Version, Version], repeats: int, tmp: Path) -> dict:
    """Where a one-step run's CPU goes in each version: the medians of `repeats` profiled runs, alternating."""
    runs: dict = {v.name: [] for v in versions}
    for i in range(repeats):
        for v in versions if i % 2 == 0 else versions[::-1]:
            work = tmp / v.name / f"profile{i}"
            args = [*RUN, "train.steps=1", "tracking=none", f"state_dir={work / 'state'}", f"hydra.run.dir={work}"]
            env = {**os.environ, **ONE_THREAD, **v.env}
            proc = subprocess.run([sys.executable, "-c", PROFILED, *args], capture_output=True, text=True, env=env)
            runs[v.name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {
        name: {part: statistics.median(r[part] for r in rows) for part in ("total", "compose", "task")}
        for name, rows in runs.items()
    }


def speed_ratios(rounds: list[dict], figure: str, key: str, faster: str) -> list[float]:
    """after's speed over before's, round by round: time before / time after where `faster` is
    'lower', after / before where it is 'higher' (a rate)."""
    pairs = [(r["before"][figure][key], r["after"][figure][key]) for r in rounds]
    return [b / a if faster == "lower" else a / b for b, a in pairs]


FIGURES = {  # name: (figure, key, which way is faster)
    "one_run_wall": ("one_run", "wall_s", "lower"),
    "one_run_cpu": ("one_run", "cpu_s", "lower"),
    "trainer_tokens_per_s": ("one_run", "tokens_per_s", "higher"),
    "trainer_tokens_per_cpu_s": ("one_run", "tokens_per_cpu_s", "higher"),
    "one_step_wall": ("one_step", "wall_s", "lower"),
    "one_step_cpu": ("one_step", "cpu_s", "lower"),
    "sweep_wall": ("sweep", "wall_s", "lower"),
    "sweep_cpu": ("sweep", "cpu_s", "lower"),
}


def verdict(ratios: list[float]) -> dict:
    median, interval = median_interval(ratios)
    return {"median": median, "interval": interval, "met": interval[0] >= KEPT or interval[1] >= 1.0}


def measure(versions: tuple[Version, Version], rounds: int, steps: int, tmp: Path) -> Iterator[dict]:
    """`rounds` rounds, each as it ends: the first version first in even rounds, second in odd ones."""
    for v in versions:  # each tree's bytecode, both models' data, the store every sweep goes into
        (tmp / v.name).mkdir()
        one_run(v, 1, tmp / v.name / "warm")
        ablate([*ONE_STEP, "train.seed=9999", *store_args(tmp / v.name)], tmp / v.name, {**ONE_THREAD, **v.env})
    for i in range(rounds):
        order = versions if i % 2 == 0 else versions[::-1]
        row: dict = {"first": order[0].name, "before": {}, "after": {}}
        for figure in ("one_run", "one_step", "sweep"):
            for v in order:
                work = tmp / v.name / f"{figure}{i}"
                if figure == "sweep":
                    seeds = range(i * SWEEP_JOBS, (i + 1) * SWEEP_JOBS)
                    row[v.name][figure] = sweep(v, seeds, tmp / v.name, work)
                else:
                    row[v.name][figure] = one_run(v, steps if figure == "one_run" else 1, work)
                print(f"round {i} {figure} {v.name}: {row[v.name][figure]['wall_s']:.1f} s", file=sys.stderr)
        yield row


def table(figures: dict) -> str:
    b, a = figures["before"], figures["after"]
    lines = [
        f"after {a['sha'][:7]} over before {b['sha'][:7]}, speed (> 1: after faster), {figures['rounds']} rounds "
        f"(load average {figures['load_range'][0]:.1f}..{figures['load_range'][1]:.1f})",
        "",
        "| figure | median | interval | kept |",
        "|---|---|---|---|",
    ]
    for name, r in figures["speed_after_over_before"].items():
        lo, hi = r["interval"]
        lines.append(f"| {name} | {r['median']:.3f} | {lo:.3f}..{hi:.3f} | {'yes' if r['met'] else 'NO'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the older commit (sha, branch or tag)")
    parser.add_argument("--after", default="HEAD", help="the newer commit (default HEAD)")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds (default 9)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 20-step runs: a check, not the figures")
    parser.add_argument(
        "--profile", type=int, metavar="N", help="only profile N one-step runs of each, into the results file"
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error(f"--rounds {args.rounds} is too few for an interval (valid: 2 or more)")
    rounds, steps = (2, 20) if args.quick else (args.rounds, ONE_RUN_STEPS)
    versions = (checkout("before", args.before), checkout("after", args.after))
    out = ROOT / "benchmarks" / "results" / ("quick" if args.quick else "") / "versions.json"
    if args.profile:
        with tempfile.TemporaryDirectory() as d:
            profiled = profile_one_step(versions, args.profile, Path(d))
        figures = json.loads(out.read_text())
        write_json(out, {**figures, "one_step_profile": {"runs_each": args.profile, "cpu_s_profiled": profiled}})
        print(json.dumps(profiled, indent=1))
        return
    measured: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        for row in measure(versions, rounds, steps, Path(d)):
            measured.append(row)
            if len(measured) >= 2:  # each round's figures kept as they come: a long run stopped keeps them
                write_json(out, summary(versions, measured, steps))
    print(table(summary(versions, measured, steps)))


def summary(versions: tuple[Version, Version], measured: list[dict], steps: int) -> dict:
    loads = [r[v][f]["load"] for r in measured for v in ("before", "after") for f in ("one_run", "one_step", "sweep")]
    return {
        "what": "the same commands run by two commits' code, alternating, each timed as the user waits",
        "commands": {
            "one_run": f"OMP_NUM_THREADS=1 python -m ablate {' '.join(RUN)} train.steps={steps} tracking=none",
            "one_step": f"OMP_NUM_THREADS=1 python -m ablate {' '.join(RUN)} train.steps=1 tracking=none",
            "sweep": f"OMP_NUM_THREADS=1 python -m ablate --multirun {' '.join(ONE_STEP)} "
            f"train.seed=<{SWEEP_JOBS} seeds> hydra/launcher=parallel (into an existing store)",
        },
        **{v.name: {"ref": v.ref, "sha": v.sha} for v in versions},
        "machine": {
            "node": platform.node(),
            "cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
        },
        "rounds": len(measured),
        "load_range": [min(loads), max(loads)],
        "speed_after_over_before": {name: verdict(speed_ratios(measured, *how)) for name, how in FIGURES.items()},
        "kept_when": f"the interval of after's speed over before's reaches 1 or ends at {KEPT} or above",
        "per_round": measured,
    }


if __name__ == "__main__":
    main()
