"""Jobs decided as slots free, for a sweeper whose next job depends on how the last ones ended (an
Optuna study asks its next trial when one ends).

Hydra's Launcher API takes a whole batch and returns when its slowest job has ended. A launcher
that also has `launch_as_slots_free` (SlotLauncher) keeps `slots` jobs going and asks the sweeper's
JobFeed for the next one whenever one ends; a sweeper falls back to batches on any other launcher.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class JobFeed(Protocol):
    def next_job(self, num: int) -> list[str] | None:
        """The overrides of job `num`, asked when a slot is free; None: nothing to start now. The
        launcher asks again after every job that ends, and stops when nothing runs and None comes."""

    def job_ended(self, num: int, ret: Any) -> None:
        """Job `num` has ended with Hydra's JobReturn `ret`; its slot is free."""


@runtime_checkable
class SlotLauncher(Protocol):
    def launch_as_slots_free(self, feed: JobFeed, slots: int, initial_job_idx: int) -> list:
        """Run the feed's jobs, at most `slots` at once, numbered from `initial_job_idx`; returns
        their JobReturns in the order they ended."""
