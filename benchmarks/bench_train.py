"""Trainer overhead, measured as ratios within one process (the machines are shared and noisy).

1. Throughput: the trainer's tokens/s (its whole wall time, set-up to final checkpoint) against a
   bare loop of the same model, optimizer and batches that also runs the trainer's one final
   evaluation. Target >= 0.95x.
2. Tracking: a ~30 s run with tracking=mlflow against tracking=none. Target: overhead <= 3%.

Each arm runs several times, alternating; the figure compares the fastest run of each arm, since
on a shared machine interference only ever adds time.

Writes benchmarks/results/train.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import run_config  # noqa: E402  (the tests' preset loader)

from ablate import train  # noqa: E402
from ablate.data import get_batch  # noqa: E402
from ablate.model import GPT  # noqa: E402
from ablate.optim import build_optimizer, lr_at  # noqa: E402
from ablate.tracking import ensure_experiment  # noqa: E402


def bare_loop(cfg, data, steps: int) -> float:
    """The same work as the trainer with nothing around it; returns tokens/s."""
    torch.manual_seed(cfg.train.seed)
    model = GPT(cfg.model)
    opt = build_optimizer(model, cfg.optim)
    B, T = cfg.train.batch_size, cfg.model.block_size
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = get_batch(data.train, B, T, cfg.train.seed, step, "train")
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, cfg.optim)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    evaluate(model, cfg, data)  # the trainer evaluates once, at its last step
    return steps * B * T / (time.perf_counter() - t0)


@torch.no_grad()
def evaluate(model, cfg, data) -> float:
    model.eval()
    B, T = cfg.train.batch_size, cfg.model.block_size
    losses = [model(*get_batch(data.val, B, T, cfg.train.seed, i, "val"))[1].item() for i in range(cfg.train.eval_batches)]
    model.train()
    return sum(losses) / len(losses)


def trainer_tokens_per_s(tmp: Path, steps: int, tag: str) -> float:
    cfg = run_config(tmp / tag, model="micro", **{"train.steps": steps, "train.eval_interval": steps})
    result = train.run(cfg, tmp / tag / "out")
    # wall time of the training loop including logging and the final eval/checkpoint
    return result.tokens / result.wall_s


def throughput(tmp: Path, steps: int = 300, repeats: int = 5) -> dict:
    cfg = train.prepare(run_config(tmp / "bare", model="micro", **{"train.steps": steps})).cfg
    from ablate.data import load_data

    data = load_data(cfg.data)
    bare, trainer = [], []
    for i in range(repeats):  # alternating which arm goes first
        if i % 2:
            trainer.append(trainer_tokens_per_s(tmp, steps, f"t{i}"))
        bare.append(bare_loop(cfg, data, steps))
        if not i % 2:
            trainer.append(trainer_tokens_per_s(tmp, steps, f"t{i}"))
    ratio = max(trainer) / max(bare)
    return {"bare_tokens_per_s": bare, "trainer_tokens_per_s": trainer, "ratio_best": ratio,
            "ratio_median_of_pairs": statistics.median(t / b for t, b in zip(trainer, bare)),
            "target": ">= 0.95", "met": ratio >= 0.95, "model": "micro", "steps": steps}


def tracking_overhead(tmp: Path, seconds: float = 30.0, repeats: int = 3) -> dict:
    probe = run_config(tmp / "probe", model="micro", **{"train.steps": 40})
    rate = train.run(probe, tmp / "probe" / "out").train_s / 40
    steps = max(50, int(seconds / rate))
    walls = {"mlflow": [], "none": []}
    for i in range(repeats):
        for backend in ("none", "mlflow") if i % 2 == 0 else ("mlflow", "none"):
            d = tmp / f"{backend}{i}"
            cfg = run_config(d, tracking=backend, model="micro", **{"train.steps": steps, "train.seed": i})
            if backend == "mlflow":
                ensure_experiment(cfg.tracking.uri, cfg.tracking.experiment)  # the store exists before a sweep starts
            walls[backend].append(train.run(cfg, d / "out").wall_s)
    overhead = min(walls["mlflow"]) / min(walls["none"]) - 1
    return {"steps": steps, "wall_s": walls, "overhead": overhead, "target": "<= 0.03", "met": overhead <= 0.03}


def main() -> None:
    out = ROOT / "benchmarks" / "results" / "train.json"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        figures = {
            "machine": {"node": platform.node(), "cpus": torch.get_num_threads(), "torch": torch.__version__},
            "throughput": throughput(tmp),
            "tracking_overhead": tracking_overhead(tmp),
        }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
