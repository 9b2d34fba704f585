"""A sweep's saved view once it ends (sweep/callback.save_view): its runs by id without the parent,
their val/loss logged against FLOPs as the step, and a parallel-coordinates chart of the params
they differ in against val/loss."""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from ablate.sweep.callback import save_view
from ablate.sweep.rows import SummaryRow
from ablate.sweep.summary import SweepSummary
from ablate.tracking import views
from ablate.tracking.store import ensure_experiment
from ablate.tracking.tags import KIND_TAG, SHARED_VIEW_PREFIX, SWEEP_TAG


def test_an_ended_search_charts_its_runs_on_log_flops_and_its_sampled_params_against_val_loss(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    eid = ensure_experiment(uri, "search")
    parent = client.create_run(eid, tags={SWEEP_TAG: "sw", KIND_TAG: "sweep"}).info.run_id
    trials = []
    for lr, warmup in (("0.001", "10"), ("0.004", "20"), ("0.002", "10")):
        tags = {SWEEP_TAG: "sw", "mlflow.parentRunId": parent}
        run_id = client.create_run(eid, tags=tags, run_name=f"optim.lr={lr}").info.run_id
        for key, value in {"optim.lr": lr, "optim.warmup_steps": warmup, "model.name": "nano"}.items():
            client.log_param(run_id, key, value)
        client.log_metric(run_id, "val/loss", 3.0, step=10)
        client.log_metric(run_id, "flops", 5e9, step=10)
        result = {"status": "finished", "mlflow_run_id": run_id}
        trials.append(SummaryRow(label=f"optim.lr={lr}", job=str(len(trials)), overrides={}, result=result))
    info = {"experiment_id": eid, "sweep_id": "sw", "parent_run_id": parent, "view_name": "search lr"}
    save_view(client, info, SweepSummary(rows=trials, table=""))
    state = json.loads(json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "sw"])["state"])
    shown = {r.info.run_id for r in client.search_runs([eid], filter_string=state["searchFilter"])}
    assert shown == {t.mlflow_run_id for t in trials}  # the parent is not among them
    for t in trials:
        assert [(m.step, m.value) for m in client.get_metric_history(t.mlflow_run_id, views.CURVE)] == [(5e9, 3.0)]
    line, parallel = state["compareRunCharts"]
    assert (line["metricKey"], line["xAxisScaleType"]) == (views.CURVE, "log")
    assert parallel["selectedParams"] == ["optim.lr", "optim.warmup_steps"]
    assert parallel["selectedMetrics"] == ["val/loss"]
