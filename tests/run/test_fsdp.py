"""train.parallel=fsdp on a CPU (gloo): FSDP2 gives the DDP run's loss curve, its sharded checkpoint
saved by 2 ranks resumes on 4 into the same MLflow run, and the memory model's sharded states match
what each rank holds, at 2 and 4 ranks."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ablate.config import ConfigError, as_dict
from ablate.perf import memory
from ablate.run import distributed
from ablate.run.prepare import prepare
from launching import checkpoint_step, logged_steps, rank_process, runs, wait_for
from support import SMALL_DATA

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
ARGS = [
    "model=nano",
    *SMALL_DATA,
    "hardware=cpu",
    "train.batch_size=4",
    "train.log_interval=5",
    "train.eval_interval=20",
    "train.checkpoint_interval=20",
    "train.progress=false",
    "tracking.system_metrics=false",
]


def torchrun(cwd: Path, ranks: int, *extra: str, log: Path) -> subprocess.Popen:
    argv = [TORCHRUN, "--standalone", f"--nproc_per_node={ranks}", "-m", "ablate", *ARGS, "hydra.run.dir=out", *extra]
    env = {k: v for k, v in os.environ.items() if k not in distributed.TORCHRUN_VARS}
    with open(log, "ab") as out:
        return subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def curve(cwd: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.mark.slow
def test_fsdp_on_two_ranks_gives_the_ddp_loss_curve(tmp_path):
    for parallel in ("ddp", "fsdp"):
        (tmp_path / parallel).mkdir()
        log = tmp_path / parallel / "log"
        done = torchrun(tmp_path / parallel, 2, "train.steps=40", f"train.parallel={parallel}", log=log)
        assert done.wait(300) == 0, log.read_text()[-3000:]
    (ddp,), (fsdp,) = runs(tmp_path / "ddp"), runs(tmp_path / "fsdp")
    for key in ("train/loss", "val/loss"):
        a, b = curve(tmp_path / "ddp", ddp.info.run_id, key), curve(tmp_path / "fsdp", fsdp.info.run_id, key)
        assert [s for s, _ in a] == [s for s, _ in b] and len(a) >= 2
        for (s, x), (_, y) in zip(a, b, strict=True):
            assert math.isclose(x, y, rel_tol=1e-4), (key, s, x, y)
    state = next((tmp_path / "fsdp" / ".ablate" / "state").iterdir())
    # sharded checkpoints: every rank's shards in a folder per step, the last three kept
    assert sorted(p.name for p in state.glob("shards-*")) == ["shards-20", "shards-40"]
    assert len(list((state / "shards-40").glob("*.distcp"))) == 2


@pytest.mark.slow
def test_a_sharded_checkpoint_saved_by_two_ranks_resumes_on_four(tmp_path):
    steps = 100
    log = tmp_path / "log"
    first = torchrun(tmp_path, 2, f"train.steps={steps}", "train.parallel=fsdp", log=log)
    try:
        wait_for(lambda: checkpoint_step(tmp_path) >= 40, 240, "a checkpoint at step 40", first)
        victim = rank_process(tmp_path, 1, "RANK")
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        assert first.wait(120) != 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    # closed by rank 0 on torchrun's SIGTERM, or else by its watchdog, which imports MLflow only once
    # rank 0 is gone (about 2 s of CPU; on a loaded machine at a fraction of a core): as long as
    # test_reliability waits for a watchdog
    wait_for(lambda: runs(tmp_path)[0].info.status == "KILLED", 120, "the MLflow run closed KILLED")
    resumed_from = checkpoint_step(tmp_path)
    again = torchrun(tmp_path, 4, f"train.steps={steps}", "train.parallel=fsdp", log=log)
    assert again.wait(400) == 0, log.read_text()[-3000:]
    (run,) = runs(tmp_path)
    assert run.info.status == "FINISHED" and int(run.data.tags["ablate.resumed_from_step"]) == resumed_from
    assert logged_steps(tmp_path, run.info.run_id) == list(range(5, steps + 1, 5))
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "finished" and result["steps"] == steps
    # the loss went on from where the 2-rank run left it, not from a fresh model
    losses = curve(tmp_path, run.info.run_id, "train/loss")
    assert losses[-1][1] < losses[0][1] - 0.3


@pytest.mark.slow
def test_a_signal_to_rank_0_checkpoints_every_ranks_shards_at_the_next_step(tmp_path):
    """SIGTERM to rank 0 alone: the ranks agree on it at the next step boundary, all write their shards,
    rank 0 names them and ends the run KILLED; the same command resumes from that step. 1000 steps
    (about 20 s on two CPU ranks): 100 could finish between the first logged step and the signal."""
    steps, log = 1000, tmp_path / "log"
    extra = (f"train.steps={steps}", "train.parallel=fsdp", "train.checkpoint_interval=1000")
    first = torchrun(tmp_path, 2, *extra, log=log)
    try:
        wait_for(lambda: runs(tmp_path) and logged_steps(tmp_path, runs(tmp_path)[0].info.run_id), 240, "a step", first)
        leader = rank_process(tmp_path, 0, "RANK")
        assert leader is not None
        os.kill(leader, signal.SIGTERM)
        assert first.wait(120) != 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    saved = checkpoint_step(tmp_path)
    assert 0 < saved < steps  # no interval checkpoint before the end: this one is the signal's
    state = next((tmp_path / ".ablate" / "state").iterdir())
    assert len(list((state / f"shards-{saved}").glob("*.distcp"))) == 2  # both ranks' shards
    (run,) = runs(tmp_path)
    assert run.info.status == "KILLED"
    again = torchrun(tmp_path, 2, *extra, log=log)
    assert again.wait(300) == 0, log.read_text()[-3000:]
    (run,) = runs(tmp_path)
    assert run.info.status == "FINISHED" and int(run.data.tags["ablate.resumed_from_step"]) == saved


# -- the memory model against what each rank holds ------------------------------------------------
MEASURE = """
import json, sys, torch
from ablate.config import parse_run
from ablate.model import GPT, apply_precision, build_optimizer
from ablate.run import distributed, fsdp
from ablate.run.prepare import prepare
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
distributed.set_current(distributed.Rank(rank, world))
p = prepare(parse_run(json.loads(sys.argv[1])))
torch.manual_seed(0)
model = GPT(p.cfg.model)
runtime = apply_precision(model, p.cfg.precision, "cpu")
fsdp.shard(model, p.cfg)
optimizer = build_optimizer(model, p.cfg.optim)
x = torch.randint(0, p.cfg.model.vocab_size, (p.cfg.train.batch_size // world, p.cfg.model.block_size))
with runtime.autocast():
    _, loss = model(x, x)
loss.backward()
optimizer.step()  # the moments exist from here on; the gradients are still held
with open(f"rank{rank}.json", "w") as f:  # a file each: ranks printing to one pipe interleave
    json.dump({"rank": rank, **fsdp.local_bytes(model, optimizer)}, f)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("precision", ["fp32", "bf16_pure"])
def test_the_memory_model_gives_each_ranks_sharded_states_within_10_percent(run_config, tmp_path, ranks, precision):
    """Measured: the bytes of this rank's shards of the weights, their gradients and AdamW's moments,
    after a step (DTensor.to_local()); on a CPU there is no allocator peak to read, so activations are
    not part of the check. Modelled: perf/memory.py's weights + gradients + optimizer states, sharded."""
    cfg = run_config(
        tmp_path, **{"model": "micro", "precision": precision, "train.parallel": "fsdp", "train.batch_size": 4}
    )
    script = tmp_path / "measure.py"
    script.write_text(MEASURE)
    env = {k: v for k, v in os.environ.items() if k not in distributed.TORCHRUN_VARS}
    done = subprocess.run(
        [TORCHRUN, "--standalone", f"--nproc_per_node={ranks}", str(script), json.dumps(as_dict(cfg))],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]
    assert len(measured) == ranks
    model_cfg = prepare(cfg).cfg.model
    modelled = memory.gpu_memory(model_cfg, cfg.precision, 4 // ranks, ranks, True, "cpu")
    want = modelled.weights + modelled.gradients + modelled.optimizer_states + modelled.master_weights
    for m in measured:
        held = m["weights"] + m["gradients"] + m["optimizer_states"]
        assert abs(want / held - 1) < 0.10, (m, modelled.parts())


def test_fsdp_refuses_what_it_cannot_shard_in_one_line(run_config, tmp_path):
    cases = [
        ({"optim.name": "muon"}, "train.parallel=fsdp with optim.name=muon"),
        ({"precision": "fp8_rowwise"}, "train.parallel=fsdp with precision=fp8_rowwise"),
        ({"train.tokens": [20480, 40960], "train.steps": None, "optim.schedule": "wsd"}, "with a list of budgets"),
    ]
    for overrides, message in cases:
        cfg = run_config(tmp_path, **{"train.parallel": "fsdp", **overrides})
        with pytest.raises(ConfigError, match=message):
            distributed.check(cfg, "cpu")
