"""sweep/prediction.py: what a recorded prediction says of its outcome."""

from __future__ import annotations

import pytest

from ablate.sweep.prediction import outcome


def test_the_outcome_says_inside_or_outside_and_the_error():
    doc = {"predicted": 4.0, "interval95": [3.8, 4.2], "actual": 4.1}
    got = outcome(doc)
    assert got["inside"] is True
    assert got["error"] == pytest.approx(4.1 / 4.0 - 1) and got["half_width"] == pytest.approx(0.05)
    assert outcome({**doc, "actual": 4.3})["inside"] is False


def test_nothing_is_judged_before_the_run_or_without_a_number():
    assert outcome({"predicted": 4.0, "interval95": [3.8, 4.2], "actual": None})["inside"] is None
    nothing = outcome({"predicted": None, "interval95": None, "actual": 4.1})
    assert nothing == {"inside": None, "error": None, "half_width": None}
