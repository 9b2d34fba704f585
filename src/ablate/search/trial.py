"""One trial of a study, from both sides.

Inside its job (`ablate train` under hydra/sweeper=ablate_optuna): the job rebuilds its trial from the shared
storage (`trial_hook`), reports the validation loss after every evaluation and ends as "pruned"
(StopRun) when the pruner says so. On the driver's side: SWEEP_DIR/optuna.json maps each job
number to its trial before a batch starts, and `outcome` reads what a job's result.json means for
its trial: COMPLETE with the final validation loss (and the costs the study minimises too), PRUNED,
or FAIL.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ablate.config import COSTS, SearchConfig
from ablate.files import read_json_object, write_json
from ablate.search.storage import make_pruner, open_storage, trial_id

TRIALS_FILE = "optuna.json"


def trial_hook(hc) -> Callable[[int, float, float], None] | None:
    """The `on_eval` hook of a job that is a trial of an Optuna study (else None).

    It reports the validation loss at each evaluation step and raises StopRun("pruned") when
    the study's pruner says so. `hc` is the job's HydraConfig.
    """
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        return None
    info = read_trials_file(sweep_dir_of(hc))
    entry = (info.get("trials") or {}).get(str(hc.job.num))
    if not entry:
        return None
    cfg = SearchConfig(**info["search"])
    if cfg.costs:
        return None  # Optuna takes intermediate values of single-objective trials only
    return PruningHook(cfg, entry["number"])


class PruningHook:
    def __init__(self, cfg: SearchConfig, number: int):
        import optuna

        self.number = number
        self.pruner_name = cfg.pruner
        storage = open_storage(cfg.storage)
        # The sampler is not used here (the driver sampled the parameters); a random one costs nothing.
        study = optuna.load_study(
            study_name=cfg.study_name,
            storage=storage,
            sampler=optuna.samplers.RandomSampler(),
            pruner=make_pruner(cfg),
        )
        self.trial = optuna.trial.Trial(study, trial_id(storage, cfg.study_name, number))

    def __call__(self, step: int, val_loss: float, flops: float) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        from ablate.run import StopRun  # torch: only inside a trial's job

        value = val_loss if math.isfinite(val_loss) else float("inf")
        try:
            self.trial.report(value, step)
            prune = self.trial.should_prune()
        except UpdateFinishedTrialError:
            return  # its driver gave the trial up (stopped); the run itself goes on
        if prune:
            raise StopRun(
                "pruned",
                f"optuna trial {self.number}: val loss {val_loss:.4f} at step {step} ({self.pruner_name} pruner)",
            )


def sweep_dir_of(hc) -> Path:
    d = Path(hc.sweep.dir)
    return d if d.is_absolute() else Path(hc.runtime.cwd) / d


def read_trials_file(sweep_dir: Path) -> dict:
    return read_json_object(sweep_dir / TRIALS_FILE)


@dataclass
class Outcome:
    state: str  # COMPLETE, PRUNED, FAIL
    value: float | None
    reason: str
    steps: int
    mlflow_run_id: str | None
    reused: bool = False  # the job found the same config already run and trained nothing
    costs: dict = field(default_factory=dict)  # COSTS' keys, as the job's result.json has them
    memory_bytes: int | None = None  # the run's modelled peak memory per device
    ended_at: float | None = None  # when the run ended (Unix seconds, the job's clock)


def objective_values(cfg: SearchConfig, out: Outcome) -> list[float]:
    """The values Optuna is told, in cfg.objectives' order."""
    return [out.value, *(float(out.costs[COSTS[c]]) for c in cfg.costs)]


def memory_excess_gb(cfg: SearchConfig, out: Outcome) -> float | None:
    """Optuna's constraint value (feasible at <= 0): GB of modelled memory over the limit."""
    if cfg.memory_limit_gb is None or out.memory_bytes is None:
        return None
    return out.memory_bytes / 1e9 - cfg.memory_limit_gb


def outcome(result: dict | None, final_val_loss_of: Callable[[str], float | None]) -> Outcome:
    """What a job's result.json means for its trial. A run skipped because the same config had
    already run (in this study or another one) counts with that run's outcome."""
    if not result:
        return Outcome("FAIL", None, "the job wrote no result.json", 0, None)
    status, reason, run_id = result.get("status"), result.get("reason") or "", result.get("mlflow_run_id")
    steps, value = int(result.get("steps") or 0), result.get("final_val_loss")
    measured = {
        "costs": {key: result[key] for key in COSTS.values() if result.get(key) is not None},
        "memory_bytes": result.get("memory_bytes"),
        "ended_at": result.get("ended_at"),
    }
    reused = status == "skipped"
    if reused:
        if reason.startswith("already finished") and run_id:
            value = final_val_loss_of(run_id)
            status = "finished"
        elif reason.startswith("pruned"):
            status = "pruned"
    if status == "finished" and value is not None and math.isfinite(value):
        return Outcome("COMPLETE", float(value), "", steps, run_id, reused, **measured)
    if status == "pruned":
        return Outcome("PRUNED", None, reason, steps, run_id, reused, **measured)
    why = f"{status}: {reason}" if reason else str(status)
    return Outcome("FAIL", None, why, steps, run_id, reused, **measured)


def write_trials_file(sweep_dir: Path, cfg: SearchConfig, trials: dict) -> None:
    """SWEEP_DIR/optuna.json: the study and {job number: trial}; written before a batch starts."""
    info = read_trials_file(sweep_dir)
    merged = {**(info.get("trials") or {}), **{str(k): v for k, v in trials.items()}}
    write_json(sweep_dir / TRIALS_FILE, {"search": asdict(cfg), "trials": merged})
