"""One training run: resolve hardware and data, build the model, apply precision, train, record.

The run is keyed by a hash of its resolved config: launching it again skips it when it has
finished, and otherwise resumes from its latest checkpoint into the same MLflow run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from ablate import accounting, checkpoint, distributed, preemption, profiling
from ablate.config import ConfigError, RunConfig, UnsupportedError, as_dict
from ablate.data import TokenData, check_fits, get_batch, load_data
from ablate.hardware import Hardware, resolve, unsupported_reason
from ablate.model import GPT
from ablate.optim import build_optimizer, lr_at
from ablate.precision import apply_precision
from ablate.progress import RunProgress
from ablate.provenance import code_version, config_hash, flatten
from ablate.result import RunResult, write_result
from ablate.tracking import CONFIG_HASH_TAG, SWEEP_TAG, Tracker, make_tracker


class Diverged(RuntimeError):
    pass


class StopRun(Exception):
    """Raised by an `on_eval` hook to end a run early on purpose (e.g. an Optuna pruner)."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


# How a RunResult status shows in MLflow; a pruned run is KILLED with reason "pruned: ...".
MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "pruned": "KILLED"}
RESUMED_TAG = "ablate.resumed_from_step"  # the checkpoint step a resumed run started from


@dataclasses.dataclass
class Prepared:
    """Everything decided before the first step; cheap enough to build for every run of a sweep."""

    cfg: RunConfig
    hardware: Hardware
    data: TokenData
    total_steps: int
    config_hash: str


def prepare(cfg: RunConfig) -> Prepared:
    """Validate against this machine and the data; raises ConfigError with one line."""
    hw = resolve(cfg.hardware)
    reason = unsupported_reason(hw, cfg.precision)
    if reason:
        raise UnsupportedError(reason)
    data = load_data(cfg.data)
    model_cfg = cfg.model
    if model_cfg.vocab_size is None:
        model_cfg = dataclasses.replace(model_cfg, vocab_size=data.vocab_size)
    elif model_cfg.vocab_size < data.vocab_size:
        raise ConfigError(
            f"model.vocab_size={model_cfg.vocab_size} is smaller than the data's vocabulary "
            f"({data.vocab_size}) (valid: >= {data.vocab_size}, or null to take it from the data)"
        )
    check_fits(data, model_cfg.block_size)
    distributed.check(cfg, hw.device)  # batch must split across DDP ranks
    cfg = dataclasses.replace(cfg, model=model_cfg)
    profiling.check_window(cfg.train, total_steps(cfg))  # the captured steps fit in the run
    return Prepared(cfg, hw, data, total_steps(cfg), config_hash(cfg, hw))


def total_steps(cfg: RunConfig) -> int:
    tokens_per_step = cfg.train.batch_size * cfg.model.block_size
    if cfg.train.steps is not None:
        return cfg.train.steps
    if cfg.train.tokens is not None:
        return max(1, math.ceil(cfg.train.tokens / tokens_per_step))
    return max(1, math.ceil(cfg.train.flops / (accounting.flops_per_token(cfg.model) * tokens_per_step)))


def run(
    cfg: RunConfig,
    out_dir: Path,
    sweep_id: str | None = None,
    experiment_id: str | None = None,
    prepared: Prepared | None = None,
    parent_run_id: str | None = None,
    on_eval: Callable[[int, float, float], None] | None = None,
) -> RunResult:
    """Train one run (or skip/resume it, see module doc). `on_eval(step, val_loss, flops)` is
    called after every evaluation and may raise StopRun."""
    p = prepared or prepare(cfg)
    cfg = p.cfg
    tracker = make_tracker(cfg.tracking, experiment_id, spool_dir=Path(cfg.state_dir) / "spool")
    existing = tracker.find(p.config_hash)
    skip = _skip_reason(existing, cfg)
    if skip:
        result = RunResult.skipped(p, existing.run_id, skip)
        write_result(result, out_dir)
        return result
    state_dir = Path(cfg.state_dir) / p.config_hash
    state = checkpoint.load(state_dir)
    resume_id = existing.run_id if existing and existing.status in ("RUNNING", "KILLED") else None
    if existing and existing.status == "FAILED" or (existing and existing.status == "FINISHED"):
        state = None  # an explicit retry or rerun starts from scratch in a new MLflow run
    if state is not None and existing is None and state.get("mlflow_run_id"):
        # The checkpoint belongs to an MLflow run this store does not have (a deleted or another
        # store): its earlier metrics are gone, so the run starts again rather than half-recorded.
        print(f"ablate: checkpoint in {state_dir} is for MLflow run {state['mlflow_run_id']}, which "
              f"{cfg.tracking.uri} does not have; starting from step 0", file=sys.stderr)
        state = None
    if state is not None and resume_id is None:
        resume_id = state.get("mlflow_run_id")
    tracker.start(
        run_name=cfg.tracking.run_name or f"{cfg.model.name}-{cfg.precision.name}-{p.config_hash[:6]}",
        params=_params(p),
        tags={
            CONFIG_HASH_TAG: p.config_hash,
            SWEEP_TAG: sweep_id or "",
            **({"mlflow.parentRunId": parent_run_id} if parent_run_id else {}),
            **code_version(),
        },
        resume_run_id=resume_id,
    )
    if state is not None:  # where a resumed run picked up
        tracker.set_tags({RESUMED_TAG: int(state["step"])})
    trainer = Trainer(p, tracker, state_dir, out_dir, on_eval)
    preemption.install()  # signals wait for a step boundary, see preemption.py
    try:
        with distributed.ranks(cfg, p.hardware.device, state_dir, resume=state is not None), preemption.armed():
            result = trainer.train(state)  # DDP ranks; signals wait for a step
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, (KeyboardInterrupt, preemption.Requeued)) else "FAILED"
        reason = f"{type(exc).__name__}: {exc}"
        path = write_result(trainer.result(status.lower(), reason), out_dir)
        tracker.finish(status, reason, [path])
        raise
    finally:
        preemption.uninstall()
    reason = f"pruned: {result.reason}" if result.status == "pruned" else result.reason
    tracker.finish(MLFLOW_STATUS[result.status], reason, trainer.artifacts)
    return result


def _skip_reason(existing, cfg: RunConfig) -> str:
    if existing is None:
        return ""
    if existing.status == "FINISHED" and not cfg.train.rerun:
        return "already finished (train.rerun=true runs it again)"
    if existing.status == "FAILED" and not cfg.train.retry_failed:
        return f"failed before: {existing.reason or 'no reason recorded'} (train.retry_failed=true retries it)"
    if existing.status == "KILLED" and existing.reason.startswith("pruned") and not cfg.train.rerun:
        return f"{existing.reason} (train.rerun=true runs it again)"
    return ""


def _params(p: Prepared) -> dict:
    flat = flatten(as_dict(p.cfg))
    flat.update(
        {
            "derived.params": accounting.params(p.cfg.model),
            "derived.params_non_embedding": accounting.params_non_embedding(p.cfg.model),
            "derived.flops_per_token": accounting.flops_per_token(p.cfg.model),
            "derived.total_steps": p.total_steps,
            "derived.entropy_floor": p.data.entropy_floor,
            "derived.device": p.hardware.device,
        }
    )
    return flat


class Trainer:
    def __init__(self, p: Prepared, tracker: Tracker, state_dir: Path, out_dir: Path, on_eval=None):
        self.p, self.cfg, self.tracker = p, p.cfg, tracker
        self.on_eval = on_eval
        self.artifacts: list[Path] = []
        self.resumed_loss_sum, self.resumed_loss_n = 0.0, 0
        self.loss_sum, self.loss_n = None, 0
        self.state_dir, self.out_dir = state_dir, out_dir
        self.device = p.hardware.device
        self.tokens_per_step = self.cfg.train.batch_size * self.cfg.model.block_size
        self.flops_per_token = accounting.flops_per_token(self.cfg.model)
        self.peak = p.hardware.peak_for(self.cfg.precision)
        self.step = 0
        self.train_time = 0.0
        self.wall_start = time.perf_counter()
        self.last_train_loss = float("nan")
        self.last_val_loss = float("nan")
        self.tokens_per_s = 0.0
        # train.profile=true: torch.profiler over a few steps, rank 0 only (profiling.py)
        self.capture = (profiling.RunCapture(self.cfg.train, p.hardware, self.cfg.precision, out_dir)
                        if self.cfg.train.profile and distributed.is_main() else None)

    # -- set-up -------------------------------------------------------------------------
    def _build(self, state: dict | None) -> None:
        torch.manual_seed(self.cfg.train.seed)
        model = GPT(self.cfg.model)
        self.runtime = apply_precision(model, self.cfg.precision, self.device)
        model.to(self.device)
        self.model = model
        self.optimizer = build_optimizer(model, self.cfg.optim)
        if state is not None:
            model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.runtime.scaler is not None and state.get("scaler"):
                self.runtime.scaler.load_state_dict(state["scaler"])
            torch.set_rng_state(state["rng"])
            self.step = int(state["step"])
            self.train_time = float(state["train_time"])
            self.last_val_loss = float(state.get("last_val_loss", float("nan")))
            self.resumed_loss_sum = float(state.get("loss_sum", 0.0))
            self.resumed_loss_n = int(state.get("loss_n", 0))
            self.tracker.pending = [tuple(m) for m in state["pending"]] + self.tracker.pending
        wrapped = distributed.wrap(model)  # DDP when this run has several ranks
        self.forward = torch.compile(wrapped) if self.cfg.train.compile else wrapped

    # -- loop ---------------------------------------------------------------------------
    def train(self, state: dict | None) -> RunResult:
        self._build(state)
        cfg, total = self.cfg.train, self.p.total_steps
        progress = RunProgress(total, self.step, enabled=cfg.progress, label=self.tracker_label())
        last_flush = time.perf_counter()
        # The running mean of the current log interval is part of the checkpoint, so a resume
        # that starts mid-interval logs the same mean as an uninterrupted run.
        loss_sum = torch.tensor(self.resumed_loss_sum, device=self.device)
        loss_n = self.resumed_loss_n
        interval_start, interval_time = time.perf_counter(), self.train_time
        try:
            while self.step < total:
                t0 = time.perf_counter()
                with profiling.around(self.capture, self.step):
                    loss = self._train_step()
                self.train_time += time.perf_counter() - t0
                self.step += 1
                loss_sum += loss
                loss_n += 1
                self.loss_sum, self.loss_n = loss_sum, loss_n
                is_eval = self.step % cfg.eval_interval == 0 or self.step == total
                if self.step % cfg.log_interval == 0 or is_eval:
                    self.last_train_loss = distributed.mean(loss_sum / loss_n).item()  # over ranks
                    loss_sum.zero_()
                    loss_n = 0
                    self.loss_n = 0
                    if not math.isfinite(self.last_train_loss):
                        raise Diverged(f"loss became {self.last_train_loss} at step {self.step}")
                    steps_done = self.train_time - interval_time
                    interval_time = self.train_time
                    self._record(is_eval, steps_done)
                    progress.update(self.step, self.last_train_loss, self.tokens_per_s)
                if self.step % cfg.checkpoint_interval == 0 and self.step < total:
                    self._checkpoint()
                if preemption.pending() and self.step < total:  # checkpoint, then requeue or go on
                    preemption.handle(self._save_for_signal, self.out_dir)
                # not at the last step: _finish records final/* at that same step, and a
                # flush marks every point at or below its step delivered (those would be dropped).
                if self.step < total and time.perf_counter() - last_flush > cfg.flush_interval_s:
                    self.tracker.flush()
                    last_flush = time.perf_counter()
        except Diverged as exc:
            progress.close()
            return self._finish("failed", str(exc))
        except StopRun as exc:
            progress.close()
            return self._finish(exc.status, exc.reason)
        finally:
            progress.close()
        self._checkpoint()
        return self._finish("finished", "")

    def _train_step(self) -> torch.Tensor:
        # profiling.phase names the parts of a step in a trace (forward, backward, ...)
        c = self.cfg
        with profiling.phase("data"):
            x, y = get_batch(self.p.data.train, c.train.batch_size, c.model.block_size, c.train.seed, self.step, "train")
            x, y = distributed.local_rows(x), distributed.local_rows(y)  # this rank's rows
            x, y = x.to(self.device), y.to(self.device)
        lr = lr_at(self.step, self.p.total_steps, c.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.lr = lr
        with profiling.phase("forward"), self.runtime.autocast():
            _, loss = self.forward(x, y)
        scaler = self.runtime.scaler
        with profiling.phase("backward"):
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(self.optimizer)
            else:
                loss.backward()
        with profiling.phase("optimizer"):
            if c.optim.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.optim.grad_clip)
            if scaler is not None:
                scaler.step(self.optimizer)
                scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    @torch.no_grad()
    def evaluate(self) -> float:
        c = self.cfg
        self.model.eval()
        losses = []
        for i in range(c.train.eval_batches):
            x, y = get_batch(self.p.data.val, c.train.batch_size, c.model.block_size, c.train.seed, i, "val")
            with self.runtime.autocast():
                _, loss = self.forward(x.to(self.device), y.to(self.device))
            losses.append(loss.item())
        self.model.train()
        return sum(losses) / len(losses)

    def _record(self, is_eval: bool, interval_time: float) -> None:
        steps = self.cfg.train.log_interval if not is_eval else None
        if interval_time > 0:
            n = steps or (self.step % self.cfg.train.log_interval or self.cfg.train.log_interval)
            self.tokens_per_s = n * self.tokens_per_step / interval_time
        metrics = {
            "train/loss": self.last_train_loss,
            "lr": self.lr,
            "tokens": self.tokens,
            "flops": self.flops,
            "tokens_per_s": self.tokens_per_s,
            "mfu": accounting.mfu(self.tokens_per_s, self.cfg.model, self.peak),
        }
        if is_eval:
            self.last_val_loss = self.evaluate()
            metrics["val/loss"] = self.last_val_loss
        self.tracker.record(self.step, metrics)
        if is_eval and self.on_eval is not None:
            self.on_eval(self.step, self.last_val_loss, self.flops)

    def _save_for_signal(self, reason: str) -> int:
        """Before SLURM ends the job: metrics delivered, state on disk, and the
        MLflow run KILLED (resumable) until training goes on or finishes. Returns the step saved."""
        self.tracker.flush(force=True)
        self._checkpoint()
        preemption.mark_killed(self.tracker)
        return self.step

    def _checkpoint(self) -> None:
        checkpoint.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.runtime.scaler.state_dict() if self.runtime.scaler else {},
                "rng": torch.get_rng_state(),
                "step": self.step,
                "train_time": self.train_time,
                "last_val_loss": self.last_val_loss,
                "loss_sum": float(self.loss_sum) if self.loss_n else 0.0,
                "loss_n": self.loss_n,
                "pending": [list(m) for m in self.tracker.pending],
                "mlflow_run_id": self.tracker.run_id or "",
                "config_hash": self.p.config_hash,
            },
            self.state_dir,
        )

    # -- results ------------------------------------------------------------------------
    @property
    def tokens(self) -> int:
        return self.step * self.tokens_per_step

    @property
    def flops(self) -> float:
        return float(self.tokens) * self.flops_per_token

    def tracker_label(self) -> str:
        return f"{self.cfg.model.name}/{self.cfg.precision.name}"

    def result(self, status: str, reason: str) -> RunResult:
        return RunResult.from_trainer(self, status, reason)

    def _finish(self, status: str, reason: str) -> RunResult:
        result = self.result(status, reason)
        path = write_result(result, self.out_dir)
        self.tracker.record(
            self.step,
            {
                "final/val_loss": result.final_val_loss,
                "final/train_loss": result.final_train_loss,
                "final/tokens_per_s": result.tokens_per_s,
                "final/mfu": result.mfu,
                "final/wall_s": result.wall_s,
            },
        )
        if self.capture is not None:  # its figures and files, when captured in this process
            self.tracker.record(self.step, self.capture.metrics())
        self.artifacts = [path, *self._config_files(), *(self.capture.files if self.capture else [])]
        return result

    def _config_files(self) -> list[Path]:
        resolved = self.out_dir / ".hydra" / "config.yaml"
        return [resolved] if resolved.is_file() else []


def set_threads(n: int | None) -> None:
    if n:
        torch.set_num_threads(n)
        os.environ["OMP_NUM_THREADS"] = str(n)
