"""A planned sweep job is prepared once: the launchers send each job what the sweep's plan made of it
(sweep/launch/job.py JobPlan: its composition, its RunConfig, its runs' hashes), and the job runs
that config without composing or parsing it again, checked to hash as its plan said (run/planned.py),
or fails in one line before anything is trained. On SLURM the job is composed once, in the launching
process."""

import dataclasses
import json
import os
from pathlib import Path

import cloudpickle
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra._internal.callbacks import Callbacks
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.types import HydraContext

from ablate.child import Call, call_line
from ablate.cli.train import task
from ablate.config import CONF_DIR
from ablate.provenance import config_hash
from ablate.run import PlanChanged, prepare_planned
from ablate.sweep import plan as sweep_plan
from ablate.sweep.launch import process, worker
from ablate.sweep.launch.job import JobPlan
from ablate.sweep.launch.slurm import JobRunner
from support import SMALL_DATA


@pytest.fixture
def loader():
    """Hydra's config loader over the package's presets, each composition it makes counted (`.seen`)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        found = GlobalHydra.instance().config_loader()
        found.seen = []
        load = found.load_configuration

        def counting(*args, **kwargs):
            found.seen.append(list(kwargs["overrides"]))
            return load(*args, **kwargs)

        found.load_configuration = counting
        yield found


def task_overrides(tmp_path: Path, *extra: str) -> list[str]:
    """Nano runs of 2 steps on the small language, no tracking, their state under tmp_path."""
    return [
        "model=nano",
        "train.steps=2",
        "train.progress=false",
        "tracking=none",
        *SMALL_DATA,
        f"state_dir={tmp_path / 'state'}",
        *extra,
    ]


def sweep_config(tmp_path: Path):
    """The master config of `python -m ablate --multirun ...`, its sweep dir under tmp_path."""
    overrides = ["hydra.mode=MULTIRUN", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    cfg = compose("config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def planned(loader, cfg, job: list[str]):
    """The job (all its overrides, as Hydra's sweeper hands them) planned as the grid sweeper plans
    it: composed and parsed, then checked and hashed."""
    (made,) = sweep_plan.assess(sweep_plan.compose(loader, cfg, [job]))
    return made


def run_job(loader, cfg, overrides: list[str], plan: JobPlan | None):
    """Job 0 run by the warm worker's code on `plan` as the channel delivers it, with the real task."""
    spec = cloudpickle.loads(process.spec(HydraContext(config_loader=loader, callbacks=Callbacks()), task, cfg))
    wire = Call.decode(json.loads(call_line(1, "run", {"plan": plan}))).args["plan"]
    return worker.run_one(spec, 0, overrides, wire)


def test_a_planned_job_trains_the_config_its_plan_parsed_without_parsing_it_again(loader, tmp_path):
    cfg = sweep_config(tmp_path)
    loader.seen.clear()
    job = planned(loader, cfg, task_overrides(tmp_path, "train.seed=3"))
    assert job.handoff().run.hashes == (job.config_hash,) and job.handoff().run.device == "cpu"
    # The parsed config the job is sent names a state dir its composition does not (state_dir is not
    # hashed): the checkpoint lands where the plan's RunConfig says, so the job ran that, not a parse.
    elsewhere = str(tmp_path / "planned_state")
    sent = job.handoff()
    sent = JobPlan(
        sent.composed, dataclasses.replace(sent.run, cfg=dataclasses.replace(sent.run.cfg, state_dir=elsewhere))
    )
    ret = run_job(loader, cfg, job.overrides, sent)
    assert ret.return_value["status"] == "finished", ret.return_value
    assert ret.return_value["config_hash"] == job.config_hash
    assert (Path(elsewhere) / job.config_hash).is_dir()
    assert not (tmp_path / "state" / job.config_hash).exists()
    assert [o[-1] for o in loader.seen] == ["train.seed=3"]  # composed once, by the plan


def test_a_job_that_does_not_hash_as_planned_fails_in_one_line_and_trains_nothing(loader, tmp_path, capfd):
    cfg = sweep_config(tmp_path)
    job = planned(loader, cfg, task_overrides(tmp_path, "train.seed=4"))
    sent = job.handoff()
    stale = "0123456789abcdef"
    ret = run_job(loader, cfg, job.overrides, JobPlan(sent.composed, dataclasses.replace(sent.run, hashes=(stale,))))
    record = ret.return_value
    assert record["status"] == "failed"
    assert record["reason"].startswith(
        f"the sweep's plan hashed this job's config as {stale}, and it prepares here as {job.config_hash}: "
    )
    assert "(valid: the same command again, which plans every job anew)" in record["reason"]
    assert json.loads((tmp_path / "sweep" / "0" / "result.json").read_text()) == record  # the sweep's row
    said = capfd.readouterr().err
    assert [ln for ln in said.splitlines() if ln.startswith("error: ")] == [f"error: {record['reason']}"]
    assert "Traceback" not in said
    assert not (tmp_path / "state" / job.config_hash).exists()  # nothing trained, no checkpoint


def test_a_plan_made_on_another_device_vouches_for_the_config_and_the_job_keeps_its_own(loader, tmp_path):
    """A cluster's job may run where hardware=auto resolves otherwise than on the machine that planned
    it: the config is checked as hashed on the plan's device, and its run is keyed by its own."""
    cfg = sweep_config(tmp_path)
    job = planned(loader, cfg, task_overrides(tmp_path, "train.seed=5"))
    sent = job.handoff().run
    prepared = prepare_planned(sent, sent.cfg)
    on_cuda = config_hash(prepared.cfg, dataclasses.replace(prepared.hardware, device="cuda"))
    assert on_cuda != job.config_hash
    here = prepare_planned(dataclasses.replace(sent, hashes=(on_cuda,), device="cuda"), sent.cfg)
    assert here.config_hash == job.config_hash
    changed = dataclasses.replace(sent.cfg, train=dataclasses.replace(sent.cfg.train, seed=6))
    with pytest.raises(PlanChanged, match=f"hashed this job's config as {on_cuda}, and it prepares here as "):
        prepare_planned(dataclasses.replace(sent, hashes=(on_cuda,), device="cuda"), changed)


def test_a_list_budget_job_is_checked_branch_by_branch(loader, tmp_path):
    cfg = sweep_config(tmp_path)
    job = planned(
        loader, cfg, task_overrides(tmp_path, "train.steps=null", "train.tokens=[4096,8192]", "optim.schedule=wsd")
    )
    sent = job.handoff().run
    assert sent.hashes == tuple(job.branch_hashes) and len(sent.hashes) == 2
    family = prepare_planned(sent, sent.cfg)
    assert tuple(b.config_hash for b in family.branches) == sent.hashes
    with pytest.raises(PlanChanged):
        prepare_planned(dataclasses.replace(sent, hashes=(sent.hashes[0], "0123456789abcdef")), sent.cfg)


def test_a_slurm_job_runs_the_composition_it_is_sent(loader, tmp_path, monkeypatch):
    """What submitit runs in a SLURM job (JobRunner) composes nothing when it is sent its job's
    composition, and hands the task what the plan parsed; without one it composes the job itself."""
    cfg = sweep_config(tmp_path)
    job = planned(loader, cfg, task_overrides(tmp_path, "train.seed=7"))
    # the job's environment, as submitit's local executor sets it
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "4242")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    context = HydraContext(config_loader=loader, callbacks=Callbacks())

    def seen_by_task(job_cfg, planned=None):
        seen = {"seed": job_cfg.train.seed, "planned_seed": planned.cfg.train.seed if planned else None}
        return {**seen, "id": HydraConfig.get().job.id}

    runner = JobRunner(context, seen_by_task, cfg, Singleton.get_state(), torch.get_num_threads())
    loader.seen.clear()
    assert runner(job.overrides, 0, job.handoff()) == {"seed": 7, "planned_seed": 7, "id": "4242"}
    assert loader.seen == []
    assert runner(task_overrides(tmp_path, "train.seed=8"), 1) == {"seed": 8, "planned_seed": None, "id": "4242"}
    assert [o[-1] for o in loader.seen] == ["train.seed=8"]


def test_a_slurm_job_run_again_with_its_plan_runs_as_the_first_time(loader, tmp_path, monkeypatch):
    """A requeued SLURM job (USR2 near its time limit: submitit pickles JobRunner.checkpoint's
    DelayedSubmission, the plan as the first run left it) runs the same composition again, with
    nothing left read-only or changed by the first run."""
    cfg = sweep_config(tmp_path)
    job = planned(loader, cfg, task_overrides(tmp_path, "train.seed=3"))
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "77")
    context = HydraContext(config_loader=loader, callbacks=Callbacks())

    def seen_by_task(job_cfg, planned=None):
        return {"seed": job_cfg.train.seed, "id": HydraConfig.get().job.id, "num": HydraConfig.get().job.num}

    runner = JobRunner(context, seen_by_task, cfg, Singleton.get_state(), torch.get_num_threads())
    plan = job.handoff()
    first = runner(job.overrides, 0, plan)
    again = cloudpickle.loads(cloudpickle.dumps(runner.checkpoint(job.overrides, 0, plan)))
    assert first == {"seed": 3, "id": "77", "num": 0}
    assert again.function(*again.args, **again.kwargs) == first
