"""The study report's busy share: the slot-seconds a launch's trials ran over slots x its span."""

from __future__ import annotations

import pytest

from ablate.search.report import launches


def row(driver: str, start: float, end: float, schedule: str = "batch") -> dict:
    return {"driver": driver, "slots": 2, "schedule": schedule, "started_at": start, "ended_at": end}


def test_busy_share_counts_the_idle_slot_behind_a_batch_barrier():
    batch = [row("a", 0, 10), row("a", 0, 5), row("a", 10, 15), row("a", 10, 12)]
    (launch,) = launches(batch)
    assert launch["span_s"] == 15 and launch["busy_s"] == 22
    assert launch["busy_share"] == pytest.approx(22 / 30)


def test_each_launch_of_a_study_is_its_own_row_in_start_order():
    rows = [row("late", 100, 110, "asynchronous"), row("late", 100, 105, "asynchronous"), row("late", 105, 110)]
    rows += [row("early", 0, 4), {**row("early", 0, 4), "ended_at": None}]  # one still running: not counted
    early, late = launches(rows)
    assert (early["driver"], early["trials"], early["busy_share"]) == ("early", 1, pytest.approx(0.5))
    assert (late["schedule"], late["trials"], late["busy_share"]) == ("asynchronous", 3, pytest.approx(1.0))
