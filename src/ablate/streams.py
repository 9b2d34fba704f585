"""Standard streams that a command can always write: one started with a stream closed (cron, a
daemon: `2>&-`) or whose reader goes away (`ablate plan | head -1`, a terminal closed, an ssh
session dropped) carries on quietly, with the exit status it would have had and its run's status
unaffected.

Python sets sys.stderr to None when descriptor 2 is closed at start (a print to it is then an
AttributeError), and the next file the process opens would take descriptor 2, so that anything
written to "stderr" would land in it (an MLflow store, a checkpoint). A write to a pipe with no
reader raises BrokenPipeError (Python ignores SIGPIPE), and a hung-up terminal EIO. So, at the
front door of every process (cli/main.entry, child.run): each closed standard descriptor is opened
on /dev/null, and stdout and stderr are wrapped so that a write or flush that finds its reader gone
moves that descriptor onto /dev/null (the processes the command starts inherit it too) and goes on.
What goes through them has the passwords of URIs hidden (redact.py).
"""

from __future__ import annotations

import errno
import os
import sys

from ablate.redact import redact

# What a write says when nobody reads it any more: a pipe closed, a socket reset, a terminal hung up.
GONE = frozenset({errno.EPIPE, errno.ECONNRESET, errno.EIO, errno.EBADF})


def _to_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    if devnull != fd:
        os.dup2(devnull, fd)
        os.close(devnull)


class SteadyStream:
    """A text stream (sys.stdout, sys.stderr) whose writes and flushes never fail because the
    reader went away: the descriptor is moved onto /dev/null and the text is dropped."""

    def __init__(self, stream, fd: int):
        self._stream, self._fd = stream, fd

    def _gone(self, exc: BaseException) -> bool:
        if isinstance(exc, OSError) and exc.errno in GONE:
            _to_devnull(self._fd)
            return True
        return False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(redact(text))
        except OSError as exc:
            if not self._gone(exc):
                raise
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if not self._gone(exc):
                raise
            try:  # what was buffered goes to /dev/null now
                self._stream.flush()
            except OSError:
                pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def steady_streams() -> None:
    """Descriptors 0-2 open (on /dev/null where closed) and sys.stdout/sys.stderr as SteadyStream."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            _to_devnull(fd)
            stream = open(fd, mode, buffering=1 if mode == "w" else -1, closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)
            if getattr(sys, f"__{name}__") is None:
                setattr(sys, f"__{name}__", stream)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, SteadyStream):
            setattr(sys, name, SteadyStream(stream, fd))
