"""ablate.scaling.checks: the verdicts fits get on data that cannot support them (noise, one size, a flat
loss, runs far above their floor), one console line each and no numpy warning, and each check's
threshold on hand-made cases."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ablate.scaling.analysis import APPROACH3, fit_all
from ablate.scaling.checks import (
    DEFAULT_NOISE,
    NOISE_FLOOR,
    LawFacts,
    OffLawRun,
    Thresholds,
    approach3_facts,
    law_verdict,
    run_noise,
    runs_off_law,
)
from ablate.scaling.fitting.bootstrap import Estimate
from ablate.scaling.laws.chinchilla import ChinchillaLaw, fit_approach3
from ablate.scaling.offlaw import removable
from ablate.scaling.points import Points
from ablate.scaling.predict import FitOptions
from ablate.scaling.reports.export import fit_dict
from ablate.scaling.reports.report import fit_markdown, summary_text
from ablate.scaling.verdict import NOT_DETERMINED, TRUSTED, WIDE
from support import TRUE_LAW

SIZES = np.geomspace(1e6, 1e8, 5)
TOKENS = np.geomspace(1e8, 1e10, 5)


def grid(loss_fn, seed: int = 0) -> Points:
    N, D = (g.ravel() for g in np.meshgrid(SIZES, TOKENS))
    return Points(N, D, loss_fn(N, D, np.random.default_rng(seed)))


def fit_quietly(points: Points, coarse_grid, **kwargs):
    """fit_all with every warning an error: none may reach the console."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = fit_all(points, options=FitOptions(n_boot=20, grid=coarse_grid), **kwargs)
        text = summary_text(report)
    return report, text


def lines_for(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_pure_noise_is_not_trusted(coarse_grid):
    noise = grid(lambda N, D, rng: 3.0 * np.exp(rng.normal(0, 0.05, N.size)))
    report, text = fit_quietly(noise, coarse_grid, targets=[{"N": 1e10, "D": 1e12}])
    verdict = report.verdicts[APPROACH3]
    assert verdict.level != TRUSTED and {"residual_size", "not_identified", "at_bound"} & set(verdict.codes())
    (line,) = lines_for(text, "Chinchilla approach 3: ")
    assert line == verdict.line("Chinchilla approach 3", 3)
    (prediction,) = report.predictions
    assert prediction.loss is None and prediction.verdict.level == NOT_DETERMINED
    assert report.approach3.law.alpha > 0 and report.approach3.law.beta > 0


def test_a_single_size_leaves_approach_3_not_determined_and_fits_L_of_D(coarse_grid):
    one = Points(np.full(8, 1e7), np.geomspace(1e8, 1e10, 8), 2 + 300 / np.geomspace(1e8, 1e10, 8) ** 0.3)
    report, text = fit_quietly(one, coarse_grid, single=("N", "D"), targets=[{"C": 1e20}])
    assert report.approach3 is None
    v = report.verdicts[APPROACH3]
    assert v.level == NOT_DETERMINED and v.codes() == ("few_sizes",)
    (line,) = lines_for(text, "Chinchilla approach 3: ")
    assert line.startswith("Chinchilla approach 3: not_determined: all points at one N (params) (1e+07)")
    assert report.verdicts["kaplan_N"].level == NOT_DETERMINED
    assert report.verdicts["kaplan_D"].level != NOT_DETERMINED  # one size still has a law in D
    (prediction,) = lines_for(text, "prediction for ")
    assert "not_determined: approach 3 is not determined: all points at one N" in prediction


def test_a_flat_loss_is_not_determined(coarse_grid):
    flat = grid(lambda N, D, rng: 2.5 * np.exp(rng.normal(0, 0.001, N.size)))
    report, text = fit_quietly(flat, coarse_grid, targets=[{"C": 1e20}])
    v = report.verdicts[APPROACH3]
    assert v.level == NOT_DETERMINED and "flat_loss" in v.codes()
    for key in ("kaplan_N", "kaplan_D", "kaplan_C"):
        assert "flat_loss" in report.verdicts[key].codes()
    assert len(lines_for(text, "Chinchilla approach 3: not_determined: ")) == 1
    assert report.predictions[0].loss is None


def test_runs_far_above_a_known_floor_keep_every_prediction_above_it(coarse_grid):
    """Like the CPU ladder: loss still falls fast, far above the floor. E sits at the floor (said so),
    and nothing predicted -- number or interval -- goes below it."""
    floor = 0.5
    steep = grid(lambda N, D, rng: floor + 0.9 + 3e3 / N**0.6 + 1e6 / D**0.8 + 0 * rng.random())
    report, _ = fit_quietly(steep.with_floor(floor), coarse_grid, targets=[{"N": 1e12, "D": 1e14}, {"C": 1e14}])
    assert report.approach3.law.E >= floor
    for p in report.predictions:
        assert p.loss is None or p.loss.ci95[0] >= floor
    f = report.frontier
    assert np.all(f.loss_lo >= floor) and np.all(f.loss >= floor)


def test_run_noise_is_measured_from_repeated_runs():
    N = np.repeat([1e6, 1e7, 1e8], 3)
    D = np.full(9, 1e9)
    L = np.exp(np.log(3.0) + np.tile([-0.02, 0.0, 0.02], 3))
    noise = run_noise(N, D, L)
    assert noise.sigma == pytest.approx(0.02) and noise.source.startswith("replicates (3 repeated (N, D), 6 degrees")
    assert run_noise(N, D, L, given=0.005).sigma == 0.005
    single = run_noise(np.geomspace(1e6, 1e8, 4), np.full(4, 1e9), np.full(4, 3.0))
    assert single.sigma == DEFAULT_NOISE and single.source.startswith("default")


def test_replicates_are_distinct_seeds_and_reruns_of_one_seed_only_floor_the_noise():
    """Issue 26: reruns of one config agree to 0.01-0.1%; they are not seed-to-seed replicates."""
    N, D = np.repeat([1e6, 1e7, 1e8], 3), np.full(9, 1e9)
    seeds = ["0", "1", "2"] * 3
    L = np.exp(np.log(3.0) + np.tile([-0.02, 0.0, 0.02], 3))
    by_seed = run_noise(N, D, L, seeds=seeds)
    assert by_seed.sigma == pytest.approx(0.02) and by_seed.kind == "seeds"
    # the same seed three times per (N, D), spread 0.04%: reruns; the noise is the floor, said so
    reruns = run_noise(N, D, np.exp(np.log(3.0) + np.tile([-4e-4, 0.0, 4e-4], 3)), seeds=["0"] * 9)
    assert reruns.sigma == NOISE_FLOOR and reruns.kind == "floor" and "reruns" in reruns.source
    assert reruns.measured == pytest.approx(4e-4)
    # without a seed column, repeats that close are also taken as reruns
    close = run_noise(N, D, np.exp(np.log(3.0) + np.tile([-4e-4, 0.0, 4e-4], 3)))
    assert close.sigma == NOISE_FLOOR and close.measured == pytest.approx(4e-4)
    # two seeds of one (N, D) with reruns of each: the reruns are averaged first, 2 values per group
    mixed = run_noise(
        np.repeat([1e6, 1e7], 4),
        np.full(8, 1e9),
        np.exp(np.tile([0.0, 1e-4, 0.02, 0.0201], 2)),
        seeds=["0", "0", "1", "1"] * 2,
    )
    assert mixed.sigma == pytest.approx(0.02 / np.sqrt(2), rel=0.01) and "2 degrees" in mixed.source


def test_a_tiny_noise_estimate_does_not_make_a_good_law_not_determined():
    """Residuals of 0.6% (a law that predicts within a few percent) against reruns that agree to 0.04%:
    judged against the floor, not against the reruns."""
    r = np.random.default_rng(0).normal(0, 0.006, 25)
    reruns = run_noise(np.repeat([1e6, 1e7, 1e8], 3), np.full(9, 1e9), np.exp(np.tile([-4e-4, 0.0, 4e-4], 3)))
    verdict = law_verdict(facts(residuals=r), reruns, TH)
    assert verdict.usable and "residual_size" not in {x.code for x in verdict.reasons if x.level == NOT_DETERMINED}


def test_runs_that_break_the_law_are_named_with_their_size_tokens_and_tokens_per_parameter():
    r = np.random.default_rng(0).normal(0, 0.004, 25)
    r[[3, 7]] = [-0.15, -0.06]  # two runs 16% and 6% above the law
    f = facts(residuals=r)
    verdict = law_verdict(f, NOISE, TH)
    (reason,) = [x for x in verdict.reasons if x.code == "residual_size"]
    named = list(runs_off_law(f, NOISE))
    assert named == [3, 7]
    N, D = f.axes["N"][3], f.axes["D"][3]
    assert f"N={N:.3g}, D={D:.3g} ({D / N:.3g} tokens per parameter) 16% above" in reason.text


# --- each check on hand-made facts ------------------------------------------------------------

TH = Thresholds()
NOISE = run_noise(np.ones(2), np.ones(2), np.ones(2), given=0.01)


def facts(**change) -> LawFacts:
    """A law that passes every check: 5 sizes and token counts over 2 decades, small residuals."""
    rng = np.random.default_rng(0)
    N, D = (g.ravel() for g in np.meshgrid(SIZES, TOKENS))
    base = dict(
        converged=True,
        message="converged",
        L=np.linspace(3, 2, N.size),
        residuals=rng.normal(0, 0.005, N.size),
        axes={"N": N, "D": D, "C": 6 * N * D},
        design=("N", "D"),
        E=Estimate(1.5, (1.4, 1.6)),
        E_bounds=(0.0, 2.0),
        floor_known=False,
        exponents={"alpha": Estimate(0.3, (0.25, 0.35)), "beta": Estimate(0.3, (0.25, 0.36))},
        n_params=5,
        n_boot=100,
        boot_converged=1.0,
    )
    return LawFacts(**{**base, **change})


def test_a_law_that_passes_every_check_is_trusted():
    assert law_verdict(facts(), NOISE, TH).level == TRUSTED


@pytest.mark.parametrize(
    "change,code,level",
    [
        ({"converged": False, "message": "DID NOT CONVERGE: x"}, "not_converged", NOT_DETERMINED),
        (
            {"axes": {"N": np.repeat([1e6, 1e7], 13)[:25], "D": np.geomspace(1e8, 1e10, 25)}},
            "few_sizes",
            NOT_DETERMINED,
        ),
        (
            {"axes": {"N": np.tile(np.geomspace(1e6, 3e6, 5), 5), "D": np.geomspace(1e8, 1e10, 25)}},
            "narrow_span",
            NOT_DETERMINED,
        ),
        ({"axes": {"N": np.tile(np.geomspace(1e6, 7e6, 5), 5), "D": np.geomspace(1e8, 1e10, 25)}}, "narrow_span", WIDE),
        ({"L": np.full(25, 2.0) * (1 + np.linspace(0, 0.01, 25))}, "flat_loss", NOT_DETERMINED),
        ({"E": Estimate(1e-6, (0.0, 0.1))}, "at_bound", WIDE),
        ({"E": Estimate(1.999, (1.99, 2.0))}, "at_bound", NOT_DETERMINED),
        ({"exponents": {"alpha": Estimate(0.001, (0.0005, 0.01))}}, "at_bound", NOT_DETERMINED),
        ({"exponents": {"alpha": Estimate(0.3, (0.1, 0.5))}}, "not_identified", WIDE),
        ({"exponents": {"alpha": Estimate(0.3, (0.1, 98.0))}}, "not_identified", NOT_DETERMINED),
        ({"E": Estimate(1.0, (0.2, 1.9))}, "not_identified", WIDE),
        ({"n_boot": 0}, "bootstrap", WIDE),
        ({"boot_converged": 0.5}, "bootstrap", WIDE),
        ({"residuals": np.random.default_rng(1).normal(0, 0.03, 25)}, "residual_size", WIDE),
        ({"residuals": np.random.default_rng(1).normal(0, 0.086, 25)}, "residual_size", NOT_DETERMINED),
        ({"residuals": np.r_[np.full(19, -0.002), np.full(6, 0.012)]}, "residual_trend", WIDE),
    ],
)
def test_each_check_names_its_reason_and_level(change, code, level):
    v = law_verdict(facts(**change), NOISE, TH)
    assert code in v.codes(), v
    assert next(r.level for r in v.reasons if r.code == code) == level
    assert all("\n" not in r.text for r in v.reasons)


def test_E_at_a_known_floor_says_the_floor_sets_it():
    v = law_verdict(facts(E=Estimate(0.5001, (0.5, 0.51)), E_bounds=(0.5, 2.0), floor_known=True), NOISE, TH)
    (reason,) = [r for r in v.reasons if r.code == "at_bound"]
    assert reason.level == WIDE and "E at the data's floor 0.5" in reason.text


@pytest.mark.parametrize(("floor", "known"), [(0.5, True), (None, False), (0.0, False)])
def test_a_floor_passed_to_the_fit_counts_as_known_even_when_the_points_carry_none(coarse_grid, floor, known):
    """The library call fit_approach3(points, floor=F) bounds E by F: its facts say the floor is known,
    whether or not the points carry entropy_floor; a zero bound is no floor."""
    points = grid(lambda N, D, rng: 0.5 + 0.9 + 3e3 / N**0.6 + 1e6 / D**0.8 + 0 * rng.random())
    assert points.entropy_floor is None
    facts = approach3_facts(fit_approach3(points, floor=floor, n_boot=0, grid=coarse_grid))
    assert facts.floor_known is known
    assert facts.E_bounds[0] == (floor or 0.0)


# --- the law refitted without the runs furthest off it ---------------------------------------------

SHORT = 5  # tokens per parameter of the corrupted runs: very short runs, as on the ladder issue 26 names
RAISED = (1.04, 1.09, 1.16)  # how far above the law each corrupted run is put


def short_runs_ladder(raised: tuple[float, ...]) -> tuple[Points, np.ndarray]:
    """TRUE_LAW at 5 sizes x 5, 10, 20, 40, 80 tokens per parameter with 0.3% noise; the 5-token runs
    at the smallest, middle and largest size raised by `raised` (none: a clean law). Returns the points
    and the corrupted rows."""
    law = ChinchillaLaw(**TRUE_LAW)
    N, tpp = (g.ravel() for g in np.meshgrid(np.geomspace(1e7, 1e9, 5), [SHORT, 10, 20, 40, 80]))
    D = N * tpp
    L = law.loss(N, D) * np.exp(np.random.default_rng(0).normal(0, 0.003, N.size))
    bad = np.flatnonzero(tpp == SHORT)[[0, 2, 4]][: len(raised)]
    L[bad] *= raised
    return Points(N, D, L), bad


def fit_with_noise(points: Points, coarse_grid):
    """approach 3 alone; the noise given (0.5%), as seeds would measure it, so that a 4% run is off."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options = FitOptions(n_boot=40, grid=coarse_grid, noise=0.005)
        return fit_all(points, options=options, single=(), approach2=False)


@pytest.fixture(scope="module")
def short_runs(coarse_grid):
    points, bad = short_runs_ladder(RAISED)
    return fit_with_noise(points, coarse_grid), bad


def test_runs_that_break_the_law_are_left_out_of_a_suggested_refit_that_is_trusted(short_runs):
    report, bad = short_runs
    verdict = report.verdicts[APPROACH3]
    assert verdict.level != TRUSTED and "residual_size" in verdict.codes()
    assert [r.index for r in report.off_law] == [bad[2], bad[1], bad[0]]  # 16%, 9%, 4% above: largest first
    s = report.without_off_law
    assert s is not None and [r.index for r in s.runs] == [r.index for r in report.off_law]
    assert all(r.tokens_per_param == pytest.approx(SHORT) and r.above > 0.02 and r.residual_sd > 3 for r in s.runs)
    assert len(s.fit.points) == len(report.points) - 3 and s.fit.converged
    assert s.verdict.level == TRUSTED, s.verdict
    assert s.fit.law.alpha == pytest.approx(TRUE_LAW["alpha"], abs=0.03)
    assert s.fit.law.beta == pytest.approx(TRUE_LAW["beta"], abs=0.03)
    # a suggestion, not applied: the law, its verdict and its predictions keep every run
    assert len(report.approach3.points) == len(report.points) and report.predictor.verdict == verdict
    text = summary_text(report)
    lines = text.splitlines()
    assert lines[0].startswith(f"Chinchilla approach 3: {verdict.level}: ")
    assert lines[1].startswith("  suggestion, not applied: without N=1e+09, D=5e+09 (5 tokens per parameter, ")
    assert lines[1].endswith(": trusted") and lines[2] == f"    refitted law: {s.params_line()}"


def test_the_runs_and_the_refit_are_data_in_fit_json_and_a_section_of_fit_md(short_runs):
    report, bad = short_runs
    a3 = fit_dict(report)[APPROACH3]
    named = [(r["N"], r["D"], r["tokens_per_param"]) for r in a3["off_law_runs"]]
    assert named == [(report.points.N[i], report.points.D[i], pytest.approx(SHORT)) for i in (bad[2], bad[1], bad[0])]
    assert all(r["residual_sd"] > 3 for r in a3["off_law_runs"])
    w = a3["without_outliers"]
    assert w["runs"] == a3["off_law_runs"] and w["verdict"] == TRUSTED and w["reasons"] == []
    assert w["applied"] is False and w["n_points"] == 22
    assert w["params"]["alpha"]["value"] == pytest.approx(report.without_off_law.fit.law.alpha)
    md = fit_markdown(report)
    section = md.split("## Chinchilla approach 3\n", 1)[1]
    reasons, rest = section.split("### Without the runs furthest off the law\n", 1)
    assert "(`residual_size`)" in reasons  # right after the verdict's reasons
    assert rest.index("approach 3 is **trusted**") < rest.index("| 1e+09 | 5e+09 | 5 | ") < rest.index("L(N, D) = ")


def test_a_clean_law_gets_no_suggestion(coarse_grid):
    points, _ = short_runs_ladder(())
    report = fit_with_noise(points, coarse_grid)
    assert report.verdicts[APPROACH3].level == TRUSTED
    assert report.off_law == () and report.without_off_law is None
    a3 = fit_dict(report)[APPROACH3]
    assert a3["off_law_runs"] == [] and a3["without_outliers"] is None
    assert "suggestion" not in summary_text(report) and "Without the runs furthest off" not in fit_markdown(report)


def test_runs_are_left_out_only_while_approach_3_can_still_be_fitted():
    """7 runs at 3 sizes: leaving out one keeps 6 points, a second would leave 5 (approach 3 needs 6);
    a run that is the only one at its size cannot go either (3 distinct N are needed)."""
    N = np.array([1e6, 1e6, 1e6, 1e7, 1e7, 1e8, 1e8])
    D = np.array([1e8, 1e9, 1e10, 1e8, 1e9, 1e10, 1e9])
    points = Points(N, D, np.full(7, 3.0))

    def run(i: int) -> OffLawRun:
        return OffLawRun(i, {"N": float(N[i]), "D": float(D[i])}, 0.1, 5.0)

    assert [r.index for r in removable(points, (run(0), run(3), run(5)))] == [0]
    lone = Points(np.r_[N[:5], 1e8, 1e6, 1e7], np.r_[D[:5], 1e10, 3e9, 3e8], np.full(8, 3.0))  # one run at 1e8
    assert removable(lone, (run(5),)) == ()
    assert [r.index for r in removable(lone, (run(0), run(5)))] == [0]  # the largest that can go, alone
