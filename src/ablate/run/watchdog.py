"""No MLflow run stays RUNNING after its process has ended, whatever ended it.

A training process closes its own run on every ending it sees (finished, failed, Ctrl-C, SIGTERM,
an exception), but kill -9, the OOM killer or a segfault give it no chance. So while an MLflow
run is open, `watch` keeps a small process beside it (ablate/child.py, target `main`, given the
store's URI, the run's id and its LOCK_DIR), reading a pipe whose only writer is the watched
process. The kernel closes the pipe when that process is gone, however it went, and the read
returns. A process that closed its run writes "done" first, and the watchdog exits without
touching MLflow. Otherwise it marks the run KILLED, with the reason, if it is still RUNNING.

With a LOCK_DIR (a training run's state dir) it does so holding the run's lock (run/lock.py), so a
relaunch that already took the run over is left alone; a relaunch that finds the watchdog holding
the lock waits for it while it lives (a second or so; longer when the store does not answer).

The watchdog imports only the standard library until it has to act, starts its own session and
ignores the signals meant for the run (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2), so that a Ctrl-C,
a kill of the process group or SLURM signalling every process of a job (scancel --signal=USR2 before
a time limit) does not end it before the run is closed; SIGKILL still does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from ablate.child import spawn
from ablate.host import RUN_SIGNALS
from ablate.run.lock import Busy, Owner, RunLock
from ablate.tracking import REASON_TAG

DONE = b"done"
REASON = "its process ended without closing the run (killed: SIGKILL, out of memory, or a crash)"


class Watch:
    """The watched side: `done()` once the run is closed; dropping it without `done()` is a death."""

    def __init__(self, uri: str, run_id: str, lock_dir: str | None = None):
        read, self._write = os.pipe()  # both non-inheritable: only the watchdog gets `read`, as stdin
        try:
            self.proc = spawn(
                "ablate.run.watchdog:main",
                {"uri": uri, "run_id": run_id, "lock_dir": lock_dir},
                dies_with_parent=False,  # the watched process's death is what it is there for
                stdin=read,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read)

    def done(self) -> None:
        if self._write is not None:
            try:
                os.write(self._write, DONE)
            except BrokenPipeError:  # the watchdog is gone (SIGKILL): there is no one left to tell
                pass
            finally:
                os.close(self._write)
                self._write = None


def watch(uri: str, run_id: str, lock_dir=None) -> Watch | None:
    """A watchdog for an open MLflow run; None where it cannot start (the run then relies on the
    next launch, which resumes or closes it)."""
    try:
        return Watch(uri, run_id, str(lock_dir) if lock_dir else None)
    except OSError as exc:
        print(f"ablate: no watchdog for MLflow run {run_id} ({exc})", file=sys.stderr)
        return None


def main(uri: str, run_id: str, lock_dir: str | None = None) -> int:
    for signum in RUN_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    message = sys.stdin.buffer.read()  # returns when the watched process has closed its end
    if message == DONE:
        return 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    lock = None
    if lock_dir:
        lock = RunLock(lock_dir)
        lock.owner = Owner(lock.owner.host, lock.owner.pid, lock.owner.since, run_id, role="watchdog")
        try:
            lock.acquire()
        except Busy:
            return 0  # a relaunch holds the run: it is alive again
    try:
        if client.get_run(run_id).info.status == "RUNNING":
            client.set_tag(run_id, REASON_TAG, REASON)
            client.set_terminated(run_id, status="KILLED")
    except Exception as exc:  # the store is unreachable: the next launch resumes or closes the run
        print(f"ablate watchdog: could not mark MLflow run {run_id} KILLED ({type(exc).__name__})", file=sys.stderr)
        return 1
    finally:
        if lock is not None:
            lock.release()
    return 0
