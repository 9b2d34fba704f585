"""RunResult: what a run leaves behind as data (result.json in its run dir, and in MLflow)."""

from __future__ import annotations

import json
import math
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ablate.config import ConfigError
from ablate.files import read_regular, write_json
from ablate.model import accounting
from ablate.perf import gpu_memory
from ablate.provenance import environment

RESULT_FILE = "result.json"
VALID_RESULT = "the result.json that `ablate` writes in a run folder"
BRANCHES_DIR = "branches"  # a trunk's out dir holds BRANCHES_DIR/<key>=<budget>/ per cooldown branch


@dataclass
class RunResult:
    status: str  # finished, failed, killed, pruned, skipped, busy
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
    # Process CPU seconds in training steps since step 0 (a branch's include its trunk's up to its fork).
    train_cpu_s: float | None = None
    # run | trunk (a constant-rate run that its cooldown branches fork from) | branch (run/branches.py)
    kind: str = "run"
    fork_step: int | None = None  # a branch: the trunk step it started from
    # The step's peak memory as perf/memory.py models it for this device and policy (states,
    # activations, optimizer step): what a precision policy saves, comparable across machines.
    memory_bytes: int | None = None
    # Validation loss in bits per byte of text: loss / ln 2 / (bytes per token), a figure that
    # compares runs whatever their tokenizer (None when the data's bytes per token are unknown).
    final_val_bpb: float | None = None
    # The tokens trained on: {"kind", "name", "fingerprint", "packages"} (data/sources.py).
    data: dict | None = None
    # Whether the run had its cores to itself, which a speed-up between runs needs: torch's threads
    # and core_share = train_cpu_s / (train_s x torch_threads) (1.0: no other process took a part of
    # them; a sweep's summary compares speeds only at >= 0.85). On a GPU: which one (host:uuid), and
    # when the run went (Unix seconds), so that two runs on one GPU at once are told apart.
    torch_threads: int | None = None
    core_share: float | None = None
    gpu: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    # Training FLOPs per token (model/accounting.py), and whether by formula or with a user's part
    # measured by FlopCounterMode.
    flops_per_token: int | None = None
    flops_source: str | None = None
    # On CUDA, torch.cuda.max_memory_allocated over the run's steps: the measurement memory_bytes models.
    measured_peak_bytes: int | None = None
    # What it was made with (provenance.environment): the user's working tree's git commit and whether
    # it was dirty, ablate's version (and its checkout's commit), Python, torch, the platform, the CPU's
    # model and flags, the GPU. Two results that differ here may differ for that reason alone.
    environment: dict | None = None
    # How the speed was timed (perf/clock.py): tokens_per_s and mfu are over the steps after the
    # warm-up, timed between the synchronizations that reading the loss forces; the warm-up is each
    # launch's first step and the intervals that compiled after it. compile_s: the warm-up's seconds
    # beyond its steps at the steady pace (None when the run does not compile). checkpoint_s: the
    # seconds checkpoints held the step path.
    warmup_steps: int | None = None
    compile_s: float | None = None
    checkpoint_s: float | None = None

    @classmethod
    def from_trainer(cls, t, status: str, reason: str) -> RunResult:
        import torch

        cfg = t.cfg
        threads = torch.get_num_threads()
        wall_s = time.perf_counter() - t.wall_start
        ended_at = time.time()
        timing = t.timing
        step_s = timing.steady_step_s()
        speed = t.tokens_per_step / step_s if step_s else None  # steady; over every step without a steady one
        return cls(
            status=status,
            reason=reason,
            config_hash=t.p.config_hash,
            model=cfg.model.name,
            precision=cfg.precision.name,
            device=t.device,
            params=accounting.params(cfg.model),
            params_non_embedding=accounting.params_non_embedding(cfg.model),
            flops_per_token=accounting.flops_per_token(cfg.model),
            flops_source=accounting.flops_source(cfg.model),
            steps=t.step,
            tokens=t.tokens,
            flops=t.flops,
            final_train_loss=_finite(t.last_train_loss),
            final_val_loss=_finite(t.last_val_loss),
            entropy_floor=t.p.data.entropy_floor,
            tokens_per_s=speed,
            mfu=t.mfu(speed) if speed else None,
            wall_s=wall_s,
            train_s=timing.train_s,
            mlflow_run_id=t.tracker.run_id,
            train_cpu_s=timing.cpu_s,
            warmup_steps=timing.warmup_steps if timing.steady_steps else 0,
            compile_s=timing.compile_s() if cfg.train.compile else None,
            checkpoint_s=timing.checkpoint_s,
            kind=t.kind,
            fork_step=t.fork_step,
            memory_bytes=step_memory(cfg, t.device),
            measured_peak_bytes=measured_peak(t.device),
            final_val_bpb=bits_per_byte(_finite(t.last_val_loss), t.p.data.bytes_per_token),
            data={"kind": cfg.data.kind, **t.p.data.provenance()},
            torch_threads=threads,
            core_share=core_share(timing.cpu_s, timing.train_s, threads),
            gpu=gpu_id(t.device),
            environment=environment(t.device),
            started_at=ended_at - wall_s,
            ended_at=ended_at,
        )

    @classmethod
    def not_trained(cls, p, status: str, run_id: str | None, reason: str, **extra) -> RunResult:
        """A launch that trained nothing: skipped, busy, or one that failed before its first step
        (`extra`: a family member's kind and fork step)."""
        cfg = p.cfg
        return cls(
            status=status,
            reason=reason,
            config_hash=p.config_hash,
            model=cfg.model.name,
            precision=cfg.precision.name,
            device=p.hardware.device,
            params=accounting.params(cfg.model),
            params_non_embedding=accounting.params_non_embedding(cfg.model),
            flops_per_token=accounting.flops_per_token(cfg.model),
            flops_source=accounting.flops_source(cfg.model),
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
            environment=environment(p.hardware.device),
            **extra,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def core_share(cpu_s: float | None, wall_s: float, threads: int) -> float | None:
    """The part of its threads' cores a run had: CPU seconds / (wall seconds x threads)."""
    if cpu_s is None or wall_s <= 0 or threads < 1:
        return None
    return cpu_s / (wall_s * threads)


def gpu_id(device: str) -> str | None:
    """host:uuid of the CUDA device a run trained on (host:index where torch gives no uuid); None off CUDA."""
    if not device.startswith("cuda"):
        return None
    import torch

    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"{socket.gethostname()}:{uuid if uuid is not None else index}"


def measured_peak(device: str) -> int | None:
    """The CUDA caching allocator's peak since the trainer reset it (Trainer._build); None off CUDA."""
    if not device.startswith("cuda"):
        return None
    import torch

    return int(torch.cuda.max_memory_allocated())


def step_memory(cfg, device: str) -> int:
    """One training step's peak as perf/memory.py models it, for one micro-batch."""
    return gpu_memory(
        cfg.model,
        cfg.precision,
        cfg.train.batch_size,
        device=device,
        checkpointing=cfg.train.activation_checkpointing,
        optimizer=cfg.optim.name,
    ).total


def bits_per_byte(loss: float | None, bytes_per_token: float | None) -> float | None:
    """nats per token -> bits per byte: L / ln 2 / (bytes per token)."""
    if loss is None or not bytes_per_token:
        return None
    return loss / math.log(2) / bytes_per_token


def write_result(result: RunResult, out_dir: Path) -> Path:
    """Atomic write of out_dir/result.json."""
    return write_json(out_dir / RESULT_FILE, result.to_dict())


def read_result(out_dir: Path) -> RunResult:
    """The run's result.json; one that is missing, torn or of another shape is refused in one line."""
    path = out_dir / RESULT_FILE
    try:
        return RunResult(**json.loads(read_regular(path)))
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror}) (valid: {VALID_RESULT})") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"{path} is not a run's result ({type(exc).__name__}: {str(exc)[:80]}) (valid: {VALID_RESULT})"
        ) from None


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
