"""`ablate compare` over an experiment pairs runs of one model instance: the model is told by its
name made from its recorded preset and sizes, so two sizes of one preset are two models (a run
recorded as tiny at another width among them), and an arm that is itself a size pairs the rest."""

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
