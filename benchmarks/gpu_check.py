"""What a GPU machine checks that the CPU tests cannot: bf16 and float8 training steps of the
gpt2_124m preset (124M parameters, 1,024-token context) with MFU, the measured peak memory
(torch.cuda.max_memory_allocated) against perf/memory.py's model, torch.compile off and on, and a
short DDP run where two GPUs are visible. Each case is the whole command a user runs
(`python -m ablate ...`), read back from its result.json; the cases go to one JSON.

    bash scripts/gpu_check.sh [OUT.json]                      # on the GPU machine, <= 10 minutes
    .venv/bin/python benchmarks/gpu_check.py --model nano --steps 2 --compile off --out X.json
                                                              # the same path on a CPU (tests)

A case that the device cannot run (fp8_rowwise below CUDA capability 9.0) is recorded with the
one-line reason the command gave, not dropped.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

PRECISIONS = ("bf16", "fp8_tensorwise", "fp8_rowwise")


def device_facts() -> dict:
    facts = {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            memory_gb=round(props.total_memory / 1e9, 1),
            gpus=torch.cuda.device_count(),
        )
    try:
        import torchao

        facts["torchao"] = torchao.__version__
    except ImportError:
        facts["torchao"] = None
    return facts


def command(args, precision: str, compiled: bool, extra: list[str], run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ablate",
        f"model={args.model}",
        "model.planning_only=false",
        f"precision={precision}",
        f"hardware={args.hardware}",
        f"train.compile={str(compiled).lower()}",
        f"train.steps={args.steps}",
        f"train.batch_size={args.batch}",
        f"train.eval_interval={args.steps}",
        "train.eval_batches=1",
        "train.progress=false",
        "tracking=none",
        f"state_dir={run_dir / 'state'}",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


def run_case(args, precision: str, compiled: bool, extra: list[str] | None = None) -> dict:
    """One command, timed as the user waits for it, and what its result.json says."""
    case = {"precision": precision, "compile": compiled, "extra": extra or []}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        start = time.perf_counter()
        done = subprocess.run(command(args, precision, compiled, extra or [], run_dir), capture_output=True, text=True)
        case["wall_s"] = round(time.perf_counter() - start, 2)
        case["exit"] = done.returncode
        result = run_dir / "result.json"
        if done.returncode != 0 or not result.exists():
            lines = (done.stderr or done.stdout).strip().splitlines()
            case["reason"] = lines[-1] if lines else ""
            return case
        case.update(summary(json.loads(result.read_text())))
    return case


def summary(result: dict) -> dict:
    """The figures of a result.json this check reports, and the measured peak over the modelled one."""
    measured, modelled = result.get("measured_peak_bytes"), result.get("memory_bytes")
    return {
        "status": result["status"],
        "tokens_per_s": result["tokens_per_s"],
        "mfu": result["mfu"],
        "final_train_loss": result["final_train_loss"],
        "modelled_peak_bytes": modelled,
        "measured_peak_bytes": measured,
        "measured_over_modelled": round(measured / modelled, 3) if measured and modelled else None,
    }


def ddp_case(args) -> dict:
    if torch.cuda.device_count() < 2:
        return {"precision": "bf16", "ddp": True, "skipped": f"{torch.cuda.device_count()} GPU visible; DDP needs 2"}
    return {**run_case(args, "bf16", False, ["hardware.gpus_per_node=2"]), "ddp": True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2_124m")
    parser.add_argument("--hardware", default="auto")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--compile", choices=("off", "on", "both"), default="both")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu_check.json"))
    args = parser.parse_args(argv)
    compiles = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    cases = [run_case(args, p, c) for p in args.precisions.split(",") for c in compiles]
    cases.append(ddp_case(args))
    report = {"device": device_facts(), "model": args.model, "steps": args.steps, "batch": args.batch, "cases": cases}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for case in cases:
        figures = (
            case.get("reason")
            or case.get("skipped")
            or f"MFU {case.get('mfu')} peak x{case.get('measured_over_modelled')}"
        )
        print(f"{case['precision']:>15} compile={case.get('compile')}: {figures}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
