"""Run a sweep's jobs as separate processes on this machine: one at a time, or several at once.

Hydra hands the launcher each job's overrides (hydra_plugins/ablate_launcher/process_launcher.py).
The jobs run in processes forked from one warm worker (worker.py, driven through pool.py) that has
imported torch, Hydra, the project and MLflow once: each job gets the config the sweep plan composed
for it and the run it parsed and hashed from it (launch/job.py JobPlan; a job with no plan, an Optuna
study's trial, composes and parses its own) and calls Hydra's
`run_job` with the same hydra context, task function and Hydra singletons as this process,
the way a SLURM job does under hydra-submitit-launcher. Nothing about a run's result depends on
this module: results, skips and resumes are decided inside each job (train.run), and the summary
reads the job directories.

Why processes: each run gets its own thread pool (workers x threads_per_job <= cores), and a
crashed or killed job is one failed row, not a dead sweep. On 2 cores, 2 runs x 1 thread beat
1 run x 2 threads: tiny models' matmuls scale poorly across threads.

Ctrl-C (or any exception here) stops the running jobs with SIGTERM, which they turn into a
checkpoint at their next step boundary and a KILLED (resumable) MLflow run, then SweepInterrupted
says in one line what was stopped; the same command resumes the sweep.

On a GPU machine each slot owns its own GPU(s) (gpus.py): a job's process gets CUDA_VISIBLE_DEVICES
before it touches CUDA, and at most one job per slot runs at once.

Files, in SWEEP_DIR/.launcher/: per job `<num>.log` (its stdout and stderr) and
`<num>.return.json` (Hydra's JobReturn, returns.py), and worker.log (the worker's own output).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.config import ProcessSettings
from ablate.files import WriteError, disk_refused, read_json, write_json
from ablate.host import available_cores
from ablate.sweep.context import read_sweep_file
from ablate.sweep.launch.feed import JobFeed
from ablate.sweep.launch.gpus import GpuSlots, gpu_slots
from ablate.sweep.launch.job import JobPlan, run_all_here
from ablate.sweep.launch.pool import Exited, Pool, wait_all
from ablate.sweep.launch.returns import from_json

log = logging.getLogger(__name__)

WORK_DIR = ".launcher"
RETURN_SUFFIX = ".return.json"
POLL_S = 1.0  # the longest a launcher waits for news before it checks for Ctrl-C again


class SweepInterrupted(KeyboardInterrupt):
    """The launcher was interrupted and has stopped its jobs; the message says what is resumable."""


@dataclass
class Resources:
    workers: int
    threads: int
    gpus: GpuSlots | None = None  # None: the jobs use no GPU (or none is visible)

    def describe(self) -> str:
        held = f", {self.gpus.per_job} GPU(s) each of {','.join(self.gpus.gpus)}" if self.gpus else ""
        return f"{self.workers} at a time, {self.threads} thread(s) each{held}"


@dataclass
class Job:
    num: int
    overrides: list
    cost: float = 0.0
    planned_skip: bool = False  # planned as skipped (or unsupported): run with the others so planned, in one call
    job_dir: str | None = None  # from the plan (BasicSweeper's sweeps)
    started: float = 0.0  # time.time() when it was handed to the worker
    plan: JobPlan | None = None  # what the sweep's plan made of it (None: the job composes and parses it)
    gpus: tuple[str, ...] | None = None  # the GPU slot it holds while it runs (gpus.py)

    def path(self, work: Path, suffix: str) -> Path:
        return work / f"{self.num}{suffix}"


def resources(settings: ProcessSettings, n_jobs: int, cores: int, gpus: GpuSlots | None = None) -> Resources:
    """Workers (never more than jobs, nor than GPU slots where the jobs have GPUs: one per slot by
    default) and threads per job so that workers x threads <= cores; the settings come checked from
    config.parse_process_settings."""
    limit = gpus.slots if gpus is not None else None
    workers = max(1, min(settings.workers or limit or cores, limit or n_jobs, n_jobs))
    threads = settings.threads_per_job or max(1, cores // workers)
    return Resources(workers, threads, gpus)


def launcher_gpus(settings: ProcessSettings, config) -> GpuSlots | None:
    """The GPU slots of this launch (gpus.py), from hydra.launcher and the sweep's hardware.device."""
    from omegaconf import OmegaConf

    device = OmegaConf.select(config, "hardware.device", default="auto")
    return gpu_slots(settings.gpus, settings.gpus_per_job, str(device))


def launch(
    hydra_context,
    task_function,
    config,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    settings: ProcessSettings,
    pool: Pool | None = None,
    plan=None,
    on_stop=None,
) -> list:
    """Hydra's Launcher.launch: run every job, return their JobReturns in job order.

    `pool`: a warm worker kept from an earlier launch of the same launcher (an Optuna study's
    batches); without one, this launch starts its own and closes it at the end. `on_stop()`: called
    before an interrupted launch stops its jobs (the sweep's live line goes quiet). `plan(num)`:
    what the sweep's plan made of job num (a JobPlan, or None), sent to the job (no `plan`: each job
    composes and parses its own)."""
    from hydra.core.utils import configure_log, setup_globals

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    work = sweep_dir / WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    jobs = [Job(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
    _read_plan(jobs, sweep_dir)
    for job in jobs:
        job.plan = plan(job.num) if plan is not None else None
    # Longest first (LPT): with uneven runs the last worker to finish idles least.
    queue = sorted((j for j in jobs if not j.planned_skip), key=lambda j: -j.cost)
    skips = [j for j in jobs if j.planned_skip]
    res = resources(settings, len(queue), available_cores(), launcher_gpus(settings, config))
    log.info(f"Launching {len(jobs)} jobs, {res.describe()} (logs in {work})")
    own = pool is None
    if own:
        pool = Pool(tracking_uri(config))
        pool.set_work(work)
    returns: dict = {}
    try:
        if skips:
            returns.update(run_skips(skips, pool, hydra_context, task_function, config))
        if queue:
            pool.set_spec(spec(hydra_context, task_function, config))
            returns.update(run_pool(queue, res, pool, work, settings.stop_timeout_s, on_stop))
    finally:
        if own:
            pool.close()
    return [returns[j.num] for j in jobs]


def warm_pool(pool: Pool | None, config) -> Pool:
    """The warm worker a launcher keeps across launches (an Optuna study's batches), started here
    if it has none yet, told where this sweep's logs go."""
    if pool is None:
        pool = Pool(tracking_uri(config))
    pool.set_work(Path(str(config.hydra.sweep.dir)) / WORK_DIR)
    return pool


def tracking_uri(config) -> str | None:
    """The sweep's MLflow URI, for the worker to load that store's code; None without tracking."""
    from omegaconf import OmegaConf

    try:
        tracking = OmegaConf.to_container(config.tracking, resolve=True)
    except Exception:  # only a hint of what to preload: a job that needs more imports it
        return None
    return str(tracking.get("uri")) if tracking.get("backend") == "mlflow" else None


def run_pool(queue: list[Job], res: Resources, pool: Pool, work: Path, stop_timeout_s: float, on_stop=None) -> dict:
    """Keep `res.workers` jobs going until the queue is empty; {num: JobReturn}."""
    returns: dict = {}

    def ended(job: Job, ret) -> None:
        returns[job.num] = ret

    def told() -> str:
        return f"{len(queue)} not started, {len(returns)} ended before"

    keep_busy(lambda: queue.pop(0) if queue else None, ended, res, pool, work, stop_timeout_s, on_stop, told)
    return returns


def launch_as_slots_free(
    hydra_context,
    task_function,
    config,
    feed: JobFeed,
    slots: int,
    initial_job_idx: int,
    settings: ProcessSettings,
    pool: Pool,
    on_stop=None,
) -> list:
    """SlotLauncher.launch_as_slots_free (feed.py) on the warm worker: at most `slots` jobs (and
    the launcher's workers) at once, the feed asked for the next whenever one ends; the JobReturns
    in the order the jobs ended."""
    from hydra.core.utils import configure_log, setup_globals

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    work = Path(str(config.hydra.sweep.dir)) / WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    res = resources(settings, slots, available_cores(), launcher_gpus(settings, config))
    log.info(f"Launching jobs as slots free, {res.describe()} (logs in {work})")
    pool.set_spec(spec(hydra_context, task_function, config))
    returns: list = []
    started: list[Job] = []

    def next_job() -> Job | None:
        num = initial_job_idx + len(started)
        overrides = feed.next_job(num)
        if overrides is None:
            return None
        started.append(Job(num, list(overrides)))
        return started[-1]

    def ended(job: Job, ret) -> None:
        returns.append(ret)
        feed.job_ended(job.num, ret)

    keep_busy(
        next_job, ended, res, pool, work, settings.stop_timeout_s, on_stop, lambda: f"{len(returns)} ended before"
    )
    return returns


def keep_busy(next_job, ended, res: Resources, pool: Pool, work: Path, stop_timeout_s: float, on_stop, told) -> None:
    """Start `next_job()` whenever fewer than `res.workers` run (None: nothing to start now) and
    hand each ending to `ended(job, JobReturn)`, until nothing runs and nothing is left to start.
    Interrupted, the running jobs are stopped; `told()` says what else there was."""
    running: dict[int, Job] = {}
    try:
        while True:
            job = next_job() if len(running) < res.workers else None
            while job is not None:
                job.gpus = res.gpus.take() if res.gpus is not None else None
                start(job, pool, work, res.threads, res.gpus.environment(job.gpus) if job.gpus else None)
                running[job.num] = job
                job = next_job() if len(running) < res.workers else None
            if not running:
                return
            for exited in pool.wait(POLL_S):
                job = running.pop(exited.num)
                if job.gpus is not None and res.gpus is not None:
                    res.gpus.give_back(job.gpus)
                ended(job, collect(job, work, exited))
    except BaseException as exc:  # Ctrl-C, or the launcher itself failing: no job is left behind
        if on_stop is not None:
            on_stop()
        stopped = stop(pool, running, stop_timeout_s)
        if isinstance(exc, KeyboardInterrupt):
            raise SweepInterrupted(
                f"{stopped} running job(s) stopped (checkpointed, KILLED in MLflow), {told()}; "
                "launch the same command again to resume"
            ) from None
        raise


def spec(hydra_context, task_function, config) -> bytes:
    """Everything a job needs besides its overrides, cloudpickled once per launch. It goes to the
    worker through its stdin pipe: no file in the sweep dir is ever unpickled."""
    import cloudpickle
    from hydra.core.singleton import Singleton

    return cloudpickle.dumps(
        {
            "hydra_context": hydra_context,
            "task_function": task_function,
            "config": config,
            "singletons": Singleton.get_state(),
        }
    )


def _read_plan(jobs: list[Job], sweep_dir: Path) -> None:
    """Each job's estimated training FLOPs, and whether it is expected to be skipped, from the plan
    SweepCallback wrote (absent: all equal, all in their own process). Only speed depends on it:
    every job still decides for itself whether to run."""
    plan = {p["num"]: p for p in read_sweep_file(sweep_dir).get("plan", [])}
    for job in jobs:
        planned = plan.get(job.num, {})
        job.planned_skip = planned.get("action") in ("skip", "unsupported")
        job.cost = 0.0 if job.planned_skip else planned.get("cost_flops") or 0.0
        job.job_dir = planned.get("job_dir")


def run_skips(skips: list[Job], pool: Pool, hydra_context, task_function, config) -> dict:
    """The jobs planned as skipped, one after another in one process forked from the warm worker (a
    skip only writes its result.json; this process has imported neither torch nor MLflow, which a
    job needs even to skip); should one turn out to need training after all, it trains there."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, filter_overrides

    for job in skips:
        log.info(f"\t#{job.num} : {' '.join(filter_overrides(job.overrides))} (expected to be skipped)")
    planned = [(j.num, j.overrides, j.plan) for j in skips]
    try:
        return pool.call(run_all_here, hydra_context, task_function, config, Singleton.get_state(), planned)
    finally:  # where the call ran in this process, Hydra's run_job left the last job's logging
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)


def start(job: Job, pool: Pool, work: Path, threads: int, env: dict | None = None) -> None:
    """`env`: variables set in the job's process before it runs (its GPUs)."""
    from hydra.core.utils import filter_overrides

    where = f" (GPU {env['CUDA_VISIBLE_DEVICES']})" if env else ""
    log.info(f"\t#{job.num} : {' '.join(filter_overrides(job.overrides))}{where}")
    job.path(work, RETURN_SUFFIX).unlink(missing_ok=True)
    job.started = time.time()
    log_path, result = job.path(work, ".log"), job.path(work, RETURN_SUFFIX)
    pool.submit(job.num, job.overrides, threads, log_path, result, job.plan, env)


def collect(job: Job, work: Path, ended: Exited):
    """The job's JobReturn; a process that died before returning (killed, crashed) becomes a failed
    row, not an exception, so that the sweep goes on and its summary reports it."""
    from hydra.core.utils import JobReturn, JobStatus

    doc = read_json(job.path(work, RETURN_SUFFIX), None)
    if isinstance(doc, dict):
        return from_json(doc)
    if ended.refused is not None:
        how = f"the sweep's worker could not start it ({ended.refused})"
    elif ended.code is None:
        how = "the worker it was forked from died"
    elif ended.code < 0:
        how = f"the job's process was killed by {signal.Signals(-ended.code).name}"
    else:
        how = f"the job's process exited with code {ended.code}"
    reason = f"{how} before returning (log: {job.path(work, '.log')})"
    log.warning(f"#{job.num}: {reason}")
    record = {"status": "failed", "reason": reason}
    result = Path(job.job_dir) / "result.json" if job.job_dir else None
    if result is not None:
        record = _ended_early(result, job.started, record)
    ret = JobReturn(overrides=job.overrides, status=JobStatus.COMPLETED)
    ret.return_value = record
    return ret


def _ended_early(result: Path, started: float, record: dict) -> dict:
    """The result.json of a job whose process died before returning: `record` when the run wrote
    none (the summary's row says what ended it, not just "missing"); a "finished" one written just
    before the death kept, with status "killed": the run trained to its end, but its MLflow run was
    not closed (the sweep's end closes it KILLED, and the same command resumes and closes it)."""
    written = read_json(result, None) if result.is_file() and result.stat().st_mtime >= started else None
    if not isinstance(written, dict):
        _write_row(result, record)
        return record
    if written.get("status") == "finished":
        written = {**written, "status": "killed", "reason": f"{record['reason']}, after its result was written"}
        _write_row(result, written)
    return written


def _write_row(result: Path, record: dict) -> None:
    """The job's result.json as the launcher saw it end; on a disk that takes none (full, read-only)
    the row is in this launch's returns alone, and the sweep goes on to its end."""
    try:
        write_json(result, record)
    except WriteError as exc:
        if not disk_refused(exc):
            raise


def stop(pool: Pool, running: dict, timeout_s: float) -> int:
    """SIGTERM the running jobs (each checkpoints at its next step and records itself KILLED), then
    SIGKILL those still running after `timeout_s`. Returns how many were running."""
    nums = set(running)
    pool.signal(nums, signal.SIGTERM)
    ended = {e.num for e in wait_all(pool, nums, timeout_s)}
    if nums - ended:
        pool.signal(nums - ended, signal.SIGKILL)
        wait_all(pool, nums - ended, 10.0)
    return len(nums)
