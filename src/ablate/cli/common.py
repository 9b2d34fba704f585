"""What every command shares: where the configs live, one-line errors, the Hydra entry."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import NoReturn

from ablate.config import BUDGET_KEYS, CONF_DIR, CONF_MODULE, CONF_PATH, ConfigError, group_options, parse_run
from ablate.files import check_file_slots, check_writable_dir, clear_leftovers, disk_errors
from ablate.host import interrupting_signal
from ablate.run import EXIT_BUSY, Busy, output_lock, sweep_lock
from ablate.sweep import OUTPUT_FILES, set_aside

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


def fail(message: str, code: int = 2) -> NoReturn:
    """Bad input: one line on stderr, no traceback, a non-zero exit."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def hydra_main(
    task: Callable,
    config_name: str,
    name: str = "",
    summary: str = "",
    example: str = "",
    argv: list[str] | None = None,
    setup: Callable | None = None,
):
    """Run `task` as a Hydra app over conf/<config_name>.yaml with `argv` (None: this process's
    arguments). `--help` prints this command's own help (command_help) instead of Hydra's, which
    lists every config group in conf/. `setup(cfg)`: for one run, a context manager that checks the
    composed config before Hydra creates anything and yields what the task takes besides it
    (cli/train.py: the run parsed and prepared). The sweep callbacks of a multirun, or None."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not (CONF_DIR / f"{config_name}.yaml").is_file():
        fail(
            f"no {config_name}.yaml among the package's presets ({CONF_DIR}) "
            "(valid: an installation of ablate that has its presets: pip install it again, or `make install`)"
        )
    args = hydra_args(argv)
    if any(a in ("-h", "--help") for a in argv):
        try:
            print(command_help(config_name, name or config_name, summary, example, args.config_dir))
        except ConfigError as exc:  # a preset past its bounds (check_presets)
            fail(str(exc))
        return None
    if config_name == "config":
        args.overrides += budget_override(args.overrides)
    try:
        if os.environ.get("HYDRA_FULL_ERROR") or any(a in _PRINT_ONLY for a in argv):
            return _hydra_itself(task, config_name, args)
        return run_app(task, config_name, args, setup)
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


def _hydra_itself(task: Callable, config_name: str, args) -> None:
    """Hydra's own handling of its print-only flags (--cfg, --info, ...), after the overrides have
    been checked in one line each; with HYDRA_FULL_ERROR, everything as Hydra does it, unchecked."""
    from hydra._internal.utils import _run_hydra, get_args_parser

    # -sc install=SHELL / query=SHELL: Hydra's shell completion, whose "overrides" are its own verb
    if not os.environ.get("HYDRA_FULL_ERROR") and not args.shell_completion:
        precheck(args.overrides, config_name, args.multirun, deep=False, config_dir=args.config_dir)  # printed
    parser = get_args_parser()
    _run_hydra(args=args, args_parser=parser, task_function=task, config_path=CONF_PATH, config_name=config_name)


def run_app(task: Callable, config_name: str, args, setup: Callable | None = None):
    """Hydra.run or Hydra.multirun in Hydra's own order (compose, callbacks, run_job or the
    sweeper), with the config composed once: a composition error is one line, a single run is
    checked by `setup` before its folder exists, a sweep by check_sweep before its callbacks run."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    hydra = _create_hydra(task, args.config_dir)
    try:
        overrides = [*args.overrides, *(["hydra.mode=MULTIRUN"] if args.multirun else [])]
        cfg = _compose_master(hydra, config_name, overrides, args.config_dir)
        if cfg.hydra.mode == RunMode.MULTIRUN:
            return _multirun(hydra, cfg, config_name, task)
        _run(hydra, cfg, config_name, task, setup)
        return None
    finally:
        GlobalHydra.instance().clear()


def _create_hydra(task: Callable, config_dir: str | None):
    """Hydra's own object over conf/ (and --config-dir), its job named after the task's module, as
    hydra.main names it (the run's log file is NAME.log)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import (
        create_automatic_config_search_path,
        detect_calling_file_or_module_from_task_function,
        detect_task_name,
    )
    from hydra.core.config_search_path import SearchPathQuery

    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
    search_path = create_automatic_config_search_path(calling_file, calling_module, CONF_PATH)
    if config_dir is not None:
        path = os.path.abspath(config_dir)
        if not os.path.isdir(path):
            fail(f"--config-dir {config_dir} is not a directory")
        search_path.prepend(provider="command-line", path=f"file://{path}", anchor=SearchPathQuery(provider="schema"))
    return Hydra.create_main_hydra2(
        task_name=detect_task_name(calling_file, calling_module), config_search_path=search_path
    )


# A preset's bounds, checked before Hydra composes it: YAML aliases expand when OmegaConf copies
# the tree, so 9 levels of 9 aliases (a "billion laughs" preset of 1 KB) never finish composing.
MAX_PRESET_BYTES, MAX_PRESET_ALIASES = 1 << 20, 64


def check_presets(config_dir: str | None = None) -> None:
    """Every YAML file among the presets (conf/ and --config-dir) within MAX_PRESET_BYTES and
    MAX_PRESET_ALIASES, read by YAML's scanner (nothing is built). ConfigError (one line) otherwise."""
    import yaml

    folders = [CONF_DIR, *([Path(config_dir)] if config_dir else [])]
    for path in (p for folder in folders for p in sorted(Path(folder).rglob("*.yaml"))):
        try:
            size = path.stat().st_size
            if size > MAX_PRESET_BYTES:
                raise ConfigError(f"preset {path} is {size:,} bytes (valid: at most {MAX_PRESET_BYTES:,})")
            text = path.read_text(errors="replace")
            if "*" not in text:
                continue
            aliases = sum(isinstance(t, yaml.AliasToken) for t in yaml.scan(text, Loader=yaml.CSafeLoader))
        except (OSError, yaml.YAMLError):
            continue  # Hydra says what is wrong with it, in one line
        if aliases > MAX_PRESET_ALIASES:
            raise ConfigError(
                f"preset {path} has {aliases} YAML aliases, which expand as it is composed (a YAML bomb) "
                f"(valid: at most {MAX_PRESET_ALIASES})"
            )


def _compose_master(hydra, config_name: str, overrides: list[str], config_dir: str | None = None):
    """The command's one composition, as Hydra composes a multirun's master config (sweep values
    allowed until the mode is known); one line on a bad override. A single run's overrides are then
    checked as Hydra checks them for a run, and its mode recorded as Hydra records it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    try:
        check_presets(config_dir)
    except ConfigError as exc:
        fail(str(exc))
    try:
        cfg = hydra.compose_config(config_name, overrides, run_mode=RunMode.MULTIRUN, validate_sweep_overrides=False)
        if cfg.hydra.mode is None:
            parsed = OverridesParser.create().parse_overrides(overrides)
            hydra.config_loader.validate_sweep_overrides_legal(parsed, run_mode=RunMode.RUN, from_shell=True)
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append("hydra.mode=RUN")
    except (HydraException, OmegaConfBaseException) as exc:
        fail(explain(exc, overrides, config_name, config_dir))
    return cfg


def _run(hydra, cfg, config_name: str, task: Callable, setup: Callable | None) -> None:
    """Hydra.run's steps on the composed config; `setup` first, whose context spans the run."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.utils import run_and_report
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import configure_log, run_job
    from hydra.types import HydraContext

    HydraConfig.instance().set_config(cfg)  # the config's ${hydra:...} values resolve from here on
    try:
        context = setup(cfg) if setup is not None else contextlib.nullcontext({})
        with context as task_kwargs:
            configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
            callbacks = Callbacks(cfg)
            callbacks.on_run_start(config=cfg, config_name=config_name)

            def run():
                # Hydra's own files of the run (.hydra/, the log) on a disk that takes none: one line
                with disk_errors(Path(cfg.hydra.run.dir), "hydra.run.dir"):
                    ret = run_job(
                        hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                        task_function=partial(task, **task_kwargs),
                        config=cfg,
                        job_dir_key="hydra.run.dir",
                        job_subdir_key=None,
                    )
                callbacks.on_run_end(config=cfg, config_name=config_name, job_return=ret)
                said = io.StringIO()  # Hydra's "Error executing job" line, said again unless ours replaces it
                try:
                    with contextlib.redirect_stderr(said):
                        return ret.return_value  # raises what the task raised
                except ConfigError as exc:  # a task's output refused by its disk (files.WriteError), ...
                    fail(str(exc))
                except BaseException:
                    sys.stderr.write(said.getvalue())
                    raise

            with contextlib.ExitStack() as claims:
                token = _CLAIMS.set(claims)
                try:
                    run_and_report(run)
                finally:
                    _CLAIMS.reset(token)
    except ConfigError as exc:
        fail(str(exc))


def _multirun(hydra, cfg, config_name: str, task: Callable):
    """Hydra.multirun's steps on the composed config, after check_sweep; returns the callbacks."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.utils import run_and_report
    from hydra.core.plugins import Plugins
    from hydra.types import HydraContext
    from omegaconf import OmegaConf

    check_sweep(cfg)
    callbacks = Callbacks(cfg)
    lock = claim_sweep(cfg)

    def sweep():
        callbacks.on_multirun_start(config=cfg, config_name=config_name)
        sweeper = Plugins.instance().instantiate_sweeper(
            config=cfg,
            hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
            task_function=task,
        )
        try:
            sweeper.sweep(arguments=OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False))
        except ConfigError as exc:  # refused by what it submits to (sbatch's reason): one line, parent FAILED
            for callback in getattr(callbacks, "callbacks", []):
                if hasattr(callback, "refused"):
                    callback.refused(str(exc))
            fail(str(exc))
        callbacks.on_multirun_end(config=cfg, config_name=config_name)

    try:
        run_and_report(sweep)
    finally:
        lock.release()
    return callbacks


def claim_sweep(cfg):
    """The sweep's folder claimed for this launch before anything is written there (run/lock.py):
    Busy, one line naming the launch that holds it, when another does. Then what earlier launches
    left there that is not what it should be is moved aside, one line each (sweep/folder.py)."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)  # hydra.sweep.dir may interpolate ${hydra:...}
    lock = sweep_lock(str(cfg.hydra.sweep.dir)).acquire()
    try:
        set_aside(Path(str(cfg.hydra.sweep.dir)), f"{hydra_node(cfg, 'job.name')}.log")
    except BaseException:
        lock.release()
        raise
    return lock


# Groups a training run takes beyond its defaults list: +sweep=NAME, and Hydra's launchers and sweeper.
EXTRA_GROUPS = {
    "config": [("+sweep", "sweep"), ("hydra/launcher", "hydra/launcher"), ("hydra/sweeper", "hydra/sweeper")]
}


def command_help(config_name: str, name: str, summary: str, example: str, config_dir: str | None = None) -> str:
    """A command's help: what it does, its config groups and their options, its own keys with their
    defaults (from the composed conf/<config_name>.yaml), and one example."""
    from omegaconf import OmegaConf

    cfg = _compose(config_name, [], config_dir)
    # Hydra records the choices last-composed first; reversed, they read in the defaults list's order.
    picked = OmegaConf.to_container(cfg.hydra.runtime.choices).items()
    choices = {g: c for g, c in reversed(list(picked)) if not g.startswith("hydra/")}
    lines = [f"usage: ablate {name} [KEY=VALUE ...]" + (" [+sweep=NAME | --multirun KEY=A,B]" * (name == "train"))]
    lines += ["", summary] if summary else []
    groups = [(g, g, c) for g, c in choices.items()] + [(f, d, None) for f, d in EXTRA_GROUPS.get(config_name, [])]
    if groups:
        lines += ["", "config groups (GROUP=OPTION; * the default):"]
        width = max(len(flag) for flag, _, _ in groups)
        for flag, directory, default in groups:
            options = group_options(directory, config_dir)
            listed = " ".join(f"{o}*" if o == default else o for o in options)
            lines.append(f"  {flag:<{width}}  {listed}")
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra", None)
    sections = [g for g in choices if isinstance(tree.get(g), dict)]
    if sections:  # a group's keys, whose defaults depend on the option chosen: one line each
        lines += ["", "group keys (GROUP.KEY=VALUE; the defaults come from the option chosen):"]
        width = max(map(len, sections))
        lines += [f"  {g:<{width}}  {' '.join(_flat(tree.pop(g)))}" for g in sections]
    lines += ["", "keys (KEY=VALUE; the defaults):"]
    for key, value in _flat(tree).items():
        lines.append(f"  {key}={_show(value)}")
    if example:
        lines += ["", "example:", f"  {example}"]
    lines += ["", "Every key takes a value on the command line; a sweep takes a,b,c (Hydra's override grammar)."]
    return "\n".join(lines)


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value).replace(" ", "")
    return str(value)


_PRINT_ONLY = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc"}


def hydra_args(argv: list[str]):
    """A Hydra app's arguments as Hydra's own parser reads them: its flags (and their values) apart
    from the overrides (`args.overrides`)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser().parse_args(argv)


def budget_override(args: list[str]) -> list[str]:
    """A run has exactly one budget and the default one is train.steps: `train.tokens=...` or
    `train.flops=...` or `train.tokens_per_param=...` on the command line, without train.steps,
    replaces it (["train.steps=null"])."""
    keys = {a.split("=", 1)[0].lstrip("+~"): a.split("=", 1)[1] for a in args if "=" in a and not a.startswith("-")}
    if "train.steps" in keys:
        return []
    given = [f"train.{k}" for k in BUDGET_KEYS if k != "steps" and keys.get(f"train.{k}", "null") != "null"]
    return ["train.steps=null"] if given else []


def check_sweep(cfg) -> None:
    """A sweep's own checks on its composed master config, before its callbacks run: the folder it
    will write to. The rest is checked where Hydra builds it, before anything exists: the launcher's
    and the sweeper's settings by their plugins, every job by the plan (hydra_plugins/ablate_sweeper)."""
    from ablate.sweep import check_plugin_providers

    try:
        check_plugin_providers(hydra_node(cfg, "runtime.choices"))  # ablate's plugin names still ablate's
        sweep_dir = hydra_node(cfg, "sweep.dir")
        check_writable_dir(sweep_dir, "hydra.sweep.dir")
        check_file_slots(sweep_dir, OUTPUT_FILES, "hydra.sweep.dir")  # written at its end, after every run
    except ConfigError as exc:
        fail(str(exc))


def precheck(
    args: list[str], config_name: str, multirun: bool = False, deep: bool = True, config_dir: str | None = None
) -> None:
    """For a command that does not run the config itself (`ablate submit`, which a driver job runs
    later; Hydra's print-only flags): compose it with the first value of each sweep, and again for
    every other option a config group sweeps over (a typo fails in one line that names the valid
    choices, instead of Hydra's multi-line report); with `deep`, a sweep's folder and its
    launcher's settings are checked (check_sweep_config)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        fail(_first_line(exc))
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
        try:
            cfg = _compose(config_name, overrides, config_dir)
            if i == 0 and config_name == "config" and deep and _is_sweep(cfg, multirun):
                check_sweep_config(cfg)
        except ConfigError as exc:
            fail(str(exc))
        except (HydraException, OmegaConfBaseException) as exc:
            fail(explain(exc, overrides, config_name, config_dir))


def _is_group(override) -> bool:
    """Whether an override picks a config group's option (model=nano, +sweep=lr, hydra/launcher=...)."""
    key = override.key_or_group.lstrip("+~")
    return "/" in key or (CONF_DIR / key).is_dir()


def _is_sweep(cfg, multirun: bool) -> bool:
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    return multirun or OmegaConf.select(cfg, "hydra.mode") == RunMode.MULTIRUN


def hydra_node(cfg, key: str):
    """cfg.hydra.KEY resolved, as plain data."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, f"hydra.{key}")
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def check_sweep_config(cfg) -> None:
    """A sweep's folder, and its launcher's settings, checked as the launcher checks them: by
    having Hydra build it (the plugins parse their settings when built), with no sweep callback."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.plugins import Plugins
    from hydra.core.utils import setup_globals
    from hydra.types import HydraContext

    from ablate.sweep import check_plugin_providers

    setup_globals()
    HydraConfig.instance().set_config(cfg)
    check_plugin_providers(hydra_node(cfg, "runtime.choices"))  # ablate's plugin names still ablate's
    check_writable_dir(hydra_node(cfg, "sweep.dir"), "hydra.sweep.dir")
    context = HydraContext(config_loader=None, callbacks=Callbacks())
    Plugins.instance().instantiate_launcher(hydra_context=context, task_function=lambda cfg: None, config=cfg)


def resolved_task(cfg) -> dict:
    """The task's part of a composed config (all but `hydra`), resolved, as a plain dict."""
    from omegaconf import OmegaConf

    return {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in cfg
        if k != "hydra"
    }


def _compose(config_name: str, overrides: list[str], config_dir: str | None = None):
    """One composition over the package's presets (pkg://ablate.conf), and a user's own
    (`--config-dir DIR`, added to Hydra's search path as hydra.searchpath)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    extra = [f"hydra.searchpath=[file://{os.path.abspath(config_dir)}]"] if config_dir else []
    check_presets(config_dir)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONF_MODULE, version_base="1.3"):
            return compose(config_name=config_name, overrides=[*overrides, *extra], return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def _values(override) -> list[str]:
    from hydra.core.override_parser.types import ValueType

    if override.value_type == ValueType.INTERVAL_SWEEP:  # a continuous range: check its two ends
        v = override.value()
        return [str(v.start), str(v.end)]
    return list(override.sweep_string_iterator())


def _with_value(override, value: str) -> str:
    return f"{override.get_key_element()}={value}"


def explain(exc: Exception, overrides: list[str], config_name: str = "config", config_dir: str | None = None) -> str:
    """One line for Hydra's composition errors: what was asked for and what is valid."""
    from hydra.errors import MissingConfigException
    from omegaconf import OmegaConf

    if isinstance(exc, MissingConfigException) or "Could not find" in str(exc):
        for o in overrides:
            key, _, value = o.lstrip("+~").partition("=")
            options = group_options(key, config_dir)
            unknown = [v for v in value.split(",") if v not in options]  # a sweep's values, each
            if options and unknown:
                return f"{key}={unknown[0]} is not a known option (valid: {', '.join(options)})"
    text = str(exc)
    if text.startswith("Error merging override") and exc.__cause__ is not None:
        override = text.removeprefix("Error merging override ").strip()
        cause = str(exc.__cause__).strip().splitlines() or [type(exc.__cause__).__name__]
        wanted = next((v for k, v in TYPE_WORDS.items() if cause[0].endswith(f"could not be converted to {k}")), None)
        return f"{override} is not {wanted}" if wanted else f"{override}: {cause[0]}"
    if text.startswith("Could not override '"):
        key = text.split("'")[1]
        rest = [_one_value(o) for o in overrides if not o.lstrip("+~").startswith(f"{key}=")]
        try:
            node = _compose(config_name, rest, config_dir)
            parent = key.rpartition(".")[0]
            while parent and not OmegaConf.is_dict(OmegaConf.select(node, parent)):
                key, parent = parent, parent.rpartition(".")[0]  # trian.steps: 'trian' is the unknown key
            keys = OmegaConf.select(node, parent).keys() if parent else (k for k in node if k != "hydra")
            valid = sorted(str(k) for k in keys if not str(k).startswith("_"))  # not a plugin's _target_
            return f"unknown key {key} (valid: {', '.join(valid)})"
        except Exception:  # the composition itself is broken: fall back to Hydra's words
            pass
    return _first_line(exc)


# OmegaConf's words for a value a typed key refuses -> what the key takes (a schema's keys: the
# launchers', the sweeper's; OmegaConf reads 1e6 as a float, which an integer key refuses)
TYPE_WORDS = {
    "Integer": "a whole number (valid: digits only, such as 4 or 1000000; no exponent or decimal point)",
    "Float": "a number (valid: such as 0.5, 60 or 1e-3)",
    "Boolean": "true or false (valid: true, false)",
}


def _one_value(override: str) -> str:
    """A sweep override (KEY=a,b) as its first value, so that one composition can list the keys."""
    key, _, value = override.partition("=")
    return f"{key}={value.split(',')[0]}" if "," in value and "[" not in value and "(" not in value else override


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return "; ".join(lines[:2]) if lines else type(exc).__name__


def compose_run(overrides: list[str]):
    """The RunConfig that `ablate OVERRIDE...` would train (one run: the sweeper is not used),
    ConfigError in one line otherwise."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = _compose("config", overrides)
        setup_globals()
        HydraConfig.instance().set_config(cfg)
        return parse_run(resolved_task(cfg))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(explain(exc, overrides)) from None
