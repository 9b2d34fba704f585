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
that will fork (worker.py says why), and OMP_NUM_THREADS=1, which each job raises to its share.
Messages to it are written by a thread: a launch spec larger than the pipe's buffer would
otherwise stall the launcher until the worker has finished importing.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import select
import signal
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ablate.child import spawn
from ablate.config import ConfigError
from ablate.sweep.launch.worker import Lines, can_fork

WORKER_LOG = "worker.log"


@dataclass
class Exited:
    num: int
    code: int | None  # None: the worker itself died under the job
    pid: int | None = None


@dataclass
class Pool:
    mlflow_uri: str | None
    work: Path | None = None  # SWEEP_DIR/.launcher, for the logs; None until a launch says
    fork: bool = field(default_factory=can_fork)
    workers: list = field(default_factory=list)  # [_Worker]; one when forking
    spec: bytes | None = None
    running: dict = field(default_factory=dict)  # num -> _Worker
    ended: list = field(default_factory=list)  # jobs that ended while a call was awaited: wait() reports them
    calls: int = 0

    def start(self) -> Pool:
        """Start the (forking) worker now, so that it imports while this process does other work."""
        if self.fork and not self.workers:
            self.workers = [_Worker.start(self.mlflow_uri, self.fork)]
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
            w.send({"cmd": "spec", "pickle": base64.b64encode(payload).decode()})

    def submit(
        self, num: int, overrides: list, threads: int, log: Path, result: Path, job_cfg=None, env: dict | None = None
    ) -> None:
        """Run job `num` (`job_cfg`: its config as the sweep plan composed it; None: the job composes it;
        `env`: variables its process gets before it runs, its GPUs)."""
        worker = self._worker(num)
        msg = {
            "cmd": "run",
            "num": num,
            "overrides": overrides,
            "threads": threads,
            "log": str(log),
            "result": str(result),
            "env": env or {},
        }
        if job_cfg is not None:
            import cloudpickle

            msg["config"] = base64.b64encode(cloudpickle.dumps(job_cfg)).decode()
        worker.send(msg)
        worker.jobs.add(num)
        self.running[num] = worker

    def call(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) in a process forked from the warm worker, which has torch and MLflow
        loaded; its exception is raised here. Without a forking worker alive (one that could not
        start, or has died), in this process."""
        worker = self.workers[0] if self.fork and self.workers and self.workers[0].alive() else None
        if worker is None:
            return fn(*args, **kwargs)
        import cloudpickle

        self.calls += 1
        call_id = self.calls
        payload = base64.b64encode(cloudpickle.dumps((fn, args, kwargs))).decode()
        worker.send({"cmd": "call", "id": call_id, "pickle": payload})
        while call_id not in worker.returned:
            if worker.lines.eof:
                return fn(*args, **kwargs)  # the worker died before answering: this process does it
            select.select([worker.lines.fd], [], [])
            self.ended += worker.read()
        event = worker.returned.pop(call_id)
        if "pickle" not in event:
            how = f"ended with code {event['code']}"
            raise RuntimeError(f"{fn.__qualname__}: its process forked from the sweep's worker {how}")
        answer = cloudpickle.loads(base64.b64decode(event["pickle"]))
        if answer[0] == "ok":
            return answer[1]
        _, exc, trace = answer
        if not isinstance(exc, ConfigError):  # a one-line error stays one line; anything else keeps its traceback
            exc.add_note(f"in the process forked from the sweep's worker:\n{trace}")
        raise exc

    def wait(self, timeout: float) -> list[Exited]:
        """Jobs that ended within `timeout` seconds (possibly none)."""
        ended, self.ended = self.ended, []
        if not self.running:
            return ended
        live = {w.lines.fd: w for w in set(self.running.values())}
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
                worker.send({"cmd": "signal", "num": num, "signal": int(signum)})

    def close(self, timeout_s: float = 10.0) -> None:
        """Tell every worker to stop (its running jobs get SIGTERM), then make sure it has."""
        for w in self.workers:
            w.close(timeout_s)
        self.workers = []
        self.running = {}

    def _worker(self, num: int) -> _Worker:
        if self.fork and self.workers and self.workers[0].alive():
            return self.workers[0]
        worker = _Worker.start(self.mlflow_uri, self.fork)
        if self.work is not None:
            worker.log_to(self.work / (WORKER_LOG if self.fork else f"worker-{num}.log"))
        if self.spec is not None:
            worker.send({"cmd": "spec", "pickle": base64.b64encode(self.spec).decode()})
        self.workers = [w for w in self.workers if w.alive() or w.jobs] + [worker]
        return worker


class _Worker:
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines = Lines(proc.stdout.fileno())
        self.jobs: set[int] = set()
        self.ready: dict | None = None
        self.pids: dict[int, int] = {}
        self.returned: dict[int, dict] = {}  # call id -> its "returned" event
        self.outbox: queue.Queue = queue.Queue()
        self.writer = threading.Thread(target=self._write, name="ablate-worker-pipe", daemon=True)
        self.writer.start()

    @classmethod
    def start(cls, mlflow_uri: str | None, fork: bool) -> _Worker:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        # Its own session: a terminal's Ctrl-C reaches the launcher only, which stops the jobs itself.
        proc = spawn(
            "ablate.sweep.launch.worker:serve",
            {"mlflow_uri": mlflow_uri, "fork": fork},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        return cls(proc)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_to(self, path: Path) -> None:
        self.send({"cmd": "log", "path": str(path)})

    def send(self, msg: dict) -> None:
        self.outbox.put((json.dumps(msg) + "\n").encode())

    def _write(self) -> None:
        while True:
            data = self.outbox.get()
            if data is None:
                break
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):  # the worker is gone; wait() reports its jobs
                break
        try:
            self.proc.stdin.close()  # end of input: the worker sends SIGTERM to its jobs and exits
        except (BrokenPipeError, OSError):
            pass

    def read(self) -> list[Exited]:
        ended = []
        for event in self.lines.read():
            kind = event.get("event")
            if kind == "ready":
                self.ready = event
            elif kind == "started":
                self.pids[event["num"]] = event["pid"]
            elif kind == "exited":
                self.jobs.discard(event["num"])
                ended.append(Exited(event["num"], event["code"], event["pid"]))
            elif kind == "returned":
                self.returned[event["id"]] = event
        if self.lines.eof:  # the worker has ended: a one-job worker's exit status is its job's
            code = self.proc.wait()
            one_job = self.ready is not None and not self.ready["fork"]
            for num in sorted(self.jobs):
                ended.append(Exited(num, code if one_job else None, self.proc.pid))
            self.jobs.clear()
        return ended

    def close(self, timeout_s: float) -> None:
        self.outbox.put(None)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # its jobs get SIGTERM from the kernel (PR_SET_PDEATHSIG), then:
            self.proc.wait()
            for pid in self.pids.values():
                _kill(pid)
        self.writer.join(timeout=1.0)
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
