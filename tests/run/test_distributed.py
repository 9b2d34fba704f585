"""DDP inside a job, tested on a CPU: 2 gloo processes on the same global batch give the loss curve
of one process (within floating-point summation order), and only rank 0 records anything."""

import math

import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate.config import ConfigError
from ablate.run import distributed, train


def curves(cfg, run_id):
    client = MlflowClient(cfg.tracking.uri)
    return {
        k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in ("train/loss", "val/loss")
    }


@pytest.mark.slow
def test_two_gloo_ranks_give_the_single_process_loss_curve(run_config, tmp_path):
    steps = {"train.steps": 30, "train.eval_interval": 10, "train.log_interval": 5}
    one = run_config(tmp_path / "one", tracking="mlflow", **steps)
    two = run_config(tmp_path / "two", tracking="mlflow", **steps, **{"hardware.gpus_per_node": 2})
    assert distributed.world_size(two, "cpu") == 2
    single = train.run(one, tmp_path / "one" / "out")
    ddp = train.run(two, tmp_path / "two" / "out")
    assert single.status == ddp.status == "finished"
    a, b = curves(one, single.mlflow_run_id), curves(two, ddp.mlflow_run_id)
    assert [s for s, _ in a["train/loss"]] == [s for s, _ in b["train/loss"]] == list(range(5, 31, 5))
    for key in a:
        for (s, x), (_, y) in zip(a[key], b[key], strict=False):
            assert math.isclose(x, y, rel_tol=1e-4), (key, s, x, y)
    # the loss moved, so the comparison covers real optimizer steps, not the initial loss only
    assert a["train/loss"][-1][1] < a["train/loss"][0][1] - 0.1
    # rank 0 alone tracked (one MLflow run) and checkpointed (one state dir, no rendezvous files left)
    client = MlflowClient(two.tracking.uri)
    assert len(client.search_runs([e.experiment_id for e in client.search_experiments()])) == 1
    (state_dir,) = (tmp_path / "two" / "state").iterdir()
    # run.lock stays for the next launch (run/lock.py); the kernel released its flock with the process
    assert sorted(p.name for p in state_dir.iterdir()) == ["checkpoint.json", "checkpoint.pt", "run.lock"]
    assert not torch.distributed.is_initialized() and distributed.current().world == 1


def test_every_rank_takes_its_own_rows_of_the_global_batch(monkeypatch):
    batch = torch.arange(16 * 3).reshape(16, 3)  # (B, T)
    parts = []
    for rank in range(4):
        monkeypatch.setattr(distributed, "_CURRENT", distributed.Rank(rank, 4))
        parts.append(distributed.local_rows(batch))
    assert [p.shape for p in parts] == [(4, 3)] * 4
    assert torch.equal(torch.cat(parts), batch)


def test_world_size_follows_the_hardware(run_config, tmp_path):
    cfg = run_config(tmp_path, **{"hardware.gpus_per_node": 2})
    assert distributed.world_size(cfg, "cpu") == 2
    assert distributed.world_size(cfg, "mps") == 1
    # CUDA: never more ranks than visible GPUs (none here: one process)
    assert distributed.world_size(cfg, "cuda") == max(1, min(2, torch.cuda.device_count()))


def test_a_batch_that_does_not_split_fails_before_any_work(run_config, tmp_path):
    cfg = run_config(tmp_path, **{"hardware.gpus_per_node": 3})
    with pytest.raises(
        ConfigError, match=r"train.batch_size=16 does not split across 3 DDP ranks .*valid: a multiple of 3"
    ):
        train.prepare(cfg)
