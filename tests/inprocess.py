"""`ablate ARGS` run inside the test process, as `python -m ablate ARGS` would run it in a new one:
same command (ablate.cli.main:main, what the process's entry() runs before it freezes the garbage
collector for a short exit), same working directory, stdout and stderr captured at the
file-descriptor level, Python's default warning filters, exit code from SystemExit (an uncaught
exception prints its traceback and is exit code 1, as in a process). What a run changes in the
process (cwd, argv, environment, logging handlers, signal handlers, torch threads, random states,
Hydra's global state, the MLflow stores and database engines it opened) is put back afterwards.
Nothing of ablate's own is: a command keeps no state in its modules (it passes what it prepared,
and the processes it started, from its entry point down, and closes them), so there is nothing
to snapshot (tests/cli/test_inprocess.py runs a command twice over changed data).

It saves the interpreter's start (the imports of torch, MLflow and Hydra: about 2 s of CPU a
command on these machines); commands that start processes of their own are left to a subprocess
(tests/conftest.py `cli` decides which).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCONT]


class _Saved:
    """The process state a command may change."""

    def __init__(self):
        self.cwd, self.argv, self.environ = os.getcwd(), list(sys.argv), dict(os.environ)
        self.signals = {s: signal.getsignal(s) for s in SIGNALS}
        self.root = (list(logging.root.handlers), logging.root.level)
        self.loggers = {
            name: (list(lg.handlers), lg.level, lg.propagate, lg.disabled)
            for name, lg in logging.Logger.manager.loggerDict.items()
            if isinstance(lg, logging.Logger)
        }
        self.handlers = set(logging._handlerList)  # weakrefs of every handler that exists now
        self.random = random.getstate()
        self.numpy = sys.modules["numpy"].random.get_state() if "numpy" in sys.modules else None
        torch = sys.modules.get("torch")
        self.torch = (torch.get_rng_state(), torch.get_num_threads()) if torch else None
        self.engines = set(_mlflow_engines())

    def restore(self) -> None:
        os.chdir(self.cwd)
        sys.argv[:] = self.argv
        # Key by key, never emptied first: threads of the session copy os.environ meanwhile (the
        # bad-input pool's commands, tests/support.environ_now), and a copy taken between a clear()
        # and the update() is a whole mapping with keys missing, which no retry would notice.
        for key in set(os.environ) - set(self.environ):
            os.environ.pop(key, None)
        for key, value in self.environ.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        for s, handler in self.signals.items():
            if handler is not None:
                signal.signal(s, handler)
        logging.root.handlers[:], logging.root.level = self.root
        attached = set(logging.root.handlers)
        for name, lg in logging.Logger.manager.loggerDict.items():
            if isinstance(lg, logging.Logger):
                if name in self.loggers:
                    lg.handlers[:], lg.level, lg.propagate, lg.disabled = self.loggers[name]
                attached |= set(lg.handlers)  # a library's logger set up on import stays as it was made
        for ref in set(logging._handlerList) - self.handlers:
            handler = ref()
            if handler is not None and handler not in attached:  # Hydra's job log file
                handler.close()
        random.setstate(self.random)
        if self.numpy is not None:
            sys.modules["numpy"].random.set_state(self.numpy)
        torch = sys.modules.get("torch")
        if torch is not None and self.torch is not None:
            torch.set_rng_state(self.torch[0])
            torch.set_num_threads(self.torch[1])
        _forget_mlflow_stores(self.engines)


def _mlflow_engines() -> dict:
    """MLflow's process-wide SQLAlchemy engines, one per database URI (empty before MLflow is imported)."""
    store = sys.modules.get("mlflow.store.tracking.sqlalchemy_store")
    return store.SqlAlchemyStore._engine_map if store else {}


def _forget_mlflow_stores(engines_before: set) -> None:
    """Closes the database connections of the engines the command created and forgets its stores,
    as the end of a process would: MLflow keeps both for the life of the process (an engine per
    URI, a store per URI in an lru_cache), and a test may replace the database file afterwards."""
    engines = _mlflow_engines()
    for uri in set(engines) - engines_before:
        engines.pop(uri).dispose()
    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    if utils is not None:
        type(utils._tracking_store_registry)._get_store_with_resolved_uri.cache_clear()


@contextlib.contextmanager
def _captured_fds(out, err):
    """fd 1 and 2 into the two files, sys.stdout and sys.stderr writing to them, for the duration."""
    sys.stdout.flush(), sys.stderr.flush()
    fds, streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", line_buffering=True)
    # Log handlers that libraries bound to the streams on import (MLflow's INFO lines) write to these too.
    moved = []
    for ref in list(logging._handlerList):
        handler = ref()
        if type(handler) is logging.StreamHandler:
            if handler.stream in (streams[0], sys.__stdout__):
                moved.append((handler, handler.setStream(sys.stdout)))
            elif handler.stream in (streams[1], sys.__stderr__):
                moved.append((handler, handler.setStream(sys.stderr)))
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush(), sys.stderr.flush()
        for handler, stream in moved:
            handler.setStream(stream)
        sys.stdout, sys.stderr = streams
        os.dup2(fds[0], 1), os.dup2(fds[1], 2)
        os.close(fds[0]), os.close(fds[1])


@contextlib.contextmanager
def _default_warnings():
    """Python's start-up warning filters (not pytest's), each warning printed to stderr as a process would."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")

        def show(message, category, filename, lineno, file=None, line=None):
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield


def exit_code(exc: SystemExit) -> int:
    """The exit status the interpreter gives a SystemExit (a message is printed, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # sys.exit("message"): printed, exit code 1
    return 1


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`python -m ablate ARGV` in cwd, in this process; the CompletedProcess a subprocess.run would give."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from ablate.cli.main import main

    saved = _Saved()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            os.chdir(cwd)
            os.environ.pop("HYDRA_FULL_ERROR", None)
            sys.argv[:] = [str(Path(sys.modules["ablate"].__file__).with_name("__main__.py")), *argv]
            GlobalHydra.instance().clear()
            with _captured_fds(out, err), _default_warnings():
                try:
                    main(list(argv))
                    code = 0
                except SystemExit as exc:
                    code = exit_code(exc)
                except KeyboardInterrupt:
                    traceback.print_exc()
                    code = -signal.SIGINT
                except BaseException:
                    traceback.print_exc()
                    code = 1
        finally:
            GlobalHydra.instance().clear()
            HydraConfig.instance().cfg = None
            saved.restore()
        out.seek(0), err.seek(0)
        stdout, stderr = (f.read().decode("utf-8", errors="replace") for f in (out, err))
    return subprocess.CompletedProcess(["ablate", *argv], code, stdout, stderr)
