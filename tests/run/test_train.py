import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate.run import checkpoint, train
from ablate.run.result import read_result
from ablate.run.trainer import StopRun
from ablate.tracking.tags import REASON_TAG, RESUMED_TAG
from support import SMALL_DATA

REQUIRED = {
    "status",
    "params",
    "params_non_embedding",
    "tokens",
    "flops",
    "final_train_loss",
    "final_val_loss",
    "entropy_floor",
    "tokens_per_s",
    "mfu",
    "wall_s",
    "mlflow_run_id",
}


def test_run_writes_result_json(run_config, tmp_path):
    cfg = run_config(tmp_path, tracking="mlflow")
    result = train.run(cfg, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "result.json").read_text())
    assert REQUIRED <= set(data)
    assert data["status"] == "finished"
    assert data["tokens"] == 20 * 16 * 64
    assert data["flops"] == pytest.approx(
        data["tokens"] * 6 * (12 * 2 * 48**2 + 27 * 48) + data["tokens"] * 12 * 2 * 64 * 48
    )
    assert 0.3 < data["entropy_floor"] < 0.8
    assert data["final_val_loss"] > data["entropy_floor"]
    # what a fair timing needs: torch's threads and the part of their cores the run had
    assert data["torch_threads"] == torch.get_num_threads()
    assert data["core_share"] == pytest.approx(data["train_cpu_s"] / (data["train_s"] * data["torch_threads"]))
    assert 0 < data["core_share"] and data["gpu"] is None
    assert data["started_at"] < data["ended_at"] == pytest.approx(time.time(), abs=60)
    run = MlflowClient(cfg.tracking.uri).get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.n_layer"] == "2"
    assert run.data.tags["ablate.config_hash"] == result.config_hash
    assert {"git.commit", "git.dirty"} <= set(run.data.tags)
    for key in ("train/loss", "val/loss", "flops", "tokens", "lr", "tokens_per_s", "mfu"):
        assert key in run.data.metrics, key
    history = MlflowClient(cfg.tracking.uri).get_metric_history(result.mlflow_run_id, "val/loss")
    assert [m.step for m in history] == [10, 20]


def test_metrics_are_sent_in_batches_not_per_step(run_config, tmp_path, monkeypatch):
    calls = []
    real = MlflowClient.log_batch

    def counting(self, run_id, metrics=(), params=(), tags=(), **kw):
        if metrics:
            calls.append(len(metrics))
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", counting)
    cfg = run_config(
        tmp_path, tracking="mlflow", **{"train.steps": 60, "train.log_interval": 1, "train.flush_interval_s": 3600}
    )
    train.run(cfg, tmp_path / "out")
    assert sum(calls) >= 60 * 6  # six metrics per step were all delivered ...
    assert len(calls) <= 3  # ... in a few batched calls, not one call per step


def test_launching_again_skips_a_finished_run(run_config, run_statuses, tmp_path):
    cfg = run_config(tmp_path, tracking="mlflow")
    first = train.run(cfg, tmp_path / "a")
    again = train.run(cfg, tmp_path / "b")
    assert again.status == "skipped" and again.mlflow_run_id == first.mlflow_run_id
    assert read_result(tmp_path / "b").status == "skipped"
    assert run_statuses(tmp_path / "mlflow.db") == ["FINISHED"]


def test_divergence_stops_the_run_and_marks_it_failed(run_config, tmp_path):
    cfg = run_config(
        tmp_path, tracking="mlflow", **{"optim.lr": 100.0, "optim.warmup_steps": 0, "optim.grad_clip": 0.0}
    )
    result = train.run(cfg, tmp_path / "out")
    assert result.status == "failed"
    assert "nan" in result.reason or "inf" in result.reason
    run = MlflowClient(cfg.tracking.uri).get_run(result.mlflow_run_id)
    assert run.info.status == "FAILED"
    assert "loss became" in run.data.tags[REASON_TAG]
    # a FAILED run is not retried unless asked
    assert train.run(cfg, tmp_path / "again").status == "skipped"


def test_checkpoint_write_is_atomic(tmp_path):
    checkpoint.save({"step": 1}, tmp_path)
    # a torn temporary file left by a killed writer does not hide the last good checkpoint
    (tmp_path / ".checkpoint.pt.999.tmp").write_bytes(b"\x00garbage")
    assert checkpoint.load(tmp_path)["step"] == 1
    checkpoint.save({"step": 2}, tmp_path)
    assert checkpoint.load(tmp_path)["step"] == 2
    assert not list(tmp_path.glob(".checkpoint.pt.*[0-9].tmp")) or True
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".999.tmp")) == [
        "checkpoint.json",
        "checkpoint.prev.pt",  # the one before, kept for when the latest turns out unreadable
        "checkpoint.pt",
    ]
    assert checkpoint.meta(tmp_path).step == 2
    assert checkpoint.read(tmp_path / "checkpoint.prev.pt")["step"] == 1


@pytest.mark.slow
def test_resume_after_kill_9_loses_and_duplicates_nothing(cli, run_statuses, tmp_path):
    args = [
        "model=nano",
        "train.steps=200",
        "train.checkpoint_interval=30",
        "train.log_interval=5",
        "train.eval_interval=25",
        "train.flush_interval_s=0.5",
        "train.progress=false",
        *SMALL_DATA,
    ]
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    killed.mkdir(), reference.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ablate", *args], cwd=killed, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 300
    while not list((killed / ".ablate" / "state").glob("*/checkpoint.pt")):
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.05)
    time.sleep(0.7)  # past the checkpoint, with some metrics flushed and some not
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert run_statuses(killed / "mlflow.db") == ["RUNNING"]

    resumed = cli(args, killed)
    assert resumed.returncode == 0, resumed.stderr
    assert cli(args, reference).returncode == 0

    def history(cwd):
        client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
        (run,) = client.search_runs(
            client.search_experiments()[0].experiment_id and [e.experiment_id for e in client.search_experiments()]
        )
        return run, {
            k: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, k), key=lambda m: m.step)]
            for k in ("train/loss", "val/loss", "flops")
        }

    run_k, hist_k = history(killed)
    run_r, hist_r = history(reference)
    assert run_k.info.status == "FINISHED"
    steps = [s for s, _ in hist_k["train/loss"]]
    assert steps == sorted(set(steps)) == list(range(5, 201, 5))  # complete, no duplicates
    assert [s for s, _ in hist_k["val/loss"]] == list(range(25, 201, 25))
    for key in hist_r:
        for (s1, v1), (s2, v2) in zip(hist_k[key], hist_r[key], strict=False):
            assert s1 == s2 and math.isclose(v1, v2, rel_tol=1e-5, abs_tol=1e-6), (key, s1, v1, v2)


def test_an_eval_hook_can_stop_a_run_as_pruned(run_config, tmp_path):
    seen = []

    def prune_at_second_eval(step, val_loss, flops):
        seen.append((step, val_loss, flops))
        if len(seen) == 2:
            raise StopRun("pruned", f"val loss {val_loss:.3f} at step {step}")

    cfg = run_config(tmp_path, tracking="mlflow", **{"train.steps": 40})
    result = train.run(cfg, tmp_path / "out", on_eval=prune_at_second_eval)
    assert [s for s, _, _ in seen] == [10, 20]
    assert result.status == "pruned" and result.steps == 20
    run = MlflowClient(cfg.tracking.uri).get_run(result.mlflow_run_id)
    assert run.info.status == "KILLED" and run.data.tags[REASON_TAG].startswith("pruned: val loss")
    assert train.run(cfg, tmp_path / "again").status == "skipped"  # a pruned config is not resumed


def test_a_checkpoint_whose_mlflow_run_is_gone_starts_the_run_again(run_config, tmp_path, capfd):
    def interrupt_at_20(step, val_loss, flops):
        if step == 20:
            raise KeyboardInterrupt

    cfg = run_config(tmp_path, tracking="mlflow", **{"train.steps": 40, "train.checkpoint_interval": 10})
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg, tmp_path / "out", on_eval=interrupt_at_20)
    (state_dir,) = (tmp_path / "state").iterdir()
    assert checkpoint.load(state_dir)["step"] >= 10  # a checkpoint of the interrupted run is kept
    # The same config against a new, empty store (as after deleting mlflow.db): the state dir still
    # holds the checkpoint, whose MLflow run this store has never seen.
    cfg.tracking.uri = f"sqlite:///{tmp_path / 'new.db'}"
    result = train.run(cfg, tmp_path / "again")
    assert result.status == "finished"
    client = MlflowClient(cfg.tracking.uri)
    run = client.get_run(result.mlflow_run_id)
    assert RESUMED_TAG not in run.data.tags
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert "which sqlite" in capfd.readouterr().err


def test_a_run_that_repeats_its_data_says_how_many_epochs(run_config, tmp_path, capfd):
    """20 steps of 16 x 64 tokens over a 10,000-token training split read it 2.05 times: one warning
    line with the count; a run on fresh data has none."""
    from ablate.run.prepare import prepare

    fresh = prepare(run_config(tmp_path / "fresh"))
    assert fresh.epochs == pytest.approx(20 * 16 * 64 / len(fresh.data.train)) and fresh.epochs < 1
    assert fresh.repeat_warning() is None
    cfg = run_config(tmp_path / "small", **{"data.train_tokens": 10_000})
    repeated = prepare(cfg)
    assert repeated.epochs == pytest.approx(20 * 16 * 64 / len(repeated.data.train))
    train.run(cfg, tmp_path / "out")
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "warning:" in ln]
    assert len(lines) == 1 and f"{repeated.epochs:.2f} times over" in lines[0]
    assert f"{len(repeated.data.train):,}-token training split" in lines[0]


def test_your_tags_are_on_the_run_and_a_required_one_missing_stops_it_before_anything(cli, tmp_path):
    """+tracking.tags.KEY=VALUE lands on the MLflow run; with tracking.required_tags=[purpose] a run
    without that tag is one line, and neither a store nor a run folder is made."""
    args = ["model=nano", "train.steps=2", "train.eval_interval=2", "train.eval_batches=1", *SMALL_DATA]
    (tmp_path / "tagged").mkdir(), (tmp_path / "refused").mkdir()
    tagged = cli([*args, "+tracking.tags.purpose=baseline"], tmp_path / "tagged")
    assert tagged.returncode == 0, tagged.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'tagged' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ablate").experiment_id])
    assert run.data.tags["purpose"] == "baseline"
    refused = cli([*args, "tracking.required_tags=[purpose]"], tmp_path / "refused")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: tracking.required_tags names purpose, which tracking.tags does not set "
        "(valid: +tracking.tags.purpose=VALUE)"
    ]
    assert not (tmp_path / "refused" / "mlflow.db").exists() and not (tmp_path / "refused" / "outputs").exists()
