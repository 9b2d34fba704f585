"""compare_arms reports its progress (scaling/multiplier.py; `ablate compare` draws it as a bar on a
terminal): each arm's fit, then each arm against the baseline, in order, ending at its total."""

from ablate.scaling import compare_arms
from ablate.scaling.points import Points
from support import ROOT

POINTS = ROOT / "experiments" / "ladder" / "sweep" / "points.csv"


def test_compare_reports_each_arms_fit_then_each_comparison():
    points = Points.from_csv(POINTS)
    groups = {"a": points, "b": points.subset(list(range(len(points)))), "c": points}
    seen = []
    compare_arms(groups, "a", n_boot=20, progress=lambda label, i, total: seen.append((label, i, total)))
    assert seen == [
        ("arm a", 0, 5),
        ("arm b", 1, 5),
        ("arm c", 2, 5),
        ("b against a", 3, 5),
        ("c against a", 4, 5),
        ("done", 5, 5),
    ]
