"""What the platform adds to one run, as ratios within one run of this script (the machines are shared).

1. Throughput: the trainer's tokens/s (its whole wall time, set-up to final checkpoint) against a
   bare loop of the same model, optimizer and batches that also runs the trainer's one final
   evaluation. Target >= 0.95x.
2. Tracking, as the user sees it: the wall time of the whole command `python -m ablate model=tiny
   model.n_embd=128 train.steps=270` (4 layers, width 128: about 18 s with tracking=none on 2 idle
   cores, the run length the target is set for) with tracking=mlflow, into an existing store and
   into a fresh one, against tracking=none. Importing MLflow and opening (or creating) the store
   count: the user waits for the process, not for the training loop. Target: <= 5%. A fourth arm
   adds MLflow's system metrics (tracking.system_metrics=true, MLflow's 10 s sampling) to the
   existing store; the other two tracked arms run without them.
3. Start-up: the wall and CPU time of a one-step run with tracking=none, and how much of it is
   imports (`python -X importtime`), naming the largest packages imported.
4. System metrics alone: the CPU time (every thread of the process) that MLflow's system-metrics
   monitor takes to start, per sample and to stop, against a run that only waits, on an existing
   sqlite store; and what that makes on the 270-step run at MLflow's 10 s sampling. CPU time, unlike
   the command's wall time, holds on a loaded machine. Beside it, the CPU time of logging the run's
   token dataset as its input (RunStore.log_dataset, once per run).

Each arm runs several times, alternating; the figure compares the fastest run of each arm, since
on a shared machine interference only ever adds time.

    .venv/bin/python benchmarks/bench_train.py [--quick] [--only CASE]
        -> benchmarks/results/train.json (quick: benchmarks/results/quick/train.json; one case
           alone: train_CASE.json), and its table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ablate.data.sources import get_batch  # noqa: E402
from ablate.files import write_json  # noqa: E402
from ablate.model.gpt import GPT  # noqa: E402
from ablate.model.optim import build_optimizer, lr_at  # noqa: E402
from ablate.run import train  # noqa: E402
from support import run_config  # noqa: E402  (the tests' preset loader)

RUN = ["model=tiny", "model.n_embd=128", "train.progress=false"]
TRACKING_TARGET = 0.05


def bare_loop(cfg, data, steps: int) -> float:
    """The same work as the trainer with nothing around it; returns tokens/s."""
    model, step_fn = bare_steps(cfg, data, steps)
    t0 = time.perf_counter()
    for step in range(steps):
        step_fn(step)
    evaluate(model, cfg, data)  # the trainer evaluates once, at its last step
    return steps * cfg.train.batch_size * cfg.model.block_size / (time.perf_counter() - t0)


def bare_steps(cfg, data, total: int):
    """A fresh model and its bare training step: batch, learning rate, forward, backward, clip, update."""
    torch.manual_seed(cfg.train.seed)
    model = GPT(cfg.model)
    opt = build_optimizer(model, cfg.optim)
    B, T = cfg.train.batch_size, cfg.model.block_size

    def step_fn(step: int) -> None:
        x, y = get_batch(data.train, B, T, cfg.train.seed, step, "train")
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg.optim)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, step_fn


@torch.no_grad()
def evaluate(model, cfg, data) -> float:
    model.eval()
    B, T = cfg.train.batch_size, cfg.model.block_size
    losses = [
        model(*get_batch(data.val, B, T, cfg.train.seed, i, "val"))[1].item() for i in range(cfg.train.eval_batches)
    ]
    model.train()
    return sum(losses) / len(losses)


def trainer_run(tmp: Path, steps: int, tag: str):
    """One whole run through the trainer (train.run, tracking=none): its RunResult."""
    cfg = run_config(tmp / tag, model="micro", **{"train.steps": steps, "train.eval_interval": steps})
    return train.run(cfg, tmp / tag / "out")


def throughput(tmp: Path, steps: int = 300, repeats: int = 7, step_pairs: int = 400) -> dict:
    """The trainer's whole run against a bare loop (alternating, `repeats` each), where its time
    goes (steps, and the rest: building, logging, evaluating, checkpointing), and its step against
    the bare step, the two alternating step by step in one process so that load falls on both."""
    prepared = train.prepare(run_config(tmp / "bare", model="micro", **{"train.steps": steps}))
    cfg = prepared.cfg
    from ablate.data.sources import load_data

    data = load_data(cfg.data)
    bare, runs = [], []
    for i in range(repeats):  # alternating which arm goes first
        if i % 2:
            runs.append(trainer_run(tmp, steps, f"t{i}"))
        bare.append(bare_loop(cfg, data, steps))
        if not i % 2:
            runs.append(trainer_run(tmp, steps, f"t{i}"))
    trainer = [r.tokens / r.wall_s for r in runs]
    pairs = [t / b for t, b in zip(trainer, bare, strict=True)]
    median, interval = median_interval(pairs)
    per_step = step_ratio(prepared, tmp, step_pairs)
    return {
        "bare_tokens_per_s": bare,
        "trainer_tokens_per_s": trainer,
        "ratio_best": max(trainer) / max(bare),
        "ratio_median_of_pairs": median,
        "ratio_interval": interval,
        "outside_steps_share": statistics.median(1 - r.train_s / r.wall_s for r in runs),
        "per_step": per_step,
        "target": ">= 0.95 (median of pairs)",
        "met": median >= 0.95,
        "model": "micro",
        "steps": steps,
    }


def step_ratio(prepared, tmp: Path, pairs: int, warmup: int = 20) -> dict:
    """The bare step's time over the trainer's step's (Trainer._train_step: its batch, learning
    rate, precision context, gradient accumulation and profiling ranges), the two alternating."""
    from ablate.run.trainer import Trainer
    from ablate.tracking import make_tracker

    cfg = prepared.cfg
    trainer = Trainer(prepared, make_tracker(cfg.tracking, None, spool_dir=tmp / "spool"), tmp / "s", tmp / "o")
    trainer._build(None)
    _, bare_step = bare_steps(cfg, prepared.data, prepared.total_steps)
    total = prepared.total_steps

    def trainer_step(step: int) -> None:
        trainer.step = step
        trainer._train_step()

    times = {bare_step: [], trainer_step: []}
    for step in range(warmup + pairs):
        for f in (bare_step, trainer_step) if step % 2 else (trainer_step, bare_step):
            t0 = time.perf_counter()
            f(step % total)
            times[f].append(time.perf_counter() - t0)
    ratios = [b / t for b, t in zip(times[bare_step][warmup:], times[trainer_step][warmup:], strict=True)]
    median, interval = median_interval(ratios)
    return {"pairs": pairs, "ratio_median": median, "ratio_interval": interval}


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, list[float]]:
    """The median and its distribution-free interval: the order statistics x_(k), x_(n+1-k) for the
    largest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2, which cover the median with
    probability at least `level` (with 7 values, the least and the greatest: 98%)."""
    from scipy.stats import binom

    v, n = sorted(values), len(values)
    k = 1
    while binom.cdf(k, n, 0.5) <= (1 - level) / 2:
        k += 1
    return statistics.median(v), [v[k - 1], v[n - k]]


def command(args: list[str], cwd: Path, python_flags: tuple = ()) -> tuple[float, float, str]:
    """`python -m ablate ARGS` in cwd: (wall seconds, CPU seconds, stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *python_flags, "-m", "ablate", *args], cwd=cwd, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"`ablate {' '.join(args)}` failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stderr


def tracking_cost(tmp: Path, steps: int, repeats: int) -> dict:
    """The command's wall time with tracking=mlflow (existing store, fresh store, existing store with
    system metrics) against tracking=none."""
    existing = tmp / "existing"
    existing.mkdir()
    command([*RUN, "train.steps=1", "train.seed=999", f"tracking.uri=sqlite:///{existing / 'mlflow.db'}"], existing)
    arms = {"none": [], "existing": [], "fresh": [], "system_metrics": []}
    cpu = {k: [] for k in arms}
    # The command's wall time in two parts (its result.json): the trainer's steps (train_s) and the
    # rest, start-up to exit (imports, the store's opening and the decision, closing the MLflow run).
    steps_s = {k: [] for k in arms}
    order = list(arms)
    for i in range(repeats):
        for arm in order if i % 2 == 0 else order[::-1]:
            d = tmp / f"{arm}{i}"
            d.mkdir()
            uri = {"none": None, "fresh": d / "mlflow.db"}.get(arm, existing / "mlflow.db")
            sampled = f"tracking.system_metrics={str(arm == 'system_metrics').lower()}"
            tracking = ["tracking=none"] if uri is None else [f"tracking.uri=sqlite:///{uri}", sampled]
            # a seed of its own: two arms into the existing store with one config would be one run,
            # trained by the first and skipped by the second (tracking keys are not in its hash)
            seed = i * len(order) + order.index(arm)
            args = [*RUN, f"train.steps={steps}", f"train.seed={seed}", f"state_dir={d / 'state'}", *tracking]
            wall, used, _ = command([*args, f"hydra.run.dir={d / 'run'}"], d)
            result = json.loads((d / "run" / "result.json").read_text())
            if result["status"] != "finished" or result["steps"] != steps:
                raise SystemExit(f"the {arm} arm's run {i} did not train {steps} steps: {result['status']}")
            arms[arm].append(wall)
            cpu[arm].append(used)
            steps_s[arm].append(result["train_s"])
    best = {k: min(v) for k, v in arms.items()}
    tracked = ("existing", "fresh", "system_metrics")
    # each repeat's arms ran one after another: their ratio to that repeat's untracked run is a pair
    paired = {k: median_interval([a / b - 1 for a, b in zip(arms[k], arms["none"], strict=True)]) for k in tracked}
    return {
        "command": f"python -m ablate {' '.join(RUN)} train.steps={steps}",
        "wall_s": arms,
        "cpu_s": cpu,
        "overhead_best": {k: best[k] / best["none"] - 1 for k in tracked},
        "overhead": {k: paired[k][0] for k in tracked},
        "overhead_interval": {k: paired[k][1] for k in tracked},
        "steps_s": steps_s,
        "median_s": {
            k: {
                "steps": statistics.median(steps_s[k]),
                "rest": statistics.median(w - t for w, t in zip(arms[k], steps_s[k], strict=True)),
            }
            for k in arms
        },
        "store_work": store_work(existing / "mlflow.db"),
        "target": f"<= {TRACKING_TARGET:.0%} (on an 18 s run, median of pairs)",
        "met": all(paired[k][0] <= TRACKING_TARGET for k in tracked),
    }


def store_work(db: Path) -> dict:
    """What the tracking agent does for one run of the tracked arms, phase by phase, measured by
    benchmarks/store_phases.py in a fresh interpreter without torch, as the agent is."""
    script = ROOT / "benchmarks" / "store_phases.py"
    proc = subprocess.run([sys.executable, str(script), str(db)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def system_metrics_cost(tmp: Path, seconds: float = 6.0, interval_s: float = 0.2) -> dict:
    """CPU seconds of MLflow's system-metrics monitor in this process: start, per sample, stop; and
    of logging a run's dataset input."""
    from ablate.tracking.runstore import RunStore

    store = RunStore(f"sqlite:///{tmp / 'system.db'}", "system")
    run_id = store.create_run("sampled", {})
    dataset = {"name": "synthetic", "digest": "5d41402abc4b2a76b9719d91", "source": {"kind": "synthetic"}}
    log_dataset = _cpu_while(lambda: store.log_dataset(run_id, dataset))
    idle = _cpu_while(lambda: time.sleep(seconds))
    os.environ["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"] = str(interval_s)  # MLflow's own setting
    try:
        start = _cpu_while(lambda: store.start_system_metrics(run_id, False))
        sampling = _cpu_while(lambda: time.sleep(seconds))
        stop = _cpu_while(lambda: store.stop_system_metrics(run_id))
    finally:
        del os.environ["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"]
    samples = len(store.client.get_metric_history(run_id, "system/cpu_utilization_percentage"))
    per_sample = (sampling - idle) / max(samples, 1)
    run_wall_s, run_cpu_s = tracked_run_times()
    mlflow_interval_s = 10.0  # MLflow's default sampling interval
    on_the_run = start + stop + per_sample * (run_wall_s // mlflow_interval_s + 1)
    return {
        "start_cpu_s": start,
        "per_sample_cpu_s": per_sample,
        "stop_cpu_s": stop,
        "samples": samples,
        "sampling_interval_s": interval_s,
        "the_270_step_run": {"wall_s": run_wall_s, "cpu_s": run_cpu_s},
        "on_the_270_step_run_cpu_s": on_the_run,
        "share_of_its_cpu": on_the_run / run_cpu_s,
        "log_dataset_cpu_s": log_dataset,
    }


def tracked_run_times() -> tuple[float, float]:
    """The 270-step run's wall and CPU seconds as benchmarks/results/train.json measured them: the
    fastest run of the tracking=none arm."""
    arms = json.loads((ROOT / "benchmarks" / "results" / "train.json").read_text())["tracking"]
    fastest = min(range(len(arms["wall_s"]["none"])), key=arms["wall_s"]["none"].__getitem__)
    return arms["wall_s"]["none"][fastest], arms["cpu_s"]["none"][fastest]


def _cpu_while(action) -> float:
    before = time.process_time()
    action()
    return time.process_time() - before


def startup(tmp: Path) -> dict:
    """A one-step run with tracking=none: wall and CPU time, and the imports' share by package."""
    d = tmp / "startup"
    d.mkdir()
    args = ["model=nano", "train.steps=1", "tracking=none", "train.progress=false", f"state_dir={d / 'state'}"]
    command(args, d)  # data and CPU peak cached, as for any run but the first
    wall, cpu, _ = command(args, d)
    _, _, stderr = command(args, d, ("-X", "importtime"))
    # "import time: self | cumulative | name": top-level packages by cumulative microseconds
    packages = {}
    for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)", stderr):
        if not m[2]:
            packages[m[3]] = packages.get(m[3], 0) + int(m[1]) / 1e6
    top = dict(sorted(packages.items(), key=lambda kv: -kv[1])[:8])
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "imports_s": sum(packages.values()),
        "largest_imports_s": top,
        "dynamo_imported": "torch._dynamo" in stderr,
        "mlflow_imported": re.search(r"\| +mlflow$", stderr, re.M) is not None,
    }


def table(figures: dict) -> str:
    load = f"load average {figures['load'][0]:.1f}..{figures['load'][1]:.1f}"
    rows = [f"One run ({figures['machine']['cpus']} cores, {load})", "", "| what | figure | target |", "|---|---|---|"]
    for case, case_rows in (
        ("throughput", throughput_rows),
        ("tracking", tracking_rows),
        ("startup", startup_rows),
        ("system_metrics", system_metrics_rows),
    ):
        if case in figures:
            rows += case_rows(figures[case])
    return "\n".join(rows)


def throughput_rows(t: dict) -> list[str]:
    lo, hi = t["ratio_interval"]
    step = t["per_step"]
    return [
        f"| trainer tokens/s against a bare loop (median of {len(t['bare_tokens_per_s'])} pairs, interval) | "
        f"{t['ratio_median_of_pairs']:.3f}x [{lo:.3f}, {hi:.3f}] | {t['target']} |",
        f"| ... the run's time outside its steps (build, logging, evaluation, checkpoints) | "
        f"{t['outside_steps_share']:.1%} | |",
        f"| ... the trainer's step against the bare step (median of {step['pairs']} alternating pairs) | "
        f"{step['ratio_median']:.3f}x [{step['ratio_interval'][0]:.3f}, {step['ratio_interval'][1]:.3f}] | |",
    ]


def tracking_rows(tr: dict) -> list[str]:
    best = {k: min(v) for k, v in tr["wall_s"].items()}
    arms = {
        "existing": "tracking=mlflow, existing store",
        "fresh": "tracking=mlflow, fresh store",
        "system_metrics": "tracking=mlflow, existing store, tracking.system_metrics=true",
    }
    n = len(tr["wall_s"]["none"])
    rows = [f"| `{tr['command']}`, tracking=none (fastest of {n}) | {best['none']:.1f} s | |"] + [
        f"| ... {label}: median of {n} pairs, interval | {tr['overhead'][arm]:+.1%} "
        f"[{tr['overhead_interval'][arm][0]:+.1%}, {tr['overhead_interval'][arm][1]:+.1%}] | {tr['target']} |"
        for arm, label in arms.items()
        if arm in best
    ]
    parts = tr["median_s"]
    rows += [
        f"| ... the command's median seconds in steps, and outside them: {arm} | "
        f"{parts[arm]['steps']:.1f} s, {parts[arm]['rest']:.1f} s | |"
        for arm in parts
    ]
    work = tr["store_work"]
    return rows + [
        "| ... the agent's work for one run, CPU s: "
        + ", ".join(work)
        + " | "
        + ", ".join(f"{cpu:.2f}" for cpu, _ in work.values())
        + " | |"
    ]


def startup_rows(st: dict) -> list[str]:
    return [
        f"| one-step run, tracking=none: wall, CPU, imports | {st['wall_s']:.1f} s, {st['cpu_s']:.1f} s, "
        f"{st['imports_s']:.1f} s | |",
        f"| ... torch._dynamo imported, MLflow imported | {st['dynamo_imported']}, {st['mlflow_imported']} | "
        "False, False |",
    ]


def system_metrics_rows(sm: dict) -> list[str]:
    return [
        f"| system metrics, CPU: start, per sample, stop | {sm['start_cpu_s']:.3f} s, {sm['per_sample_cpu_s']:.4f} s, "
        f"{sm['stop_cpu_s']:.3f} s | |",
        f"| ... on the 270-step run (10 s sampling) | {sm['on_the_270_step_run_cpu_s']:.2f} s CPU "
        f"({sm['share_of_its_cpu']:.2%} of its CPU) | |",
        f"| the run's dataset input, CPU (once per run) | {sm['log_dataset_cpu_s']:.3f} s | |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer repeats: a check, not the figures")
    parser.add_argument(
        "--only",
        choices=["throughput", "tracking", "startup", "system_metrics"],
        help="one case alone, into its own results file",
    )
    args = parser.parse_args()
    name = f"train_{args.only}.json" if args.only else "train.json"
    out = ROOT / "benchmarks" / "results" / ("quick" if args.quick else "") / name
    cases = {
        "throughput": lambda tmp: throughput(
            tmp, steps=100 if args.quick else 300, repeats=3 if args.quick else 7, step_pairs=60 if args.quick else 400
        ),
        "tracking": lambda tmp: tracking_cost(tmp, steps=40 if args.quick else 270, repeats=2 if args.quick else 5),
        "startup": startup,
        "system_metrics": system_metrics_cost,
    }
    load = [os.getloadavg()[0]]
    figures = {"machine": {"node": platform.node(), "cpus": torch.get_num_threads(), "torch": torch.__version__}}
    with tempfile.TemporaryDirectory() as d:
        for case, measure in cases.items():
            if args.only in (None, case):
                figures[case] = measure(Path(d))
    load.append(os.getloadavg()[0])
    figures["load"] = load
    write_json(out, figures)
    print(table(figures))


if __name__ == "__main__":
    main()
