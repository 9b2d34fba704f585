"""Hyperparameter search with Optuna, whose trials are ordinary sweep jobs that can be pruned.

space.py    search_space: Hydra sweep grammar as Optuna distributions; trial_overrides
storage.py  open_study (journal file or RDB), samplers, pruners; Drivers and give_back across relaunches
trial.py    trial_hook (inside a job: report, prune) and outcome (the driver's reading of a result)
driver.py   run_study: ask, launch a batch, tell, until n_trials
report.py   export: trials.json, study.md, best.args, the best config group, plots

Its schema, SearchConfig and parse_search (the sweeper's settings, checked), is in config/search.py.
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "space": ("check_sweeper",),
        "trial": ("trial_hook",),
        "driver": ("run_study",),
    },
)
