"""`ablate compare` over an experiment pairs runs of one model instance: the model is told by its
name made from its recorded preset and sizes, so two sizes of one preset are two models (a run
recorded as tiny at another width among them), and an arm that is itself a size pairs the rest."""

import math
import shutil

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from ablate.cli.compare import arms_from_experiment
from ablate.config import as_dict, parse_compare
from ablate.provenance import flatten

TOKENS = (1e5, 4e5)


def record(client, exp: str, model, precision: str, name: str | None = None, preset: str | None = "tiny"):
    """A finished run per budget as train.py records it: the model's params as parsed (or as runs
    recorded them before names told sizes: `name` and no model.preset), its precision and figures."""
    params = {k: v for k, v in flatten(as_dict(model), "model.").items() if k != "model.preset" or preset}
    if name is not None:
        params["model.name"] = name
    for i, D in enumerate(TOKENS):
        run = client.create_run(exp).info.run_id
        N = 4e5 * model.n_embd / 96
        client.log_batch(
            run,
            params=[
                *(Param(k, str(v)) for k, v in params.items()),
                Param("derived.params", str(int(N))),
                Param("precision.name", precision),
                Param("train.seed", "0"),
            ],
            metrics=[Metric(k, v, 0, 10) for k, v in (("tokens", D), ("flops", 6 * N * D), ("final/val_loss", 3 - i))],
        )
        client.set_terminated(run)


def arms(folder, template, arm: str, baseline: str, runs) -> dict[str, tuple[int, set]]:
    """{arm: (its runs, the models they are paired by)} over a store holding `runs`."""
    folder.mkdir()
    shutil.copyfile(template, folder / "mlflow.db")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("sizes")
    for model, precision, name in runs:
        record(client, exp, model, precision, name, preset=None if name else "tiny")
    cfg = parse_compare({"experiment": "sizes", "arm": arm, "baseline": baseline, "tracking": {"uri": uri}})
    (groups, keys), *_ = arms_from_experiment(cfg)
    return {a: (len(groups[a]), {k[0] for k in ks}) for a, ks in keys.items()}


def test_two_widths_of_a_preset_are_two_models_and_a_width_arm_pairs_the_rest(
    run_config, mlflow_store_template, tmp_path
):
    tiny = run_config(tmp_path, model="tiny").model
    wide = run_config(tmp_path, model="tiny", **{"model.n_embd": 128}).model
    assert wide.name == "tiny.n_embd_128"
    # fp16 ran the wide one only, one of its runs recorded as tiny: none is paired with fp32's tiny
    runs = [(tiny, "fp32", None), (wide, "fp16", None), (wide, "fp16", "tiny")]
    found = arms(tmp_path / "a", mlflow_store_template, "precision", "fp32", runs)
    assert found == {"fp32": (2, {"tiny"}), "fp16": (4, {"tiny.n_embd_128"})}
    # arm=model: the arms are the two models, the run recorded as tiny among the wide ones
    by_model = [(tiny, "fp32", None), (wide, "fp32", None), (wide, "fp32", "tiny")]
    found = arms(tmp_path / "b", mlflow_store_template, "model", "tiny", by_model)
    assert {a: n for a, (n, _) in found.items()} == {"tiny": 2, "tiny.n_embd_128": 4}
    # arm=model.n_embd: runs that differ in the width alone are one model instance in each arm
    found = arms(tmp_path / "c", mlflow_store_template, "model.n_embd", "96", by_model[:2])
    assert found == {"96": (2, {"tiny"}), "128": (2, {"tiny"})}


def paired_groups(offset: float, seed: int = 0):
    """Two arms on a ladder of 4 sizes x 3 budgets, one seed, each run sharing its pair's 1% noise
    (a seed's initialisation and data order) and 0.2% of its own; the arm's loss exp(offset) times."""
    import numpy as np

    from ablate.scaling import Points

    rng = np.random.default_rng(seed)
    N = np.repeat([1e5, 3e5, 1e6, 3e6], 3)
    D = np.tile([1e7, 3e7, 1e8], 4)
    L = (1.7 + 400 / N**0.34 + 410 / D**0.28) * np.exp(rng.normal(0, 0.01, N.size))
    own = rng.normal(0, 0.002, (2, N.size))
    return {
        "baseline": Points(N, D, L * np.exp(own[0]), 6 * N * D),
        "muon": Points(N, D, L * np.exp(offset + own[1]), 6 * N * D),
    }


def test_the_headline_is_the_paired_offset_with_its_interval_when_it_resolves():
    """Muon 16% below the baseline on every paired run: the first console line gives the offset,
    its interval and the count of pairs; the multipliers across scale keep their own verdicts after it."""
    from ablate.cli.compare import console_text
    from ablate.scaling import compare_arms
    from ablate.scaling.reports import multiplier_export

    report = compare_arms(paired_groups(-0.17), "baseline", n_boot=100)
    text = console_text(report, multiplier_export.summary_text(report))
    first, second, third = text.splitlines()[:3]
    f = report.comparisons[0].paired
    lo, hi = f.offset.ci95
    assert hi < 0 and lo < -0.17 < hi
    assert first == (
        f"muon vs baseline, run against run: log loss {f.offset.value:+.2g} (95% {lo:+.2g} to {hi:+.2g}): "
        f"{-math.expm1(f.offset.value):.1%} lower loss; lower in 12 of 12 paired runs"
    )
    assert second == "compute multipliers, across scale:" and third.startswith("muon vs baseline: ")


def test_an_offset_the_pairs_do_not_resolve_is_said_to_be_none():
    from ablate.cli.compare import offset_line
    from ablate.scaling import compare_arms

    line = offset_line(compare_arms(paired_groups(0.0, seed=3), "baseline", n_boot=100).comparisons[0])
    assert "no difference resolved (the interval holds 0)" in line
