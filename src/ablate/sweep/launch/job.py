"""Jobs of a sweep run in this process, as Hydra's BasicLauncher runs each job: by the worker
(worker.py) in each job's process, and in one forked process for the jobs planned as skipped."""

from __future__ import annotations


def run_here(hydra_context, task_function, config, num: int, overrides: list, job_cfg=None):
    """Run job `num` in this process (what BasicLauncher does per job) with `job_cfg`, its config as
    the sweep plan composed it, or, without one, its config composed here."""
    from hydra.core.utils import run_job
    from omegaconf import open_dict

    loader = hydra_context.config_loader
    sweep_config = job_cfg if job_cfg is not None else loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


def run_all_here(hydra_context, task_function, config, singletons: dict, planned: list) -> dict:
    """{num: JobReturn} of each (num, overrides, composed config or None) run here in order, with
    the launching process's Hydra singletons (HydraConfig, the resolvers' state)."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals

    Singleton.set_state(singletons)
    setup_globals()
    return {num: run_here(hydra_context, task_function, config, num, o, cfg) for num, o, cfg in planned}
