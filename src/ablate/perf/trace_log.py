"""The profiler's own log lines kept off the console.

torch.profiler's CPU and CUDA tracing is Kineto's (libkineto, C++), which writes a line to
descriptor 2 when a trace starts and stops ("USDT:2026-12-04 23:51:28 1378:1378
SyncActivityProfilerHandler.cpp:52] profiler_start", "STAGE:... Completed Stage: Warm Up"),
whatever KINETO_LOG_LEVEL says: in the middle of a run's progress bar they read as output of the
run. `kineto_quiet()` points descriptor 2 at a file while the profiler starts or stops, then writes
back every line that is not Kineto's (a Python warning, an error) to stderr, so nothing else said
in that moment is lost.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# Kineto's log prefix: LEVEL:YYYY-MM-DD HH:MM:SS pid:tid File.cpp:line]
KINETO_LINE = re.compile(rb"^[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w.]+:\d+\]")


@contextlib.contextmanager
def kineto_quiet() -> Iterator[None]:
    """Descriptor 2 captured for the block; its lines, less Kineto's, written back to stderr after."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 to take over: nothing reaches a console anyway
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(AttributeError, ValueError, OSError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = [line for line in sink.read().splitlines(keepends=True) if not KINETO_LINE.match(line)]
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, b"".join(kept))
