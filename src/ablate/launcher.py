"""Run a sweep's jobs as separate processes on this machine: one at a time, or several at once.

Hydra hands the launcher each job's overrides (hydra_plugins/ablate_launcher/process_launcher.py).
Every job runs in a fresh `python -m ablate.launcher` process that composes its own config and
calls Hydra's `run_job`, the way a SLURM job does under hydra-submitit-launcher (the same
cloudpickled hydra context, task function and Hydra singletons). Nothing about a run's result
depends on this module: results, skips and resumes are decided inside each job (train.run), and
the summary reads the job directories.

Why processes: each run gets its own thread pool (workers x threads_per_job <= cores), and a
crashed or killed job is one failed row, not a dead sweep. On 2 cores, 2 runs x 1 thread beat
1 run x 2 threads: tiny models' matmuls scale poorly across threads.

Files, in SWEEP_DIR/.launcher/: the pickled launch spec, and per job `<num>.json` (its overrides),
`<num>.log` (its stdout and stderr) and `<num>.return.pkl` (Hydra's JobReturn).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ablate.cli import fail

log = logging.getLogger(__name__)

WORK_DIR = ".launcher"
POLL_S = 0.2
# After the launcher is interrupted, each job gets this long to record itself as KILLED on its
# own (a terminal's Ctrl-C reaches every process in the group) before it is sent SIGTERM.
GRACE_S = 5.0


@dataclass
class LaunchSettings:
    workers: int | None = None  # runs at once; None: one per core
    threads_per_job: int | None = None  # None: cores // workers
    stop_timeout_s: float = 60.0  # after SIGTERM, how long a job may take to stop before SIGKILL


@dataclass
class Resources:
    workers: int
    threads: int


@dataclass
class Job:
    num: int
    overrides: list
    cost: float = 0.0
    in_process: bool = False  # planned as skipped: a new process would cost more than the job
    proc: subprocess.Popen | None = None

    def path(self, work: Path, suffix: str) -> Path:
        return work / f"{self.num}{suffix}"


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resources(settings: LaunchSettings, n_jobs: int, cores: int) -> Resources:
    """Workers (never more than jobs) and threads per job so that workers x threads <= cores."""
    for key in ("workers", "threads_per_job"):
        value = getattr(settings, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            fail(f"hydra.launcher.{key}={value} is invalid (valid: a whole number >= 1, or null for automatic)")
    workers = max(1, min(settings.workers or cores, n_jobs))
    threads = settings.threads_per_job or max(1, cores // workers)
    return Resources(workers, threads)


def launch(hydra_context, task_function, config, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
           settings: LaunchSettings) -> list:
    """Hydra's Launcher.launch: run every job, return their JobReturns in job order."""
    from hydra.core.utils import configure_log, setup_globals

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    work = sweep_dir / WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    jobs = [Job(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
    _read_plan(jobs, sweep_dir)
    # Longest first (LPT): with uneven runs the last worker to finish idles least.
    queue = sorted((j for j in jobs if not j.in_process), key=lambda j: -j.cost)
    res = resources(settings, len(queue), available_cores())
    spec = write_spec(work, initial_job_idx, hydra_context, task_function, config)
    log.info(f"Launching {len(jobs)} jobs, {res.workers} at a time, {res.threads} thread(s) each (logs in {work})")
    returns = {j.num: run_in_process(j, hydra_context, task_function, config) for j in jobs if j.in_process}
    returns.update(run_pool(queue, res, spec, work, settings.stop_timeout_s))
    return [returns[j.num] for j in jobs]


def run_pool(queue: list[Job], res: Resources, spec: Path, work: Path, stop_timeout_s: float) -> dict:
    """Keep `res.workers` job processes going until the queue is empty; {num: JobReturn}."""
    returns = {}
    running: list[Job] = []
    try:
        while queue or running:
            while queue and len(running) < res.workers:
                job = queue.pop(0)
                start(job, spec, work, res.threads)
                running.append(job)
            time.sleep(POLL_S)
            for job in [j for j in running if j.proc.poll() is not None]:
                running.remove(job)
                returns[job.num] = collect(job, work)
    except BaseException:  # Ctrl-C, or the launcher itself failing: no job is left behind
        stop(running, stop_timeout_s)
        raise
    return returns


def write_spec(work: Path, initial_job_idx: int, hydra_context, task_function, config) -> Path:
    """Everything a job process needs besides its overrides, pickled once per batch."""
    import cloudpickle
    from hydra.core.singleton import Singleton

    from ablate.sweep import write_bytes

    payload = cloudpickle.dumps(
        {"hydra_context": hydra_context, "task_function": task_function, "config": config,
         "singletons": Singleton.get_state()}
    )
    return write_bytes(work / f"launch-{initial_job_idx}.pkl", payload)


def _read_plan(jobs: list[Job], sweep_dir: Path) -> None:
    """Each job's estimated training FLOPs, and whether it is expected to be skipped, from the plan
    SweepCallback wrote (absent: all equal, all in their own process). Only speed depends on it:
    every job still decides for itself whether to run."""
    from ablate.sweep import read_sweep_file

    plan = {p["num"]: p for p in read_sweep_file(sweep_dir).get("plan", [])}
    for job in jobs:
        planned = plan.get(job.num, {})
        job.in_process = planned.get("action") in ("skip", "unsupported")
        job.cost = 0.0 if job.in_process else planned.get("cost_flops") or 0.0


def run_in_process(job: Job, hydra_context, task_function, config):
    """A job planned as skipped runs here, as Hydra's BasicLauncher would run it (it only writes
    its result.json); should it turn out to need training after all, it trains here."""
    from hydra.core.utils import configure_log, filter_overrides

    log.info(f"\t#{job.num} : {' '.join(filter_overrides(job.overrides))} (expected to be skipped: in this process)")
    try:
        return run_here(hydra_context, task_function, config, job.num, job.overrides)
    finally:
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)


def run_here(hydra_context, task_function, config, num: int, overrides: list):
    """Compose job `num`'s config and run it in this process (what BasicLauncher does per job)."""
    from hydra.core.utils import run_job
    from omegaconf import open_dict

    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
    return run_job(hydra_context=hydra_context, task_function=task_function, config=sweep_config,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


def start(job: Job, spec: Path, work: Path, threads: int) -> None:
    from ablate.sweep import write_json

    from hydra.core.utils import filter_overrides

    log.info(f"\t#{job.num} : {' '.join(filter_overrides(job.overrides))}")
    write_json(job.path(work, ".json"), {"num": job.num, "overrides": job.overrides})
    job.path(work, ".return.pkl").unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(job.path(work, ".log"), "ab") as out:
        job.proc = subprocess.Popen(
            [sys.executable, "-m", "ablate.launcher", str(spec), str(job.path(work, ".json")), str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
        )


def collect(job: Job, work: Path):
    """The job's JobReturn; a process that died before returning (killed, crashed) becomes a failed
    row, not an exception, so that the sweep goes on and its summary reports it."""
    import cloudpickle
    from hydra.core.utils import JobReturn, JobStatus

    path = job.path(work, ".return.pkl")
    if path.is_file():
        with open(path, "rb") as f:
            return cloudpickle.load(f)
    reason = f"the job's process exited with code {job.proc.returncode} before returning (log: {job.path(work, '.log')})"
    log.warning(f"#{job.num}: {reason}")
    ret = JobReturn(overrides=job.overrides, status=JobStatus.COMPLETED)
    ret.return_value = {"status": "failed", "reason": reason}
    return ret


def stop(running: list[Job], timeout_s: float) -> None:
    """Let interrupted jobs record themselves as KILLED; SIGTERM the ones that do not, then SIGKILL."""
    deadline = time.monotonic() + GRACE_S
    while any(j.proc.poll() is None for j in running) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for job in running:
        if job.proc.poll() is None:
            job.proc.terminate()
    deadline = time.monotonic() + timeout_s
    for job in running:
        try:
            job.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            job.proc.kill()
            job.proc.wait()


# -- the job process --------------------------------------------------------------------------

def job_main(spec_path: str, job_path: str, parent_pid: int) -> None:
    started = time.perf_counter()
    _die_with_parent(parent_pid)
    _interrupt_on(signal.SIGTERM, signal.SIGINT)
    import cloudpickle

    with open(spec_path, "rb") as f:
        spec = cloudpickle.load(f)
    job = json.loads(Path(job_path).read_text())
    ret = run_one(spec, job["num"], job["overrides"])
    if ret.hydra_cfg is not None:
        write_usage(Path(ret.hydra_cfg.hydra.runtime.output_dir), time.perf_counter() - started)
    write_return(Path(job_path).with_suffix(".return.pkl"), ret)


def write_usage(job_dir: Path, wall_s: float) -> None:
    """JOB_DIR/usage.json: the CPU time this job's process used, start-up included. On a shared
    machine wall time says little; CPU seconds / cores is what the sweep takes on idle cores."""
    import resource

    from ablate.sweep import USAGE_FILE, write_json

    own, helpers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + helpers.ru_utime + helpers.ru_stime
    write_json(job_dir / USAGE_FILE, {"cpu_s": cpu, "wall_s": wall_s, "max_rss_mb": own.ru_maxrss / 1024})


def run_one(spec: dict, num: int, overrides: list):
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals

    Singleton.set_state(spec["singletons"])
    setup_globals()
    return run_here(spec["hydra_context"], spec["task_function"], spec["config"], num, overrides)


def write_return(path: Path, ret) -> None:
    import cloudpickle

    from ablate.sweep import write_bytes

    try:
        payload = cloudpickle.dumps(ret)
    except Exception as exc:  # an unpicklable return value: keep the status, describe the value
        ret.return_value = f"{type(ret.return_value).__name__} (not picklable: {exc})"
        payload = cloudpickle.dumps(ret)
    write_bytes(path, payload)


def _die_with_parent(parent_pid: int) -> None:
    """A job must not outlive its launcher: a relaunch would resume the same run while the orphan
    still writes to it. Linux's PR_SET_PDEATHSIG sends SIGTERM when the parent dies (prctl(2))."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        raise SystemExit(f"the launcher (pid {parent_pid}) is gone")


def _interrupt_on(*signals) -> None:
    """The first SIGTERM/SIGINT becomes KeyboardInterrupt, so train.run records the run as KILLED
    and keeps its checkpoint; later ones are ignored so that this clean-up is not cut short."""

    def handler(signum, frame):
        for s in signals:
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    for s in signals:
        signal.signal(s, handler)


if __name__ == "__main__":
    job_main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
