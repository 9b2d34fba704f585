"""Sweep launchers side by side on the same sweep and machine, in one run, as ratios.

Launchers (each arm runs the same sweep through `python -m ablate`, into a store and state dir of
its own, so that nothing is skipped):
    basic       Hydra's BasicLauncher: every job in the launching process, one after another
    joblib      hydra-joblib-launcher 1.2.0: loky worker processes kept from job to job (n_jobs = cores)
    sequential  this project's process launcher, one job at a time (a process forked per job
                from a warm worker)
    parallel    the same, one job per core

Sweeps:
    scaling     +sweep=scaling with token budgets cut to 1/8 (20 runs: 5 models x 8K..64K tokens);
                --quick: nano and micro x 8K, 16K (4 runs)
    one-step    runs of nano for one step, where nearly all of a job is overhead: with each
                launcher, a sweep of N and one of 2N (N = 8; --quick: 4), so that the cost of one
                more job is the difference / N, in wall time and in CPU time (CPU time is what a
                machine shared with other work cannot inflate; one thread per job in every arm,
                OMP_NUM_THREADS=1, so that idle OpenMP threads spinning count in none). The same N
                runs launched one after another by hand (`python -m ablate ...` each) against the
                parallel sweep of N: the issue's "8 one-step runs as a sweep".

Per arm of the scaling sweep: the command's wall time, the CPU time of all its processes, the runs'
own wall times added up (each run's wall_s, set-up to its last checkpoint, from its result.json) and
the overhead per job outside training = (wall x jobs at once - runs' wall) / jobs: process start-up,
imports, composing the config, opening the store, and every job's share of the sweep's own start
and summary. Every run goes into an existing store, as in a user's second sweep.

Targets on 2 cores (issue 17): overhead <= 0.5 s per job with the warm worker; parallel <= 0.55x
sequential; parallel faster than both Hydra launchers; 8 one-step runs as a sweep <= 0.35x of the 8
by hand. A machine shared with other work slows every arm, so the load average around each arm is
recorded, and only ratios within one run are compared.

    .venv/bin/python benchmarks/bench_sweep.py [--quick] [--arms basic,joblib,sequential,parallel]
        -> benchmarks/results/sweep.json (quick: benchmarks/results/quick/sweep.json), and its tables
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("basic", "joblib", "sequential", "parallel")
GRIDS = {
    "full": ["+sweep=scaling", "train.tokens=8192,16384,32768,65536"],  # the preset's 5 models
    "quick": ["+sweep=scaling", "model=nano,micro", "train.tokens=8192,16384"],
}
ONE_STEP_RUNS = {"full": 8, "quick": 4}
ONE_STEP = ["model=nano", "train.steps=1"]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TARGETS = {"overhead_s": 0.5, "parallel_vs_sequential": 0.55, "one_step_sweep_vs_by_hand": 0.35}


def cores() -> int:
    return len(os.sched_getaffinity(0))


def ablate(args: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float]:
    """Run `python -m ablate ARGS` in cwd; (wall seconds, CPU seconds of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"`ablate {' '.join(args)}` failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def store_args(work: Path) -> list[str]:
    return [f"tracking.uri=sqlite:///{work / 'mlflow.db'}", f"state_dir={work / 'state'}", "train.progress=false"]


def launcher_args(arm: str) -> list[str]:
    return [f"hydra/launcher={arm}"] + (["hydra.launcher.workers=1"] if arm == "sequential" else [])


def concurrency(arm: str) -> int:
    return 1 if arm in ("basic", "sequential") else cores()


def sweep_arm(arm: str, grid: list[str], work: Path) -> dict:
    """One sweep with launcher `arm` in its own directory, into an existing store."""
    work.mkdir(parents=True)
    ablate([*ONE_STEP, "train.seed=9999", *store_args(work)], work)  # the store exists, as it would
    load = os.getloadavg()[0]
    wall, cpu = ablate([*grid, *launcher_args(arm), f"hydra.sweep.dir={work / 'sweep'}", *store_args(work)], work)
    summary = json.loads((work / "sweep" / "summary.json").read_text())
    runs = summary["runs"]
    statuses = sorted({r["status"] for r in runs})
    if statuses != ["finished"]:
        raise SystemExit(f"{arm}: statuses {statuses} (expected every run finished)")
    run_wall = sum(r["wall_s"] for r in runs)
    at_once = concurrency(arm)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "runs": len(runs),
        "run_wall_s_sum": run_wall,
        "jobs_at_once": at_once,
        "overhead_per_job_s": (wall * at_once - run_wall) / len(runs),
        "mfu_max": max((r.get("mfu") or 0.0) for r in runs),
        "load_before": load,
        "load_after": os.getloadavg()[0],
    }


def one_step_sweep(arm: str, n: int, first_seed: int, work: Path) -> tuple[float, float]:
    seeds = ",".join(str(first_seed + i) for i in range(n))
    args = ["--multirun", *ONE_STEP, f"train.seed={seeds}", *launcher_args(arm), *store_args(work)]
    return ablate([*args, f"hydra.sweep.dir={work / f'sweep{n}'}"], work, ONE_THREAD)


def one_step(arms: list[str], n: int, work: Path) -> dict:
    """Per-job cost of each launcher from one-step sweeps of n and 2n runs, and n runs by hand."""
    out: dict = {"runs": n, "launchers": {}}
    for arm in arms:
        d = work / arm
        d.mkdir(parents=True)
        ablate([*ONE_STEP, "train.seed=9999", *store_args(d)], d, ONE_THREAD)  # the store exists, as it would
        load = os.getloadavg()[0]
        wall_n, cpu_n = one_step_sweep(arm, n, 0, d)
        wall_2n, cpu_2n = one_step_sweep(arm, 2 * n, 1000, d)
        out["launchers"][arm] = {
            "wall_s": {str(n): wall_n, str(2 * n): wall_2n},
            "cpu_s": {str(n): cpu_n, str(2 * n): cpu_2n},
            "per_job_wall_s": (wall_2n - wall_n) / n * concurrency(arm),
            "per_job_cpu_s": (cpu_2n - cpu_n) / n,
            "load_before": load,
            "load_after": os.getloadavg()[0],
        }
    d = work / "by_hand"
    d.mkdir(parents=True)
    ablate([*ONE_STEP, "train.seed=9999", *store_args(d)], d, ONE_THREAD)
    hand_wall, hand_cpu = 0.0, 0.0
    for seed in range(n):
        wall, cpu = ablate([*ONE_STEP, f"train.seed={seed}", *store_args(d)], d, ONE_THREAD)
        hand_wall, hand_cpu = hand_wall + wall, hand_cpu + cpu
    out["by_hand"] = {"wall_s": hand_wall, "cpu_s": hand_cpu, "per_run_wall_s": hand_wall / n}
    if "parallel" in out["launchers"]:
        sweep = out["launchers"]["parallel"]
        out["parallel_sweep_vs_by_hand"] = sweep["wall_s"][str(n)] / hand_wall
        out["parallel_sweep_vs_by_hand_cpu"] = sweep["cpu_s"][str(n)] / hand_cpu
    return out


def ratios(arms: dict) -> dict:
    """Wall-time ratios, and the floor the runs' own times put under parallel / sequential: with no
    overhead at all, the parallel sweep would take its runs' summed wall time / jobs at once, and
    the sequential one its runs' summed wall time (each run there has every core's threads)."""
    out = {}
    wall = {a: r["wall_s"] for a, r in arms.items()}
    for a, b in (("parallel", "sequential"), ("parallel", "basic"), ("parallel", "joblib"), ("sequential", "basic")):
        if a in wall and b in wall:
            out[f"{a}_vs_{b}"] = wall[a] / wall[b]
    if "parallel" in arms and "sequential" in arms:
        par, seq = arms["parallel"], arms["sequential"]
        out["parallel_vs_sequential_floor"] = par["run_wall_s_sum"] / par["jobs_at_once"] / seq["run_wall_s_sum"]
    return out


def verdicts(arms: dict, rat: dict, step: dict | None) -> dict:
    out = {}
    for arm in ("sequential", "parallel"):
        if arm in arms:
            out[f"{arm}: overhead per job in the scaling sweep <= {TARGETS['overhead_s']} s"] = (
                arms[arm]["overhead_per_job_s"] <= TARGETS["overhead_s"]
            )
        if step is not None and arm in step["launchers"]:
            out[f"{arm}: CPU per one more one-step job <= {TARGETS['overhead_s']} s"] = (
                step["launchers"][arm]["per_job_cpu_s"] <= TARGETS["overhead_s"]
            )
    if "parallel_vs_sequential" in rat:
        out[f"parallel <= {TARGETS['parallel_vs_sequential']}x sequential"] = (
            rat["parallel_vs_sequential"] <= TARGETS["parallel_vs_sequential"]
        )
    for peer in ("basic", "joblib"):
        if f"parallel_vs_{peer}" in rat:
            out[f"parallel faster than {peer}"] = rat[f"parallel_vs_{peer}"] < 1.0
    if step is not None and "parallel_sweep_vs_by_hand" in step:
        out[f"{step['runs']} one-step runs as a sweep <= {TARGETS['one_step_sweep_vs_by_hand']}x by hand"] = (
            step["parallel_sweep_vs_by_hand"] <= TARGETS["one_step_sweep_vs_by_hand"]
        )
    out["no MFU above 100%"] = all(r["mfu_max"] <= 1.0 for r in arms.values())
    return out


def tables(figures: dict) -> str:
    lines = [
        f"Sweep launchers, {figures['grid']} ({figures['machine']['cores']} cores, "
        f"load average {figures['load_range'][0]:.1f}..{figures['load_range'][1]:.1f})",
        "",
        "| launcher | wall s | CPU s | runs' wall s | jobs at once | overhead s/job | vs sequential | vs basic |",
        "|---|---|---|---|---|---|---|---|",
    ]
    arms = figures["arms"]
    for name, r in arms.items():
        vs = {b: (f"{r['wall_s'] / arms[b]['wall_s']:.2f}x" if b in arms else "-") for b in ("sequential", "basic")}
        lines.append(
            f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['run_wall_s_sum']:.1f} | {r['jobs_at_once']} | "
            f"{r['overhead_per_job_s']:.2f} | {vs['sequential']} | {vs['basic']} |"
        )
    step = figures.get("one_step")
    if step:
        n = step["runs"]
        lines += [
            "",
            f"One-step runs, one thread each: sweeps of {n} and {2 * n}; one more job costs",
            "",
            f"| launcher | wall s, {n} | wall s, {2 * n} | CPU s, {n} | CPU s, {2 * n} | "
            "per job: wall s x jobs at once | per job: CPU s |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in step["launchers"].items():
            w, c = r["wall_s"], r["cpu_s"]
            lines.append(
                f"| {name} | {w[str(n)]:.1f} | {w[str(2 * n)]:.1f} | {c[str(n)]:.1f} | {c[str(2 * n)]:.1f} | "
                f"{r['per_job_wall_s']:.2f} | {r['per_job_cpu_s']:.2f} |"
            )
        hand = step["by_hand"]
        lines.append(
            f"| {n} by hand, one command each | {hand['wall_s']:.1f} | | {hand['cpu_s']:.1f} | | "
            f"{hand['per_run_wall_s']:.2f} | {hand['cpu_s'] / n:.2f} |"
        )
        if "parallel_sweep_vs_by_hand" in step:
            lines += [
                "",
                f"{n} one-step runs as one parallel sweep against {n} by hand: "
                f"{step['parallel_sweep_vs_by_hand']:.2f}x the wall time, "
                f"{step['parallel_sweep_vs_by_hand_cpu']:.2f}x the CPU time",
            ]
    rat = figures.get("ratios", {})
    if "parallel_vs_sequential_floor" in rat:
        lines += [
            "",
            f"parallel / sequential: {rat['parallel_vs_sequential']:.2f}x; the runs' own wall times alone put it at "
            f">= {rat['parallel_vs_sequential_floor']:.2f}x (one thread per run against all cores' threads)",
        ]
    lines += ["", "| target | met |", "|---|---|"]
    lines += [f"| {k} | {'yes' if v else 'NO'} |" for k, v in figures["targets"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 runs instead of 20: a check, not the figures")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {', '.join(ARMS)}")
    parser.add_argument("--no-one-step", action="store_true", help="leave out the one-step comparison")
    args = parser.parse_args()
    arms_wanted = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms_wanted) - set(ARMS))
    if unknown:
        parser.error(f"--arms {','.join(unknown)} unknown (valid: {', '.join(ARMS)})")
    scale = "quick" if args.quick else "full"
    arms: dict = {}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        warm = tmp / "warm"
        warm.mkdir()
        ablate([*ONE_STEP, "tracking=none", f"state_dir={warm / 'state'}", "train.progress=false"], warm)  # caches
        for arm in arms_wanted:
            print(f"{arm} ...", file=sys.stderr, flush=True)
            arms[arm] = sweep_arm(arm, GRIDS[scale], tmp / arm)
            loads.append(arms[arm]["load_after"])
            print(f"  {arms[arm]['wall_s']:.1f} s wall, {arms[arm]['cpu_s']:.1f} s CPU", file=sys.stderr)
        step = None
        if not args.no_one_step:
            print("one-step runs ...", file=sys.stderr, flush=True)
            step = one_step(arms_wanted, ONE_STEP_RUNS[scale], tmp / "one_step")
            loads += [r["load_after"] for r in step["launchers"].values()]
    rat = ratios(arms)
    figures = {
        "what": "the same sweep through python -m ablate with each launcher, a store of its own each, nothing skipped",
        "grid": f"{' '.join(GRIDS[scale])} ({scale})",
        "machine": {"node": platform.node(), "cores": cores(), "python": platform.python_version()},
        "load_range": [min(loads), max(loads)],
        "arms": arms,
        "ratios": rat,
        "one_step": step,
        "targets": verdicts(arms, rat, step),
    }
    out = ROOT / "benchmarks" / "results" / ("quick" if args.quick else "") / "sweep.json"
    sys.path.insert(0, str(ROOT / "src"))
    from ablate.files import write_json

    write_json(out, figures)
    print(tables(figures))


if __name__ == "__main__":
    main()
