"""A sweep's saved view once it ends (sweep/callback.save_view): its runs by id, and a
parallel-coordinates chart of the params they differ in against val/loss."""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from ablate.sweep.callback import save_view
from ablate.sweep.summary import SweepSummary
from ablate.tracking.store import ensure_experiment
from ablate.tracking.tags import SHARED_VIEW_PREFIX, SWEEP_TAG


def test_an_ended_search_charts_its_sampled_params_against_val_loss(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    eid = ensure_experiment(uri, "search")
    parent = client.create_run(eid, tags={SWEEP_TAG: "sw"}).info.run_id
    trials = []
    for lr, warmup in (("0.001", "10"), ("0.004", "20"), ("0.002", "10")):
        run_id = client.create_run(eid, tags={SWEEP_TAG: "sw", "mlflow.parentRunId": parent}).info.run_id
        for key, value in {"optim.lr": lr, "optim.warmup_steps": warmup, "model.name": "nano"}.items():
            client.log_param(run_id, key, value)
        trials.append({"mlflow_run_id": run_id, "status": "finished"})
    info = {"experiment_id": eid, "sweep_id": "sw", "parent_run_id": parent, "view_name": "search lr"}
    save_view(client, info, SweepSummary(rows=trials, table=""))
    state = json.loads(json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "sw"])["state"])
    (parallel,) = [c for c in state["compareRunCharts"] if c["type"] == "PARALLEL"]
    assert parallel["selectedParams"] == ["optim.lr", "optim.warmup_steps"]
    assert parallel["selectedMetrics"] == ["val/loss"]
