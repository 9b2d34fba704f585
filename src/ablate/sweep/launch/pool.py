"""The launcher's side of the warm worker (worker.py): start it, hand it jobs, hear how they ended.

One worker serves a whole launch, and every later launch of the same launcher (an Optuna study's
batches): it pays for importing torch, Hydra, the project and MLflow once, and forks a process per
job. Where the platform cannot fork (worker.can_fork), each job gets a worker of its own.

The sweep callback starts the worker as soon as the sweep begins, so that its imports overlap the
composition of the sweep's jobs in the launching process, and owns it; the launcher finds it through
Hydra's context (callback.warm_pool) and starts one of its own only where there is none. The
callback also hands the worker the sweep's own work that needs torch or MLflow
(`call`: the plan's checks and decisions, the parent run, the summary), each call in a process
forked from the worker: the launching process never imports either (in an 8-job sweep its CPU fell
from 14 to 6 s, on the cores the jobs need; docs/benchmarks.md).

The worker is started with OPENBLAS_NUM_THREADS=1, so that numpy starts no thread pool in a process
that will fork (worker.py says why), and OMP_NUM_THREADS=1, which each job raises to its share. It
is called through its channel (ablate/child.py), whose calls are written by a thread: a launch spec
larger than the pipe's buffer would otherwise stall the launcher until the worker has finished
importing. A job is two calls sent together, `run` (answered with its pid) and `wait` (answered
when it exits).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ablate.child import Channel, Reply
from ablate.config import ConfigError
from ablate.sweep.launch.job import JobPlan
from ablate.sweep.launch.worker import can_fork

log = logging.getLogger(__name__)

WORKER_LOG = "worker.log"


@dataclass
class Exited:
    num: int
    code: int | None  # None: the worker itself died under the job, or could not start it
    pid: int | None = None
    refused: str | None = None  # why the worker could not start it (its answer to `run`)


@dataclass
class Pool:
    mlflow_uri: str | None
    work: Path | None = None  # SWEEP_DIR/.launcher, for the logs; None until a launch says
    fork: bool = field(default_factory=can_fork)
    workers: list = field(default_factory=list)  # [Worker]; one when forking
    spec: bytes | None = None
    running: dict = field(default_factory=dict)  # num -> Worker
    ended: list = field(default_factory=list)  # jobs that ended while a call was awaited: wait() reports them

    def start(self) -> Pool:
        """Start the (forking) worker now, so that it imports while this process does other work."""
        if self.fork and not self.workers:
            self.workers = [Worker.start(self.mlflow_uri, self.fork)]
            # Closed at exit at the latest, and after the exit handlers registered from now on (the
            # sweep callback's, which may still call the worker): weakref.finalize's own exit hook
            # is registered with its first finalizer, and exit handlers run last-registered first.
            weakref.finalize(self, self.close)
        return self

    def set_work(self, work: Path) -> None:
        """Where the jobs' logs and the worker's own go (SWEEP_DIR/.launcher)."""
        self.work = work
        for w in self.workers:
            w.log_to(work / WORKER_LOG)

    def set_spec(self, payload: bytes) -> None:
        """The launch spec for the jobs that follow (cloudpickled by the launcher, sent through the pipe)."""
        self.spec = payload
        for w in self.workers:
            w.tell("spec", payload=payload)

    def submit(
        self,
        num: int,
        overrides: list,
        threads: int,
        log: Path,
        result: Path,
        plan: JobPlan | None = None,
        env: dict | None = None,
    ) -> None:
        """Run job `num` (`plan`: what the sweep's plan made of it, sent through the channel; None: the
        job composes and parses its config; `env`: variables its process gets before it runs, its GPUs)."""
        worker = self._worker(num)
        job = {"overrides": overrides, "threads": threads, "log": str(log), "result": str(result), "env": env or {}}
        worker.start_job(num, "run", {**job, "plan": plan})
        self.running[num] = worker

    def call(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) in a process forked from the warm worker, which has torch and MLflow
        loaded; its exception is raised here. Without a forking worker alive (one that could not
        start, or has died), in this process."""
        worker = self.workers[0] if self.fork and self.workers and self.workers[0].alive() else None
        if worker is None:
            return fn(*args, **kwargs)
        call_id = worker.channel.send("call", fn=fn, args=args, kwargs=kwargs)
        while call_id not in worker.replies:
            if worker.channel.closed:
                return fn(*args, **kwargs)  # the worker died before answering: this process does it
            select.select([worker.channel.fd], [], [])
            self.ended += worker.read()
        reply = worker.replies.pop(call_id)
        try:
            return reply.value()
        except Exception as exc:
            if not isinstance(exc, ConfigError):  # a one-line error stays one line; anything else keeps its traceback
                exc.add_note(f"in the process forked from the sweep's worker:\n{reply.trace or reply.message['error']}")
            raise

    def wait(self, timeout: float) -> list[Exited]:
        """Jobs that ended within `timeout` seconds (possibly none)."""
        ended, self.ended = self.ended, []
        if not self.running:
            return ended
        live = {w.channel.fd: w for w in set(self.running.values())}
        ready, _, _ = select.select(list(live), [], [], 0.0 if ended else timeout)
        for fd in ready:
            ended += live[fd].read()
        for e in ended:
            self.running.pop(e.num, None)
        if not self.fork:  # a one-job worker is done with its job
            self.workers = [w for w in self.workers if w.jobs]
        return ended

    def signal(self, nums, signum: int) -> None:
        for num in nums:
            worker = self.running.get(num)
            if worker is not None:
                worker.tell("signal", num=num, signal=int(signum))

    def close(self, timeout_s: float = 10.0) -> None:
        """Tell every worker to stop (its running jobs get SIGTERM), then make sure it has."""
        for w in self.workers:
            w.close(timeout_s)
        self.workers = []
        self.running = {}

    def _worker(self, num: int) -> Worker:
        if self.fork and self.workers and self.workers[0].alive():
            return self.workers[0]
        worker = Worker.start(self.mlflow_uri, self.fork)
        if self.work is not None:
            worker.log_to(self.work / (WORKER_LOG if self.fork else f"worker-{num}.log"))
        if self.spec is not None:
            worker.tell("spec", payload=self.spec)
        self.workers = [w for w in self.workers if w.alive() or w.jobs] + [worker]
        return worker


class Worker:
    """A worker process and its channel; the jobs it runs (two calls each: run, wait) and the answers
    of the sweep's calls not yet taken."""

    def __init__(self, channel: Channel, fork: bool):
        self.channel, self.proc, self.fork = channel, channel.proc, fork
        self.jobs: set[int] = set()
        self.pids: dict[int, int] = {}
        self.purpose: dict[int, tuple[str, int]] = {}  # call id -> (its name, its job's num or 0)
        self.replies: dict[int, Reply] = {}  # the sweep's calls answered (call id -> answer)
        self.report: dict | None = None  # the answer to `ready`
        self.purpose[channel.send("ready")] = ("ready", 0)

    @classmethod
    def start(cls, mlflow_uri: str | None, fork: bool, modules: list[str] | None = None, env: dict | None = None):
        env = {**(env or os.environ), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        # Its own session: a terminal's Ctrl-C reaches the launcher only, which stops the jobs itself.
        channel = Channel.spawn(
            "ablate.sweep.launch.worker:serve",
            {"mlflow_uri": mlflow_uri, "fork": fork, "modules": modules or []},
            env=env,
            start_new_session=True,
        )
        return cls(channel, fork)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_to(self, path: Path) -> None:
        self.tell("log", path=str(path))

    def tell(self, name: str, **args) -> None:
        """A call whose answer says nothing unless it failed (log, spec, signal)."""
        self.purpose[self.channel.send(name, **args)] = (name, args.get("num", 0))

    def start_job(self, num: int, how: str, args: dict) -> None:
        """Job `num` (`how`: "run" a sweep job, "run_argv" a command), and the wait for its end."""
        self.purpose[self.channel.send(how, num=num, **args)] = (how, num)
        self.purpose[self.channel.send("wait", num=num)] = ("wait", num)
        self.jobs.add(num)

    def ready(self) -> dict | None:
        """The worker's report once it has imported everything (waited for); None if it died first."""
        while self.report is None and not self.channel.closed:
            self.read()
        return self.report

    def read(self) -> list[Exited]:
        """The answers that have come: the jobs that ended; the sweep's calls' answers are kept."""
        ended = []
        for reply in self.channel.read():
            what, num = self.purpose.pop(reply.id, (None, 0))
            if what is None:
                self.replies[reply.id] = reply
            elif reply.failed:
                if what != "wait":  # (a wait fails only for a job that did not start, said already)
                    log.warning(f"the sweep's worker could not {what} (job {num}): {reply.message['error']}")
                if what in ("run", "run_argv") and num in self.jobs:  # a job that could not start
                    self.jobs.discard(num)
                    ended.append(Exited(num, None, refused=reply.message["error"]))
            elif what == "ready":
                self.report = reply.value()
            elif what in ("run", "run_argv"):
                self.pids[num] = reply.value()["pid"]
            elif what == "wait" and num in self.jobs:
                answer = reply.value()
                self.jobs.discard(num)
                ended.append(Exited(num, answer["code"], answer["pid"]))
        if self.channel.closed:  # the worker has ended: a one-job worker's exit status is its job's
            code = self.proc.wait()
            for num in sorted(self.jobs):
                ended.append(Exited(num, code if not self.fork else None, self.proc.pid))
            self.jobs.clear()
        return ended

    def close(self, timeout_s: float) -> None:
        self.channel.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # its jobs get SIGTERM from the kernel (PR_SET_PDEATHSIG), then:
            self.proc.wait()
            for pid in self.pids.values():
                _kill(pid)
        self.channel.writer.join(timeout=1.0)
        if self.proc.stdout:
            self.proc.stdout.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_all(pool: Pool, nums: set[int], timeout_s: float) -> list[Exited]:
    """Wait until the jobs `nums` have ended or `timeout_s` has passed; returns those that ended."""
    deadline = time.monotonic() + timeout_s
    ended = []
    while nums - {e.num for e in ended} and time.monotonic() < deadline:
        ended += pool.wait(max(0.0, min(0.5, deadline - time.monotonic())))
    return ended
