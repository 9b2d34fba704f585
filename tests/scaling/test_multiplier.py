"""Compute multipliers between the arms of an ablation (scaling/multiplier.py, multiplier_paired.py,
multiplier_export.py, `ablate compare`): known multipliers recovered on a shared ladder, run against
run (paired) and from each arm's law (unpaired), trends, the unmatched case, a small offset that only
the pairing resolves, the null case's coverage, the one-line-per-arm report, and the command over a
CSV and over an MLflow experiment."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from ablate.scaling.fitting.bootstrap import Estimate
from ablate.scaling.multiplier import GROWS, HOLDS, PAIRED, SHRINKS, UNPAIRED, compare_arms, multiplier
from ablate.scaling.multiplier_paired import PairedRuns, fit_paired, mean_interval
from ablate.scaling.points import FitInputError, Points
from ablate.scaling.reports.multiplier_export import (
    amounts_to,
    arm_line,
    export_multiplier,
    multiplier_dict,
    multiplier_markdown,
    summary_text,
)
from ablate.scaling.verdict import NOT_DETERMINED, TRUSTED, WIDE
from ablate.tracking.tags import FIT_VERDICT_TAG

SIZES, TOKENS = (3e4, 6e4, 1.5e5, 4e5), (2.6e5, 5.2e5, 1.05e6)
E, A, ALPHA = 0.9, 40.0, 0.17


def baseline_loss(C):
    return E + A * np.asarray(C, float) ** -ALPHA


def ladder(effective, noise: float = 0.004, seed: int = 0, sizes=SIZES, tokens=TOKENS) -> Points:
    """The shared ladder; the arm's loss is the baseline's at compute effective(C)."""
    N, D = (a.ravel() for a in np.meshgrid(sizes, tokens, indexing="ij"))
    C = 6 * N * D
    L = baseline_loss(effective(C)) * np.exp(np.random.default_rng(seed).normal(0, noise, C.size))
    return Points(N, D, L, C)


# a ladder wide enough (4 decades of compute, 5 sizes x 4 budgets) for L(C) laws that the checks trust
WIDE_SIZES, WIDE_TOKENS = tuple(np.geomspace(1e4, 1e6, 5)), tuple(np.geomspace(1e5, 1e7, 4))


@pytest.fixture(scope="module")
def wide_ladder():
    return {
        "base": ladder(lambda C: C, 0.003, 1, WIDE_SIZES, WIDE_TOKENS),
        "third": ladder(lambda C: C / 3, 0.003, 2, WIDE_SIZES, WIDE_TOKENS),  # worth a third of its compute
    }


@pytest.fixture(scope="module")
def report():
    groups = {
        "fp32": ladder(lambda C: C, seed=1),
        "half": ladder(lambda C: 0.5 * C, seed=2),  # worth half its compute at every scale
        "grows": ladder(lambda C: C * (C / 1e11) ** 0.3, seed=3),  # m = (C / 1e11)^0.3
    }
    return compare_arms(groups, "fp32", key="precision.name", target_C=1e14, n_boot=300, seed=0)


def test_a_constant_multiplier_is_recovered_at_every_scale_and_holds(report):
    half = next(c for c in report.comparisons if c.arm == "half")
    for at in half.scales:
        assert at.multiplier.value == pytest.approx(0.5, rel=0.25)
        lo, hi = at.multiplier.ci95
        assert lo < 0.5 < hi
    assert half.trend.direction == HOLDS
    assert half.scales[0].C == pytest.approx(6 * SIZES[0] * TOKENS[0], rel=1e-9)


def test_a_growing_multiplier_is_seen_to_grow(report):
    grows = next(c for c in report.comparisons if c.arm == "grows")
    assert grows.trend.direction == GROWS
    assert grows.trend.exponent.value == pytest.approx(0.3, abs=0.12)
    assert grows.scales[-1].multiplier.value > grows.scales[0].multiplier.value
    assert grows.trend.ratio.ci95[0] > 1


def test_shrinking_is_the_mirror_image():
    groups = {"base": ladder(lambda C: C, seed=1), "arm": ladder(lambda C: C * (C / 1e11) ** -0.3, seed=4)}
    trend = compare_arms(groups, "base", n_boot=200).comparisons[0].trend
    assert trend.direction == SHRINKS and trend.ratio.ci95[1] < 1


def test_multiplier_is_exact_for_known_laws_and_infinite_below_the_baseline_floor():
    base = np.array([E, A, ALPHA])
    C = np.geomspace(1e10, 1e16, 7)
    arm = np.array([E, A * 0.5**-ALPHA, ALPHA])  # L_a(C) = L_b(C / 2)... written as A' = A * 2^alpha
    assert multiplier(C, arm, base) == pytest.approx(np.full(7, 0.5))
    better = np.array([E - 0.2, A, ALPHA])  # reaches losses the baseline never does
    m = multiplier(C, better, base)
    assert np.all(m > 1) and np.isinf(m[-1])


def test_export_writes_json_markdown_and_plot_without_impossible_numbers(report, tmp_path):
    files = export_multiplier(report, tmp_path / "out")
    assert sorted(f.name for f in files) == ["multiplier.json", "multiplier.md", "multiplier.png"]
    doc = json.loads((tmp_path / "out" / "multiplier.json").read_text())
    assert doc["baseline"] == "fp32" and [c["arm"] for c in doc["comparisons"]] == ["half", "grows"]
    assert "NaN" not in (tmp_path / "out" / "multiplier.json").read_text()
    for c in doc["comparisons"]:
        assert c["target"]["C"] == 1e14 and c["trend"]["direction"] in (GROWS, HOLDS, SHRINKS)
        assert all(s["multiplier"]["value"] > 0 for s in c["scales"])
    md = (tmp_path / "out" / "multiplier.md").read_text()
    assert "## Answer" in md and "| half | x0.5" in md and "grows with scale" in md
    assert all(c["method"] == PAIRED and c["line"].startswith(f"{c['arm']} vs fp32: x") for c in doc["comparisons"])
    assert (tmp_path / "out" / "multiplier.png").stat().st_size > 10_000
    assert multiplier_dict(report)["arms"]["half"]["n_runs"] == len(SIZES) * len(TOKENS)


@pytest.mark.parametrize(
    ("estimate", "said"),
    [
        ((0.5, (0.4, 0.6)), "a cost of 50%"),
        ((1.02, (1.01, 1.03)), "a gain of 2%"),
        ((0.98, (0.2, 2.5)), "no measurable difference"),
        ((0.997, (0.995, 0.999)), "a cost of 0.3%"),
        ((2.0, None), "a gain of 1e+02%"),
    ],
)
def test_a_cost_or_gain_is_called_only_where_the_interval_excludes_one(estimate, said):
    assert amounts_to(Estimate(*estimate)) == said


@pytest.mark.parametrize(
    ("groups", "baseline", "message"),
    [
        ({"a": None, "b": None}, "c", "baseline=c is not an arm (valid: a, b)"),
        ({"a": None}, "a", "only one arm (a): a multiplier needs a baseline and at least one other arm"),
    ],
)
def test_bad_arms_fail_in_one_line(groups, baseline, message):
    with pytest.raises(FitInputError) as err:
        compare_arms(groups, baseline)
    assert str(err.value) == message


def test_an_arm_with_too_few_runs_is_named():
    small = ladder(lambda C: C).subset([0, 1, 2])  # one size, three budgets
    with pytest.raises(FitInputError) as err:
        compare_arms({"base": ladder(lambda C: C), "tiny": small}, "base", n_boot=0, shared=False)
    assert str(err.value).startswith("arm tiny: ")


def near(path, truth: float) -> None:
    """Every in-range multiplier of the one comparison within 25% of the truth, the truth inside most intervals."""
    scales = json.loads(path.read_text())["comparisons"][0]["scales"]
    assert all(s["multiplier"]["value"] == pytest.approx(truth, rel=0.25) for s in scales)
    inside = [s["multiplier"]["ci95"][0] <= truth <= s["multiplier"]["ci95"][1] for s in scales]
    assert sum(inside) >= len(inside) - 1


def test_the_command_over_a_csv(tmp_path, cli):
    path = tmp_path / "points.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["params", "tokens", "loss", "flops", "policy", "entropy_floor", "bpb"])
        for name, k in (("fp32", 1.0), ("bf16", 0.7)):
            p = ladder(lambda C, k=k: k * C, seed=int(k * 10))
            for row in zip(p.N, p.D, p.L, p.C, strict=True):
                # bits per byte recorded by one arm's runs alone (as by runs of a later version): a
                # measurement, which does not make them other runs than the baseline's
                w.writerow([*row, name, 0.8, row[2] / math.log(2) if name == "bf16" else ""])
    done = cli(
        ["points=points.csv", "arm=policy", "baseline=fp32", "n_boot=100", "out=out"], tmp_path, command="compare"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("bf16 vs fp32, run against run: log loss +0.")  # the paired offset first
    assert "higher loss; lower in 0 of 12 paired runs" in lines[0]
    multiplier = lines[lines.index("compute multipliers, across scale:") + 1]
    assert multiplier.startswith("bf16 vs fp32: x0.") and multiplier.endswith("paired: 12 runs of 4 model instances")
    assert "law of fp32: " in done.stdout
    near(tmp_path / "out" / "multiplier.json", 0.7)
    doc = json.loads((tmp_path / "out" / "multiplier.json").read_text())
    assert doc["entropy_floor"] == 0.8 and all(a["law"]["E"]["value"] >= 0.8 for a in doc["arms"].values())
    assert doc["verdict"] in (TRUSTED, WIDE, NOT_DETERMINED)
    bad = cli(["points=points.csv", "arm=policy", "baseline=fp8"], tmp_path, command="compare")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: policy=fp8 has no finished runs (valid: fp32, bf16)"


def test_the_command_over_an_experiment_groups_runs_by_a_config_key(tmp_path, cli):
    """Runs recorded as train.py records them; `arm=precision` stands for the param precision.name."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("ladder")
    for name, k in (("fp32", 1.0), ("fp16", 0.8)):
        p = ladder(lambda C, k=k: k * C, seed=int(k * 10))
        for N, D, L, C in zip(p.N, p.D, p.L, p.C, strict=True):
            rid = client.create_run(exp).info.run_id
            client.log_batch(
                rid,
                params=[
                    Param("derived.params", str(int(N))),
                    Param("precision.name", name),
                    Param("model.n_embd", "64"),
                ],
                metrics=[Metric("tokens", D, 0, 10), Metric("flops", C, 0, 10), Metric("final/val_loss", L, 0, 10)],
            )
            client.set_terminated(rid)
    args = ["experiment=ladder", f"tracking.uri={uri}", "baseline=fp32", "n_boot=100", "out=out", "target=1e13"]
    done = cli(args, tmp_path, command="compare")
    assert done.returncode == 0, done.stderr
    assert "\nfp16 vs fp32: x0." in done.stdout
    near(tmp_path / "out" / "multiplier.json", 0.8)
    runs = client.search_runs([exp], filter_string="tags.`ablate.kind` = 'compare'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    doc = json.loads((tmp_path / "out" / "multiplier.json").read_text())
    assert runs[0].data.tags[FIT_VERDICT_TAG] == doc["verdict"]
    target = doc["comparisons"][0]["target"]  # 1e13: 0.6 decades past 1.7 decades of data
    assert target["verdict"] == NOT_DETERMINED and target["multiplier"]["value"] is None
    bad = cli(["experiment=ladder", f"tracking.uri={uri}", "arm=optim.lr", "baseline=x"], tmp_path, command="compare")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "error: arm=optim.lr is not a config key the runs of ladder record "
        "(valid: a key whose value differs between them: precision.name)"
    )
    assert math.isfinite(json.loads((tmp_path / "out" / "multiplier.json").read_text())["target_C"])


def test_a_known_multiplier_on_a_wide_ladder_is_recovered_trusted_and_its_far_extrapolation_is_not(
    wide_ladder, tmp_path
):
    report = compare_arms(wide_ladder, "base", target_C=1e20, n_boot=200)
    assert all(arm.verdict.level == TRUSTED for arm in report.arms.values())
    (c,) = report.comparisons
    for at in c.scales:
        assert at.verdict.level == TRUSTED, at.verdict.line("multiplier")
        assert at.multiplier.value == pytest.approx(1 / 3, rel=0.15)
    assert report.verdict.level == TRUSTED
    # 6 decades past 4 decades of data: no number, the reason coded
    assert c.target.verdict.level == NOT_DETERMINED and "extrapolation" in c.target.verdict.codes()
    assert c.target.shown is None
    doc = multiplier_dict(report)
    target = doc["comparisons"][0]["target"]
    assert target["verdict"] == NOT_DETERMINED and target["multiplier"]["value"] is None
    assert target["multiplier"]["ci95"] is None
    assert doc["verdict"] == TRUSTED and doc["arms"]["base"]["verdict"] == TRUSTED
    assert all(s["verdict"] == TRUSTED and s["multiplier"]["value"] > 0 for s in doc["comparisons"][0]["scales"])
    md = multiplier_markdown(report)
    assert "arms reached): not_determined; not_determined [extrapolation]" in md
    assert "- `extrapolation` (not_determined), third at 1e+20 FLOPs: 6.2 decades of compute past" in md
    printed = summary_text(report)
    assert "; trusted; holds with scale" in printed and "at 1e+20 FLOPs: not_determined; not_determined" in printed
    assert "law of third: trusted" in printed


def test_a_short_extrapolation_is_wide_and_inside_the_data_adds_nothing(wide_ladder):
    C_hi = float(max(p.C.max() for p in wide_ladder.values()))
    near_target = compare_arms(wide_ladder, "base", target_C=C_hi * 10**0.5, n_boot=100).comparisons[0].target
    assert near_target.verdict.level == WIDE and near_target.verdict.codes() == ("extrapolation",)
    assert near_target.shown.value == pytest.approx(1 / 3, rel=0.2)
    inside = compare_arms(wide_ladder, "base", target_C=C_hi / 10, n_boot=100).comparisons[0].target
    assert inside.verdict.level == TRUSTED


def test_an_extrapolation_from_a_law_whose_e_is_not_determined_is_not_determined():
    """The small ladder (1.7 decades) leaves E's interval over most of its range: inside the data the
    multiplier is printed (wide), 0.3 decades past it (under half the span) it is not determined from
    the two laws (unpaired); paired, it rests on the baseline's E alone."""
    groups = {"fp32": ladder(lambda C: C, seed=1), "half": ladder(lambda C: 0.5 * C, seed=2)}
    C_hi = float(groups["fp32"].C.max())
    paired = compare_arms(groups, "fp32", target_C=C_hi * 10**0.3, n_boot=200).comparisons[0]
    report = compare_arms(groups, "fp32", target_C=C_hi * 10**0.3, n_boot=200, paired=False)
    assert ("law" in paired.target.verdict.codes()) == bool(report.arms["fp32"].e_reasons)
    assert any(arm.e_reasons for arm in report.arms.values())
    (c,) = report.comparisons
    assert all(at.verdict.usable for at in c.scales)
    assert c.target.verdict.level == NOT_DETERMINED and "law" in c.target.verdict.codes()
    assert any("E" in r.text for r in c.target.verdict.reasons if r.level == NOT_DETERMINED)


@pytest.mark.parametrize("given", [True, False])
def test_every_arms_e_respects_the_entropy_floor(given):
    """Given as an option or carried by the points (a CSV's entropy_floor column): E, its interval and
    every bootstrap law lie at or above the floor, and the export says which floor bounded them."""
    floor = 0.85
    groups = {"fp32": ladder(lambda C: C, seed=1), "half": ladder(lambda C: 0.5 * C, seed=2)}
    if not given:
        groups = {k: p.with_floor(floor) for k, p in groups.items()}
    report = compare_arms(groups, "fp32", n_boot=200, entropy_floor=floor if given else None)
    assert report.entropy_floor == floor
    for arm in report.arms.values():
        E = arm.law.params["E"]
        assert E.value >= floor and E.ci95[0] >= floor
        assert np.all(arm.law.bootstrap.usable()[:, 0] >= floor)
    doc = multiplier_dict(report)
    assert doc["entropy_floor"] == floor
    assert all(a["law"]["E"]["value"] >= floor and a["law"]["E"]["ci95"][0] >= floor for a in doc["arms"].values())
    assert "E is fitted above the data's entropy floor 0.85." in multiplier_markdown(report)


def test_a_floor_above_a_runs_loss_or_two_floors_fail_in_one_line():
    groups = {"fp32": ladder(lambda C: C, seed=1), "half": ladder(lambda C: 0.5 * C, seed=2)}
    lowest = min(float(p.L.min()) for p in groups.values())
    with pytest.raises(FitInputError) as err:
        compare_arms(groups, "fp32", n_boot=0, entropy_floor=lowest + 0.01)
    assert str(err.value).startswith("arm ") and "is not below the lowest loss in the data" in str(err.value)
    mixed = {"fp32": groups["fp32"].with_floor(0.8), "half": groups["half"].with_floor(0.7)}
    with pytest.raises(FitInputError) as err:
        compare_arms(mixed, "fp32", n_boot=0)
    assert str(err.value).startswith("the arms give different entropy floors (0.7, 0.8)")


def test_an_arm_below_the_baselines_e_is_not_determined_and_so_is_the_trend():
    """The arm reaches losses the baseline's law never does (its E 0.2 lower): no multiplier, no
    trend, no infinite number in any output."""
    base = ladder(lambda C: C, seed=1)
    better = Points(base.N, base.D, ladder(lambda C: C, seed=2).L - 0.2, base.C)
    report = compare_arms({"base": base, "better": better}, "base", n_boot=100)
    (c,) = report.comparisons
    top = c.scales[-1]
    assert top.verdict.level == NOT_DETERMINED and top.shown is None
    assert c.trend.direction == NOT_DETERMINED and "is not determined with scale" in c.trend.sentence()
    doc = multiplier_dict(report)
    assert doc["comparisons"][0]["trend"]["ratio"] is None and doc["verdict"] == NOT_DETERMINED
    assert "inf" not in json.dumps(doc).lower().replace("interval", "").replace("infinite", "")


def paired_ladder(offset: float, shared: float = 0.01, paired: float = 0.0005, seed: int = 0) -> dict[str, Points]:
    """Two arms on one ladder and one seed: each run's loss is the law's times a noise that both arms'
    runs of a cell share (`shared`, as a seed's initialisation and data order do), the arm's times
    exp(offset), and each run's own noise (sd paired / sqrt 2, so that a pair's difference has sd
    `paired`)."""
    rng = np.random.default_rng(seed)
    base = ladder(lambda C: C, noise=0.0)
    common = rng.normal(0, shared, len(base))
    own = rng.normal(0, paired / math.sqrt(2), (2, len(base)))
    L = base.L * np.exp(common)
    return {
        "base": Points(base.N, base.D, L * np.exp(own[0]), base.C),
        "arm": Points(base.N, base.D, L * np.exp(offset + own[1]), base.C),
    }


def test_a_small_offset_resolves_run_against_run_and_not_from_the_laws():
    """0.3% more loss, 0.05% paired noise, 1% noise each run shares with its pair: the paired interval
    excludes x1 (a cost), the laws' alone (paired=False) cover it."""
    groups = paired_ladder(0.003)
    paired = compare_arms(groups, "base", n_boot=200).comparisons[0]
    assert paired.method == PAIRED and paired.paired.n_units == len(SIZES)
    lo, hi = paired.headline.multiplier.ci95
    assert hi < 1 and lo > 0.8, (lo, hi)
    # the truth: the baseline's compute at 1.003 times its loss, over the compute, at the cells' centre
    C_c = paired.headline.C
    truth = multiplier([C_c], np.array([E + 0.003 * baseline_loss(C_c), A, ALPHA]), np.array([E, A, ALPHA]))[0]
    assert lo < truth < hi
    assert arm_line(paired).startswith("arm vs base: x0.9") and "a cost of" in arm_line(paired)
    unpaired = compare_arms(groups, "base", n_boot=200, paired=False).comparisons[0]
    assert unpaired.method == UNPAIRED and unpaired.why_unpaired == "paired=false"
    lo_u, hi_u = unpaired.headline.multiplier.ci95
    assert lo_u < 1 < hi_u
    assert "unpaired: each arm's law (paired=false)" in arm_line(unpaired)


def test_with_no_offset_the_paired_interval_covers_one_at_least_nine_times_in_ten():
    """The null case over 300 draws: 4 instances x 3 budgets, each pair's log-loss difference N(0,
    0.0005), converted with the true law: the headline's interval covers x1, the trend's covers 0."""
    rng = np.random.default_rng(7)
    p = ladder(lambda C: C, noise=0.0)
    unit = np.repeat(np.arange(len(SIZES)), len(TOKENS))
    theta = np.array([E, A, ALPHA])
    covered_m, covered_k = 0, 0
    draws = 300
    for _ in range(draws):
        fit = fit_paired(PairedRuns(p.C, rng.normal(0, 0.0005, len(p)), unit), theta, np.empty((0, 3)))
        lo, hi = fit.headline().ci95
        covered_m += lo <= 1 <= hi
        k_lo, k_hi = fit.exponent().ci95
        covered_k += k_lo <= 0 <= k_hi
    assert covered_m / draws >= 0.9 and covered_k / draws >= 0.9, (covered_m, covered_k)
    assert covered_m / draws <= 0.99  # and the interval is not so wide that it always covers


def test_runs_with_different_seeds_are_not_paired_and_say_so():
    groups = paired_ladder(0.003)
    keys = {
        "base": [(n, d, None, "0") for n, d in zip(groups["base"].N, groups["base"].D, strict=True)],
        "arm": [(n, d, None, "1") for n, d in zip(groups["arm"].N, groups["arm"].D, strict=True)],
    }
    (c,) = compare_arms(groups, "base", n_boot=100, keys=keys).comparisons
    assert c.method == UNPAIRED and c.why_unpaired.startswith("0 runs shared run against run")
    assert multiplier_dict(compare_arms(groups, "base", n_boot=100, keys=keys))["comparisons"][0]["method"] == UNPAIRED


def test_the_report_is_one_line_per_arm_then_each_reason_once(report):
    md = multiplier_markdown(report)
    answer = md.split("## Answer")[1].split("## Method")[0]
    rows = [line for line in answer.splitlines() if line.startswith("| ") and not line.startswith("| arm ")]
    assert [r.split(" | ")[0] for r in rows] == ["| half", "| grows"]
    assert "grows with scale" in rows[1] and "holds with scale" in rows[0]
    reasons = md.split("## Reasons")[1].split("## Laws")[0].strip().splitlines()
    assert reasons and all(r.startswith("- `") for r in reasons)
    assert len({r.split(": ", 1)[1] for r in reasons}) == len(reasons)  # no reason's text twice
    printed = summary_text(report).splitlines()
    assert [line.split(" vs ")[0] for line in printed if " vs fp32: " in line] == ["half", "grows"]
    line = arm_line(report.comparisons[0])
    assert line.count(";") == 3 and "(x" in line and "paired: 12 runs of 4 model instances" in line


def test_a_mean_of_paired_differences_gets_students_t_interval():
    """mean +- t_{0.975, n-1} sd / sqrt(n): with 3 seeds t is 4.303, not the normal's 1.96."""
    est = mean_interval([0.016, 0.024, 0.018])
    half = 4.302653 * np.std([0.016, 0.024, 0.018], ddof=1) / math.sqrt(3)
    assert est.value == pytest.approx(0.019333, abs=1e-6)
    assert est.ci95 == pytest.approx((est.value - half, est.value + half), rel=1e-6)
    assert mean_interval([0.01]).ci95 is None  # one seed: no interval


def test_arms_that_change_the_parameter_count_pair_by_model_name_and_pay_for_their_compute():
    """An architecture arm trains the same model presets with other parameter counts (no position
    table, one key/value head): named sizes pair its runs with the baseline's, and an arm that reaches
    the baseline's losses with 10% more compute per run is worth x1/1.1 of it, paired."""
    from ablate.scaling.multiplier_paired import run_keys

    base = paired_ladder(0.0, paired=0.0001)["base"]
    names = [f"size{SIZES.index(n)}" for n in base.N]
    costlier = Points(base.N * 0.97, base.D, base.L, base.C * 1.1)  # 3% fewer parameters, 10% more FLOPs
    groups = {"base": base, "arm": costlier}
    with pytest.raises(FitInputError, match="share no"):
        compare_arms(groups, "base", n_boot=50)  # by parameter count the two ladders share no cell
    keys = {k: run_keys(p, sizes=names) for k, p in groups.items()}
    report = compare_arms(groups, "base", n_boot=100, keys=keys)
    (arm,) = report.comparisons
    assert arm.method == PAIRED and arm.paired.n_units == len(SIZES)
    assert arm.headline.multiplier.value == pytest.approx(1 / 1.1, rel=0.01)
