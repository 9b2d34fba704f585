"""`ablate [COMMAND] [ARGS...]`, also `python -m ablate ...`: the front door to every command.

Without a command name the arguments go to `train`, so `ablate +sweep=precision` and
`python -m ablate model=tiny` are training runs and sweeps, as they have always been.
"""

from __future__ import annotations

import gc
import importlib
import sys

from ablate.config import CONF_DIR
from ablate.sweep.launch import pool
from ablate.tracking import agent

# name -> (module with main(), one line for `ablate --help`, how it takes its arguments)
COMMANDS = {
    "train": ("ablate.cli.train", "one training run, or a sweep with +sweep=NAME or --multirun (the default)", "hydra"),
    "fit": ("ablate.cli.fit", "fit scaling laws to an experiment's runs or to a points CSV", "hydra"),
    "compare": (
        "ablate.cli.compare",
        "an ablation's arms as compute multipliers against a baseline, across scale",
        "hydra",
    ),
    "backtest": ("ablate.cli.backtest", "how often a fit's 95% interval holds runs past the data it saw", "hydra"),
    "plan": ("ablate.cli.plan", "price a big run: FLOPs, memory, hours, cost, predicted loss, what binds", "hydra"),
    "predict": (
        "ablate.cli.predict",
        "a fit's prediction for a run, written before the run is trained; its outcome after",
        "argv",
    ),
    "prepare": (
        "ablate.cli.prepare",
        "tokenize your text: train a byte-level BPE (or bring one), write token files",
        "argv",
    ),
    "study": ("ablate.cli.study", "run or refresh a recorded study (experiments/NAME)", "argv"),
    "submit": ("ablate.cli.submit", "submit a SLURM sweep as a driver job and return at once", "argv"),
    "jobs": ("ablate.cli.jobs", "a SLURM sweep's jobs and how their runs ended", "argv"),
    "sync": ("ablate.cli.sync", "deliver runs spooled during a tracking outage", "argv"),
    "ui": ("ablate.cli.ui", "the MLflow UI over a store, on 127.0.0.1", "argv"),
}
DEFAULT = "train"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: ablate [COMMAND] [ARGS...]   (or python -m ablate ...)",
        "",
        "Small, honest training experiments turned into decisions about big ones.",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {line}" for name, (_, line, _) in COMMANDS.items()]
    lines += [
        "",
        f"Without a COMMAND the arguments go to `{DEFAULT}`.",
        "`ablate COMMAND --help` shows a command's own options.",
    ]
    return "\n".join(lines)


def entry() -> None:
    """The process's front door (the `ablate` script, `python -m ablate`): main, then a short exit.
    What is left after the command is the interpreter's teardown, whose garbage collections walk
    every object torch and MLflow made (about 1.5 s of a one-step run's 5 s on 2 cores); frozen, the
    objects are still freed by reference counting, and the collections skip them. Not in main:
    a process that runs several commands (the tests' warm runner) keeps collecting."""
    try:
        main()
    finally:
        gc.freeze()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv in (["-h"], ["--help"], ["help"]):
        print(usage())
        return
    name = argv[0] if argv and argv[0] in COMMANDS else DEFAULT
    args = argv[1:] if argv and argv[0] == name else argv
    module_name, _, style = COMMANDS[name]
    if name == "train" and _one_tracked_run(args):
        agent.prestart()  # MLflow's client imported on another core while this process starts the run
    elif name == "train" and (store := _process_launched_sweep(args)) is not None:
        pool.prestart(store or None)  # the sweep's worker imports torch and MLflow while Hydra starts here
    module = importlib.import_module(module_name)
    if style == "hydra":  # Hydra reads the overrides from sys.argv
        sys.argv = [f"{sys.argv[0]} {name}" if name != DEFAULT else sys.argv[0], *args]
        try:
            module.main()
        finally:
            pool.discard_prestarted()  # a worker started for a sweep that no launcher took
        return
    code = module.main(args)
    if code:
        raise SystemExit(code)


# Arguments after which `ablate train` is not one run that tracks: a sweep (its jobs track from their
# own processes), Hydra's print-only flags, and tracking turned off.
_NOT_ONE_TRACKED_RUN = {"-m", "--multirun", "--cfg", "-c", "--help", "-h", "--info", "-i", "--hydra-help"}
_NOT_ONE_TRACKED_RUN |= {"--shell-completion", "-sc", "tracking=none", "tracking.backend=none"}


def _process_launched_sweep(args: list[str]) -> str | None:
    """For `ablate train ARGS` that is, by its arguments, a sweep under this project's process
    launchers (hydra/launcher=parallel|sequential, given or set by its +sweep= preset): what its
    worker should preload for tracking ("sqlite:", a tracking.uri= given, "" without tracking);
    None otherwise. The sweep callback decides for certain from the composed config."""
    if not any(a in ("-m", "--multirun") or a.lstrip("+").startswith("sweep=") for a in args):
        return None
    launcher = None
    for a in args:
        if a.lstrip("+").startswith("sweep="):
            launcher = _preset_launcher(a.split("=", 1)[1]) or launcher
    for a in args:
        if a.startswith("hydra/launcher="):
            launcher = a.split("=", 1)[1]
    if launcher not in PROCESS_LAUNCHERS:
        return None
    store = "sqlite:"
    for a in args:
        if a in ("tracking=none", "tracking.backend=none"):
            store = ""
        elif a.startswith("tracking.uri="):
            store = a.split("=", 1)[1]
    return store


PROCESS_LAUNCHERS = ("parallel", "sequential")  # conf/hydra/launcher/


def _preset_launcher(preset: str) -> str | None:
    """The launcher a sweep preset (conf/sweep/NAME.yaml) overrides to, read from its defaults line."""
    try:
        text = (CONF_DIR / "sweep" / f"{preset}.yaml").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        head, _, value = line.strip().lstrip("- ").partition(":")
        if head.strip() == "override /hydra/launcher":
            return value.strip()
    return None


def _one_tracked_run(args: list[str]) -> bool:
    """Whether `ablate train ARGS` is, by its arguments, a single run with tracking on (the default);
    the config decides for certain later (cli/common.py closes the agent if not)."""
    return not any(a in _NOT_ONE_TRACKED_RUN or a.lstrip("+").startswith("sweep=") for a in args)
