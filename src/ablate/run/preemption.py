"""Preemption and time limits: a signal becomes a checkpoint at the next step boundary, then a requeue.

SLURM warns a job before it ends it:
- USR2, `signal_delay_s` before the time limit (submitit asks sbatch for `--signal=USR2@N`); it is
  also what submitit's `job._interrupt()` sends to simulate a preemption;
- SIGTERM when the job is requeued (`scontrol requeue`), preempted (PreemptMode=REQUEUE) or
  cancelled, followed by SIGKILL after the cluster's KillWait (30 s by default, 5 s on the test cluster).

The handler only notes the signal: a checkpoint written from inside a half-done optimizer step
would be torn. The training loop polls `pending()` after each step and calls `handle()`, which
flushes the metrics, checkpoints, and then:
- USR2: hands over to submitit's own handler (saved at `install`). It tells a preemption from a
  timeout, counts timeouts against `max_num_timeout`, runs `scontrol requeue` and exits; the
  requeued job runs the same Hydra job again, which resumes from the checkpoint into the same
  MLflow run (the tracker drops metric steps MLflow already has, so none is logged twice).
  Once the timeouts are used up submitit raises instead, and the run ends FAILED.
- SIGTERM inside a SLURM job: the run is marked KILLED in MLflow and training goes on. SIGKILL may
  follow (a requeue or a cancel: the checkpoint is safe either way), or USR2 (submitit's interrupt
  sends both), or nothing (the run finishes and is marked FINISHED).
- Outside SLURM (a local process, submitit's local executor) SIGTERM ends the run as KILLED;
  launching it again resumes it.
- SIGINT (Ctrl-C) anywhere: the same checkpoint, then the run ends KILLED and resumable. A second
  Ctrl-C before the step boundary does not wait: KeyboardInterrupt at once (the run is still closed
  as KILLED, and resumes from its previous checkpoint).

Each signal handled is appended to RUN_DIR/preemption.jsonl (time, job, signal, step, action).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

RUNNING_IN_SLURM = "SLURM_JOB_ID"
EVENTS_FILE = "preemption.jsonl"


class Requeued(SystemExit):
    """The run was checkpointed and its job requeued (or stopped): the process ends with `code`,
    the exit status submitit chose (its local executor restarts a job on one particular code)."""

    def __init__(self, code: int | None, reason: str):
        super().__init__(code)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class _State:
    def __init__(self) -> None:
        self.installed = False
        self.armed = False
        self.pending: int | None = None
        self.previous: dict[int, object] = {}


_STATE = _State()


def preempt_signal() -> int:
    """submitit's preemption signal: USR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


def install() -> bool:
    """Take over the preemption signal and SIGTERM in this process (main thread only).

    Whatever handled them before (submitit's handlers, in a submitit job) is kept and called
    after the checkpoint. Returns False where signals cannot be handled (not the main thread).
    """
    if _STATE.installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in (preempt_signal(), signal.SIGTERM, signal.SIGINT):
        _STATE.previous[signum] = signal.signal(signum, _on_signal)
    _STATE.installed = True
    return True


def uninstall() -> None:
    """Give the signals back to whoever had them before `install`."""
    if not _STATE.installed:
        return
    for signum, handler in _STATE.previous.items():
        signal.signal(signum, handler)
    _STATE.previous.clear()
    _STATE.installed = False
    _STATE.armed = False
    _STATE.pending = None


@contextmanager
def armed():
    """While the training loop runs, signals wait for its next step boundary."""
    _STATE.armed = True
    try:
        yield
    finally:
        _STATE.armed = False


def pending() -> int | None:
    return _STATE.pending


def handle(save: Callable[[str], int], events_dir: Path | None) -> None:
    """Act on the pending signal. `save(reason)` makes the run durable (flush metrics, checkpoint,
    mark the MLflow run) and returns the step it saved. May raise Requeued, or submitit's
    UncompletedJobError when the job has timed out too often to be requeued."""
    signum = _STATE.pending
    _STATE.pending = None
    if signum is None:
        return
    name = signal.Signals(signum).name
    stays = signum == signal.SIGTERM and in_slurm()
    action = "checkpointed, continuing until SLURM ends the job" if stays else "checkpointed, stopping"
    step = save(f"{name} in job {job_id() or 'local'}: {action}")
    _log_event(events_dir, name, step, "continue" if stays else "stop")
    if not stays:
        _act(signum, None, step)


def in_slurm() -> bool:
    return RUNNING_IN_SLURM in os.environ


def job_id() -> str:
    """SLURM's id of this job (array_task form when in an array), or ''."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get(RUNNING_IN_SLURM, "")


def _on_signal(signum: int, frame) -> None:
    if signum == signal.SIGINT and (not _STATE.armed or _STATE.pending == signal.SIGINT):
        raise KeyboardInterrupt  # outside the loop, or a second Ctrl-C: no waiting for a step
    if _STATE.armed:
        # USR2 outranks SIGTERM: submitit's interrupt sends SIGTERM then USR2 in quick succession.
        if _STATE.pending != preempt_signal():
            _STATE.pending = signum
        return
    if signum == signal.SIGTERM and in_slurm():
        print("SIGTERM outside the training loop: nothing to checkpoint, continuing", file=sys.stderr)
        return
    _act(signum, frame)


def _act(signum: int, frame, step: int | None = None) -> None:
    """After the checkpoint (or when there is no loop to checkpoint): requeue or stop."""
    name = signal.Signals(signum).name
    previous = _STATE.previous.get(signum)
    if signum == preempt_signal() and callable(previous):
        try:
            previous(signum, frame)  # submitit: requeue (counting timeouts) and sys.exit
        except SystemExit as exc:
            raise Requeued(exc.code, f"{name}: checkpointed and requeued (job {job_id() or 'local'})") from None
        return  # submitit declined to act (a rank other than 0): keep going
    if signum == preempt_signal() and in_slurm():
        # A plain sbatch job without submitit: requeue it ourselves (no timeout count here).

        subprocess.run(["scontrol", "requeue", job_id()], check=True, timeout=60)
        raise Requeued(-1, f"{name}: checkpointed and requeued (job {job_id()})")
    at = f" at step {step}" if step is not None else ""
    raise Requeued(128 + signum, f"{name}: checkpointed{at} and stopped; launching the run again resumes it")


def _log_event(events_dir: Path | None, name: str, step: int, action: str) -> None:
    if events_dir is None:
        return
    record = {"time": time.time(), "job_id": job_id(), "signal": name, "step": step, "action": action}
    events_dir.mkdir(parents=True, exist_ok=True)
    with open(events_dir / EVENTS_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_events(run_dir: Path) -> list[dict]:
    try:
        lines = (run_dir / EVENTS_FILE).read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def mark_killed(tracker) -> None:
    """MLflow shows the run KILLED (a status `train.run` resumes) while the job may be ending."""
    try:
        tracker.set_status("KILLED")
    except Exception as exc:  # the store may be unreachable; the checkpoint is what matters
        print(f"preemption: could not mark run {tracker.run_id} KILLED ({type(exc).__name__})", file=sys.stderr)
