"""A run in a world that an engine launched: torchrun on a CPU (gloo), and SLURM tasks on the local
cluster. Every process runs the same command; rank 0 is the run (one MLflow run, each step logged
once), and a run whose rank is killed with SIGKILL resumes from its checkpoint into the same run."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.config import ConfigError, SubmititSettings
from ablate.run import distributed
from ablate.sweep.launch.slurm import resources
from launching import checkpoint_step, logged_steps, rank_process, runs, wait_for
from support import SMALL_DATA

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
STEPS = 120
ARGS = [
    "model=nano",
    *SMALL_DATA,
    "hardware=cpu",
    f"train.steps={STEPS}",
    "train.batch_size=4",
    "train.log_interval=5",
    "train.eval_interval=50",
    "train.checkpoint_interval=20",
    "train.progress=false",
    "tracking.system_metrics=false",
]


def torchrun(cwd: Path, *extra: str, log: Path) -> subprocess.Popen:
    argv = [TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "ablate", *ARGS, "hydra.run.dir=out", *extra]
    env = {k: v for k, v in os.environ.items() if k not in distributed.TORCHRUN_VARS}
    with open(log, "ab") as out:
        return subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


# -- which world a process is in ------------------------------------------------------------
def test_torchrun_variables_make_a_launched_world(monkeypatch):
    for key in ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID", "SUBMITIT_LOCAL_NTASKS", *distributed.TORCHRUN_VARS):
        monkeypatch.delenv(key, raising=False)
    assert distributed.launched() is None
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_ADDR", "node0")
    assert distributed.launched() is None  # no port: not a torchrun world
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.launched() == distributed.Launch("torchrun", 3, 4, 1)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.launched() is None  # one process: the run alone


def test_slurm_tasks_make_a_launched_world(monkeypatch):
    for key in distributed.TORCHRUN_VARS:
        monkeypatch.delenv(key, raising=False)
    env = {"SLURM_JOB_ID": "17", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}
    env.update(SLURM_JOB_NUM_NODES="1", SLURM_NODEID="0", SUBMITIT_EXECUTOR="slurm", SLURM_JOB_NODELIST="vm")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert distributed.launched() == distributed.Launch("slurm", 1, 2, 1)
    monkeypatch.setenv("SLURM_NTASKS", "1")  # one task per job: the run spawns its own ranks
    assert distributed.launched() is None


def test_a_launched_world_sizes_the_batch_split(run_config, tmp_path, monkeypatch):
    for k, v in {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(k, v)
    cfg = run_config(tmp_path, **{"train.batch_size": 4})
    assert distributed.world_size(cfg, "cpu") == 3
    with pytest.raises(ConfigError, match=r"does not split across 3 DDP ranks \(3 processes launched by torchrun\)"):
        distributed.check(cfg, "cpu")


def test_slurm_tasks_per_node_make_one_rank_a_task():
    cpu = {"device": "cpu", "gpus_per_node": 2}
    one = resources(SubmititSettings(), cpu)
    assert (one.nodes, one.tasks_per_node, one.cpus_per_task) == (1, 1, 2)  # its own spawn: 2 gloo ranks
    two = resources(SubmititSettings(tasks_per_node=2), cpu)
    assert (two.nodes, two.tasks_per_node, two.cpus_per_task, two.gpus_per_task) == (1, 2, 1, 0)
    gpus = resources(SubmititSettings(nodes=4, tasks_per_node=8), {"device": "cuda", "gpus_per_node": 8})
    assert (gpus.nodes, gpus.tasks_per_node, gpus.gpus_per_task) == (4, 8, 1)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"nodes": 0}, "hydra.launcher.nodes=0 is too small (valid: >= 1)"),
        ({"tasks_per_node": 0}, "hydra.launcher.tasks_per_node=0 is too small (valid: >= 1)"),
        ({"cluster": "local", "nodes": 2}, "hydra.launcher.nodes=2 with cluster=local"),
    ],
)
def test_bad_node_and_task_counts_are_one_line(settings, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SubmititSettings(**settings).validate()


# -- torchrun --------------------------------------------------------------------------------
@pytest.mark.slow
def test_torchrun_two_ranks_are_one_run_that_resumes_after_a_rank_is_killed(tmp_path):
    """Two torchrun processes: rank 1 killed with SIGKILL after a checkpoint; the run ends KILLED,
    and the same command resumes it into the same MLflow run and finishes, each step logged once."""
    log = tmp_path / "torchrun.log"
    first = torchrun(tmp_path, log=log)
    try:
        wait_for(lambda: checkpoint_step(tmp_path) >= 40, 240, "a checkpoint at step 40", first)
        victim = rank_process(tmp_path, 1, "RANK")
        assert victim is not None, log.read_text()[-3000:]
        os.kill(victim, signal.SIGKILL)
        assert first.wait(120) != 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    (killed,) = runs(tmp_path)
    # closed by rank 0 on torchrun's SIGTERM, or else by its watchdog, which imports MLflow only once
    # rank 0 is gone (about 2 s of CPU; on a loaded machine at a fraction of a core): as long as
    # test_reliability waits for a watchdog
    wait_for(lambda: runs(tmp_path)[0].info.status == "KILLED", 120, "the MLflow run closed KILLED")
    resumed_from = checkpoint_step(tmp_path)
    assert 40 <= resumed_from < STEPS
    again = torchrun(tmp_path, log=log)
    assert again.wait(300) == 0, log.read_text()[-3000:]
    (run,) = runs(tmp_path)  # one MLflow run: rank 0's, resumed
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"
    assert int(run.data.tags["ablate.resumed_from_step"]) == resumed_from
    assert logged_steps(tmp_path, run.info.run_id) == list(range(5, STEPS + 1, 5))  # each step once
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "finished" and result["steps"] == STEPS
    assert result["mlflow_run_id"] == run.info.run_id


@pytest.mark.slow
def test_torchrun_launch_of_a_finished_run_skips_it_on_every_rank(tmp_path):
    log = tmp_path / "torchrun.log"
    short = ("train.steps=10", "train.checkpoint_interval=10")
    assert torchrun(tmp_path, *short, log=log).wait(300) == 0, log.read_text()[-3000:]
    assert torchrun(tmp_path, *short, log=log).wait(300) == 0, log.read_text()[-3000:]
    (run,) = runs(tmp_path)
    assert run.info.status == "FINISHED"
    assert log.read_text().count("skipped") >= 2  # both ranks said so, rank 0 decided it


# -- SLURM tasks -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.slurm
def test_two_slurm_tasks_are_one_run_that_resumes_after_a_task_is_killed(cli, workdir):
    """One job of two tasks (hydra.launcher.tasks_per_node=2), each task a rank joined with env://:
    one MLflow run with each step once; a task killed with SIGKILL leaves the run resumable, and the
    same sweep launched again finishes it in the same MLflow run."""
    args = ["--multirun", *ARGS, "hydra/launcher=slurm", "hydra.launcher.tasks_per_node=2", "hydra.launcher.poll_s=1"]
    first = cli.start(args, workdir, stderr=workdir / "first.err", fresh=True)
    try:
        wait_for(lambda: checkpoint_step(workdir) >= 40, 300, "a checkpoint at step 40", first)
        victim = rank_process(workdir, 1, "SLURM_PROCID")
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        first.wait(300)
    finally:
        if first.poll() is None:
            first.kill()
    (killed,) = runs(workdir)
    assert killed.info.status == "KILLED"  # resumable: another rank ended, not the run
    resumed_from = checkpoint_step(workdir)
    done = cli(args, workdir, timeout=600, process=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = runs(workdir)
    assert run.info.run_id == killed.info.run_id and run.info.status == "FINISHED"
    assert int(run.data.tags["ablate.resumed_from_step"]) == resumed_from
    assert logged_steps(workdir, run.info.run_id) == list(range(5, STEPS + 1, 5))
    jobs = sorted(workdir.glob("multirun/*/*/jobs.json"))
    assert json.loads(jobs[-1].read_text())["arrays"][0]["resources"]["tasks_per_node"] == 2
    assert shutil.which("sacct")
