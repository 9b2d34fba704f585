"""tracking.log_model=final (run/final_model.py): a finished run's weights, with its model config,
are an MLflow artifact of the run, from which the model is rebuilt anywhere the store is reached."""

import json
import subprocess
import sys

import pytest
import torch

from ablate.run import MODEL_FILE, load_final_model
from support import SMALL_DATA

pytestmark = pytest.mark.slow

RUN = ["model=nano", "train.steps=2", "train.eval_interval=2", "train.progress=false", *SMALL_DATA]


def ablate(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ablate", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_final_weights_are_an_artifact_of_the_run_and_rebuild_the_model(tmp_path):
    from mlflow import MlflowClient

    done = ablate([*RUN, "tracking.log_model=final"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (result_file,) = tmp_path.glob("outputs/*/*/result.json")
    result = json.loads(result_file.read_text())
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    names = [a.path for a in client.list_artifacts(result["mlflow_run_id"])]
    assert MODEL_FILE in names and "result.json" in names
    local = client.download_artifacts(result["mlflow_run_id"], MODEL_FILE, str(tmp_path / "got"))
    model = load_final_model(local)
    assert sum(p.numel() for p in model.parameters()) == result["params"]
    logits, _ = model(torch.zeros(1, 8, dtype=torch.long))
    assert torch.isfinite(logits).all()

    plain = ablate([*RUN, "train.seed=3"], tmp_path)  # the default: no weights logged
    assert plain.returncode == 0, plain.stderr[-3000:]
    run_id = json.loads(sorted(tmp_path.glob("outputs/*/*/result.json"))[-1].read_text())["mlflow_run_id"]
    assert MODEL_FILE not in [a.path for a in client.list_artifacts(run_id)]


def test_logging_the_model_without_a_tracker_is_refused_in_one_line(tmp_path):
    done = ablate([*RUN, "tracking=none", "tracking.log_model=final"], tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert (
        done.returncode == 2 and len(lines) == 1 and "tracking.log_model=final logs the weights to MLflow" in lines[0]
    )
