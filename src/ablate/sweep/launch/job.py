"""Jobs of a sweep run in this process, as Hydra's BasicLauncher runs each job: by the worker
(worker.py) in each job's process, by a SLURM job (slurm.py), and in one forked process for the jobs
planned as skipped. A job the sweep's plan made is sent what the plan made of it (JobPlan), and is
neither composed nor parsed again."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.run import Planned


@dataclass(frozen=True)
class JobPlan:
    """One job as the launching process made it: its config as composed there (before its
    hydra.job.num is set), and its run as the sweep's plan parsed and hashed it (None where no plan
    parsed it: a SLURM launch's job of a sweeper that does not plan), which the task is given as
    `planned`."""

    composed: Any  # a DictConfig
    run: Planned | None = None


def run_here(hydra_context, task_function, config, num: int, overrides: list, plan: JobPlan | None = None, job_id=None):
    """Run job `num` in this process (what BasicLauncher does per job) with the config `plan` holds,
    or, without one, its config composed here. `job_id`: Hydra's hydra.job.id (its num unless a
    scheduler names the job)."""
    from hydra.core.utils import run_job
    from omegaconf import open_dict, read_write

    loader = hydra_context.config_loader
    # a copy: run_job marks the config's hydra node read-only, and a job run again with the same plan
    # (a SLURM requeue, submitit's checkpoint pickling the plan as the first run left it) starts from
    # the composition as the launching process made it
    sweep_config = (
        copy.deepcopy(plan.composed) if plan is not None else loader.load_sweep_config(config, list(overrides))
    )
    with read_write(sweep_config), open_dict(sweep_config):
        sweep_config.hydra.job.id = num if job_id is None else job_id
        sweep_config.hydra.job.num = num
    if plan is not None and plan.run is not None:
        task_function = partial(task_function, planned=plan.run)
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


def run_all_here(hydra_context, task_function, config, singletons: dict, planned: list) -> dict:
    """{num: JobReturn} of each (num, overrides, JobPlan or None) run here in order, with the
    launching process's Hydra singletons (HydraConfig, the resolvers' state)."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals

    Singleton.set_state(singletons)
    setup_globals()
    return {num: run_here(hydra_context, task_function, config, num, o, plan) for num, o, plan in planned}
