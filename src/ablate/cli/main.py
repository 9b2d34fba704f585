"""`ablate [COMMAND] [ARGS...]`, also `python -m ablate ...`: the front door to every command.

Without a command name the arguments go to `train`, so `ablate +sweep=precision` and
`python -m ablate model=tiny` are training runs and sweeps, as they have always been.
"""

from __future__ import annotations

import contextlib
import difflib
import gc
import importlib
import io
import os
import platform
import signal
import sys
from importlib import metadata

from ablate.host import interrupt_on
from ablate.oneline import fail
from ablate.streams import steady_streams

# name -> (module with main(), one line for `ablate --help`, how it takes its arguments: "argv", its
# main takes them and returns an exit status; "hydra", its main takes them and runs a Hydra app)
COMMANDS = {
    "train": ("ablate.cli.train", "one training run, or a sweep with +sweep=NAME or --multirun (the default)", "hydra"),
    "fit": ("ablate.cli.fit", "fit scaling laws to an experiment's runs or to a points CSV", "hydra"),
    "compare": (
        "ablate.cli.compare",
        "an ablation's arms as compute multipliers against a baseline, across scale",
        "hydra",
    ),
    "backtest": (
        "ablate.cli.backtest",
        "how often a fit's 95% interval holds runs past the data it saw",
        "hydra",
    ),
    "plan": ("ablate.cli.plan", "price a big run: FLOPs, memory, hours, cost, predicted loss, what binds", "hydra"),
    "predict": (
        "ablate.cli.predict",
        "a fit's prediction for a run, written before the run is trained; its outcome after",
        "argv",
    ),
    "prepare": (
        "ablate.cli.prepare",
        "tokenize your text: train a byte-level BPE (or bring one), write token files",
        "hydra",
    ),
    "sample": (
        "ablate.cli.sample",
        "text from a run's checkpoint, its decode tokens/s against the bandwidth bound",
        "hydra",
    ),
    "study": ("ablate.cli.study", "run or refresh a recorded study (experiments/NAME)", "argv"),
    "submit": ("ablate.cli.submit", "submit a SLURM sweep as a driver job and return at once", "argv"),
    "jobs": ("ablate.cli.jobs", "a SLURM sweep's jobs and how their runs ended", "argv"),
    "sync": ("ablate.cli.sync", "deliver runs spooled during a tracking outage", "argv"),
    "ui": ("ablate.cli.ui", "the MLflow UI over a store, on 127.0.0.1", "argv"),
}
DEFAULT = "train"


COMPLETION_FLAGS = ("-sc", "--shell-completion")


def complete(argv: list[str], environ) -> None:
    """Hydra's completion query (`ablate -sc query=SHELL`, which the script `ablate -sc install=SHELL`
    installs runs on every TAB with the line so far in COMP_LINE), routed as the line is: the words
    after a command name are completed against that command's config (`ablate fit n_b` -> n_boot=);
    the first word also against the command names. Commands that are not Hydra apps complete nothing."""
    line = environ["COMP_LINE"]
    words = line.split()
    rest, done = words[1:], line.endswith(" ")  # done: the cursor is past the last word
    argv = [*config_dir_args(words), *argv]  # the line's own presets, which Hydra's query never sees
    if rest and rest[0] in COMMANDS and (len(rest) > 1 or done):
        name = rest[0]
        module_name, _, style = COMMANDS[name]
        if style == "hydra":
            environ["COMP_LINE"] = " ".join([words[0], *rest[1:]]) + (" " if done else "")
            importlib.import_module(module_name).main(argv)
        return
    word = "" if done or not rest else rest[0]
    found = io.StringIO()
    with contextlib.redirect_stdout(found):
        importlib.import_module(COMMANDS[DEFAULT][0]).main(argv)
    separator = "\n" if "query=fish" in argv else " "  # as Hydra's fish and bash plugins print them
    print(separator.join([c for c in COMMANDS if c.startswith(word)] + found.getvalue().split()))


def config_dir_args(words: list[str]) -> list[str]:
    """`--config-dir DIR` (or -cd DIR, --config-dir=DIR) as the line being completed gives it, for the
    query: Hydra's `-sc query=SHELL` reads only its own arguments, so a user's presets would not be
    offered. Nothing where the line names none or a folder that is not there (yet)."""
    for i, word in enumerate(words):
        folder = None
        if word in ("--config-dir", "-cd") and i + 1 < len(words):
            folder = words[i + 1]
        elif word.startswith("--config-dir="):
            folder = word.split("=", 1)[1]
        if folder and os.path.isdir(os.path.expanduser(folder)):
            return ["--config-dir", os.path.expanduser(folder)]
    return []


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


def refuse_unknown_command(word: str) -> None:
    """A first word that is neither a command nor an override (KEY=VALUE) nor a flag: a mistyped
    command, named in one line with the closest commands, where Hydra would say "missing EQUAL"."""
    close = difflib.get_close_matches(word, COMMANDS, n=2, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    fail(f"unknown command {word!r}: {hint}(valid: {', '.join(COMMANDS)}; or overrides KEY=VALUE for {DEFAULT})")


def versions() -> str:
    """`ablate --version`: ablate's, then those of what its results depend on most."""
    from ablate.provenance import ablate_version, torch_version

    def of(distribution: str) -> str:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"ablate {ablate_version()} (torch {torch_version() or 'not installed'}, MLflow {of('mlflow')}, "
        f"Hydra {of('hydra-core')}, Python {platform.python_version()})"
    )


def entry() -> None:
    """The process's front door (the `ablate` script, `python -m ablate`): main, then a short exit.
    What is left after the command is the interpreter's teardown, whose garbage collections walk
    every object torch and MLflow made (about 1.5 s of a one-step run's 5 s on 2 cores); frozen, the
    objects are still freed by reference counting, and the collections skip them. Not in main:
    a process that runs several commands (the tests' warm runner) keeps collecting.

    SIGTERM (kill, a scheduler, a container stopping) and SIGHUP (the terminal closing) end the
    command as Ctrl-C does, not at once: a run records itself KILLED with its checkpoint, a sweep
    stops its jobs and closes its parent run, and the exit status is 128 + the signal's number
    (the trainer takes SIGTERM over while it trains, to stop at a step boundary: run/preemption.py)."""
    steady_streams()  # a closed stderr or a reader gone (`| head`) is quiet, not a traceback or a failed run
    interrupt_on(signal.SIGTERM, signal.SIGHUP)
    try:
        main()
    finally:
        gc.freeze()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv in (["-h"], ["--help"], ["help"]):
        print(usage())
        return
    if argv in (["--version"], ["-V"], ["version"]):
        print(versions())
        return
    if any(a in COMPLETION_FLAGS for a in argv) and "query=" in " ".join(argv) and "COMP_LINE" in os.environ:
        complete(argv, os.environ)
        return
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-") and "=" not in argv[0]:
        refuse_unknown_command(argv[0])
    name = argv[0] if argv and argv[0] in COMMANDS else DEFAULT
    args = argv[1:] if argv and argv[0] == name else argv
    module_name, _, style = COMMANDS[name]
    module = importlib.import_module(module_name)
    if style == "hydra":
        module.main(args)
        return
    code = module.main(args)
    if code:
        raise SystemExit(code)
