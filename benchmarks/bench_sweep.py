"""The scaling sweep with the parallel launcher against the sequential one, as ratios within one run.

Both arms run the same grid through the command line (`python -m ablate +sweep=scaling`), each in a
fresh store and state dir so that nothing is skipped, with the arms alternating when repeated (the
machine is shared). Target: parallel wall time <= 0.65 x sequential.

By default the grid is the scaling preset's five models with token budgets 1/8 of its own
(8K..64K tokens instead of 64K..512K), so that both arms together take minutes, not the better part
of an hour; the structure (models, run-length spread, one process per run) is the preset's.
--full runs the preset as it is. Reported per arm: wall time, the CPU time of all its processes
(what the arm would take on idle cores) and the load average around it.

    .venv/bin/python benchmarks/bench_sweep.py [--full] [--repeats N]   -> benchmarks/results/sweep.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REDUCED_TOKENS = "8192,16384,32768,65536"
ARMS = ("parallel", "sequential")


def run_arm(arm: str, tmp: Path, full: bool) -> dict:
    """One sweep with launcher `arm` in its own directory; wall time, CPU time, outcome."""
    work = tmp / arm
    work.mkdir(parents=True)
    args = ["+sweep=scaling", f"hydra/launcher={arm}", f"hydra.sweep.dir={work / 'sweep'}",
            f"tracking.uri=sqlite:///{work / 'mlflow.db'}", f"state_dir={work / 'state'}", "train.progress=false"]
    if not full:
        args.append(f"train.tokens={REDUCED_TOKENS}")  # a command-line axis replaces the preset's
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{arm} sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads((work / "sweep" / "summary.json").read_text())
    statuses = sorted({r["status"] for r in summary["runs"]})
    if statuses != ["finished"]:
        raise SystemExit(f"{arm} sweep: statuses {statuses} (expected every run finished)")
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "runs": len(summary["runs"]),
        "run_wall_s_sum": sum(r["wall_s"] for r in summary["runs"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the scaling preset's own token budgets")
    parser.add_argument("--repeats", type=int, default=1, help="pairs of (parallel, sequential), alternating order")
    args = parser.parse_args()
    arms: dict = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.repeats):
            for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
                print(f"repeat {i + 1}/{args.repeats}: {arm} ...", file=sys.stderr, flush=True)
                arms[arm].append(run_arm(arm, Path(d) / str(i), args.full))
                print(f"  {arms[arm][-1]['wall_s']:.1f} s wall, {arms[arm][-1]['cpu_s']:.1f} s CPU", file=sys.stderr)
    ratios = [p["wall_s"] / s["wall_s"] for p, s in zip(arms["parallel"], arms["sequential"])]
    ratio = statistics.median(ratios)
    figures = {
        "what": "python -m ablate +sweep=scaling, hydra/launcher=parallel vs hydra/launcher=sequential",
        "grid": "scaling preset" if args.full else f"scaling preset with train.tokens={REDUCED_TOKENS} (1/8 of its budgets)",
        "machine": {"node": platform.node(), "cores": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "arms": arms,
        "ratios": ratios,
        "ratio_median": ratio,
        "target": "<= 0.65",
        "met": ratio <= 0.65,
    }
    out = ROOT / "benchmarks" / "results" / "sweep.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(figures, indent=2) + "\n")
    os.replace(tmp, out)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
