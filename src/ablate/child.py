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
number.

The request travels on the command line, not on stdin, because stdin is the channel: it also names
the child in `ps`. A child that is asked for more after its start (the sweep's warm worker, a run's
tracking agent) reads calls on stdin and answers on stdout, JSON lines of one form for all of them
(`Channel` is the parent's end; `Calls`, `ok` and `error` the child's):

    {"id": 7, "call": "log_params", "args": {"run_id": "ab12", "params": {...}}}     -> the child
    {"id": 7, "ok": VALUE}                                                            <- its answer
    {"id": 7, "error": "Type: message"}                                               <- or its failure

Every call is answered once, by its id, in the order the child finishes them (a worker answers a
short call while a long one runs), unless the child ends first: its stdout's end says so. A value
that is not JSON (a function to run, a composed config, an exception with its class) travels
cloudpickled, base64, in a "pickle" field beside the JSON: the arguments that are not JSON as one
object, a value as itself (then "ok" is null), an exception that pickles as itself (then "trace"
holds the child's traceback). Pickles come only from the
process's own parent or child through their pipes, never from a file. The watchdog has a pipe but
no calls: its parent's end closing is the message (run/watchdog.py).
"""

from __future__ import annotations

import base64
import importlib
import itertools
import json
import os
import pickle
import queue
import re
import signal
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

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


# -- the channel: calls after the start ---------------------------------------------------------------


class RemoteError(RuntimeError):
    """A call the child could not make, as its one line "Type: message"."""


class ChannelClosed(ConnectionError):
    """The child's end has closed (it exited, or died) before answering."""


JSON_SCALARS = (type(None), bool, int, float, str)


def is_json(value) -> bool:
    """Whether `value` travels as JSON and arrives equal: scalars, lists and string-keyed objects of
    them; a tuple arrives as a list, as json.dumps writes it."""
    if type(value) in JSON_SCALARS:
        return True
    if type(value) in (list, tuple):
        return all(is_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and is_json(v) for k, v in value.items())
    return False


def _pickled(value) -> str:
    import cloudpickle  # functions and classes by value (a test's function, the sweep's task)

    return base64.b64encode(cloudpickle.dumps(value)).decode()


def _unpickled(text: str):
    return pickle.loads(base64.b64decode(text))


def _line(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def call_line(call_id: int, name: str, args: dict) -> bytes:
    """A call: its JSON arguments as they are, the others in one pickled object."""
    plain = {k: v for k, v in args.items() if is_json(v)}
    message: dict[str, Any] = {"id": call_id, "call": name, "args": plain}
    if len(plain) < len(args):
        message["pickle"] = _pickled({k: v for k, v in args.items() if k not in plain})
    return _line(message)


def ok(call_id: int, value=None) -> bytes:
    """A call's answer."""
    if is_json(value):
        return _line({"id": call_id, "ok": value})
    return _line({"id": call_id, "ok": None, "pickle": _pickled(value)})


def error(call_id: int, exc: BaseException | str, trace: str | None = None) -> bytes:
    """A call's failure: its one line; with `trace`, the exception itself too (where it pickles),
    raised again in the parent with its class, and the child's traceback."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    message: dict[str, Any] = {"id": call_id, "error": text}
    if trace is not None and isinstance(exc, BaseException):
        message["trace"] = trace
        try:
            message["pickle"] = _pickled(exc)
        except Exception:  # an exception that does not pickle: its line says what it was
            pass
    return _line(message)


@dataclass(frozen=True)
class Call:
    """A call as the child reads it: its id, its name, its keyword arguments."""

    id: int
    name: str
    args: dict

    @classmethod
    def decode(cls, message: dict) -> Call:
        args = dict(message.get("args") or {})
        if "pickle" in message:
            args.update(_unpickled(message["pickle"]))
        return cls(message["id"], message["call"], args)


@dataclass(frozen=True)
class Reply:
    """A call's answer as the parent reads it."""

    id: int
    message: dict

    @property
    def failed(self) -> bool:
        return "error" in self.message

    @property
    def trace(self) -> str | None:
        return self.message.get("trace")

    def value(self):
        """The call's value, or its failure raised: the child's exception where it came, else a RemoteError."""
        if self.failed:
            if "pickle" in self.message:
                raise _unpickled(self.message["pickle"])
            raise RemoteError(self.message["error"])
        return _unpickled(self.message["pickle"]) if "pickle" in self.message else self.message.get("ok")


class Lines:
    """JSON lines read from a file descriptor with os.read, so that select() sees every message not
    yet handled (a buffered reader would hide the ones it had read ahead). A last line without its
    newline (its writer died while writing it) is never read."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.eof = fd, bytearray(), False

    def read(self) -> list[dict]:
        """The lines that have come; blocks until some bytes do, unless select() said they had."""
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            self.eof = True
        self.buffer += chunk
        *lines, rest = self.buffer.split(b"\n")
        self.buffer = bytearray(rest)
        return [json.loads(line) for line in lines if line.strip()]


class Calls(Lines):
    """The child's end: the calls on its stdin."""

    def __init__(self, fd: int = 0):
        super().__init__(fd)

    def read_calls(self) -> list[Call]:
        return [Call.decode(message) for message in self.read()]


class Channel:
    """The parent's end of a child's calls: written to its stdin by a thread of this channel (a call
    larger than the pipe holds does not stall the parent while the child is still starting), the
    answers read from its stdout. Thread-safe to send; one reader at a time."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.replies = Lines(proc.stdout.fileno())
        self.answered: dict[int, Reply] = {}  # answers read while waiting for another
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.outbox: queue.Queue = queue.Queue()
        self.writer = threading.Thread(target=self._write, name="ablate-channel", daemon=True)
        self.writer.start()

    @classmethod
    def spawn(cls, target: str, args: dict | None = None, *, dies_with_parent: bool = True, **popen) -> Channel:
        """Start `target(**args)` in a child (`spawn`) that takes calls on stdin and answers on stdout."""
        proc = spawn(
            target, args, dies_with_parent=dies_with_parent, stdin=subprocess.PIPE, stdout=subprocess.PIPE, **popen
        )
        return cls(proc)

    @property
    def fd(self) -> int:
        return self.replies.fd

    @property
    def closed(self) -> bool:
        """The child's end has closed: no more answers."""
        return self.replies.eof

    def send(self, name: str, **args) -> int:
        """Call `name(**args)` in the child without waiting; its id."""
        with self.lock:
            call_id = next(self.ids)
            self.outbox.put(call_line(call_id, name, args))
        return call_id

    def read(self) -> list[Reply]:
        """The answers that have come (blocks until some bytes do, unless select() said they had)."""
        return [Reply(message["id"], message) for message in self.replies.read()]

    def reply(self, call_id: int) -> Reply:
        """The answer to `call_id`, waited for; the others read meanwhile are kept for their callers."""
        while call_id not in self.answered:
            if self.closed:
                raise ChannelClosed(f"the child (pid {self.proc.pid}) ended before answering call {call_id}")
            for reply in self.read():
                self.answered[reply.id] = reply
        return self.answered.pop(call_id)

    def call(self, name: str, **args):
        """`name(**args)` in the child: its value, or its failure raised."""
        return self.reply(self.send(name, **args)).value()

    def close(self) -> None:
        """End of input, once every call sent is written: the child's cue to finish and exit."""
        self.outbox.put(None)

    def _write(self) -> None:
        while (data := self.outbox.get()) is not None:
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):  # the child is gone: reading says so
                break
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise BadRequest("usage: python -m ablate.child REQUEST (one JSON object)")
    return run(Request.decode(argv[0]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
