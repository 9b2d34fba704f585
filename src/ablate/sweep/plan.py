"""What a sweep will do, decided before its first job: run, skip (already finished) or resume.

The jobs are expanded as Hydra's BasicSweeper expands them (the cartesian product of the
sweeper's params and the command line, in the same order, so job N here is job N there), each
job's config is composed as the launcher will compose it, and keyed by the same config hash as
run/prepare.py. One MLflow query per experiment finds the runs already recorded under those hashes,
and run/decision.py, the rule each job applies when it starts, says what each will do.

A job with a list budget (run/branches.py: a trunk and a cooldown branch per budget) costs the
trunk's steps plus the cooldowns', and is planned from its branches: skipped when all are.

A job's config that does not parse raises ConfigError here, before anything is created.
Composing and parsing needs Hydra only (`compose`, in the launching process); the checks and hashes
need torch (`assess`) and the decisions MLflow (`decide_all`): under the process launchers the sweep
callback has both run in a process forked from the warm worker (sweep/launch/pool.py).

Each job's composed config is kept in this process (`composed`), and the config loader hands it back
when asked for that job again: Hydra's BasicSweeper composes every job once more to validate it
(validate_batch_is_legal) and the launchers compose each job to run it; the process launcher sends
each job the config planned for it. A composition costs about 0.1 s of CPU; a job was composed
four times before (the pre-check, the plan, the sweeper's check, the job).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import ConfigError, UnsupportedError, budget, parse_run
from ablate.model import accounting
from ablate.run import checkpoint
from ablate.run.decision import decide
from ablate.run.lock import busy_with
from ablate.tracking.runstore import existing_run
from ablate.tracking.store import quiet_store_logs, sqlite_path
from ablate.tracking.tags import CONFIG_HASH_TAG

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
# The last plan's compositions: a job's overrides -> its DictConfig, and the sweep config they came from.
_COMPOSED: dict[tuple[str, ...], object] = {}
_MASTER: list = [None]


@dataclass
class PlannedJob:
    num: int
    overrides: list  # this job's overrides, key=value
    job_dir: str
    label: str = ""  # the overrides that differ between the sweep's jobs
    config_hash: str | None = None
    total_steps: int = 0
    cost_flops: float = 0.0  # training FLOPs of the whole run (steps x tokens/step x FLOPs/token)
    action: str = "run"  # run | resume | skip | busy | unsupported
    reason: str = ""
    mlflow_run_id: str | None = None
    branch_hashes: list = field(default_factory=list)  # a trunk's job: its branches' config hashes
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


def prepare(config, call=None) -> list[PlannedJob] | None:
    """Compose and parse every job here (Hydra), then check and hash them (`assess`, which needs
    torch) through `call` (call(fn, *args): the sweep's warm worker runs it; None: this process). A
    job that does not parse or fails a check raises ConfigError, naming the job."""
    jobs = compose(config)
    if jobs is None:
        return None
    return call(assess, jobs) if call is not None else assess(jobs)


def compose(config) -> list[PlannedJob] | None:
    """Every job composed as the launcher will compose it, and parsed (PlannedJob.cfg)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import filter_overrides
    from omegaconf import OmegaConf, open_dict, read_write

    expanded = expand(config)
    if expanded is None:
        return None
    loader = GlobalHydra.instance().config_loader()
    jobs = []
    _COMPOSED.clear()
    _MASTER[0] = config
    _reuse_compositions(loader)
    try:
        for num, overrides in enumerate(expanded):
            job_cfg = loader.load_sweep_config(config, list(overrides))
            _COMPOSED[tuple(overrides)] = copy.deepcopy(job_cfg)
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
            except ConfigError as exc:
                raise ConfigError(f"sweep job #{num} ({' '.join(job.overrides)}): {exc}") from None
            jobs.append(job)
    finally:
        HydraConfig.instance().set_config(config)
    common = set.intersection(*(set(j.overrides) for j in jobs)) if jobs else set()
    for j in jobs:
        j.label = " ".join(o for o in j.overrides if o not in common) or f"#{j.num}"
    return jobs


def assess(jobs: list[PlannedJob]) -> list[PlannedJob]:
    """Each job's config hash, steps and FLOPs, from the checks its run will make (key); a job this
    machine cannot run is `unsupported` where its config allows skipping it."""
    from ablate.run.branches import is_family  # torch, like the devices key() resolves

    caches: dict = {}
    for job in jobs:
        try:
            if is_family(job.cfg):
                job.config_hash, job.total_steps, job.cost_flops, job.branch_hashes = family_key(job.cfg, caches)
            else:
                job.config_hash, job.total_steps, job.cost_flops = key(job.cfg, caches)
        except UnsupportedError as exc:
            if not job.cfg.skip_unsupported:
                raise ConfigError(f"sweep job #{job.num} ({' '.join(job.overrides)}): {exc}") from None
            job.action, job.reason = "unsupported", str(exc)
        except ConfigError as exc:
            raise ConfigError(f"sweep job #{job.num} ({' '.join(job.overrides)}): {exc}") from None
    return jobs


def composed(overrides, copied: bool = True) -> object | None:
    """The config (a DictConfig) of the job with these overrides as the last plan made in this
    process composed it, before its hydra.job.id and num are set; None when no plan composed it
    (Optuna's trials, another process). copied=False: the plan's own object, for a caller that
    only serializes it."""
    cfg = _COMPOSED.get(tuple(overrides))
    return copy.deepcopy(cfg) if cfg is not None and copied else cfg


def _reuse_compositions(loader) -> None:
    """From now on `loader` (Hydra's config loader, shared by the sweeper and the launcher) answers
    a request for a job this plan composed, from the same sweep config, with a copy of that
    composition instead of composing it again."""
    if getattr(loader, "_ablate_reuses_plan", False):
        return
    compose = loader.load_sweep_config

    def load_sweep_config(master_config, sweep_overrides):
        cfg = composed(sweep_overrides) if master_config is _MASTER[0] else None
        return cfg if cfg is not None else compose(master_config, sweep_overrides)

    loader.load_sweep_config = load_sweep_config
    loader._ablate_reuses_plan = True


def key(cfg, caches: dict) -> tuple[str, int, float]:
    """(config hash, total steps, training FLOPs), from the same run/prepare.prepare a job runs (so
    every check a job would fail on fails here, before anything exists), with each distinct
    hardware and data config resolved and loaded once for the whole sweep."""
    from ablate.run.prepare import prepare  # torch: the jobs' devices

    p = prepare(cfg, caches)
    tokens = p.total_steps * p.cfg.train.batch_size * p.cfg.model.block_size
    return p.config_hash, p.total_steps, float(tokens * accounting.flops_per_token(p.cfg.model))


def family_key(cfg, caches: dict) -> tuple[str, int, float, list[str]]:
    """(trunk's hash, steps of the trunk and the cooldowns, their FLOPs, the branches' hashes)."""
    from ablate.model.optim import cooldown_start
    from ablate.run.branches import with_budget

    unit, values = budget(cfg.train)
    members = [key(with_budget(cfg, unit, v), caches) for v in sorted(values)]
    forks = [cooldown_start(steps, cfg.optim) for _, steps, _ in members]
    trunk_cfg = with_budget(cfg, "steps", max(max(forks), 1))
    trunk_cfg = dataclasses.replace(trunk_cfg, optim=dataclasses.replace(cfg.optim, schedule="constant"))
    trunk_hash, _, _ = key(trunk_cfg, caches)
    steps = max(forks) + sum(s - f for (_, s, _), f in zip(members, forks, strict=True))
    flops_per_step = members[0][2] / members[0][1]
    return trunk_hash, steps, steps * flops_per_step, [h for h, _, _ in members]


def decide_all(jobs: list[PlannedJob]) -> None:
    """Set each job's action from the run recorded under its hash and its checkpoint; a trunk's job
    from its branches' (skipped when all are, resumed when any resumes)."""
    existing = _existing_runs([j for j in jobs if j.config_hash])
    for job in jobs:
        if job.action == "unsupported":
            continue
        store = _store(job.cfg)
        decisions = []
        for h in job.branch_hashes or [job.config_hash]:
            run = existing.get((store, h))
            state_dir = Path(job.cfg.state_dir) / h
            rerun, retry = job.cfg.train.rerun, job.cfg.train.retry_failed
            busy = busy_with(run, state_dir)  # a live launch holds it, or writes it from another state dir
            decisions.append(
                (run, decide(run, checkpoint.meta(state_dir), rerun, retry, store[0] if store else None, busy=busy))
            )
        if len(decisions) == 1:
            run, decision = decisions[0]
            job.mlflow_run_id = run.run_id if run else None
            job.action, job.reason = decision.action, "finished" if decision.finished_before else decision.reason
            continue
        actions = [d.action for _, d in decisions]
        if "busy" in actions:
            job.action, job.reason = "busy", "; ".join(d.reason for _, d in decisions if d.action == "busy")
        elif all(a == "skip" for a in actions):
            done = all(d.finished_before for _, d in decisions)
            job.action, job.reason = "skip", "finished" if done else "; ".join(d.reason for _, d in decisions)
        else:
            job.action = "resume" if "resume" in actions else "run"
            job.reason = f"{actions.count('skip')} of {len(actions)} branches done" if "skip" in actions else ""


def _store(cfg) -> tuple | None:
    t = cfg.tracking
    return (t.uri, t.experiment) if t.backend == "mlflow" else None


def _existing_runs(jobs: list[PlannedJob]) -> dict:
    """{(store, config hash): the latest run with that hash}, one search per experiment."""
    from mlflow.tracking import MlflowClient

    quiet_store_logs()
    found = {}
    for store in {_store(j.cfg) for j in jobs} - {None}:
        uri, name = store
        path = sqlite_path(uri)
        if path is not None and not path.is_file():
            continue  # no store yet, so no runs; opening it here would create it outside its lock
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            continue
        token = None
        while True:
            page = client.search_runs(
                [experiment.experiment_id], max_results=1000, page_token=token, order_by=["attributes.start_time DESC"]
            )
            for r in page:
                h = r.data.tags.get(CONFIG_HASH_TAG)
                if h and (store, h) not in found:
                    found[(store, h)] = existing_run(r)
            token = page.token
            if not token:
                break
    return found


def describe(jobs: list[PlannedJob], name: str) -> str:
    """One line with the counts, then one line per job that resumes or is skipped for a failure."""
    counts = {a: sum(j.action == a for j in jobs) for a in ("run", "resume", "skip", "unsupported", "busy")}
    finished = sum(j.action == "skip" and j.reason == "finished" for j in jobs)
    parts = [
        f"{counts['run']} to run",
        f"{counts['resume']} to resume",
        f"{counts['skip']} skipped ({finished} already finished)",
    ]
    if counts["unsupported"]:
        parts.append(f"{counts['unsupported']} unsupported here")
    if counts["busy"]:
        parts.append(f"{counts['busy']} being trained by another launch")
    lines = [f"sweep {name}: {len(jobs)} jobs: " + ", ".join(parts)]
    for j in jobs:
        if j.action in ("resume", "busy") or (j.action == "skip" and j.reason != "finished"):
            lines.append(f"  #{j.num} {j.label}: {j.action} {j.reason}")
    return "\n".join(lines)
