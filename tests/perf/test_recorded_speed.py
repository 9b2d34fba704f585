"""perf/recorded_speed.py: the speeds earlier runs recorded on this machine, from result.json files
and a real sqlite MLflow store, other machines' left out."""

import json

from mlflow.tracking import MlflowClient

from ablate.perf.recorded_speed import recorded_speeds
from ablate.provenance import cpu

HERE = cpu()["cpu"]


def result(folder, model, tps, cpu_model=HERE, status="finished"):
    folder.mkdir(parents=True)
    doc = {
        "status": status,
        "model": model,
        "precision": "fp32",
        "device": "cpu",
        "tokens": 1_000_000,
        "flops": 6e11,
        "tokens_per_s": tps,
        "environment": {"cpu": cpu_model, "gpu": None},
    }
    (folder / "result.json").write_text(json.dumps(doc))


def test_result_files_of_this_machines_finished_runs_are_read(tmp_path):
    result(tmp_path / "sweep-a" / "0", "nano", 5000.0)
    result(tmp_path / "sweep-a" / "1" / "branches" / "tokens=1048576", "tiny", 900.0)
    result(tmp_path / "sweep-b" / "0", "nano", 7000.0, cpu_model="another CPU")
    result(tmp_path / "sweep-b" / "1", "nano", 7000.0, status="failed")
    (tmp_path / "sweep-b" / "2").mkdir()
    (tmp_path / "sweep-b" / "2" / "result.json").write_text("{not json")
    speeds = recorded_speeds([tmp_path], [], HERE)
    assert sorted((s.model, s.tokens_per_s, s.flops_per_token, s.source) for s in speeds) == [
        ("nano", 5000.0, 6e5, "result.json"),
        ("tiny", 900.0, 6e5, "result.json"),
    ]


def test_a_sqlite_stores_finished_runs_on_this_cpu_are_read_without_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    eid = client.create_experiment("ladder")
    for model, tps, where, status in (
        ("nano", 4000.0, HERE, "FINISHED"),
        ("nano", 9999.0, "another CPU", "FINISHED"),
        ("tiny", 800.0, HERE, "KILLED"),
    ):
        run = client.create_run(eid, tags={"ablate.cpu": where})
        for key, value in {
            "model.name": model,
            "precision.name": "bf16",
            "derived.device": "cpu",
            "derived.flops_per_token": "123456",
        }.items():
            client.log_param(run.info.run_id, key, value)
        client.log_metric(run.info.run_id, "final/tokens_per_s", tps)
        client.set_terminated(run.info.run_id, status)
    (speed,) = recorded_speeds([], [uri, "http://127.0.0.1:1", "sqlite:///nowhere.db"], HERE)
    assert (speed.model, speed.precision, speed.tokens_per_s, speed.flops_per_token, speed.source) == (
        "nano",
        "bf16",
        4000.0,
        123456.0,
        "MLflow",
    )
