"""The one way a process of this project starts another: `python -m ablate.child REQUEST`.

Every child (a sweep's warm worker, a run's tracking agent and watchdog, a cooldown branch, a DDP
helper rank) is started by `spawn` and runs this module, which reads one request, a JSON object on
its command line:

    {"target": "ablate.run.watchdog:main", "args": {"uri": ..., "run_id": ...}, "parent_pid": 4242}

- target: the function the child runs, "ablate.<module>:<function>", imported by name when the
  child starts. The module that spawns names a function of its own package, so this module, at the
  bottom layer, imports nothing above it (tests/test_architecture.py counts the name as an import
  of the module that writes it, and checks that it names a function that exists).
- args: the function's keyword arguments, JSON values.
- parent_pid: the process the child must not outlive (host.die_with_parent), set before the
  target's module is imported; null for a child that outlives its parent on purpose (the watchdog
  that closes a dead run's records, the agent that makes every call it was sent before it exits).

The function's return value is the child's exit status (None: 0); a KeyboardInterrupt (Ctrl-C, or
a signal that host.interrupt_on turned into one) ends it as the shell reports a signal, 128 + its
number. What else passes between a parent and its child is the target's own channel on stdin and
stdout: the worker's and the agent's JSON lines, the watchdog's pipe.

The request travels on the command line, not on stdin, because stdin is that channel; there it also
names the child in `ps`. A request larger than a command-line argument may be (128 KiB on Linux)
is a file its target reads (a branch's spec).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from ablate.host import die_with_parent, interrupting_signal
from ablate.streams import steady_streams

TARGET = re.compile(r"ablate(\.\w+)+:\w+")


class BadRequest(SystemExit):
    """A request this module cannot run: the child exits with its one line."""

    def __init__(self, reason: str):
        super().__init__(f"ablate.child: {reason}")


@dataclass(frozen=True)
class Request:
    target: str
    args: dict = field(default_factory=dict)
    parent_pid: int | None = None

    def __post_init__(self):
        if not isinstance(self.target, str) or not TARGET.fullmatch(self.target):
            raise BadRequest(f"target={self.target!r} (valid: 'ablate.<module>:<function>')")
        if not isinstance(self.args, dict):
            raise BadRequest(f"args={self.args!r} (valid: an object of keyword arguments)")
        if self.parent_pid is not None and (not isinstance(self.parent_pid, int) or self.parent_pid <= 0):
            raise BadRequest(f"parent_pid={self.parent_pid!r} (valid: a process id, or null)")

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> Request:
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"the request is not JSON ({exc})") from None
        if not isinstance(fields, dict) or "target" not in fields or set(fields) - {"target", "args", "parent_pid"}:
            raise BadRequest(f"request={text!r} (valid: an object with target, and args and parent_pid)")
        return cls(**fields)


def command(request: Request) -> list[str]:
    """The child's command line: this interpreter, this module, the request."""
    return [sys.executable, "-m", "ablate.child", request.encode()]


def spawn(target: str, args: dict | None = None, *, dies_with_parent: bool = True, **popen) -> subprocess.Popen:
    """Start `target(**args)` in a child of this process; `popen`: subprocess.Popen's own keywords
    (its pipes, environment, session). `dies_with_parent`: the child ends when this process does."""
    request = Request(target, args or {}, os.getpid() if dies_with_parent else None)
    return subprocess.Popen(command(request), **popen)


def target_function(target: str):
    """The function a target names, its module imported now."""
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name, None)
    if not callable(function):
        raise BadRequest(f"target={target!r}: {module_name} has no function {function_name}")
    return function


def run(request: Request) -> int:
    """Run a request in this process; its exit status."""
    if request.parent_pid is not None:
        die_with_parent(request.parent_pid)
    steady_streams()
    function = target_function(request.target)
    try:
        code = function(**request.args)
    except KeyboardInterrupt as exc:
        return 128 + (interrupting_signal(exc) or signal.SIGINT)
    return 0 if code is None else code


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise BadRequest("usage: python -m ablate.child REQUEST (one JSON object)")
    return run(Request.decode(argv[0]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
