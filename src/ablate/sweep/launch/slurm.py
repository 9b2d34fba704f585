"""`hydra/launcher=slurm`: a multirun as one SLURM job array, through submitit.

In the launching process (`launch`):
  1. resources: hydra.launcher's settings, with GPUs and CPUs taken from the hardware config
     unless given (`resources`);
  2. one job array (submitit's map_array); SWEEP_DIR/jobs.json records the job ids, and each
     run dir gets `slurm.log`, a link to its job's log;
  3. wait for every job, with a progress bar;
  4. a job that ended without a result (killed, out of memory, node failure, cancelled) gets a
     result.json that says so, and any of the sweep's MLflow runs still RUNNING is marked FAILED;
  5. every job comes back to Hydra as completed: the sweep summary reads each run's result.json,
     shows the failed ones, and `python -m ablate` exits 1 when there is any.

Each job is composed once, in the launching process (by the sweep's plan, which also parses it,
or by `launch` where no plan did), and sent to its SLURM job with what the plan made of it
(job.py JobPlan, pickled by submitit with the job): the job composes and parses nothing again.

In the job (`JobRunner`): the Hydra job runs as under the basic launcher, with torch threads set
to the CPUs the job was given. A run that failed raises after it has been recorded, so SLURM
accounting shows the task FAILED too. On USR2 the trainer checkpoints (src/ablate/preemption.py)
and submitit requeues the job; the requeued job runs the same Hydra job, which resumes.

Why not hydra-submitit-launcher 1.2.0: tried against the local cluster, a job killed by a signal
made its launching process raise before the sweep's end callback, so there was no summary and
the dead run stayed RUNNING in MLflow; a run that raised ended COMPLETED in sacct (hydra#1928).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config import ConfigError, SubmititSettings
from ablate.files import read_json_object, write_json
from ablate.sweep.context import read_sweep_file
from ablate.sweep.launch.feed import JobFeed
from ablate.sweep.launch.job import JobPlan, run_here
from ablate.tracking import close_orphaned_runs

JOBS_FILE = "jobs.json"
LOG_LINK = "slurm.log"
FAILED_STATUSES = ("failed", "killed")


@dataclass
class Resources:
    gpus_per_task: int
    cpus_per_task: int
    threads: int  # torch threads in the job: its CPUs (split across DDP ranks by distributed.py)
    nodes: int = 1
    tasks_per_node: int = 1


def resources(settings: SubmititSettings, hardware: dict) -> Resources:
    """GPUs: hardware.gpus_per_node when the hardware is a CUDA device (hardware=cuda, h100, ...),
    else none; CPUs: one per training process (one per GPU, or hardware.gpus_per_node gloo
    processes on a CPU). hydra.launcher.gpus_per_task / cpus_per_task override both.
    With nodes x tasks_per_node above one, each task is one rank: one GPU (CUDA) and one CPU."""
    device = hardware.get("device")
    if settings.nodes * settings.tasks_per_node > 1:
        gpus = settings.gpus_per_task if settings.gpus_per_task is not None else (1 if device == "cuda" else 0)
        cpus = settings.cpus_per_task or 1
        return Resources(gpus, cpus, cpus, settings.nodes, settings.tasks_per_node)
    per_node = int(hardware.get("gpus_per_node") or 1)
    gpus = settings.gpus_per_task if settings.gpus_per_task is not None else (per_node if device == "cuda" else 0)
    processes = max(1, gpus) if device == "cuda" else (per_node if device == "cpu" else 1)
    cpus = settings.cpus_per_task or processes
    return Resources(gpus_per_task=gpus, cpus_per_task=cpus, threads=cpus)


def executor_for(settings: SubmititSettings, res: Resources, folder: Path):
    import submitit

    cluster = settings.cluster
    python = settings.python or sys.executable
    executor = submitit.AutoExecutor(
        folder=folder,
        cluster=cluster,
        **{f"{cluster}_max_num_timeout": settings.max_num_timeout, f"{cluster}_python": python},
    )
    params: dict[str, Any] = {
        "name": settings.job_name,
        "timeout_min": settings.timeout_min,
        "cpus_per_task": res.cpus_per_task,
        "stderr_to_stdout": True,
        "nodes": res.nodes,
        "tasks_per_node": res.tasks_per_node,
    }
    if settings.mem_gb is not None:
        params["mem_gb"] = settings.mem_gb
    if cluster == "slurm":
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(settings, key):
                params[f"slurm_{key}"] = getattr(settings, key)
        if res.gpus_per_task:
            params["slurm_gpus_per_task"] = res.gpus_per_task
        params.update(
            slurm_array_parallelism=settings.array_parallelism,
            slurm_signal_delay_s=settings.signal_delay_s,
            slurm_additional_parameters=dict(settings.additional_parameters),
            slurm_setup=list(settings.setup),
        )
    else:
        params["gpus_per_node"] = res.gpus_per_task
        if settings.setup:
            params["local_setup"] = list(settings.setup)
    executor.update_parameters(**params)
    return executor


# -- in the job ----------------------------------------------------------------------------
class JobRunner:
    """What each array task runs (cloudpickled by submitit): one Hydra job."""

    def __init__(self, hydra_context, task_function, config, singleton_state: dict, threads: int):
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config
        self.singleton_state = singleton_state
        self.threads = threads

    def __call__(self, overrides: list, num: int, plan: JobPlan | None = None):
        """Job `num`, with `plan`: its config as the launching process composed it (and parsed,
        where the sweep's plan did); None: composed here."""
        import submitit
        import torch
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobStatus, setup_globals

        Singleton.set_state(self.singleton_state)
        setup_globals()
        torch.set_num_threads(self.threads)
        os.environ["OMP_NUM_THREADS"] = str(self.threads)
        job_id = submitit.JobEnvironment().job_id
        ret = run_here(self.hydra_context, self.task_function, self.config, num, overrides, plan, job_id)
        if ret.status == JobStatus.FAILED:
            raise ret._return_value  # the task itself crashed (it records ordinary failures)
        value = ret.return_value
        if isinstance(value, dict) and value.get("status") in FAILED_STATUSES:
            raise RunFailed(f"run {value.get('status')}: {value.get('reason', '')}")
        return value

    def checkpoint(self, *args: Any) -> Any:
        """submitit calls this on USR2: run the same job again (it resumes from its checkpoint)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args)


class RunFailed(RuntimeError):
    """Raised in the job after a failed run was recorded, so that SLURM marks the task FAILED."""


# -- in the launching process --------------------------------------------------------------
@dataclass
class Submitted:
    num: int
    overrides: list
    run_dir: Path
    job: Any


def launch(
    hydra_context,
    task_function,
    config,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    settings: SubmititSettings,
    plan=None,
) -> list:
    """`plan(num)`: what the sweep's plan made of job num (a JobPlan, or None), sent to the job;
    a job without one is composed here, once, and sent that."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals
    from omegaconf import OmegaConf

    setup_globals()
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    nums = [initial_job_idx + i for i in range(len(job_overrides))]
    plans = [_job_plan(hydra_context, config, ov, n, plan) for ov, n in zip(job_overrides, nums, strict=True)]
    job_configs = [_pending(p.composed, n) for p, n in zip(plans, nums, strict=True)]
    res = _max_resources(settings, [OmegaConf.to_container(c.hardware, resolve=True) for c in job_configs])
    folder = _folder(settings, sweep_dir)
    executor = executor_for(settings, res, folder)
    runner = JobRunner(hydra_context, task_function, config, Singleton.get_state(), res.threads)
    jobs = _submitting(settings, executor.map_array, runner, [list(ov) for ov in job_overrides], nums, plans)
    submitted = [
        Submitted(n, list(ov), _run_dir(c), job)
        for n, ov, c, job in zip(nums, job_overrides, job_configs, jobs, strict=False)
    ]
    _record(sweep_dir, settings, res, submitted)
    array = str(jobs[0].job_id).split("_")[0]
    print(
        f"submitted {len(jobs)} job(s) to {settings.cluster} as {array} "
        f"({res.cpus_per_task} CPU, {res.gpus_per_task} GPU, {settings.timeout_min} min each); "
        f"`python -m ablate jobs {sweep_dir}` shows them",
        file=sys.stderr,
    )
    try:
        _wait(jobs, settings.poll_s)
    except KeyboardInterrupt:
        print(f"stopped waiting; the jobs go on (scancel {array} stops them)", file=sys.stderr)
        raise
    returns = [_job_return(s, c) for s, c in zip(submitted, job_configs, strict=False)]
    _fail_orphaned_runs(sweep_dir, submitted)
    return returns


def launch_as_slots_free(
    hydra_context, task_function, config, feed: JobFeed, slots: int, initial_job_idx: int, settings: SubmititSettings
) -> list:
    """SlotLauncher.launch_as_slots_free (feed.py) on SLURM: a slot is a job allowance, each job
    submitted on its own as soon as one of the `slots` in flight has ended, with the resources
    its own config asks for; the JobReturns in the order the jobs ended."""
    from hydra.core.utils import setup_globals

    setup_globals()
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    folder = _folder(settings, sweep_dir)
    in_flight: dict[int, tuple[Submitted, Any]] = {}
    submitted: list[Submitted] = []
    returns: list = []
    try:
        while True:
            overrides = feed.next_job(initial_job_idx + len(submitted)) if len(in_flight) < slots else None
            if overrides is not None:
                num = initial_job_idx + len(submitted)
                in_flight[num] = _submit_one(hydra_context, task_function, config, overrides, num, settings, folder)
                submitted.append(in_flight[num][0])
                continue
            if not in_flight:
                break
            done = [num for num, (s, _) in in_flight.items() if s.job.done()]
            for num in done:
                s, cfg = in_flight.pop(num)
                returns.append(_job_return(s, cfg))
                feed.job_ended(num, returns[-1])
            if not done:
                time.sleep(settings.poll_s)
    except KeyboardInterrupt:
        ids = " ".join(str(s.job.job_id) for s, _ in in_flight.values())
        print(f"stopped waiting; the jobs go on (scancel {ids} stops them)", file=sys.stderr)
        raise
    _fail_orphaned_runs(sweep_dir, submitted)
    return returns


def _submit_one(hydra_context, task_function, config, overrides, num: int, settings: SubmititSettings, folder: Path):
    """One job submitted on its own: (Submitted, its composed config)."""
    from hydra.core.singleton import Singleton
    from omegaconf import OmegaConf

    plan = _job_plan(hydra_context, config, overrides, num)
    cfg = _pending(plan.composed, num)
    res = resources(settings, OmegaConf.to_container(cfg.hardware, resolve=True))
    runner = JobRunner(hydra_context, task_function, config, Singleton.get_state(), res.threads)
    job = _submitting(settings, executor_for(settings, res, folder).submit, runner, list(overrides), num, plan)
    s = Submitted(num, list(overrides), _run_dir(cfg), job)
    _record(Path(str(config.hydra.sweep.dir)), settings, res, [s])
    print(f"submitted job {num} to {settings.cluster} as {job.job_id}", file=sys.stderr)
    return s, cfg


def _submitting(settings: SubmititSettings, submit, *args):
    """submit(*args) (submitit's submit or map_array, which run sbatch); sbatch refusing it (an
    unknown partition or account, a limit) is one line naming sbatch's own reason, not submitit's
    FailedJobError with sbatch's lines printed before it."""
    from submitit.core.utils import FailedJobError

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # submitit prints sbatch's stderr before raising
            submitted = submit(*args)
    except FailedJobError as exc:
        lines = [ln.strip() for ln in (str(exc) or said.getvalue()).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()] or lines or ["no reason given"]
        raise ConfigError(
            f"hydra.launcher: {settings.cluster} refused the submission: {errors[-1]} "
            "(valid: a partition, account, qos and limits the cluster accepts; see sinfo and sacctmgr)"
        ) from None
    sys.stderr.write(said.getvalue())
    return submitted


def _job_plan(hydra_context, config, overrides, num: int, plan=None) -> JobPlan:
    """What job `num` is sent: what the sweep's plan made of it, or its config composed here."""
    made = plan(num) if plan is not None else None
    return made if made is not None else JobPlan(hydra_context.config_loader.load_sweep_config(config, list(overrides)))


def _pending(composed, num: int):
    """The job's config as this process reads it (its resources, its run dir) before SLURM names it:
    a copy, the composition itself travelling to the job as it was made."""
    from omegaconf import open_dict

    cfg = copy.deepcopy(composed)
    with open_dict(cfg):
        cfg.hydra.job.num = num
        cfg.hydra.job.id = f"pending_{num}"
    return cfg


def _run_dir(cfg) -> Path:
    return Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)


def _max_resources(settings: SubmititSettings, hardware: list[dict]) -> Resources:
    """One array, one resource request: the largest any of its runs needs."""
    each = [resources(settings, hw) for hw in hardware]
    return Resources(
        gpus_per_task=max(r.gpus_per_task for r in each),
        cpus_per_task=max(r.cpus_per_task for r in each),
        threads=max(r.threads for r in each),
        nodes=settings.nodes,
        tasks_per_node=settings.tasks_per_node,
    )


def _folder(settings: SubmititSettings, sweep_dir: Path) -> Path:
    folder = Path(settings.submitit_folder)
    return folder if folder.is_absolute() else sweep_dir / folder


def _record(sweep_dir: Path, settings: SubmititSettings, res: Resources, submitted: list[Submitted]) -> None:
    """SWEEP_DIR/jobs.json (appended to, one entry per array) and a log link in each run dir."""

    path = sweep_dir / JOBS_FILE
    record = read_json_object(path)  # a launch has set aside one that is not this record (sweep/folder.py)
    if not isinstance(record.get("arrays"), list):
        record = {"arrays": []}
    record["arrays"].append(
        {
            "cluster": settings.cluster,
            "submitted_at": time.time(),
            "resources": {
                "cpus_per_task": res.cpus_per_task,
                "gpus_per_task": res.gpus_per_task,
                "timeout_min": settings.timeout_min,
                "partition": settings.partition,
                "nodes": res.nodes,
                "tasks_per_node": res.tasks_per_node,
            },
            "jobs": [
                {
                    "num": s.num,
                    "job_id": str(s.job.job_id),
                    "overrides": s.overrides,
                    "run_dir": os.path.relpath(s.run_dir, sweep_dir),
                    "log": os.path.relpath(s.job.paths.stdout, sweep_dir),
                }
                for s in submitted
            ],
        }
    )
    write_json(path, record)
    for s in submitted:
        s.run_dir.mkdir(parents=True, exist_ok=True)
        link = s.run_dir / LOG_LINK
        link.unlink(missing_ok=True)
        link.symlink_to(os.path.relpath(s.job.paths.stdout, s.run_dir))


def _wait(jobs: list, poll_s: float) -> None:
    from tqdm import tqdm

    left = set(range(len(jobs)))
    with tqdm(total=len(jobs), desc="jobs done", unit="job", file=sys.stderr, dynamic_ncols=True) as bar:
        while left:
            for i in sorted(left):
                if jobs[i].done():
                    left.discard(i)
                    bar.update(1)
            if left:
                time.sleep(poll_s)


def _job_return(s: Submitted, cfg):
    """Hydra's record of one job. Always COMPLETED: what happened to the run is in its result.json."""

    from hydra.core.utils import JobReturn, JobStatus

    outcome = _outcome(s)
    result_path = s.run_dir / "result.json"
    try:
        value = json.loads(result_path.read_text())
    except (OSError, ValueError):
        value = None
    if outcome is not None and (
        value is None or value.get("status") not in ("failed", "unsupported", "skipped", "finished")
    ):
        # Died without recording an ending (a stale "killed" from a requeued attempt included).
        value = {**(value or {}), "status": "failed", "reason": outcome}

        write_json(result_path, value)
    ret = JobReturn(overrides=s.overrides, cfg=cfg, hydra_cfg=cfg, working_dir=str(s.run_dir))
    ret.status = JobStatus.COMPLETED
    ret.return_value = value
    return ret


def _outcome(s: Submitted) -> str | None:
    """None when the job function returned; otherwise one line on how the job ended."""
    job = s.job
    if job.paths.result_pickle.exists():
        try:
            job.results()  # every task's (a job of several tasks is one run's ranks)
            return None
        except Exception as exc:
            last = [ln for ln in str(exc).splitlines() if ln.strip()]
            return f"job {job.job_id} raised: {last[-1] if last else type(exc).__name__} (log: {s.run_dir / LOG_LINK})"
    return f"job {job.job_id} ended {job.state} without a result (log: {s.run_dir / LOG_LINK})"


def _fail_orphaned_runs(sweep_dir: Path, submitted: list[Submitted]) -> None:
    """Every job has ended, so a run of this sweep still RUNNING in MLflow lost its process: on a
    cluster that is a job ended by SLURM (out of memory, over its time), FAILED."""
    info = read_sweep_file(sweep_dir)
    if not info.get("tracking_uri") or not info.get("sweep_id"):
        return
    reason = "its job ended without finishing the run (see `python -m ablate jobs`)"
    keep = (info.get("parent_run_id"),)
    uri, experiment_id = info["tracking_uri"], info["experiment_id"]
    for run_id in close_orphaned_runs(uri, experiment_id, info["sweep_id"], "FAILED", reason, keep):
        print(f"marked MLflow run {run_id} FAILED: {reason}", file=sys.stderr)
