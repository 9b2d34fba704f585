"""The training loop of one run: build the model under its precision policy, step, evaluate, log,
checkpoint. Everything around it (skip or resume, the MLflow run, signals, DDP helpers) is train.py's.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from ablate.data import TrainBatches, get_val_batch
from ablate.model import GPT, accounting, apply_precision, build_optimizer, checkpoint_blocks, lr_at, weight_shapes
from ablate.perf import DeviceClock, IntervalTimer, RunCapture, Timing, profiling
from ablate.run import checkpoint, checkpoint_sharded, distributed, fsdp, preemption
from ablate.run.prepare import Prepared
from ablate.run.progress import RunProgress
from ablate.run.result import RunResult, bits_per_byte, write_result
from ablate.tracking import Tracker


class Diverged(RuntimeError):
    pass


class StopRun(Exception):
    """Raised by an `on_eval` hook to end a run early on purpose (e.g. an Optuna pruner)."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def state_mismatch(model_cfg, state: dict) -> str | None:
    """Why a checkpoint's weights cannot be this model's (a name or a shape differs), or None."""
    weights = state.get("model")
    if not isinstance(weights, dict):
        return "holds no model weights"
    expected = weight_shapes(model_cfg)
    # a sharded checkpoint keeps its weights' shapes as lists (checkpoint_sharded.py)
    found = {k: tuple(v if isinstance(v, list) else getattr(v, "shape", ())) for k, v in weights.items()}
    for key in sorted(expected.keys() | found.keys()):
        if key not in found:
            return f"lacks the weight {key}"
        if key not in expected:
            return f"has a weight {key} that this model does not"
        if found[key] != expected[key]:
            return f"has {key} of shape {list(found[key])} where this model's is {list(expected[key])}"
    return None


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """PaLM's z-loss term (Chowdhery et al. 2022, Sec. 5): mean over positions of (log Z)^2, log Z
    the logsumexp of a position's logits (B, T, V) -> (B, T); it keeps the softmax normaliser near 1."""
    return logits.float().logsumexp(dim=-1).square().mean()


class Trainer:
    """`forks`: {step: hook(trainer)}, called once the step's update is done with the trainer in the
    state a run of any longer budget has at that step (run/branches.py saves cooldown forks so)."""

    def __init__(
        self,
        p: Prepared,
        tracker: Tracker,
        state_dir: Path,
        out_dir: Path,
        on_eval=None,
        forks=None,
        progress_file: Path | None = None,
        clock: DeviceClock | None = None,
    ):
        self.p, self.cfg, self.tracker = p, p.cfg, tracker
        self.on_eval = on_eval
        self.forks = dict(forks or {})
        self.kind, self.fork_step = "run", None  # RunResult.kind; train.py sets them for trunks and branches
        self.artifacts: list[Path] = []
        self.resumed_loss_sum, self.resumed_loss_n = 0.0, 0
        self.loss_sum, self.loss_n = None, 0
        self.state_dir, self.out_dir = state_dir, out_dir
        self.progress_file = progress_file  # a sweep's job: its progress for the sweep's line
        self.device = p.hardware.device
        self.tokens_per_step = self.cfg.train.sequences_per_step * self.cfg.model.block_size
        self.flops_per_token = accounting.flops_per_token(self.cfg.model)
        self.peak = p.hardware.peak_for(self.cfg.precision)
        self.step = 0
        # `clock`: where time is read and the device waited for (perf/clock.py); a test's may be a
        # device that defers its work. `timing`: the run's training time, warm-up apart.
        self.clock = clock or DeviceClock(self.device)
        self.timing = Timing()
        self.saver = checkpoint.BackgroundSaver()  # mid-run checkpoints, written while training goes on
        self.wall_start = time.perf_counter()
        self.last_train_loss = float("nan")
        self.last_val_loss = float("nan")
        self.tokens_per_s = 0.0
        # train.profile=true: torch.profiler over a few steps, rank 0 only (profiling.py)
        self.capture = (
            RunCapture(self.cfg.train, p.hardware, self.cfg.precision, out_dir)
            if self.cfg.train.profile and distributed.is_main()
            else None
        )

    # -- set-up -------------------------------------------------------------------------
    def _build(self, state: dict | None) -> None:
        torch.manual_seed(self.cfg.train.seed)
        model = GPT(self.cfg.model)
        self.runtime = apply_precision(model, self.cfg.precision, self.device)
        model.to(self.device)
        if self.cfg.train.activation_checkpointing:  # before FSDP wraps the blocks, as torchtitan orders them
            checkpoint_blocks(model)
        self.model = model
        fsdp.shard(model, self.cfg)  # train.parallel=fsdp: FSDP2 per block, before the optimizer sees DTensors
        self.optimizer = build_optimizer(
            model, self.cfg.optim, compiled=self.cfg.train.compile, rounding=self.cfg.precision.rounding
        )
        if state is not None:
            checkpoint_sharded.restore(model, self.optimizer, state, self.state_dir)
            if self.runtime.scaler is not None and state.get("scaler"):
                self.runtime.scaler.load_state_dict(state["scaler"])
            torch.set_rng_state(state["rng"])
            self.step = int(state["step"])
            self.timing = Timing.from_state(state.get("timing")) if "timing" in state else _untimed(state)
            self.last_val_loss = float(state.get("last_val_loss", float("nan")))
            self.resumed_loss_sum = float(state.get("loss_sum", 0.0))
            self.resumed_loss_n = int(state.get("loss_n", 0))
            self.tracker.pending = [tuple(m) for m in state["pending"]] + self.tracker.pending
        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()  # result.measured_peak: this run's steps only
        if self.cfg.train.compile and self.cfg.train.compile_blocks:
            for block in model.blocks:  # one graph for every block, compiled once (nn.Module.compile)
                block.compile()
        wrapped = distributed.wrap(model)  # DDP when this run has several ranks
        whole = self.cfg.train.compile and not self.cfg.train.compile_blocks
        self.forward = torch.compile(wrapped) if whole else wrapped
        c = self.cfg
        self.batches = TrainBatches(
            self.p.data.train,
            c.train.sequences_per_step,
            c.model.block_size,
            c.train.seed,
            self.device,
            distributed.local_rows,
        )

    # -- loop ---------------------------------------------------------------------------
    def train(self, state: dict | None) -> RunResult:
        self._build(state)
        cfg, total = self.cfg.train, self.p.total_steps
        progress = RunProgress(
            total, self.step, enabled=cfg.progress, label=self.tracker_label(), status_file=self.progress_file
        )
        last_flush = time.perf_counter()
        # The running mean of the current log interval is part of the checkpoint, so a resume
        # that starts mid-interval logs the same mean as an uninterrupted run.
        loss_sum = torch.tensor(self.resumed_loss_sum, device=self.device)
        loss_n = self.resumed_loss_n
        timer = IntervalTimer(self.clock, self.timing, compiled=cfg.compile)
        timer.begin()
        try:
            while self.step < total:
                with timer.step(), profiling.around(self.capture, self.step):
                    loss = self._train_step()
                self.step += 1
                loss_sum += loss
                loss_n += 1
                self.loss_sum, self.loss_n = loss_sum, loss_n
                # A fork is the state a longer run has here: after a log that run also makes, but
                # before the log and evaluation this run adds only because it is its last step.
                regular = self.step % cfg.log_interval == 0 or self.step % cfg.eval_interval == 0
                fork = self.forks.get(self.step)
                if fork is not None and not regular:
                    fork(self)
                is_eval = self.step % cfg.eval_interval == 0 or self.step == total
                if self.step % cfg.log_interval == 0 or is_eval:
                    # reading the loss waits for the device: the interval is timed to this point
                    self.last_train_loss = self.clock.read(distributed.mean(loss_sum / loss_n))  # over ranks
                    step_s = timer.close()
                    loss_sum.zero_()
                    loss_n = 0
                    self.loss_n = 0
                    if not math.isfinite(self.last_train_loss):
                        raise Diverged(f"loss became {self.last_train_loss} at step {self.step}")
                    if step_s:
                        self.tokens_per_s = self.tokens_per_step / step_s
                    timer.pause()  # evaluation and logging are not training time
                    self._record(is_eval, timer.warming)
                    progress.update(
                        self.step, self.last_train_loss, self.tokens_per_s, self.interval_mfu, timer.warming
                    )
                    timer.resume()
                if fork is not None and regular:
                    fork(self)
                if self.step % cfg.checkpoint_interval == 0 and self.step < total:
                    self._checkpoint()  # on the step path: its time is in the interval, and counted
                if self._signalled() and self.step < total:  # checkpoint, then requeue or go on
                    self._on_signal()
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
        except BaseException:
            self._settle_write()  # what ends the run is this exception, not the write's
            raise
        finally:
            progress.close()
        timer.pause()  # the final checkpoint is after the last interval
        self._checkpoint()
        return self._finish("finished", "")

    def _train_step(self) -> torch.Tensor:
        # profiling.phase names the parts of a step in a trace (forward, backward, ...)
        c, traced = self.cfg, self.capture is not None
        with profiling.phase("data", traced):
            # The step's rows (this rank's), the same as one batch of batch_size x grad_accum would draw.
            x, y = self.batches.take(self.step)
        lr = lr_at(self.step, self.p.total_steps, c.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.lr = lr
        scaler = self.runtime.scaler
        loss = torch.zeros((), device=self.device)
        for xm, ym in zip(x.chunk(c.train.grad_accum), y.chunk(c.train.grad_accum), strict=True):
            with profiling.phase("forward", traced), self.runtime.autocast():
                logits, micro = self.forward(xm, ym)
                objective = (micro + c.train.z_loss * z_loss(logits) if c.train.z_loss else micro) / c.train.grad_accum
            with profiling.phase("backward", traced):
                (scaler.scale(objective) if scaler is not None else objective).backward()
            loss += micro.detach() / c.train.grad_accum
        if self.step + 1 < self.p.total_steps:  # drawn and copied while the device runs this step
            with profiling.phase("data", traced):
                self.batches.prefetch(self.step + 1)
        with profiling.phase("optimizer", traced):
            if scaler is not None:
                scaler.unscale_(self.optimizer)
            if c.optim.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.optim.grad_clip)
            if scaler is not None:
                scaler.step(self.optimizer)
                scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss

    @torch.no_grad()
    def evaluate(self) -> float:
        c = self.cfg
        self.model.eval()
        losses = []
        for i in range(c.train.eval_batches):
            # The windows of a batch of batch_size x grad_accum, evaluated a micro-batch at a time.
            x, y = get_val_batch(self.p.data.val, c.train.sequences_per_step, c.model.block_size, i)
            for xm, ym in zip(x.chunk(c.train.grad_accum), y.chunk(c.train.grad_accum), strict=True):
                with self.runtime.autocast():
                    _, loss = self.forward(xm.to(self.device), ym.to(self.device))
                losses.append(loss.item())
        self.model.train()
        return sum(losses) / len(losses)

    @property
    def interval_mfu(self) -> float | None:
        return self.mfu(self.tokens_per_s) if self.tokens_per_s > 0 else None

    def _record(self, is_eval: bool, warmup: bool = False) -> None:
        metrics = {
            "train/loss": self.last_train_loss,
            "lr": self.lr,
            "tokens": self.tokens,
            "flops": self.flops,
        }
        if self.tokens_per_s > 0:
            # the last interval's rate; one that compiled is logged apart, as warm-up
            prefix = "warmup/" if warmup else ""
            metrics[prefix + "tokens_per_s"] = self.tokens_per_s
            metrics[prefix + "mfu"] = self.interval_mfu
        if is_eval:
            self.last_val_loss = self.evaluate()
            metrics["val/loss"] = self.last_val_loss
            if self.p.data.bytes_per_token:  # bits per byte: compares runs across tokenizers
                metrics["val/bpb"] = bits_per_byte(self.last_val_loss, self.p.data.bytes_per_token)
        self.tracker.record(self.step, metrics)
        if is_eval and self.on_eval is not None:
            self.on_eval(self.step, self.last_val_loss, self.flops)

    def _signalled(self) -> bool:
        """A signal waits at this step boundary. A sharded model's ranks agree on it (each step, a
        collective), since its checkpoint needs every one of them (checkpoint_sharded.py)."""
        waiting = preemption.pending() is not None
        return distributed.any_rank(waiting) if fsdp.is_sharded(self.model) else waiting

    def _on_signal(self) -> None:
        preemption.handle(self._save_for_signal, self.out_dir)

    def _save_for_signal(self, reason: str) -> int:
        """Before SLURM ends the job: metrics delivered, state on disk, and the
        MLflow run KILLED (resumable) until training goes on or finishes. Returns the step saved."""
        self.tracker.flush(force=True)
        self._checkpoint()
        self.saver.wait()  # on disk before the job may be ended
        preemption.mark_killed(self.tracker)
        return self.step

    def _checkpoint(self) -> None:
        """The state saved, written in the background: the step path pays for its copy to host
        memory (checkpoint.BackgroundSaver); the run's end waits for the write (_finish)."""
        start = time.perf_counter()
        self.saver.save(self.state(), self.state_dir)
        self.timing.checkpoint_s += time.perf_counter() - start

    def _settle_write(self) -> None:
        """A run ending on an exception: the write in flight completes; its own failure, if any, is
        not the run's (the exception already ending it is)."""
        try:
            self.saver.wait()
        except Exception:
            pass

    def state(self) -> dict:
        """Everything a resume needs: weights, optimizer moments, RNG, counters, unsent metrics."""
        return {
            # sharded: every rank writes its shards here (checkpoint_sharded.py)
            **checkpoint_sharded.weights(self.model, self.optimizer, self.state_dir, self.step),
            "scaler": self.runtime.scaler.state_dict() if self.runtime.scaler else {},
            "rng": torch.get_rng_state(),
            "step": self.step,
            "train_time": self.timing.train_s,
            "train_cpu_s": self.timing.cpu_s,
            "timing": self.timing.to_state(),
            "last_val_loss": self.last_val_loss,
            "loss_sum": float(self.loss_sum) if self.loss_n else 0.0,
            "loss_n": self.loss_n,
            "pending": [list(m) for m in self.tracker.pending],
            "mlflow_run_id": self.tracker.run_id or "",
            "config_hash": self.p.config_hash,
        }

    # -- results ------------------------------------------------------------------------
    def mfu(self, tokens_per_s: float) -> float | None:
        """Model FLOPs utilisation of the run's ranks together. A rate above the peak means the peak
        was low (a busy machine measured it): it is raised first (Hardware.raise_peak), so the MFU
        reported is never above 1."""
        if not self.peak:
            return None
        world = distributed.current().world
        attained = tokens_per_s * self.flops_per_token
        if attained > self.peak * world:
            self.peak = self.p.hardware.raise_peak(self.cfg.precision, attained / world)
        # (attained / world) x world can round one ulp below attained: the peak of the ranks
        # together is at least what they attained, so that the ratio is at most 1.0 exactly.
        return accounting.mfu(tokens_per_s, self.cfg.model, max(self.peak * world, attained))

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
        self.saver.wait()  # the last checkpoint is on disk before the run says how it ended
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
                "final/warmup_steps": result.warmup_steps,
                "final/compile_s": result.compile_s,
                "final/checkpoint_s": result.checkpoint_s,
                "final/val_bpb": result.final_val_bpb,
            },
        )
        if self.capture is not None:  # its figures and files, when captured in this process
            self.tracker.record(self.step, self.capture.metrics())
        self.artifacts = [path, *self._config_files(), *(self.capture.files if self.capture else [])]
        return result

    @property
    def train_time(self) -> float:
        return self.timing.train_s

    @property
    def train_cpu(self) -> float:
        return self.timing.cpu_s

    def _config_files(self) -> list[Path]:
        resolved = self.out_dir / ".hydra" / "config.yaml"
        return [resolved] if resolved.is_file() else []


def _untimed(state: dict) -> Timing:
    """A checkpoint written before timing was kept apart: its steps as steady ones, as they were reported."""
    return Timing(
        steady_steps=int(state["step"]),
        steady_s=float(state["train_time"]),
        cpu_s=float(state.get("train_cpu_s", 0.0)),
    )
