"""RunResult: what a run leaves behind as data (result.json in its run dir, and in MLflow)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ablate import accounting

RESULT_FILE = "result.json"


@dataclass
class RunResult:
    status: str  # finished, failed, killed, skipped
    reason: str
    config_hash: str
    model: str
    precision: str
    device: str
    params: int
    params_non_embedding: int
    steps: int
    tokens: int
    flops: float
    final_train_loss: float | None
    final_val_loss: float | None
    entropy_floor: float | None
    tokens_per_s: float | None
    mfu: float | None
    wall_s: float
    train_s: float
    mlflow_run_id: str | None

    @classmethod
    def from_trainer(cls, t, status: str, reason: str) -> "RunResult":
        import time

        cfg = t.cfg
        return cls(
            status=status,
            reason=reason,
            config_hash=t.p.config_hash,
            model=cfg.model.name,
            precision=cfg.precision.name,
            device=t.device,
            params=accounting.params(cfg.model),
            params_non_embedding=accounting.params_non_embedding(cfg.model),
            steps=t.step,
            tokens=t.tokens,
            flops=t.flops,
            final_train_loss=_finite(t.last_train_loss),
            final_val_loss=_finite(t.last_val_loss),
            entropy_floor=t.p.data.entropy_floor,
            tokens_per_s=t.tokens / t.train_time if t.train_time > 0 else None,
            mfu=accounting.mfu(t.tokens / t.train_time, cfg.model, t.peak) if t.train_time > 0 else None,
            wall_s=time.perf_counter() - t.wall_start,
            train_s=t.train_time,
            mlflow_run_id=t.tracker.run_id,
        )

    @classmethod
    def skipped(cls, p, run_id: str | None, reason: str) -> "RunResult":
        cfg = p.cfg
        return cls(
            status="skipped",
            reason=reason,
            config_hash=p.config_hash,
            model=cfg.model.name,
            precision=cfg.precision.name,
            device=p.hardware.device,
            params=accounting.params(cfg.model),
            params_non_embedding=accounting.params_non_embedding(cfg.model),
            steps=0,
            tokens=0,
            flops=0.0,
            final_train_loss=None,
            final_val_loss=None,
            entropy_floor=p.data.entropy_floor,
            tokens_per_s=None,
            mfu=None,
            wall_s=0.0,
            train_s=0.0,
            mlflow_run_id=run_id,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def write_result(result: RunResult, out_dir: Path) -> Path:
    """Atomic write of out_dir/result.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULT_FILE
    tmp = out_dir / f".{RESULT_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_result(out_dir: Path) -> RunResult:
    return RunResult(**json.loads((out_dir / RESULT_FILE).read_text()))


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
