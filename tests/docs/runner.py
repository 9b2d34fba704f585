"""A warm process for the docs examples' `ablate` commands (run as a script by tests/docs/conftest.py).

Each command of a Hydra app (training, fit, plan) would spend its first seconds in a new process
importing torch, MLflow and Hydra. This process imports them once, then reads one JSON request a
line on stdin, {"argv": [...], "cwd": DIR, "env": {...}, "log": FILE}, and runs
`ablate.cli.main.main(argv)` in DIR, with that environment and with file descriptors 1 and 2 sent
to FILE (so the output of the processes a sweep starts lands there too). It answers
{"code": EXIT_STATUS, "cpu_s": CPU_SECONDS} on the descriptor that was stdout at start. What one
command leaves in process-wide state (Hydra's global config, signal handlers, torch's thread count,
the last sweep summary) is reset before the next.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import traceback


def main() -> None:
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing but answers on the reply channel, even between requests
    import hydra  # noqa: F401  (warm-up: what the commands import anyway)
    import mlflow  # noqa: F401
    import torch
    from hydra.core.global_hydra import GlobalHydra

    from ablate.cli import main as cli

    signals = [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2]
    handlers = {s: signal.getsignal(s) for s in signals}
    threads = torch.get_num_threads()
    reply.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        cpu = _cpu()
        code = run(cli.main, request)
        cpu = _cpu() - cpu
        GlobalHydra.instance().clear()
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)
        reply.write(json.dumps({"code": code, "cpu_s": round(cpu, 2)}) + "\n")


def _cpu() -> float:
    """CPU seconds of this process and the children it has waited for (a sweep's job processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run(entry, request: dict) -> int:
    os.chdir(request["cwd"])
    os.environ.clear()  # what a bash command of the same page sees (the processes a sweep starts inherit it)
    os.environ.update(request["env"])
    saved = os.dup(1), os.dup(2)
    with open(request["log"], "ab") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            sys.argv = ["ablate"]
            entry(list(request["argv"]))
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # sys.exit("message") prints the message and exits 1
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return code


if __name__ == "__main__":
    main()
