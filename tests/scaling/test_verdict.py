"""ablate.scaling.verdict: the one type that says whether a law, a prediction or an allocation may be used."""

from __future__ import annotations

import json

import pytest

from ablate.scaling.verdict import LEVELS, NOT_DETERMINED, REASON_CODES, TRUSTED, WIDE, Reason, Verdict


def test_no_reasons_is_trusted_and_the_worst_reason_sets_the_level():
    assert Verdict.of([]) == Verdict(TRUSTED)
    wide = Reason("extrapolation", WIDE, "1.6 decades of compute past the largest run")
    nd = Reason("few_sizes", NOT_DETERMINED, "2 sizes (needs 3)")
    v = Verdict.of([wide, nd])
    assert v.level == NOT_DETERMINED and not v.usable and not v.trusted
    assert v.reasons == (nd, wide)  # worst first
    assert v.codes() == ("few_sizes", "extrapolation")
    assert Verdict.of([wide]).usable and Verdict.of([wide]).level == WIDE


def test_worst_merges_the_reasons_of_several_verdicts_once():
    a = Reason("residual_trend", WIDE, "residuals drift")
    b = Reason("interval_width", NOT_DETERMINED, "interval spans a factor 3")
    law, prediction = Verdict.of([a]), Verdict.of([a, b])
    merged = Verdict.worst(law, prediction)
    assert merged.level == NOT_DETERMINED and merged.reasons == (b, a)
    assert Verdict.worst() == Verdict(TRUSTED)


def test_one_console_line_says_the_level_and_why():
    assert Verdict.of([]).line("approach 3") == "approach 3: trusted"
    v = Verdict.of([Reason("few_sizes", NOT_DETERMINED, "1 size"), Reason("flat_loss", WIDE, "flat")])
    assert v.line("approach 3") == "approach 3: not_determined: 1 size; flat"
    assert "\n" not in v.line("x")


def test_round_trips_through_json():
    v = Verdict.of([Reason("at_bound", WIDE, "E at the floor 0.504"), Reason("law", NOT_DETERMINED, "law")])
    assert Verdict.from_dict(json.loads(json.dumps(v.to_dict()))) == v
    assert v.to_dict()["verdict"] == NOT_DETERMINED
    assert v.to_dict()["reasons"][0] == {"code": "law", "level": NOT_DETERMINED, "text": "law"}


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: Reason("made_up", WIDE, "x"), "unknown reason code 'made_up'"),
        (lambda: Reason("law", "fine", "x"), "unknown level 'fine'"),
        (lambda: Verdict(TRUSTED, (Reason("law", WIDE, "x"),)), "its reasons call for 'wide'"),
        (lambda: Verdict(WIDE), "its reasons call for 'trusted'"),
    ],
)
def test_inconsistent_verdicts_are_refused(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_every_code_and_level_is_documented():
    assert LEVELS == ("trusted", "wide", "not_determined")
    assert all(isinstance(text, str) and text for text in REASON_CODES.values())
