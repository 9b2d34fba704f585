"""sweep/prediction.py: what a recorded prediction says of its outcome."""

from __future__ import annotations

import pytest

from ablate.sweep import prediction
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


@pytest.mark.parametrize(
    ("made", "start", "end", "when"),
    [
        ("2026-01-01T10:00:00+00:00", "2026-01-01T11:00:00+00:00", "2026-01-01T12:00:00+00:00", "before"),
        ("2026-01-01T11:30:00+00:00", "2026-01-01T11:00:00+00:00", "2026-01-01T12:00:00+00:00", "during"),
        ("2026-01-01T12:30:00+00:00", "2026-01-01T11:00:00+00:00", "2026-01-01T12:00:00+00:00", "after"),
        ("2026-01-01T10:00:00+00:00", None, None, None),
    ],
)
def test_the_record_says_whether_the_prediction_came_before_during_or_after_the_run(made, start, end, when):
    """The run's own window (from its result.json) against the prediction's time: a prediction made
    after the run ended is said to predict nothing, in the table's last line and the study's heading."""
    doc = {"made_at": made, "trained_from": start, "trained_at": end}
    assert prediction.when_made(doc) == when
    if when == "after":
        assert "AFTER the target was trained: it predicts nothing" in prediction.TIMING[when]
