"""`python -m ablate ARGS` as a process of its own without a fresh interpreter's start: run as a script
by the `cli` fixture (tests/conftest.py) for the commands that must be processes.

It imports torch, MLflow, Hydra and the command line once, then forks one child per request. The child
is the command's process: its own pid, exit status, file descriptors 1 and 2 (files the test reads
back), working directory, environment and signal dispositions, and what it changes dies with it. It
runs `ablate/__main__.py` as `python -m ablate` would (runpy, run_name "__main__", sys.argv and
sys.path[0] as the interpreter sets them), then shuts down as the interpreter does: non-daemon threads
joined, atexit handlers run, streams flushed. An exception that escapes prints its traceback and exits
1; a KeyboardInterrupt that escapes ends the child by SIGINT, as Python does.

What it saves is the interpreter's start: about 2 s of CPU a command on these machines (the bad-input
ledger alone runs 150 of them). Forking is safe because this process starts no thread pool: torch's
OpenMP pool starts at the first parallel op, which only a child runs; OpenBLAS is held to one thread
(as in the sweep's warm worker, src/ablate/sweep/launch/worker.py).

Protocol, JSON lines: requests on stdin, {"id", "argv", "cwd", "env", "stdout", "stderr"} (file paths);
answers on the descriptor that was stdout at start: {"id", "pid"} once forked, then {"id", "code"} when
the child has exited (code < 0: killed by signal -code, as subprocess reports it). End of input: the
children still running are killed and the server exits.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import selectors
import signal
import sys
import threading
import traceback
from pathlib import Path

from ablate.host import flush_std_streams
from inprocess import exit_code  # tests/, this script's folder

PRELOAD = ("numpy", "torch", "omegaconf", "hydra", "mlflow", "mlflow.tracking", "ablate.cli.main", "ablate.run.train")


def main() -> None:
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)  # nothing but answers on the reply channel
    sys.path[0] = str(Path.cwd())  # not tests/: a child's sys.path[0] is its own cwd, set there
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    for name in PRELOAD:
        __import__(name)
    children: dict[int, str] = {}
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    reply.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    pending, done = b"", False
    while not done:
        if selector.select(timeout=0.02):
            # os.read, not a buffered readline: requests that arrive together are all seen now,
            # none left in a buffer that select() cannot see.
            chunk = os.read(0, 1 << 20)
            done = not chunk
            *lines, pending = (pending + chunk).split(b"\n")
            for line in filter(None, lines):
                request = json.loads(line)
                sys.stdout.flush(), sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    reply.close()
                    _child(request, null)
                children[pid] = request["id"]
                reply.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
        _reap(children, reply)
    for pid in children:
        os.kill(pid, signal.SIGKILL)


def _reap(children: dict[int, str], reply) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        if pid in children:
            code = os.waitstatus_to_exitcode(status)
            reply.write(json.dumps({"id": children.pop(pid), "code": code}) + "\n")


def _child(request: dict, null: int) -> None:
    """Never returns: the command's process, from its first line to its exit status."""
    code = 1
    try:
        os.setpgrp()  # a timeout kills the command and every process it started
        os.dup2(null, 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            # O_APPEND: when both name one file, neither descriptor writes over the other's output
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            os.dup2(target, fd)
            os.close(target)
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:  # read by OpenMP when torch loaded, here already
            sys.modules["torch"].set_num_threads(int(threads))
        sys.argv = ["-m", *request["argv"]]  # runpy puts ablate/__main__.py in front, as `python -m` does
        sys.path[0] = os.getcwd()
        code = _run()
        threading._shutdown()  # what the interpreter does first at exit: join non-daemon threads
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        flush_std_streams()
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def _run() -> int:
    """`-m ablate`: ablate/__main__.py run as __main__; the exit status the interpreter would give."""
    try:
        runpy.run_module("ablate", run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exc:
        return exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    main()
