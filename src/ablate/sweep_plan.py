"""What a sweep will do, decided before its first job: run, skip (already finished) or resume.

The jobs are expanded as Hydra's BasicSweeper expands them (the cartesian product of the
sweeper's params and the command line, in the same order, so job N here is job N there), each
job's config is composed as the launcher will compose it, and keyed by the same config hash as
train.prepare. One MLflow query per experiment finds the runs already recorded under those hashes;
the rules mirror train.run, which makes the actual decision inside each job.

A job's config that does not parse stops the sweep here, in one line, before anything is created.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
RESUMABLE = ("RUNNING", "KILLED")


@dataclass
class PlannedJob:
    num: int
    overrides: list  # this job's overrides, key=value
    job_dir: str
    label: str = ""  # the overrides that differ between the sweep's jobs
    config_hash: str | None = None
    total_steps: int = 0
    cost_flops: float = 0.0  # training FLOPs of the whole run (steps x tokens/step x FLOPs/token)
    action: str = "run"  # run | resume | skip | unsupported
    reason: str = ""
    mlflow_run_id: str | None = None
    cfg: object = field(default=None, repr=False)  # the parsed RunConfig (not serialized)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "cfg"}


def expand(config) -> list[list[str]] | None:
    """Every job's overrides, in BasicSweeper's order; None for other sweepers (Optuna, ...)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return None
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()]
    arguments += list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
    overrides = OverridesParser.create().parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def prepare(config) -> list[PlannedJob] | None:
    """Compose, parse and hash every job (no MLflow yet). Bad input: one line, exit 2."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import filter_overrides
    from omegaconf import OmegaConf, open_dict, read_write

    from ablate.cli import fail
    from ablate.config import ConfigError, UnsupportedError, parse_run

    expanded = expand(config)
    if expanded is None:
        return None
    loader = GlobalHydra.instance().config_loader()
    caches: dict = {"data": {}, "hardware": {}}
    jobs = []
    try:
        for num, overrides in enumerate(expanded):
            job_cfg = loader.load_sweep_config(config, list(overrides))
            with open_dict(job_cfg):
                job_cfg.hydra.job.id = num
                job_cfg.hydra.job.num = num
            HydraConfig.instance().set_config(job_cfg)
            job_dir = Path(str(job_cfg.hydra.sweep.dir)) / str(job_cfg.hydra.sweep.subdir)
            job = PlannedJob(num, list(filter_overrides(overrides)), str(job_dir.absolute()))
            task_cfg = copy.deepcopy(job_cfg)
            with read_write(task_cfg), open_dict(task_cfg):
                del task_cfg["hydra"]
            try:
                job.cfg = parse_run(OmegaConf.to_container(task_cfg, resolve=True))
                job.config_hash, job.total_steps, job.cost_flops = key(job.cfg, caches)
            except UnsupportedError as exc:
                if not job.cfg.skip_unsupported:
                    fail(f"sweep job #{num} ({' '.join(job.overrides)}): {exc}")
                job.action, job.reason = "unsupported", str(exc)
            except ConfigError as exc:
                fail(f"sweep job #{num} ({' '.join(job.overrides)}): {exc}")
            jobs.append(job)
    finally:
        HydraConfig.instance().set_config(config)
    common = set.intersection(*(set(j.overrides) for j in jobs)) if jobs else set()
    for j in jobs:
        j.label = " ".join(o for o in j.overrides if o not in common) or f"#{j.num}"
    return jobs


def key(cfg, caches: dict) -> tuple[str, int, float]:
    """(config hash, total steps, training FLOPs) as train.prepare computes them, with the data
    loaded once per distinct data config rather than once per job."""
    from ablate import accounting
    from ablate.config import UnsupportedError, as_dict
    from ablate.data import load_data
    from ablate.hardware import resolve, unsupported_reason
    from ablate.provenance import config_hash
    from ablate.train import total_steps

    hw_key = json.dumps(as_dict(cfg.hardware), sort_keys=True, default=str)
    hw = caches["hardware"].get(hw_key) or caches["hardware"].setdefault(hw_key, resolve(cfg.hardware))
    reason = unsupported_reason(hw, cfg.precision)
    if reason:
        raise UnsupportedError(reason)
    data_key = json.dumps(as_dict(cfg.data), sort_keys=True, default=str)
    if data_key not in caches["data"]:
        caches["data"][data_key] = load_data(cfg.data).vocab_size
    model = cfg.model
    if model.vocab_size is None:
        model = dataclasses.replace(model, vocab_size=caches["data"][data_key])
    cfg = dataclasses.replace(cfg, model=model)
    steps = total_steps(cfg)
    flops = float(steps * cfg.train.batch_size * model.block_size * accounting.flops_per_token(model))
    return config_hash(cfg, hw), steps, flops


def decide(jobs: list[PlannedJob]) -> None:
    """Set each job's action from the runs recorded under its hash and its checkpoint."""
    existing = _existing_runs([j for j in jobs if j.config_hash])
    for job in jobs:
        if job.action == "unsupported":
            continue
        run = existing.get((_store(job.cfg), job.config_hash))
        checkpoint = Path(job.cfg.state_dir) / job.config_hash / "checkpoint.pt"
        job.mlflow_run_id = run.run_id if run else None
        job.action, job.reason = _action(run, checkpoint.is_file(), job.cfg.train)


def _action(run, has_checkpoint: bool, train_cfg) -> tuple[str, str]:
    """train.run's rules (train._skip_reason and its resume logic), without running anything."""
    if run is not None and run.status == "FINISHED" and not train_cfg.rerun:
        return "skip", "finished"
    if run is not None and run.status == "FAILED" and not train_cfg.retry_failed:
        return "skip", "failed before (train.retry_failed=true retries it)"
    if run is not None and run.status in RESUMABLE:
        return "resume", "from its checkpoint" if has_checkpoint else "from the start, into the same MLflow run"
    if run is not None:
        return "run", "again, as asked (train.rerun / train.retry_failed)"
    if has_checkpoint:
        return "resume", "from its checkpoint"
    return "run", ""


def _store(cfg) -> tuple | None:
    t = cfg.tracking
    return (t.uri, t.experiment) if t.backend == "mlflow" else None


def _existing_runs(jobs: list[PlannedJob]) -> dict:
    """{(store, config hash): the latest run with that hash}, one search per experiment."""
    from mlflow.tracking import MlflowClient

    from ablate.tracking import CONFIG_HASH_TAG, ExistingRun, REASON_TAG

    found = {}
    for store in {_store(j.cfg) for j in jobs} - {None}:
        uri, name = store
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            continue
        token = None
        while True:
            page = client.search_runs([experiment.experiment_id], max_results=1000, page_token=token,
                                      order_by=["attributes.start_time DESC"])
            for r in page:
                h = r.data.tags.get(CONFIG_HASH_TAG)
                if h and (store, h) not in found:
                    found[(store, h)] = ExistingRun(r.info.run_id, r.info.status, r.data.tags.get(REASON_TAG, ""))
            token = page.token
            if not token:
                break
    return found


def describe(jobs: list[PlannedJob], name: str) -> str:
    """One line with the counts, then one line per job that resumes or is skipped for a failure."""
    counts = {a: sum(j.action == a for j in jobs) for a in ("run", "resume", "skip", "unsupported")}
    finished = sum(j.action == "skip" and j.reason == "finished" for j in jobs)
    parts = [f"{counts['run']} to run", f"{counts['resume']} to resume",
             f"{counts['skip']} skipped ({finished} already finished)"]
    if counts["unsupported"]:
        parts.append(f"{counts['unsupported']} unsupported here")
    lines = [f"sweep {name}: {len(jobs)} jobs: " + ", ".join(parts)]
    for j in jobs:
        if j.action == "resume" or (j.action == "skip" and j.reason != "finished"):
            lines.append(f"  #{j.num} {j.label}: {j.action} {j.reason}")
    return "\n".join(lines)
