"""Facts about this machine's processes and cores that several layers need."""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, which SLURM and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def process_alive(pid: int, started_before: float | None = None) -> bool:
    """True when process `pid` exists (and, given `started_before`, is not a recycled PID: it was
    created no later than that time, in seconds since the epoch, with a second's tolerance)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return started_before is None or proc.create_time() <= started_before + 1.0
    except psutil.Error:
        return False


def die_with_parent(parent_pid: int) -> None:
    """A child must not outlive the process that started it: a relaunch would resume the same run while
    the orphan still writes to it. Linux's PR_SET_PDEATHSIG sends SIGTERM when the parent dies (prctl(2))."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        raise SystemExit(f"the parent process (pid {parent_pid}) is gone")


class Interrupted(KeyboardInterrupt):
    """A signal turned into KeyboardInterrupt by interrupt_on: the same clean-up as Ctrl-C, and the
    signal's number for the exit status (128 + signum, the shell's convention)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def interrupt_on(*signals) -> None:
    """The first of `signals` becomes KeyboardInterrupt (Interrupted), so a run records itself as
    KILLED and keeps its checkpoint, and a sweep stops its jobs and closes its records; later ones
    are ignored so that this clean-up is not cut short."""

    def handler(signum, frame):
        for s in signals:
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    for s in signals:
        signal.signal(s, handler)


def interrupting_signal(exc: BaseException | None) -> int | None:
    """The signal behind a KeyboardInterrupt, through the exceptions raised while handling it (a
    launcher re-raises its own once it has stopped its jobs); None for Ctrl-C's own."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Interrupted):
            return exc.signum
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def flush_std_streams() -> None:
    """Flush stdout and stderr before a process ends with os._exit (which skips the interpreter's
    own flush); a closed or broken stream has nothing more to say."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


# Signals that mean "stop the run" (a terminal, a scheduler): the processes that must outlive a run
# to close its records (run/watchdog.py, tracking/agent.py) ignore them.
RUN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def import_available(names) -> list[str]:
    """Import each module of `names` that this environment has (a warm process's preload); the
    names imported."""
    loaded = []
    for name in names:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except ImportError:
            pass
    return loaded
