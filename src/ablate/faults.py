"""Failpoints: named places where the reliability suite kills the process on purpose.

ABLATE_FAILPOINTS="checkpoint.write@2,tracking.flush" sends SIGKILL to this process the 2nd
time execution reaches `failpoint("checkpoint.write")` and the 1st time it reaches
`failpoint("tracking.flush")`. Unset (always, outside tests), a failpoint is one dict lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "ABLATE_FAILPOINTS"
_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    _hits[name] = _hits.get(name, 0) + 1
    for item in spec.split(","):
        point, _, nth = item.strip().partition("@")
        if point == name and _hits[name] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
