"""One training run from start to end: decide whether it trains, resumes or is skipped (decision.py),
open or reopen its MLflow run, arm signals, start DDP helper ranks, train (trainer.py), and record
how it ended, whatever ended it.

The run is keyed by a hash of its resolved config: launching it again skips it when it has
finished, and otherwise resumes from its latest checkpoint into the same MLflow run. One launch per
config hash trains at a time (run/lock.py): a second one, while the first trains, returns a "busy"
result naming the first. A checkpoint that does not load or does not fit the run is quarantined
(checkpoint.load_good) and the run goes on from the one before, or from step 0. The MLflow run is
closed on every ending this process sees, and by a watchdog (run/watchdog.py) on the ones it does not.
A run that a full or read-only disk stopped (a checkpoint, its result.json, a log line it could not
write) ends KILLED, as a signal's does: what stopped it is where it writes, not what it is, and the
same command resumes it from its last checkpoint once the disk has room.

A cooldown branch (run/branches.py) is such a run with a `fork`: whenever it would start at step 0
it starts from the fork instead, its trunk's state at the step its cooldown begins, which is its
own state at that step. A trunk passes `forks`, the hooks that save those states.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ablate.config import RunConfig, as_dict
from ablate.faults import failpoint
from ablate.files import WriteError, disk_refused
from ablate.model import accounting
from ablate.provenance import flatten
from ablate.redact import redact_tree
from ablate.run import checkpoint, distributed, preemption, ranks
from ablate.run.decision import BUSY, RUN, SKIP, decide
from ablate.run.final_model import save_final_model
from ablate.run.lock import Busy, RunLock, acquire_all, busy_with, owner_tag, store_claim
from ablate.run.prepare import Prepared, prepare
from ablate.run.result import RunResult, write_result
from ablate.run.trainer import Trainer, state_mismatch
from ablate.run.watchdog import watch
from ablate.tracking import (
    CONFIG_HASH_TAG,
    DATA_TAG,
    FORK_TAG,
    KIND_TAG,
    OWNER_TAG,
    RESUMED_TAG,
    SWEEP_TAG,
    TRUNK_KIND,
    make_tracker,
    run_tags,
)

# How a RunResult status shows in MLflow; a pruned run is KILLED with reason "pruned: ..." (decision.py).
MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "pruned": "KILLED"}


def run(
    cfg: RunConfig,
    out_dir: Path,
    sweep_id: str | None = None,
    experiment_id: str | None = None,
    prepared: Prepared | None = None,
    parent_run_id: str | None = None,
    on_eval: Callable[[int, float, float], None] | None = None,
    kind: str = "run",
    fork: checkpoint.Fork | None = None,
    forks: dict | None = None,
    agent=None,
    progress_file: Path | None = None,
) -> RunResult:
    """Train one run (or skip/resume it, see module doc). `on_eval(step, val_loss, flops)` is
    called after every evaluation and may raise StopRun. `kind`: run, trunk or branch (RunResult.kind;
    a trunk is tagged so that fits skip it); `fork`: a branch's starting state; `forks`: a trunk's
    {step: hook(trainer)}; `agent`: the tracking agent the command started for this run (its MLflow
    calls are made there), or None; `progress_file`: where a sweep's job reports its progress."""
    family = Member(kind, fork, forks)
    p = prepared or prepare(cfg)
    launch = distributed.launched()
    if launch is not None and not distributed.joined():  # torchrun or SLURM tasks: rank 0 is this run
        again = dict(sweep_id=sweep_id, experiment_id=experiment_id, prepared=p, parent_run_id=parent_run_id)
        again.update(on_eval=on_eval, kind=kind, fork=fork, forks=forks, agent=agent, progress_file=progress_file)
        return ranks.launched_run(launch, p.hardware.device, lambda: run(cfg, out_dir, **again), lambda: p)
    state_dir = Path(p.cfg.state_dir) / p.config_hash
    lock = RunLock(state_dir)
    claim = store_claim(p.cfg.tracking.uri, p.config_hash) if p.cfg.tracking.backend != "none" else None
    held = [lock, claim] if claim is not None else [lock]
    try:
        # held until the MLflow run is closed: one launch per config hash at a time, in the state dir
        # and where the store is (another launch may use another state dir)
        acquire_all(held)
    except Busy as exc:
        owner = exc.owner.describe() if exc.owner else "another process"
        run_id = (exc.owner.mlflow_run_id if exc.owner else "") or None
        return _not_trained(p, out_dir, decide(None, None, busy=owner), run_id, family)
    try:
        return _run(p, out_dir, lock, sweep_id, experiment_id, parent_run_id, on_eval, family, agent, progress_file)
    finally:
        for taken in reversed(held):
            taken.release()


@dataclass(frozen=True)
class Member:
    """Where a run sits in a family of cooldown branches (run/branches.py); a plain run is kind "run"."""

    kind: str = "run"
    fork: checkpoint.Fork | None = None
    forks: dict | None = None

    @property
    def fork_step(self) -> int | None:
        return self.fork.step if self.fork is not None else None


def _run(
    p: Prepared,
    out_dir: Path,
    lock: RunLock,
    sweep_id,
    experiment_id,
    parent_run_id,
    on_eval,
    family: Member,
    agent=None,
    progress_file: Path | None = None,
) -> RunResult:
    cfg = p.cfg
    state_dir = lock.directory
    tracker = make_tracker(cfg.tracking, experiment_id, spool_dir=Path(cfg.state_dir) / "spool", agent=agent)
    existing = tracker.find(p.config_hash)
    store = cfg.tracking.uri if cfg.tracking.backend != "none" else None
    found = checkpoint.meta(state_dir)
    if found is not None and found.config_hash and found.config_hash != p.config_hash:
        # another config's checkpoint (copied in by hand): moved aside with one line whatever the
        # decision, never left for this run to overwrite or resume from
        checkpoint.load_good(state_dir, p.config_hash, lambda s: state_mismatch(cfg.model, s))
        found = checkpoint.meta(state_dir)
    decision = decide(
        existing,
        found,
        cfg.train.rerun,
        cfg.train.retry_failed,
        store,
        busy=busy_with(existing),  # a live writer with another state dir
    )
    if decision.action in (SKIP, BUSY):
        return _not_trained(p, out_dir, decision, existing.run_id if existing else None, family)
    if decision.action == RUN and decision.reason and existing is None:
        print(f"ablate: {state_dir}: {decision.reason}", file=sys.stderr)
    repeats = p.repeat_warning()
    if repeats:
        print(f"ablate: {repeats}", file=sys.stderr)
    state = None
    if decision.from_checkpoint:
        state = checkpoint.load_good(state_dir, p.config_hash, lambda s: state_mismatch(cfg.model, s))
        if state is None:
            print(f"ablate: {state_dir}: no usable checkpoint left; training from step 0", file=sys.stderr)
    forked = False
    if state is None and family.fork is not None:  # a branch starts from its trunk's state at its fork
        state = checkpoint.load(family.fork.directory)
        forked = state is not None
    guard, trainer, closed = None, None, False
    try:
        tracker.start(
            run_name=cfg.tracking.run_name
            or f"{cfg.model.name}-{cfg.precision.name}-{p.config_hash[:6]}"
            + ("-trunk" if family.kind == TRUNK_KIND else ""),
            params=_params(p),
            tags={
                CONFIG_HASH_TAG: p.config_hash,
                SWEEP_TAG: sweep_id or "",
                DATA_TAG: data_tag(p.data.provenance()),
                **({"mlflow.parentRunId": parent_run_id} if parent_run_id else {}),
                **({KIND_TAG: TRUNK_KIND} if family.kind == TRUNK_KIND else {}),
                **run_tags(p.hardware.device),  # MLflow's user and source tags, the environment
                **{str(k): str(v) for k, v in cfg.tracking.tags.items()},
            },
            resume_run_id=decision.resume_run_id,
        )
        lock.set_run(tracker.run_id)
        failpoint("run.started")  # the MLflow run exists, its watchdog not yet: the sweep's end closes it
        guard = watch(cfg.tracking.uri, tracker.run_id, state_dir) if tracker.run_id else None
        # where a resumed run picked up, or the trunk step a branch forked from
        started = {FORK_TAG if forked else RESUMED_TAG: int(state["step"])} if state else {}
        tracker.set_tags({OWNER_TAG: owner_tag(lock.owner), **started})
        trainer = Trainer(p, tracker, state_dir, out_dir, on_eval, family.forks, progress_file)
        trainer.kind = family.kind
        trainer.fork_step = family.fork_step
        preemption.install()  # signals wait for a step boundary, see preemption.py
        try:
            with ranks.helpers(cfg, p.hardware.device, state_dir, resume=state is not None), preemption.armed():
                result = trainer.train(state)  # DDP ranks; signals wait for a step
        finally:
            preemption.uninstall()
    except BaseException as exc:  # whatever ended it, the MLflow run is closed with the reason
        full = disk_refused(exc)
        stopped = isinstance(exc, (KeyboardInterrupt, preemption.Requeued)) or distributed.lost_peer(exc)
        status = "KILLED" if full or stopped else "FAILED"
        reason = f"{type(exc).__name__}: {exc}"
        if full:
            reason += "; the same command resumes it once the disk has room"
        elif distributed.lost_peer(exc):
            reason += "; another rank of the run ended: the same command resumes it"
        ended = (
            trainer.result(status.lower(), reason)
            if trainer
            else RunResult.not_trained(
                p, status.lower(), tracker.run_id, reason, kind=family.kind, fork_step=family.fork_step
            )
        )
        try:
            written = [write_result(ended, out_dir)]
        except (OSError, WriteError):  # the disk that stopped the run takes no result.json either
            written = []
        if tracker.run_id or cfg.tracking.backend == "none":  # an MLflow run exists to close
            tracker.finish(status, reason, written)
            closed = True
        raise
    else:
        reason = f"pruned: {result.reason}" if result.status == "pruned" else result.reason
        failpoint("run.ending")  # result.json and the last checkpoint written, the MLflow run still open
        artifacts = trainer.artifacts
        if cfg.tracking.log_model == "final" and result.status == "finished":  # the weights as an artifact
            artifacts = [*artifacts, save_final_model(trainer.model, cfg.model, out_dir)]
        tracker.finish(MLFLOW_STATUS[result.status], reason, artifacts)
        closed = True
        return result
    finally:
        # a close that a signal cut short (torchrun's SIGTERM once a rank died) is left to the watchdog
        if guard is not None and closed:
            guard.done()


def _not_trained(p: Prepared, out_dir: Path, decision, run_id: str | None, family: Member) -> RunResult:
    """A launch that does not train: skipped (already finished, failed before) or busy (another
    launch is training it)."""
    status = "busy" if decision.action == BUSY else "skipped"
    result = RunResult.not_trained(p, status, run_id, decision.reason, kind=family.kind, fork_step=family.fork_step)
    write_result(result, out_dir)
    return result


def data_tag(provenance: dict) -> str:
    packages = " ".join(f"{k}={v}" for k, v in sorted(provenance["packages"].items()))
    return " ".join(x for x in (provenance["name"], provenance["fingerprint"] or "", packages) if x)


def _params(p: Prepared) -> dict:
    flat = redact_tree(flatten(as_dict(p.cfg)))  # tracking.uri's password is MLflow's to use, not to show
    flat.update(
        {
            "derived.params": accounting.params(p.cfg.model),
            "derived.params_non_embedding": accounting.params_non_embedding(p.cfg.model),
            "derived.flops_per_token": accounting.flops_per_token(p.cfg.model),
            "derived.total_steps": p.total_steps,
            "derived.entropy_floor": p.data.entropy_floor,
            "derived.train_split_tokens": len(p.data.train),  # the corpus a fit's suggested runs are checked against
            "derived.device": p.hardware.device,
        }
    )
    return flat


def set_threads(n: int | None) -> None:
    """Torch's intra-op threads for this process (a sweep's share of the cores)."""
    if n:
        import torch

        torch.set_num_threads(n)
        os.environ["OMP_NUM_THREADS"] = str(n)
