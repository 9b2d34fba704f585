"""The warm worker of the process launchers, started by pool.py through the child entry point
(ablate/child.py) with the target `serve`: its arguments say which MLflow store to preload and
whether to fork, and its parent is the launcher, which it does not outlive.

It imports torch, Hydra, the project (and MLflow when the sweep tracks) once, then forks one child
per job: a job starts with every module already loaded (copy-on-write pages, nothing imported
again), yet it is still a process of its own, so a crash or a kill is one failed row, its threads
are set before its first torch op, and all of its memory goes back when it exits.

Forking is safe here because nothing in this process has started a thread pool: torch's OpenMP
pool starts at the first parallel op, which only ever runs in a job; OpenBLAS is held to one thread
(OPENBLAS_NUM_THREADS=1, set by pool.py) so numpy starts none; the one other thread, pyarrow's
jemalloc background thread (imported with MLflow), is fork-safe by design (jemalloc's own atfork
handlers). tests/sweep/test_pool.py checks the worker's threads.

CUDA is never initialized here: a CUDA context does not survive a fork, and each job's GPUs are set
in its own process (CUDA_VISIBLE_DEVICES) before its first CUDA call. Nothing the worker runs itself
touches CUDA (jobs and calls run in forked children), and `fork_safe` checks before every fork.

Where fork is not available or not safe after these imports (macOS, Windows), the worker runs the
one job it is given in its own process and exits (pool.py starts one per job).

Its calls (the child's channel, ablate/child.py: JSON lines, a pickle only for what is not JSON),
answered in the order they finish; its own stdout and stderr go to its log file:
    ready()                          -> {"pid", "threads": [names], "fork", "preloaded", "boot_s",
                                        "cuda_initialized": false}, once it has imported everything
    log(path)                        where the worker's own output goes from now on (until then: the
                                     launcher's stderr; a worker started early, while the sweep is
                                     still being checked, creates no file)
    spec(payload)                    the launch spec (Hydra context, task function, config),
                                     cloudpickled by the launcher: bytes, sent through the pipe,
                                     never through a file another process could replace
    run(num, overrides, threads, log, result, env, plan=None)
                                     -> {"pid"} once job `num` is forked; plan: what the sweep's plan
                                     made of the job (job.py JobPlan: its composed config and its
                                     parsed, hashed run; None: the job composes and parses its own);
                                     env: variables set in the job's process before it runs
                                     (CUDA_VISIBLE_DEVICES: its GPUs, sweep/launch/gpus.py)
    run_argv(num, argv, cwd, env, stdout, stderr)
                                     -> {"pid"} once `python -m ablate ARGV` is forked as job `num`
                                     (command.py): the command's own process, started warm
    wait(num)                        -> {"pid", "code"} when job `num` has exited (code < 0: killed
                                     by signal -code)
    signal(num, signal)              a job's process is signalled (SIGTERM, SIGKILL)
    call(fn, args, kwargs)           -> fn(*args, **kwargs): a function of the sweep (its plan, its
                                     MLflow parent run, its summary) run in a process forked for it,
                                     so the launcher never imports torch or MLflow itself; its
                                     output goes to the launcher's stderr; its exception comes back
                                     as itself with its traceback
    end of input                     the jobs still running are sent SIGTERM; the worker exits

A job leaves JOB_DIR/usage.json (CPU seconds, wall seconds, memory, the modules it had to import)
and its JobReturn as JSON (`result`): the launcher never unpickles anything a job wrote. A call's
answer comes back through a pipe, never through a file.
"""

from __future__ import annotations

import gc
import os
import resource
import selectors
import signal
import sys
import time
import traceback
from pathlib import Path

from ablate.child import Call, Calls, error, ok
from ablate.files import write_json
from ablate.host import die_with_parent, flush_std_streams, import_available, interrupt_on
from ablate.hydra_app import JOB_MODULES
from ablate.sweep.context import USAGE_FILE
from ablate.sweep.launch.command import run_command
from ablate.sweep.launch.job import run_here
from ablate.sweep.launch.returns import to_json
from ablate.tracking import mlflow_modules

# What a job imports (a job's usage.json lists what it still had to import); loaded here once so
# that no job pays for it. A name this torch or Hydra does not have is skipped. The command's own
# modules (its task, its callbacks) are a layer above this one: they are imported here when the
# launch spec that names them is unpickled, once, before the first job is forked.
PRELOAD = (
    "numpy",
    "numpy.random",
    "torch",
    "torch.utils.serialization",
    "torch.profiler._cupti_monitor",
    "omegaconf",
    "omegaconf._impl",
    "hydra.core.utils",
    "hydra.core.plugins",
    *JOB_MODULES,
    "secrets",
    "psutil",
    "ablate.run.train",
    "ablate.run.branches",
    "ablate.run.watchdog",
    "ablate.run.trainer",
    "ablate.data.synthetic",
    "ablate.data.cache",
    "ablate.perf.hardware",
    "ablate.sweep.launch.job",
    "ablate.sweep.launch.returns",
)

NO_FORK_ENV = "ABLATE_WORKER_FORK"  # "0": one fresh worker per job, as where fork is unavailable


def can_fork() -> bool:
    """Fork after importing torch is safe on Linux; macOS's system libraries are not fork-safe once
    loaded, and Windows has no fork. ABLATE_WORKER_FORK=0 asks for a fresh process per job anyway
    (a library that misbehaves after fork; the tests of that path)."""
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and os.environ.get(NO_FORK_ENV) != "0"


def preload(mlflow_uri: str | None, modules: list[str]) -> list[str]:
    loaded = import_available([*PRELOAD, *(mlflow_modules(mlflow_uri) if mlflow_uri else []), *modules])
    # Hydra finds its plugins by importing every module under hydra_plugins, and parses overrides
    # with a generated ANTLR parser: both happen in every job unless done here (pure Python, no threads).
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.plugins import Plugins

    Plugins.instance()
    OverridesParser.create().parse_overrides(["a=1", "b=x,y"])
    _remember_schema_head()
    return loaded


def _remember_schema_head() -> None:
    """MLflow checks a database store's schema against the newest of its migration scripts, which it
    finds by parsing all of them each time a process opens a store (about 0.05 s of a one-step
    job's 0.4 s). They cannot change while the worker lives: its jobs get the answer found here."""
    utils = sys.modules.get("mlflow.store.db.utils")
    latest = getattr(utils, "_get_latest_schema_revision", None)
    if latest is None:  # no database store preloaded, or an MLflow without this helper
        return
    head = latest()
    utils._get_latest_schema_revision = lambda: head


def cuda_initialized() -> bool:
    """Whether this process has initialized CUDA (torch's lazy init has run)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def fork_safe() -> None:
    """Refuse to fork a job from a worker that holds a CUDA context (the child's CUDA would be broken)."""
    if cuda_initialized():
        raise RuntimeError("the sweep's warm worker has initialized CUDA, and a CUDA context does not survive fork")


def thread_names(pid: int | str = "self") -> list[str]:
    """The names of a process's threads (Linux; [] elsewhere)."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return []
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # the thread ended while being listed
            pass
    return sorted(names)


# -- the worker's loop ------------------------------------------------------------------------------


def serve(mlflow_uri: str | None, fork: bool, modules: list[str] | None = None) -> None:
    """The worker's life: preload, then answer the launcher's calls until its input ends.
    `mlflow_uri`: the store whose client to preload (None: the sweep does not track); `fork`: a
    process per job (False: run the one job it is given in this process, then exit); `modules`:
    more to import before the first fork (the command line, for a worker that runs commands)."""
    launcher_pid = os.getppid()  # ablate.child has checked that the launcher is alive
    # The launcher decides when jobs stop (it turns its Ctrl-C into SIGTERM for each job); a
    # terminal's Ctrl-C must not end the worker under them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)  # the pipe to the launcher
    os.dup2(2, 1)  # anything printed here goes to the worker's log, not into the channel
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    launcher_stderr = os.dup(2)  # a call's output goes there, after the worker's own has moved to its log
    started = time.perf_counter()
    loaded = preload(mlflow_uri, modules or [])
    # What was preloaded lives as long as the worker: out of the cyclic collector's sight, a forked
    # job's collections do not walk (and so copy) those pages, and the worker's exit does not
    # collect them (about 1.5 s of teardown once torch and MLflow are loaded).
    gc.freeze()
    ready = {
        "pid": os.getpid(),
        "threads": thread_names(),
        "fork": fork,
        "preloaded": loaded,
        "boot_s": time.perf_counter() - started,
        "cuda_initialized": cuda_initialized(),
    }
    _Server(fork, replies, launcher_stderr, launcher_pid, ready).loop()


class _Server:
    """The worker's state between calls: its jobs and the calls it has forked, and what it was told."""

    def __init__(self, fork: bool, replies, launcher_stderr: int, launcher_pid: int, ready: dict):
        self.fork, self.replies, self.launcher_stderr, self.launcher_pid = fork, replies, launcher_stderr, launcher_pid
        self.ready = ready
        self.calls = Calls()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.calls.fd, selectors.EVENT_READ, "calls")
        self.jobs: dict[int, tuple[int, int]] = {}  # num -> (pid, pidfd)
        self.exits: dict[int, dict] = {}  # num -> {"pid", "code"}: a job that ended before its wait came
        self.waits: dict[int, int] = {}  # num -> the id of the wait call to answer when it ends
        self.forked_calls: dict[int, _Call] = {}  # answer pipe's fd -> the call
        self.spec = None
        self.closing = False

    def loop(self) -> None:
        while not self.closing or self.jobs or self.forked_calls:
            for key, _ in self.selector.select():
                if isinstance(key.data, _Call):
                    self._answered(key.data)
                elif key.data == "calls":
                    self._read_calls()
                else:
                    self._exited(key.data)

    def send(self, line: bytes) -> None:
        self.replies.write(line)

    def _read_calls(self) -> None:
        for call in self.calls.read_calls():
            if not self.closing:
                self._handle(call)
        if self.calls.eof and not self.closing:
            self.selector.unregister(self.calls.fd)
            self.closing = True
            # the launcher is done or gone: no job or call outlives it
            for pid in [pid for pid, _ in self.jobs.values()] + [c.pid for c in self.forked_calls.values()]:
                _signal(pid, signal.SIGTERM)

    def _handle(self, call: Call) -> None:
        handler = getattr(self, f"_on_{call.name}", None)
        if handler is None:
            self.send(error(call.id, f"ValueError: no call {call.name!r}"))
            return
        try:
            value = handler(call, **call.args)
        except Exception as exc:  # a call it cannot make (a bad spec, a fork that failed): its answer says so
            self.send(error(call.id, exc, traceback.format_exc()))
            return
        if value is not _LATER:
            self.send(ok(call.id, value))

    def _on_ready(self, call: Call) -> dict:
        return self.ready

    def _on_log(self, call: Call, path: str) -> None:
        _redirect_errors(path)

    def _on_spec(self, call: Call, payload: bytes) -> None:
        self.spec = _unpickle(payload)

    def _on_run(self, call: Call, num: int, **job) -> dict:
        if not self.fork:
            self.send(ok(call.id, {"pid": os.getpid()}))
            self.replies.close()
            _job(self.spec, {"num": num, **job}, time.perf_counter(), self.launcher_pid)  # never returns
        pid = self._fork(lambda: _job(self.spec, {"num": num, **job}, time.perf_counter(), os.getppid()))
        return self._started(num, pid)

    def _on_run_argv(self, call: Call, num: int, **command) -> dict:
        if not self.fork:
            raise RuntimeError("this worker does not fork (ABLATE_WORKER_FORK=0, or no fork here)")
        return self._started(num, self._fork(lambda: run_command(**command)))

    def _on_wait(self, call: Call, num: int):
        if num in self.exits:
            return self.exits.pop(num)
        if num not in self.jobs:
            raise KeyError(f"no job {num}")
        self.waits[num] = call.id
        return _LATER

    def _on_signal(self, call: Call, num: int, signal: int) -> None:
        if num in self.jobs:
            _signal(self.jobs[num][0], int(signal))

    def _on_call(self, call: Call, fn, args: list, kwargs: dict):
        inherited = [fd for fd in self._inherited() if fd != self.launcher_stderr]  # the call prints there
        forked = _Call.fork(call.id, (fn, args, kwargs), self.launcher_stderr, inherited)
        self.selector.register(forked.fd, selectors.EVENT_READ, forked)
        self.forked_calls[forked.fd] = forked
        return _LATER

    def _inherited(self) -> list[int]:
        """The descriptors a forked child must close: the pipe to the launcher, the jobs' pidfds, the
        calls' pipes (stdin, the calls' pipe from the launcher, stays: a job puts /dev/null there)."""
        return (
            [self.replies.fileno(), self.selector.fileno(), self.launcher_stderr]
            + [pidfd for _, pidfd in self.jobs.values()]
            + list(self.forked_calls)
        )

    def _fork(self, child) -> int:
        fork_safe()
        sys.stdout.flush()
        sys.stderr.flush()
        inherited = self._inherited()
        pid = os.fork()
        if pid:
            return pid
        _close(inherited)
        child()  # never returns

    def _started(self, num: int, pid: int) -> dict:
        pidfd = os.pidfd_open(pid)
        self.selector.register(pidfd, selectors.EVENT_READ, num)
        self.jobs[num] = (pid, pidfd)
        return {"pid": pid}

    def _exited(self, num: int) -> None:
        pid, pidfd = self.jobs.pop(num)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        ended = {"pid": pid, "code": os.waitstatus_to_exitcode(status)}
        if num in self.waits:
            self.send(ok(self.waits.pop(num), ended))
        else:
            self.exits[num] = ended

    def _answered(self, forked: _Call) -> None:
        line = forked.read()
        if line is not None:
            self.selector.unregister(forked.fd)
            del self.forked_calls[forked.fd]
            self.send(line)


_LATER = object()  # a call answered when its job or process ends, not on return


class _Call:
    """A call of the launcher's (a function and its arguments), run in a child forked for it, which
    writes its answer's line into a pipe that the worker reads as it comes (an answer larger than
    the pipe's buffer would otherwise block the child)."""

    def __init__(self, call_id: int, pid: int, fd: int, name: str):
        self.id, self.pid, self.fd, self.name, self.answer = call_id, pid, fd, name, bytearray()

    @classmethod
    def fork(cls, call_id: int, function: tuple, stderr_fd: int, inherited: list[int]) -> _Call:
        fork_safe()
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        worker_pid = os.getpid()
        pid = os.fork()
        if pid:
            os.close(write_fd)
            return cls(call_id, pid, read_fd, getattr(function[0], "__qualname__", repr(function[0])))
        os.close(read_fd)
        _close(inherited)
        _answer(call_id, function, write_fd, stderr_fd, worker_pid)

    def read(self) -> bytes | None:
        """The answer's line once the child has closed its pipe, else None."""
        chunk = os.read(self.fd, 1 << 20)
        if chunk:
            self.answer += chunk
            return None
        os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if self.answer.endswith(b"\n") and code == 0:
            return bytes(self.answer)
        how = f"its process forked from the sweep's worker ended with code {code}"
        return error(self.id, f"RuntimeError: {self.name}: {how}")


def _answer(call_id: int, function: tuple, write_fd: int, stderr_fd: int, worker_pid: int) -> None:
    """In a call's child: run it, write its answer's line, exit (never returns)."""
    code = 1
    try:
        os.dup2(stderr_fd, 1)  # what the call prints is the launcher's to show
        os.dup2(stderr_fd, 2)
        die_with_parent(worker_pid)
        fn, args, kwargs = function
        try:
            line = ok(call_id, fn(*args, **kwargs))
        except Exception as exc:
            line = error(call_id, exc, traceback.format_exc())
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(line)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        flush_std_streams()
        os._exit(code)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # it has just exited; its pidfd reports it
        pass


def _unpickle(payload: bytes):
    import cloudpickle

    return cloudpickle.loads(payload)


def _close(fds: list[int]) -> None:
    """In a child: none of the worker's descriptors (its pipes, the other jobs' pidfds, the calls'
    pipes, the launcher's stderr) stay open in it."""
    for fd in fds:
        os.close(fd)


def _job(spec: dict, msg: dict, started: float, parent_pid: int) -> None:
    """Run one job in this process, then exit (never returns)."""
    code = 1
    try:
        _redirect(msg["log"])
        if os.getpgid(0) != os.getpid():  # (a one-job worker leads its own session already)
            os.setpgid(0, 0)  # its own process group: a terminal's Ctrl-C reaches the launcher, which stops it
        die_with_parent(parent_pid)
        interrupt_on(signal.SIGTERM, signal.SIGINT)
        modules_before = set(sys.modules)
        os.environ.update(msg.get("env") or {})  # its GPUs, before anything in it touches CUDA
        _set_threads(int(msg["threads"]))
        ret = run_one(spec, msg["num"], msg["overrides"], msg.get("plan"))
        imported = sorted(set(sys.modules) - modules_before)
        if ret.hydra_cfg is not None:
            write_usage(Path(ret.hydra_cfg.hydra.runtime.output_dir), time.perf_counter() - started, imported)
        write_return(Path(msg["result"]), ret)
        code = 0
    except SystemExit as exc:  # fail() has printed its one line; a Requeued run is resumable
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        flush_std_streams()
        os._exit(code)  # the worker's exit handlers are the worker's, not this job's


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _redirect_errors(log: str) -> None:
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _set_threads(n: int) -> None:
    """This job's share of the cores, before its first torch op starts the OpenMP pool; the
    variables reach the processes it starts (DDP helper ranks)."""
    import torch

    torch.set_num_threads(n)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


def write_usage(job_dir: Path, wall_s: float, imported: list[str]) -> None:
    """JOB_DIR/usage.json: the CPU time this job's process used, and the modules it imported
    (a warm worker should leave it almost nothing to import). On a shared machine wall time says
    little; CPU seconds / cores is what the sweep takes on idle cores."""

    own, helpers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + helpers.ru_utime + helpers.ru_stime
    top = sorted({m.split(".")[0] for m in imported})
    write_json(
        job_dir / USAGE_FILE,
        {
            "cpu_s": cpu,
            "wall_s": wall_s,
            "max_rss_mb": own.ru_maxrss / 1024,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "imported": len(imported),
            "packages": top,
        },
    )


def run_one(spec: dict, num: int, overrides: list, plan=None):
    """Run job `num`; `plan`: what the sweep's plan made of it (job.JobPlan; None: compose it here)."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals

    Singleton.set_state(spec["singletons"])
    setup_globals()
    return run_here(spec["hydra_context"], spec["task_function"], spec["config"], num, overrides, plan)


def write_return(path: Path, ret) -> None:

    write_json(path, to_json(ret))
