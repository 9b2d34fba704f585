"""This project's training run as the objective of Hydra's own Optuna sweeper (hydra-optuna-sweeper),
the anchor `bench_search.py --anchor` compares this project's sweeper with.

It runs inside the anchor's own virtual environment (benchmarks/.venv-optuna2: Optuna 2, which the
upstream plugin requires), with only the `ablate` package on its path: upstream's sweeper is
`hydra/sweeper=optuna`, this project's (`ablate_optuna`, which needs Optuna 5) stays out. The
upstream plugin takes the job's return value as the objective, so the task returns the run's final
validation loss where `ablate`'s returns its whole result.

Each job writes anchor_job.json into its folder (when its run ended, on the job's clock); the
sweeper's study, held in memory, is written to anchor_trials.json at the end (when each trial was
asked, its parameters and value): the busy share is computed from both as this project's report
computes its own (report.launches).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import hydra
import optuna
from hydra.core.hydra_config import HydraConfig

JOB_FILE, TRIALS_FILE = "anchor_job.json", "anchor_trials.json"


@hydra.main(config_path="pkg://ablate.conf", config_name="config", version_base=None)
def objective(cfg) -> float:
    from ablate.cli.train import task

    result = task(cfg)
    hc = HydraConfig.get()
    record = {"num": hc.job.num, "ended_at": time.time(), "status": result["status"], "steps": result.get("steps")}
    (Path(hc.runtime.output_dir) / JOB_FILE).write_text(json.dumps(record))
    return result["final_val_loss"]


def keep_studies() -> list:
    """The studies the sweeper creates: it keeps its study in memory and returns nothing, so
    optuna.create_study is wrapped to hold on to it."""
    studies = []
    create = optuna.create_study

    def create_and_keep(*args, **kwargs):
        study = create(*args, **kwargs)
        studies.append(study)
        return study

    optuna.create_study = create_and_keep
    return studies


def trial_record(t) -> dict:
    return {
        "number": t.number,
        "state": t.state.name,
        "value": t.value,
        "params": dict(t.params),
        "started_at": t.datetime_start.timestamp() if t.datetime_start else None,
    }


if __name__ == "__main__":
    studies = keep_studies()
    objective()
    trials = [trial_record(t) for study in studies for t in study.trials]
    Path(TRIALS_FILE).write_text(json.dumps({"optuna": optuna.__version__, "trials": trials}, indent=2))
