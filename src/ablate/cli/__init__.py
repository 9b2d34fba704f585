"""The command line: `ablate COMMAND` (main.py), one module per command, each a thin layer over the
library whose ConfigError becomes one line and exit 2 (ablate/oneline.py). The Hydra commands come in
through ablate/hydra_app.py, the one door to Hydra.

    main.py    the front door: dispatch to a command; `ablate --help` lists them
    common.py  hydra_main: a Hydra command through hydra_app.App; output claims; a sweep's checks
    help.py    `ablate COMMAND --help` for the Hydra commands: groups, keys, defaults, an example
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
    {"main": ("entry",)},
)
