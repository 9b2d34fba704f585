"""The command line: `ablate COMMAND` (main.py), one module per command, each a thin layer over the
library that turns a ConfigError into one line and exit 2 (common.fail).

    main.py    the front door: dispatch to a command; `ablate --help` lists them
    common.py  fail, hydra_main: the config composed once and run in Hydra's own order
    train.py   `ablate [train]`: a run or a sweep        fit.py    `ablate fit`: scaling laws
    plan.py    `ablate plan`: price a big run            study.py  `ablate study`: recorded studies
    submit.py  `ablate submit`: a SLURM driver job       jobs.py   `ablate jobs`: a SLURM sweep's jobs
    sync.py    `ablate sync`: spooled runs               ui.py     `ablate ui`: the MLflow UI
    prepare.py `ablate prepare`: text -> token files   sample.py  `ablate sample`: text from a run
    compare.py `ablate compare`: arms as compute multipliers
    backtest.py `ablate backtest`: how often a fit's interval holds when it extrapolates
    predict.py `ablate predict`: a prediction written before its run, and the outcome after
    hooks.py   the sweep callback Hydra calls (conf/config.yaml names it)
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    # common: what the Hydra plugins (src/hydra_plugins) need to fail as a command does
    {"main": ("entry",), "common": ("fail", "explain", "resolved_task")},
)
