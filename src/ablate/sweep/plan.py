"""What a sweep will do, decided before its first job: run, skip (already finished) or resume.

Hydra's sweeper hands its check of each batch (validate_batch_is_legal) the jobs' overrides in the
order it launches them; the project's grid sweeper (hydra_plugins/ablate_sweeper) plans them there:
each job's config is composed once, as the launcher would compose it (`compose`, Hydra's own
load_sweep_config), parsed, and keyed by the same config hash as run/prepare.py (`assess`). One
MLflow query per experiment finds the runs already recorded under those hashes, and run/decision.py,
the rule each job applies when it starts, says what each will do (`decide_all`). The composition
is kept with the job (PlannedJob.composed), and the launchers send it to the job with the RunConfig
parsed from it and the hashes its runs were keyed by (PlannedJob.handoff): the job neither composes
nor parses it again, and prepares it to those hashes or fails in one line (run/planned.py).

A job with a list budget (run/branches.py: a trunk and a cooldown branch per budget) costs the
trunk's steps plus the cooldowns', and is planned from its branches: skipped when all are.

A job's config that does not parse raises ConfigError here, before anything is created.
Composing and parsing needs Hydra only (in the launching process); the checks and hashes need torch
(`assess`) and the decisions MLflow (`decide_all`): under the process launchers the sweep callback
runs both in a process forked from the warm worker (sweep/launch/pool.py).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import ConfigError, UnsupportedError, budget, parse_run, preset_folders
from ablate.model import accounting
from ablate.run import Planned, busy_with, checkpoint, decide
from ablate.sweep.launch.job import JobPlan
from ablate.tracking import CONFIG_HASH_TAG, existing_run, quiet_store_logs, sqlite_path


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
    # (params, training tokens, tokens in its training split) of each run it makes: a trunk's job
    # one per branch; what a law fitted to the sweep will see (sweep/design.py)
    points: list = field(default_factory=list)
    device: str | None = None  # the device its hashes were made on (this machine's, as resolved)
    cfg: object = field(default=None, repr=False)  # the parsed RunConfig (not serialized)
    composed: object = field(default=None, repr=False)  # its DictConfig as composed (not serialized)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("cfg", "composed")}

    def __getstate__(self) -> dict:
        # Sent to the warm worker to be checked and decided: the composition stays with the launcher.
        return {**self.__dict__, "composed": None}

    def handoff(self) -> JobPlan:
        """What the job is sent: its composition, and its RunConfig with its runs' hashes (none where
        it was planned unsupported: it then says so itself, as it would have)."""
        hashes = tuple(self.branch_hashes) or ((self.config_hash,) if self.config_hash else ())
        return JobPlan(self.composed, Planned(self.cfg, hashes, self.device) if self.cfg is not None else None)


def compose(loader, config, batch: list[list[str]], first_num: int = 0) -> list[PlannedJob]:
    """Every job of a batch composed once from the sweep's config, as the launcher would compose it
    (Hydra's config loader), and parsed (PlannedJob.cfg); job N of the batch is job first_num + N.
    What goes wrong names its job (of_job)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import filter_overrides
    from omegaconf import OmegaConf, open_dict, read_write

    jobs = []
    folders = preset_folders(config.hydra)
    try:
        for num, overrides in enumerate(batch, start=first_num):
            with of_job(num, list(filter_overrides(overrides))):
                composed = loader.load_sweep_config(config, list(overrides))
            job_cfg = copy.deepcopy(composed)
            with open_dict(job_cfg):
                job_cfg.hydra.job.id = num
                job_cfg.hydra.job.num = num
            HydraConfig.instance().set_config(job_cfg)  # its ${hydra:...} values, as its run resolves them
            job_dir = Path(str(job_cfg.hydra.sweep.dir)) / str(job_cfg.hydra.sweep.subdir)
            job = PlannedJob(num, list(filter_overrides(overrides)), str(job_dir.absolute()), composed=composed)
            with read_write(job_cfg), open_dict(job_cfg):
                del job_cfg["hydra"]
            with of_job(num, job.overrides):
                job.cfg = parse_run(OmegaConf.to_container(job_cfg, resolve=True), folders)
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
    from ablate.run import is_family  # torch, like the devices key() resolves

    caches: dict = {}
    for job in jobs:
        try:
            with of_job(job.num, job.overrides):
                if is_family(job.cfg):
                    job.config_hash, job.total_steps, job.cost_flops, job.branch_hashes = family_key(job.cfg, caches)
                    job.points = [caches[POINTS][h] for h in job.branch_hashes]
                else:
                    job.config_hash, job.total_steps, job.cost_flops = key(job.cfg, caches)
                    job.points = [caches[POINTS][job.config_hash]]
                job.device = caches[DEVICES][job.config_hash]
        except UnsupportedError as exc:
            if not job.cfg.skip_unsupported:
                raise
            job.action, job.reason = "unsupported", exc.said
    return jobs


@contextlib.contextmanager
def of_job(num: int, overrides: list[str]) -> Iterator[None]:
    """What goes wrong inside names sweep job #num: a ConfigError's one line starts with the job
    ("sweep job #3 (model=nano): ..."), keeping its own words in `said`; any other error (Hydra's,
    which the sweeper explains) carries `job_num` and `job_overrides`. Its type stays as raised."""
    try:
        yield
    except Exception as exc:
        exc.job_num, exc.job_overrides = num, overrides
        if isinstance(exc, ConfigError) and not hasattr(exc, "said"):
            exc.said = str(exc)
            exc.args = (f"sweep job #{num} ({' '.join(overrides)}): {exc.said}",)
        raise


POINTS = "points"  # caches[POINTS]: {config hash: (params, tokens, training split's tokens)}, filled by key
DEVICES = "devices"  # caches[DEVICES]: {config hash: the device it was hashed on}, filled by key


def key(cfg, caches: dict) -> tuple[str, int, float]:
    """(config hash, total steps, training FLOPs), from the same run/prepare.prepare a job runs (so
    every check a job would fail on fails here, before anything exists), with each distinct
    hardware and data config resolved and loaded once for the whole sweep."""
    from ablate.run import prepare  # torch: the jobs' devices

    p = prepare.prepare(cfg, caches)
    tokens = p.total_steps * p.cfg.train.sequences_per_step * p.cfg.model.block_size
    caches.setdefault(POINTS, {})[p.config_hash] = (accounting.params(p.cfg.model), tokens, len(p.data.train))
    caches.setdefault(DEVICES, {})[p.config_hash] = p.hardware.device
    return p.config_hash, p.total_steps, float(tokens * accounting.flops_per_token(p.cfg.model))


def family_key(cfg, caches: dict) -> tuple[str, int, float, list[str]]:
    """(trunk's hash, steps of the trunk and the cooldowns, their FLOPs, the branches' hashes)."""
    from ablate.model import cooldown_start
    from ablate.run import with_budget

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
    stores = {_store(j.cfg) for j in jobs} - {None}
    if not stores:  # nothing tracked: MLflow is not needed, and a machine may not have it
        return {}
    from mlflow.tracking import MlflowClient

    quiet_store_logs()
    found = {}
    for store in stores:
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
