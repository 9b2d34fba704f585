"""hydra/launcher=slurm against the real local cluster (scripts/slurm_cluster.sh; `make test` starts it):
a sweep's runs all FINISHED, failures visible in MLflow, the summary, sacct and the exit code, real
preemptions (scontrol requeue; USR2 as submitit's interrupt sends it) resumed into the same MLflow run,
time-outs counted, and a sweep submitted to walk away from. Plus the same launcher without a cluster
(hydra/launcher=ablate_submitit_local) and the launcher's resource and driver-job logic."""

import json
import math
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ablate.cli.submit import driver_script
from ablate.config import SubmititSettings
from ablate.run import preemption, train
from ablate.sweep.launch.slurm import resources
from ablate.tracking.tags import REASON_TAG
from support import SMALL_DATA

QUICK = ["model=nano", *SMALL_DATA, "train.progress=false", "hydra.launcher.poll_s=1"]
WAIT_S = 600


# -- helpers -------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def cancel_leftover_jobs(tmp_path):
    """A test that fails midway must not leave its jobs holding the cluster's CPUs."""
    yield
    ids = []
    for path in tmp_path.glob("**/multirun/*/*/jobs.json"):
        ids += job_ids(path.parent)
    ids += [json.loads(p.read_text())["job_id"] for p in tmp_path.glob("**/multirun/*/*/driver.json")]
    if ids and shutil.which("scancel"):
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30)


def the_sweep_dir(cwd: Path) -> Path:
    (found,) = [p for p in (cwd / "multirun").glob("*/*") if p.is_dir()]
    return found


def wait_for(what: str, check, timeout: float = WAIT_S, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the launching command ended (rc {proc.returncode}) while waiting for {what}")
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def training_at(run_dir: Path, step: int, start: int = 0):
    """The run's progress file (sweep jobs write one) once it is past `step`, having started at >= `start`."""
    try:
        p = json.loads((run_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return None
    return p if p["step"] >= step and p["start"] >= start else None


def job_ids(sweep_dir: Path) -> list[str]:
    record = json.loads((sweep_dir / "jobs.json").read_text())
    return [j["job_id"] for a in record["arrays"] for j in a["jobs"]]


def child_runs(cwd: Path) -> list:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return [r for r in runs if r.data.tags.get("ablate.kind") != "sweep"]


def parent_run(cwd: Path):
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (parent,) = [r for r in runs if r.data.tags.get("ablate.kind") == "sweep"]
    return parent


def job_rows(cli, sweep_dir: Path, *extra: str) -> tuple[int, list[dict]]:
    done = cli([str(sweep_dir), "--json", *extra], sweep_dir.parents[2], command="jobs", timeout=WAIT_S)
    return done.returncode, json.loads(done.stdout)


def metric_steps(cwd: Path, run_id: str, key: str) -> list[int]:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def launch(cli, args: list[str], cwd: Path):
    """The launching command, left running; what it prints goes to cwd/launch.log (launched_output)."""
    return cli.start(args, cwd, stdout=cwd / "launch.log", stderr=cwd / "launch.log")


def launched_output(cwd: Path) -> str:
    return (cwd / "launch.log").read_text(errors="replace")


def kill_job_processes(job: str) -> None:
    """SIGKILL the Python processes of a job's steps (not SLURM's own slurmstepd)."""
    raw = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%A"], check=True, capture_output=True, text=True, timeout=30
    ).stdout.strip()  # an array task's own job id: listpids wants it
    out = subprocess.run(["scontrol", "listpids", raw], check=True, capture_output=True, text=True, timeout=30).stdout
    pids = [int(line.split()[0]) for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]
    pythons = [
        p for p in pids if Path(f"/proc/{p}/comm").exists() and Path(f"/proc/{p}/comm").read_text().startswith("python")
    ]
    assert pythons, f"no python process in job {job}: {out}"
    for pid in pythons:
        os.kill(pid, 9)


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, timeout=30)


# -- no cluster needed ---------------------------------------------------------------------
def test_resources_come_from_the_hardware_config_unless_overridden():
    cpu = {"device": "cpu", "gpus_per_node": 1}
    h100 = {"device": "cuda", "gpus_per_node": 8}
    one = {"nodes": 1, "tasks_per_node": 1}  # one task per run, which spawns its own ranks
    assert resources(SubmititSettings(), cpu).__dict__ == {"gpus_per_task": 0, "cpus_per_task": 1, "threads": 1, **one}
    assert resources(SubmititSettings(), h100).__dict__ == {"gpus_per_task": 8, "cpus_per_task": 8, "threads": 8, **one}
    assert resources(SubmititSettings(), {"device": "auto", "gpus_per_node": 1}).gpus_per_task == 0
    assert resources(SubmititSettings(), {"device": "cpu", "gpus_per_node": 2}).cpus_per_task == 2  # 2 gloo ranks
    custom = SubmititSettings(gpus_per_task=2, cpus_per_task=16)
    assert resources(custom, h100).__dict__ == {"gpus_per_task": 2, "cpus_per_task": 16, "threads": 16, **one}


def test_the_driver_job_submits_the_same_sweep_into_a_fixed_dir(tmp_path):
    settings = SubmititSettings(
        partition="gpu", account="lab", qos="low", driver_timeout_min=2880, setup=["module load cuda"]
    )
    script = driver_script(tmp_path, tmp_path / "sweep", ["+sweep=precision", "hydra/launcher=slurm"], settings)
    lines = script.splitlines()
    for option in (
        "--partition=gpu",
        "--account=lab",
        "--qos=low",
        "--time=2880",
        "--cpus-per-task=1",
        "--no-requeue",
        f"--output={tmp_path / 'sweep' / 'driver.log'}",
        f"--chdir={tmp_path}",
    ):
        assert f"#SBATCH {option}" in lines, option
    assert "module load cuda" in lines
    assert lines[-1].split()[-4:] == [
        "--multirun",
        "+sweep=precision",
        "hydra/launcher=slurm",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]


def test_a_bad_launcher_setting_fails_in_one_line(cli, workdir):
    done = cli(["+sweep=precision", "hydra/launcher=slurm", "hydra.launcher.timeout_min=0", *QUICK], workdir)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "error: hydra.launcher.timeout_min=0 is too small (valid: >= 1)"
    assert not (workdir / "multirun").exists() or not list((workdir / "multirun").glob("*/*/jobs.json"))


@pytest.mark.slow
def test_the_local_executor_variant_runs_a_sweep_without_a_cluster(cli, workdir):
    done = cli(
        [
            "--multirun",
            "hydra/launcher=ablate_submitit_local",
            *QUICK,
            "train.steps=6",
            "train.eval_interval=3",
            "train.seed=0,1",
        ],
        workdir,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(r.info.status for r in child_runs(workdir)) == ["FINISHED", "FINISHED"]
    sweep_dir = the_sweep_dir(workdir)
    record = json.loads((sweep_dir / "jobs.json").read_text())
    assert [a["cluster"] for a in record["arrays"]] == ["local"]
    for job in ("0", "1"):
        assert "finished nano/fp32" in (sweep_dir / job / "slurm.log").read_text()


def study_of(cwd: Path):
    import optuna

    from ablate.search.storage import open_storage

    return optuna.load_study(study_name="lr", storage=open_storage(str(cwd / "studies" / "lr" / "journal.log")))


STUDY = [
    "+sweep=lr",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.n_jobs=2",
    *QUICK,
    "train.steps=20",
    "train.eval_interval=10",
]


def check_asynchronous_study(workdir: Path, cluster: str) -> None:
    """Three trials, two slots: each trial its own job (a slot is a job allowance), asked as one
    ended, every trial and run ended, and jobs.json naming each job for `ablate jobs`."""
    from optuna.trial import TrialState

    trials = study_of(workdir).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert {t.user_attrs["schedule"] for t in trials} == {"asynchronous"}
    assert all(sorted(t.intermediate_values) == [10, 20] for t in trials)  # each job reported to the study
    record = json.loads((the_sweep_dir(workdir) / "jobs.json").read_text())
    assert [len(a["jobs"]) for a in record["arrays"]] == [1, 1, 1]
    assert {a["cluster"] for a in record["arrays"]} == {cluster}
    assert sorted(j["num"] for a in record["arrays"] for j in a["jobs"]) == [0, 1, 2]
    # The third trial was submitted only after one of the first two had ended.
    first_two, third = [a["submitted_at"] for a in record["arrays"][:2]], record["arrays"][2]["submitted_at"]
    ended = sorted(t.user_attrs["ended_at"] for t in trials[:2])
    assert third >= ended[0] > max(first_two)
    trial_runs = [r for r in child_runs(workdir) if "optuna.trial" in r.data.tags]
    assert sorted(r.info.status for r in trial_runs) == ["FINISHED"] * 3


def test_a_study_asks_each_trial_as_a_job_ends_on_the_local_executor(cli, workdir):
    done = cli([*STUDY, "hydra/launcher=ablate_submitit_local"], workdir, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    check_asynchronous_study(workdir, "local")


# -- against the local cluster -------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.slurm
def test_the_precision_sweep_on_slurm_finishes_every_run(cli, workdir):
    done = cli(
        # one seed of the preset's three: one job per policy
        ["+sweep=precision", "hydra/launcher=slurm", *QUICK, "train.steps=10", "train.eval_interval=5", "train.seed=0"],
        workdir,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = child_runs(workdir)
    # fp8_tensorwise (sm_89+) and fp8_rowwise (sm_90+) need a GPU: reported unsupported, no MLflow run;
    # every other policy FINISHED
    assert sorted(r.data.params["precision.name"] for r in runs) == [
        "bf16",
        "bf16_pure",
        "bf16_pure_nearest",
        "fp16",
        "fp32",
        "fp8_rowwise_emulated",
        "fp8_tensorwise_emulated",
    ]
    assert {r.info.status for r in runs} == {"FINISHED"}
    parent = parent_run(workdir)
    assert parent.info.status == "FINISHED"
    # the experiment existed before any job started: every job logged into the parent's experiment
    sweep_dir = the_sweep_dir(workdir)
    info = json.loads((sweep_dir / "sweep.json").read_text())
    assert {r.info.experiment_id for r in runs} == {info["experiment_id"]} == {parent.info.experiment_id}
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert sorted(r["status"] for r in summary["runs"]) == ["finished"] * 7 + ["unsupported"] * 2
    # The sweep returns once every job's result is written; SLURM marks a job ended a moment later.
    rc, rows = job_rows(cli, sweep_dir, "--wait", "--poll-s", "0.5")
    assert rc == 0 and len(rows) == 9
    assert {r["state"] for r in rows} == {"COMPLETED"}
    for r in rows:  # each job's log beside its run dir
        log = sweep_dir / str(r["num"]) / "slurm.log"
        assert log.resolve() == (sweep_dir / r["log"]).resolve() and log.stat().st_size > 0


@pytest.mark.slow
@pytest.mark.slurm
def test_a_diverging_run_is_failed_in_mlflow_the_summary_sacct_and_the_exit_code(cli, workdir):
    # Each job trains with DDP on 2 gloo ranks (2 CPUs per job): a run that diverges fails on
    # every rank at the same step, since the logged loss is averaged over ranks.
    ddp = ["hardware=cpu", "hardware.gpus_per_node=2"]
    done = cli(
        [
            "--multirun",
            "hydra/launcher=slurm",
            *QUICK,
            *ddp,
            "train.steps=10",
            "train.eval_interval=5",
            "optim.warmup_steps=0",
            "optim.grad_clip=0",
            "optim.lr=0.003,100",
        ],
        workdir,
        timeout=WAIT_S,
    )
    assert done.returncode == 1
    by_lr = {r.data.params["optim.lr"]: r for r in child_runs(workdir)}
    assert by_lr["0.003"].info.status == "FINISHED"
    assert by_lr["100.0"].info.status == "FAILED" and "loss became" in by_lr["100.0"].data.tags[REASON_TAG]
    assert parent_run(workdir).info.status == "FAILED"
    sweep_dir = the_sweep_dir(workdir)
    assert "| optim.lr=100 | failed |" in (sweep_dir / "summary.md").read_text()
    _, rows = job_rows(cli, sweep_dir, "--wait", "--poll-s", "0.5")  # until SLURM has marked both ended
    assert [(r["state"], r["run_status"]) for r in rows] == [("COMPLETED", "finished"), ("FAILED", "failed")]
    (array,) = json.loads((sweep_dir / "jobs.json").read_text())["arrays"]
    assert array["resources"]["cpus_per_task"] == 2  # one CPU per training process


@pytest.mark.slow
@pytest.mark.slurm
def test_scontrol_requeue_resumes_from_the_checkpoint_into_the_same_run(cli, run_config, workdir, tmp_path_factory):
    # 600 steps: after SIGTERM the job trains on until SIGKILL (KillWait=5 s on the test cluster); the
    # remaining ~570 steps must not fit in those 5 s, or the run would finish before the requeue.
    steps = [
        "train.steps=600",
        "train.log_interval=50",
        "train.eval_interval=200",
        "train.flush_interval_s=1",
        "train.checkpoint_interval=1000",
    ]
    proc = launch(cli, ["--multirun", "hydra/launcher=slurm", *QUICK, *steps], workdir)
    try:
        sweep_dir = wait_for(
            "the job to be submitted",
            lambda: (list((workdir / "multirun").glob("*/*/jobs.json")) or [None])[0],
            proc=proc,
        ).parent
        (job,) = job_ids(sweep_dir)
        wait_for("training past step 30", lambda: training_at(sweep_dir / "0", 30), proc=proc)
        scontrol("requeue", job)  # SIGTERM now, SIGKILL after KillWait, then the job runs again
        # while the requeued job runs, the same run uninterrupted, for comparison
        ref_dir = tmp_path_factory.mktemp("reference")
        ref_cfg = run_config(
            ref_dir, tracking="mlflow", **{"train.steps": 600, "train.log_interval": 50, "train.eval_interval": 200}
        )
        reference = train.run(ref_cfg, ref_dir / "out")
        proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, launched_output(workdir)[-3000:]
    (run,) = child_runs(workdir)
    events = preemption.read_events(sweep_dir / "0")
    assert [(e["signal"], e["action"]) for e in events] == [("SIGTERM", "continue")]
    assert run.info.status == "FINISHED"
    assert run.data.tags[train.RESUMED_TAG] == str(events[0]["step"])  # resumed from the signal's checkpoint
    assert 30 <= events[0]["step"] < 600
    assert metric_steps(workdir, run.info.run_id, "train/loss") == list(range(50, 601, 50))  # complete, no duplicates
    assert metric_steps(workdir, run.info.run_id, "val/loss") == list(range(200, 601, 200))
    client, ref_client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}"), MlflowClient(ref_cfg.tracking.uri)
    for key in ("train/loss", "val/loss"):
        got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        want = sorted((m.step, m.value) for m in ref_client.get_metric_history(reference.mlflow_run_id, key))
        assert all(math.isclose(a, b, rel_tol=1e-4) for (_, a), (_, b) in zip(got, want, strict=False)), key
    _, (row,) = job_rows(cli, sweep_dir, "--wait", "--poll-s", "0.5")
    assert row["state"] == "COMPLETED" and row["requeues"] >= 1 and row["run_status"] == "finished"


@pytest.mark.slow
@pytest.mark.slurm
def test_usr2_requeues_the_job_until_its_timeouts_are_used_up(cli, workdir):
    # A 5-minute limit: submitit counts a USR2 this far from the limit as a time-out (see
    # submitit's has_timed_out); one requeue allowed, so the second USR2 fails the run.
    settings = ["hydra.launcher.timeout_min=5", "hydra.launcher.max_num_timeout=1", "hydra.launcher.signal_delay_s=60"]
    steps = ["train.steps=3000", "train.log_interval=10", "train.eval_interval=100", "train.flush_interval_s=1"]
    proc = launch(cli, ["--multirun", "hydra/launcher=slurm", *QUICK, *settings, *steps], workdir)
    try:
        sweep_dir = wait_for(
            "the job to be submitted",
            lambda: (list((workdir / "multirun").glob("*/*/jobs.json")) or [None])[0],
            proc=proc,
        ).parent
        (job,) = job_ids(sweep_dir)
        usr2 = ["scancel", "--signal=USR2", job]  # what submitit's job._interrupt(timeout=True) runs
        wait_for("training past step 20", lambda: training_at(sweep_dir / "0", 20), proc=proc)
        subprocess.run(usr2, check=True, timeout=30)
        first = wait_for("the first signal's checkpoint", lambda: preemption.read_events(sweep_dir / "0"), proc=proc)[0]
        wait_for(
            "the requeued job training again",
            lambda: training_at(sweep_dir / "0", first["step"] + 20, start=first["step"]),
            proc=proc,
        )
        subprocess.run(usr2, check=True, timeout=30)
        proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, launched_output(workdir)[-3000:]
    events = preemption.read_events(sweep_dir / "0")
    assert [(e["signal"], e["action"]) for e in events] == [("SIGUSR2", "stop"), ("SIGUSR2", "stop")]
    (run,) = child_runs(workdir)
    assert run.info.status == "FAILED" and "timed-out too many times" in run.data.tags[REASON_TAG]
    assert run.data.tags[train.RESUMED_TAG] == str(events[0]["step"])
    logged = metric_steps(workdir, run.info.run_id, "train/loss")
    assert logged == list(range(10, logged[-1] + 1, 10)) and logged[-1] >= events[1]["step"] - 10
    _, (row,) = job_rows(cli, sweep_dir, "--wait", "--poll-s", "0.5")
    assert row["state"] == "FAILED" and row["requeues"] == 1 and row["run_status"] == "failed"


@pytest.mark.slow
@pytest.mark.slurm
def test_submit_and_walk_away_with_a_job_that_crashes(cli, workdir):
    done = cli(
        ["hydra/launcher=slurm", *QUICK, "train.eval_interval=5", "train.steps=10,3000"], workdir, command="submit"
    )
    assert done.returncode == 0, done.stderr
    submitted = json.loads(done.stdout)
    sweep_dir = Path(submitted["sweep_dir"])
    assert json.loads((sweep_dir / "driver.json").read_text())["job_id"] == submitted["driver_job_id"]
    # the terminal is free; meanwhile the driver submits the array. Crash the long run hard
    # once it trains: SIGKILL to its processes, as the kernel's OOM killer would send.
    wait_for("the long run training", lambda: training_at(sweep_dir / "1", 20))
    kill_job_processes(job_ids(sweep_dir)[1])
    rc, rows = job_rows(cli, sweep_dir, "--wait", "--poll-s", "2")
    assert rc == 1
    states = {("driver" if r["num"] is None else r["num"]): (r["state"], r["run_status"]) for r in rows}
    assert states == {"driver": ("FAILED", "failed"), 0: ("COMPLETED", "finished"), 1: ("FAILED", "failed")}
    by_steps = {r.data.params["train.steps"]: r for r in child_runs(workdir)}
    assert by_steps["10"].info.status == "FINISHED"
    assert by_steps["3000"].info.status == "FAILED"  # was RUNNING when its process died: the driver marked it
    assert "ended without finishing" in by_steps["3000"].data.tags[REASON_TAG]
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["finished", "failed"]
    assert "ended FAILED without a result" in summary["runs"][1]["reason"]
    assert "finished nano/fp32" in (sweep_dir / "0" / "slurm.log").read_text()
    assert (sweep_dir / "driver.log").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.slurm
def test_jobs_track_into_a_tracking_server(cli, workdir, mlflow_server):
    # The setup for clusters larger than a sqlite file can serve: `mlflow server`, jobs log over HTTP.
    server = mlflow_server(f"sqlite:///{workdir / 'server.db'}")
    done = cli(
        [
            "--multirun",
            "hydra/launcher=slurm",
            *QUICK,
            "train.steps=6",
            "train.eval_interval=3",
            f"tracking.uri={server.uri}",
            "train.seed=0,1",
        ],
        workdir,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(server.uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    kinds = sorted((r.data.tags.get("ablate.kind", "run"), r.info.status) for r in runs)
    assert kinds == [("run", "FINISHED"), ("run", "FINISHED"), ("sweep", "FINISHED")]
    assert not (workdir / "mlflow.db").exists()  # nothing went to the default sqlite store


@pytest.mark.slow
@pytest.mark.slurm
def test_a_study_asks_each_trial_as_a_job_ends_on_slurm(cli, workdir):
    done = cli([*STUDY, "hydra/launcher=slurm"], workdir, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    check_asynchronous_study(workdir, "slurm")
