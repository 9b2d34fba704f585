"""`python -m ablate ARGV` in a process forked from the warm worker (its `run_argv` call, worker.py):
the command's own process, without a fresh interpreter's start.

The forked child is the command's process from its first line to its exit status: its own pid and
process group (a timeout kills the command and every process it started), exit status, file
descriptors 1 and 2 (the files named), working directory, environment and signal dispositions. It
runs `ablate/__main__.py` as `python -m ablate` would (runpy, run_name "__main__", sys.argv and
sys.path[0] as the interpreter sets them), then shuts down as the interpreter does: non-daemon
threads joined, atexit handlers run, streams flushed. An exception that escapes prints its
traceback and exits 1; a KeyboardInterrupt that escapes ends the process by SIGINT, as Python's does.

What it saves is the interpreter's start and the imports of torch, Hydra and MLflow: about 2 s of
CPU a command on 2 cores (the tests start hundreds of commands this way).
"""

from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys
import threading
import traceback

from ablate.host import flush_std_streams


def run_command(argv: list[str], cwd: str, env: dict, stdout: str, stderr: str) -> None:
    """In the forked child: the command, then its exit (never returns)."""
    code = 1
    try:
        os.setpgrp()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the worker ignores Ctrl-C; a command does not
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        for fd, path in ((1, stdout), (2, stderr)):
            # O_APPEND: when both name one file, neither descriptor writes over the other's output
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        _set_threads(os.environ.get("OMP_NUM_THREADS", ""))
        sys.argv = ["-m", *argv]  # runpy puts ablate/__main__.py in front, as `python -m` does
        sys.path[0] = os.getcwd()
        code = _run()
        threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter does first at exit: join non-daemon threads
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        flush_std_streams()
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def _set_threads(threads: str) -> None:
    """OpenMP read OMP_NUM_THREADS when the worker imported torch: the command's value is set again."""
    torch = sys.modules.get("torch")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def _run() -> int:
    """`-m ablate`: ablate/__main__.py run as __main__; the exit status the interpreter would give."""
    try:
        runpy.run_module("ablate", run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exc:
        return exit_status(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


def exit_status(exc: SystemExit) -> int:
    """The exit status the interpreter gives a SystemExit (a message is printed, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1
