"""What the commands share: a Hydra command's entry (hydra_main, through hydra_app.App), the output
folders a command claims, and the checks of a sweep before it runs or is submitted (precheck)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path

from ablate.cli.help import command_help
from ablate.config import CONF_DIR, parse_run, preset_folders
from ablate.files import check_file_slots, check_writable_dir, clear_leftovers
from ablate.host import interrupting_signal
from ablate.oneline import fail, one_line
from ablate.run import EXIT_BUSY, Busy, output_lock, sweep_lock
from ablate.sweep import OUTPUT_FILES, check_plugin_providers, set_aside

# The output folders the running command has claimed (claim_output), released when it ends.
_CLAIMS: ContextVar[contextlib.ExitStack | None] = ContextVar("ablate_output_claims", default=None)


def claim_output(folder, key: str = "out") -> Path:
    """A command's output folder, checked (check_writable_dir) and claimed for this command until it
    ends, as a sweep claims its folder (run/lock.py, OutputLock): a second command writing into it
    is busy, one line and exit 75, before it does any work or writes anything. What writers killed
    earlier left there (temporary files, staging folders) is removed once the claim is held."""
    path = check_writable_dir(folder, key)
    try:
        lock = output_lock(path).acquire()
    except Busy as exc:
        print(f"busy: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BUSY) from None
    claims = _CLAIMS.get()
    if claims is not None:
        claims.callback(lock.release)  # else held until this process ends, when the kernel drops it
    clear_leftovers(path)
    return path


def hydra_main(
    task: Callable,
    config_name: str,
    name: str = "",
    summary: str = "",
    example: str = "",
    argv: list[str] | None = None,
    setup: Callable | None = None,
) -> dict | None:
    """Run `task` as a Hydra app over conf/<config_name>.yaml with `argv` (None: this process's
    arguments), through the one door to Hydra (hydra_app.App). `--help` prints this command's own
    help (cli/help.py) instead of Hydra's, which lists every config group in conf/. `setup(cfg)`: for
    one run, a context manager that checks the composed config before Hydra creates anything and
    yields what the task takes besides it (cli/train.py: the run parsed and prepared). A sweep
    returns the callbacks it made, by their name in hydra.callbacks; anything else None."""
    from ablate.hydra_app import App, parse_args  # Hydra: loaded by the commands that compose

    argv = sys.argv[1:] if argv is None else list(argv)
    if not (CONF_DIR / f"{config_name}.yaml").is_file():
        fail(
            f"no {config_name}.yaml among the package's presets ({CONF_DIR}) "
            "(valid: an installation of ablate that has its presets: pip install it again, or `make install`)"
        )
    args = parse_args(argv)
    app = App(config_name, args.config_dir)
    if any(a in ("-h", "--help") for a in argv):
        with one_line():  # a preset past its bounds (check_presets)
            print(command_help(app, name or config_name, summary, example))
        return None
    try:
        if os.environ.get("HYDRA_FULL_ERROR") or any(a in _PRINT_ONLY for a in argv):
            # -sc install=SHELL / query=SHELL: Hydra's shell completion, whose "overrides" are its own verb
            if not os.environ.get("HYDRA_FULL_ERROR") and not args.shell_completion:
                precheck(args.overrides, config_name, args.multirun, deep=False, config_dir=args.config_dir)
            app.as_hydra_main(task, args)
            return None
        return app.start(task, args.overrides, args.multirun, setup=_claiming(setup), sweep_setup=claimed_sweep)
    except Busy as exc:  # another launch is running this sweep now
        print(f"busy: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BUSY) from None
    except KeyboardInterrupt as exc:
        # The run (or each run of a sweep) has recorded itself KILLED and kept its checkpoint; a
        # launcher that stopped its jobs says how many in the exception (sweep/launch/process.py).
        # SIGTERM and SIGHUP arrive as KeyboardInterrupt too (cli/main.entry): 128 + their number.
        print(
            f"interrupted: {exc}"
            if str(exc)
            else "interrupted (Ctrl-C): runs stopped are KILLED in MLflow; the same command resumes them",
            file=sys.stderr,
        )
        raise SystemExit(128 + (interrupting_signal(exc) or signal.SIGINT)) from None


def _claiming(setup: Callable | None) -> Callable:
    """`setup`, during which the output folders the task claims (claim_output) are held."""

    @contextlib.contextmanager
    def claiming(cfg):
        with setup(cfg) if setup is not None else contextlib.nullcontext({}) as task_kwargs:
            with contextlib.ExitStack() as claims:
                token = _CLAIMS.set(claims)
                try:
                    yield task_kwargs
                finally:
                    _CLAIMS.reset(token)

    return claiming


_PRINT_ONLY = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc"}


def hydra_args(argv: list[str]):
    """A Hydra app's arguments as Hydra's own parser reads them: its flags (and their values) apart
    from the overrides (`args.overrides`)."""
    from ablate.hydra_app import parse_args  # Hydra: loaded by the commands that compose

    return parse_args(argv)


@contextlib.contextmanager
def claimed_sweep(cfg) -> Iterator[None]:
    """A sweep's own checks on its composed master config (check_sweep), then its folder claimed for
    this launch (claim_sweep) while it runs: App.start's `sweep_setup`."""
    check_sweep(cfg)
    lock = claim_sweep(cfg)
    try:
        yield
    finally:
        lock.release()


def check_sweep(cfg) -> None:
    """A sweep's own checks on its composed master config, before its callbacks run: the folder it
    will write to. The rest is checked where Hydra builds it, before anything exists: the launcher's
    and the sweeper's settings by their plugins, every job by the plan (hydra_plugins/ablate_sweeper)."""
    from ablate.hydra_app import hydra_node  # Hydra: loaded by the commands that compose

    check_plugin_providers(hydra_node(cfg, "runtime.choices"))  # ablate's plugin names still ablate's
    sweep_dir = hydra_node(cfg, "sweep.dir")
    check_writable_dir(sweep_dir, "hydra.sweep.dir")
    check_file_slots(sweep_dir, OUTPUT_FILES, "hydra.sweep.dir")  # written at its end, after every run


def claim_sweep(cfg):
    """The sweep's folder claimed for this launch before anything is written there (run/lock.py):
    Busy, one line naming the launch that holds it, when another does. Then what earlier launches
    left there that is not what it should be is moved aside, one line each (sweep/folder.py)."""
    from hydra.core.hydra_config import HydraConfig

    from ablate.hydra_app import hydra_node

    HydraConfig.instance().set_config(cfg)  # hydra.sweep.dir may interpolate ${hydra:...}
    lock = sweep_lock(str(cfg.hydra.sweep.dir)).acquire()
    try:
        set_aside(Path(str(cfg.hydra.sweep.dir)), f"{hydra_node(cfg, 'job.name')}.log")
    except BaseException:
        lock.release()
        raise
    return lock


def precheck(
    args: list[str], config_name: str, multirun: bool = False, deep: bool = True, config_dir: str | None = None
) -> None:
    """For a command that does not run the config itself (`ablate submit`, which a driver job runs
    later; Hydra's print-only flags): compose it with the first value of each sweep, and again for
    every other option a config group sweeps over (a typo fails in one line that names the valid
    choices, instead of Hydra's multi-line report); with `deep`, a sweep's folder and its
    launcher's settings are checked (check_sweep_config)."""
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from ablate.hydra_app import App, parse_overrides  # Hydra: loaded by the commands that compose

    with one_line():
        parsed = parse_overrides(args)
        plain = [o.input_line for o in parsed if not o.is_sweep_override()]
        sweeps = [o for o in parsed if o.is_sweep_override()]
        first_values = plain + [_with_value(o, _values(o)[0]) for o in sweeps]
        trials = [first_values]
        for i, o in enumerate(sweeps):
            for v in _values(o)[1:] if _is_group(o) else []:
                trial = list(first_values)
                trial[len(plain) + i] = _with_value(o, v)
                trials.append(trial)
        for i, overrides in enumerate(trials):
            cfg = _compose(config_name, overrides, config_dir)
            swept = multirun or OmegaConf.select(cfg, "hydra.mode") == RunMode.MULTIRUN
            if i == 0 and config_name == "config" and deep and swept:
                check_sweep_config(cfg, App(config_name, config_dir))


def _is_group(override) -> bool:
    """Whether an override picks a config group's option (model=nano, +sweep=lr, hydra/launcher=...)."""
    key = override.key_or_group.lstrip("+~")
    return "/" in key or (CONF_DIR / key).is_dir()


def check_sweep_config(cfg, app) -> None:
    """A sweep's folder, and its launcher's settings, checked as the launcher checks them: by
    having Hydra build it (the plugins parse their settings when built), with no sweep callback."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals

    from ablate.hydra_app import hydra_node

    setup_globals()
    HydraConfig.instance().set_config(cfg)
    check_plugin_providers(hydra_node(cfg, "runtime.choices"))  # ablate's plugin names still ablate's
    check_writable_dir(hydra_node(cfg, "sweep.dir"), "hydra.sweep.dir")
    app.check_launcher(cfg)


def _compose(config_name: str, overrides: list[str], config_dir: str | None = None):
    """One composition over the package's presets and a user's own (hydra_app.App.compose)."""
    from ablate.hydra_app import App  # Hydra: loaded by the commands that compose

    return App(config_name, config_dir).compose(overrides)


def _values(override) -> list[str]:
    from hydra.core.override_parser.types import ValueType

    if override.value_type == ValueType.INTERVAL_SWEEP:  # a continuous range: check its two ends
        v = override.value()
        return [str(v.start), str(v.end)]
    return list(override.sweep_string_iterator())


def _with_value(override, value: str) -> str:
    return f"{override.get_key_element()}={value}"


def compose_run(overrides: list[str]):
    """The RunConfig that `ablate OVERRIDE...` would train (one run: the sweeper is not used),
    ConfigError in one line otherwise."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals

    from ablate.hydra_app import resolved_task

    cfg = _compose("config", overrides)
    setup_globals()
    HydraConfig.instance().set_config(cfg)
    return parse_run(resolved_task(cfg), preset_folders(cfg.hydra))
