"""What a GPU machine checks that the CPU tests cannot, in one call of at most 8 minutes, into one JSON
(scripts/gpu_check.sh runs it on a bare machine from the source tree, with carried wheels):

1. honest time: the user's command (`python -m ablate model=gpt2_124m precision=bf16 ...`) eager and
   compiled, read back from result.json: steady tokens/s and MFU, warmup_steps, compile_s, and the
   measured peak memory against perf/memory.py's model;
2. checkpoints off the step path: the eager run checkpoints every 20 steps; result.json's
   checkpoint_s over its checkpoints is what each cost the step path (the write is in the background);
3. benchmarks/bench_gpu.py in its own process (its own budget): trainer against a bare compiled loop at
   batch 16/32/64, bf16 against fp8 tensorwise and rowwise at widths 768/2048/4096, measured against
   modelled peak compiled and eager; it writes benchmarks/results/gpu.json, which `ablate plan` and the
   precision sweep read for the fp8 crossover (perf/fp8.py);
4. every GPU of the box: a two-job sweep under the parallel launcher with hardware=<the catalogue
   entry>: each job's CUDA_VISIBLE_DEVICES (its usage.json), its GPU (result.json) and whether the two
   ran at once (they do where two GPUs are visible); a DDP run where two are visible;
5. decode: `ablate sample` on the compiled run's checkpoint, its tokens/s against the HBM bound;
6. per-block compilation (train.compile_blocks=true) against the whole model's: compile_s and steady
   tokens/s of the same command.
The short sections run first (1, 2, 4, 5, 6); the benchmark (3) takes the time left.

A case that fails is recorded with the last line it printed, not dropped; a section the time budget
cannot hold is recorded as skipped.

    bash scripts/gpu_check.sh                                  # on the GPU machine
    bash scripts/gpu_check.sh --dry-run OUT.json               # every path on a CPU, tiny (make test)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "gpu_check.json"


class Check:
    """The sizes of this check: the GPU's, or a CPU's dry run of the same paths."""

    def __init__(self, args):
        self.dry = args.dry_run
        self.hardware = "cpu" if self.dry else args.hardware
        self.model = "nano" if self.dry else "gpt2_124m"
        self.batch = 2 if self.dry else 16
        self.steps = 6 if self.dry else 60
        self.log_interval = 2 if self.dry else 10
        self.checkpoint_every = 2 if self.dry else 20
        self.compile = not self.dry  # compiling on a CPU takes minutes; the dry run checks the paths
        self.deadline = time.monotonic() + args.budget_s
        self.tmp = Path(tempfile.mkdtemp(prefix="gpu-check-"))

    def left_s(self) -> float:
        return self.deadline - time.monotonic()


def ablate(args: list[str], cwd: Path, timeout_s: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m ablate ARGS` from the source tree, as a user runs it."""
    run_env = {**os.environ, **(env or {})}
    run_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), run_env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "ablate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=max(timeout_s, 1.0),
        env=run_env,
    )


def last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def train_case(
    check: Check, name: str, compiled: bool, checkpoint_every: int, gpus: str | None = None, extra: tuple = ()
) -> dict:
    """One user command, read back from its result.json; `gpus`: the CUDA_VISIBLE_DEVICES it runs
    with (one GPU for a one-GPU run on a box of several: the run's DDP world is the GPUs it sees)."""
    precision = "fp32" if check.dry else "bf16"
    run_dir = check.tmp / name
    args = [
        f"model={check.model}",
        "model.planning_only=false",
        f"precision={precision}",
        f"hardware={check.hardware}",
        f"train.compile={str(compiled).lower()}",
        f"train.steps={check.steps}",
        f"train.batch_size={check.batch}",
        f"train.log_interval={check.log_interval}",
        f"train.eval_interval={check.steps}",
        f"train.checkpoint_interval={checkpoint_every}",
        "train.eval_batches=1",
        "train.progress=false",
        "tracking=none",
        f"state_dir={run_dir / 'state'}",  # its own: two cases of one config would skip the second
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    case: dict = {"name": name, "precision": precision, "compile": compiled, "run_dir": str(run_dir)}
    if check.left_s() < 30:
        return {**case, "skipped": "the time budget ran out"}
    start = time.perf_counter()
    done = ablate(args, check.tmp, check.left_s(), {"CUDA_VISIBLE_DEVICES": gpus} if gpus else None)
    case["wall_s"] = round(time.perf_counter() - start, 2)
    result = run_dir / "result.json"
    if done.returncode != 0 or not result.exists():
        return {**case, "exit": done.returncode, "reason": last_line(done)}
    r = json.loads(result.read_text())
    checkpoints = (r["steps"] - 1) // checkpoint_every  # mid-run ones; the last is written at the end
    measured, modelled = r.get("measured_peak_bytes"), r.get("memory_bytes")
    case.update(
        status=r["status"],
        tokens_per_s=r["tokens_per_s"],
        mfu=r["mfu"],
        warmup_steps=r.get("warmup_steps"),
        compile_s=r.get("compile_s"),
        train_s=r["train_s"],
        checkpoint_s=r.get("checkpoint_s"),
        mid_run_checkpoints=checkpoints,
        measured_peak_bytes=measured,
        modelled_peak_bytes=modelled,
        measured_over_modelled=round(measured / modelled, 3) if measured and modelled else None,
        final_train_loss=r["final_train_loss"],
    )
    return case


def checkpoint_cost(eager: dict) -> dict:
    """What each mid-run checkpoint cost the step path, from the eager run that made them; beside it the
    step's own time, so that the cost reads as steps lost."""
    n = eager.get("mid_run_checkpoints") or 0
    if not n or eager.get("checkpoint_s") is None or not eager.get("tokens_per_s"):
        return {"skipped": eager.get("reason") or eager.get("skipped") or "no mid-run checkpoint"}
    # the final checkpoint is written after the last interval, waited for: not on the step path
    per = eager["checkpoint_s"] / (n + 1)
    return {"checkpoints": n, "step_path_s_each": per, "run": eager["name"]}


def bench(check: Check, out: Path) -> dict:
    """benchmarks/bench_gpu.py in its own process, with the time left but what the last sections need."""
    budget = check.left_s() - 10
    if budget < 60 and not check.dry:
        return {"skipped": "the time budget ran out"}
    args = [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--out", str(out)]
    args += ["--dry-run"] if check.dry else ["--hardware", check.hardware]
    args += ["--budget-s", str(max(budget - 30, 10))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(args, capture_output=True, text=True, timeout=max(budget, 30), env=env)
    if done.returncode != 0 or not out.exists():
        return {"exit": done.returncode, "reason": last_line(done)}
    return json.loads(out.read_text())


def sweep(check: Check) -> dict:
    """Two runs under the parallel launcher: each job's GPUs as its own process saw them."""
    if check.left_s() < 40:
        return {"skipped": "the time budget ran out"}
    where = check.tmp / "sweep"
    hardware = "auto" if check.dry else check.hardware
    args = [
        "--multirun",
        "model=nano",
        "model.planning_only=false",
        f"hardware={hardware}",
        f"train.steps={check.steps}",
        "train.progress=false",
        "train.seed=0,1",
        "tracking=none",
        f"state_dir={check.tmp / 'state'}",
        "hydra/launcher=parallel",
        f"hydra.sweep.dir={where}",
    ]
    # the dry run hands out two GPUs by name, as a machine with two would see them
    env = {"CUDA_VISIBLE_DEVICES": "0,1"} if check.dry else None
    done = ablate(args, check.tmp, check.left_s(), env)
    jobs = []
    for n in ("0", "1"):
        usage, result = where / n / "usage.json", where / n / "result.json"
        job: dict = {"job": int(n)}
        if usage.exists():
            job["cuda_visible_devices"] = json.loads(usage.read_text()).get("cuda_visible_devices")
        if result.exists():
            r = json.loads(result.read_text())
            job.update(status=r.get("status"), gpu=r.get("gpu"), started_at=r.get("started_at"))
            job["ended_at"] = r.get("ended_at")
        jobs.append(job)
    together = all(j.get("started_at") for j in jobs) and max(j["started_at"] for j in jobs) < min(
        j["ended_at"] for j in jobs
    )
    devices = [j.get("cuda_visible_devices") for j in jobs]
    return {
        "exit": done.returncode,
        **({"reason": last_line(done)} if done.returncode else {}),
        "jobs": jobs,
        "ran_at_once": bool(together),
        "own_gpu_each": len(set(devices)) == len(devices) and None not in devices,
    }


def ddp(check: Check, gpus: int) -> dict:
    if gpus < 2:
        return {"skipped": f"{gpus} GPU visible; DDP needs 2"}
    return train_case(check, "ddp", False, 10**9, gpus="0,1", extra=("hardware.gpus_per_node=2",))


def decode(check: Check, compiled_run: dict) -> dict:
    """`ablate sample` on a run's checkpoint: decode tokens/s against the memory-bandwidth bound."""
    if compiled_run.get("status") != "finished":
        return {"skipped": "no finished run to sample from"}
    if check.left_s() < 20:
        return {"skipped": "the time budget ran out"}
    out = check.tmp / "sample.json"
    tokens = 32 if check.dry else 256  # the dry run's model holds 64 positions, gpt2_124m's 1,024
    args = [f"run={compiled_run['run_dir']}", f"tokens={tokens}", "samples=1", f"out={out}"]
    done = ablate(["sample", *args], check.tmp, check.left_s())
    if done.returncode != 0 or not out.exists():
        return {"exit": done.returncode, "reason": last_line(done)}
    return json.loads(out.read_text())["speed"]


def device_facts() -> dict:
    import torch

    facts = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.cuda.is_available()}
    facts["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=props.name, capability=f"{props.major}.{props.minor}", memory_gb=round(props.total_memory / 1e9)
        )
    try:
        import torchao

        facts["torchao"] = torchao.__version__
    except ImportError:
        facts["torchao"] = None
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="auto", help="the catalogue entry for MFU and the HBM bound (h200, ...)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--bench-out", type=Path, default=None, help="bench_gpu.py's JSON (default: beside --out)")
    parser.add_argument("--budget-s", type=float, default=450.0, help="the whole check's time")
    parser.add_argument("--dry-run", action="store_true", help="every path on a CPU, tiny")
    args = parser.parse_args(argv)
    check = Check(args)
    facts = device_facts()
    if not args.dry_run and not facts["cuda"]:
        print("error: the GPU check needs a CUDA device and none is visible (valid: a GPU machine, or --dry-run)")
        return 2
    started = time.monotonic()
    one = "0" if facts["gpus"] > 1 else None
    eager = train_case(check, "bf16_eager", False, check.checkpoint_every, one)
    compiled = train_case(check, "bf16_compiled", check.compile, 10**9, one)
    bench_out = args.bench_out or (
        ROOT / "benchmarks" / "results" / "gpu.json" if not args.dry_run else args.out.with_name("gpu_bench.json")
    )
    report = {
        "device": facts,
        "dry_run": args.dry_run,
        "hardware": check.hardware,
        "model": check.model,
        "batch": check.batch,
        "steps": check.steps,
        "runs": [eager, compiled],
        "checkpoint": checkpoint_cost(eager),
    }
    # the short sections first; the benchmark takes the time that is left
    report["sweep"] = sweep(check)
    report["ddp"] = ddp(check, facts["gpus"])
    report["decode"] = decode(check, compiled)
    report["compile_blocks"] = (
        train_case(check, "bf16_compiled_blocks", True, 10**9, one, extra=("train.compile_blocks=true",))
        if check.compile
        else {"skipped": "the dry run does not compile (minutes on a CPU; tests/run/test_timing.py does)"}
    )
    report["bench"] = bench(check, bench_out)
    report["seconds"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for run in report["runs"]:
        figures = (
            run.get("reason")
            or run.get("skipped")
            or (
                f"{run['tokens_per_s']:,.0f} tokens/s, MFU {run['mfu']}, warm-up {run['warmup_steps']} steps, "
                f"compile {run['compile_s']} s, peak x{run['measured_over_modelled']}"
            )
        )
        print(f"{run['name']}: {figures}")
    print(f"checkpoint: {report['checkpoint']}")
    print(f"sweep: {report['sweep'].get('jobs', report['sweep'])}")
    print(f"wrote {args.out} in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
