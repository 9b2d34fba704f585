"""The one door to Hydra: every command composes, runs and sweeps its config through `App`, in Hydra's
own order (hydra/_internal/hydra.py, Hydra.run and Hydra.multirun), with the command's config composed
once. The only module that imports `hydra._internal` (not an API: a Hydra release may move it):
what ablate uses of it is named here, for the command line, the worker's preload and the plugins.

    compose      one composition over the presets (pkg://ablate.conf and --config-dir), a bad
                 override or preset as one ConfigError line (oneline.explain)
    start        the command's composition; then run (one job, `setup` checking it first) or
                 multirun (`setup` claiming the sweep's folder; the sweeper and the launcher plugins)
    multirun     returns the callbacks it made, by their name in hydra.callbacks: the caller reads
                 the sweep's ending from the one it configured, without searching Hydra's list
    ConfigError  raised by a task, a setup or a plugin (Hydra's instantiate wraps a plugin's in an
                 InstantiationException: unwrapped here), said in one line by oneline.one_line
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from hydra import compose as compose_api
from hydra import initialize_config_module
from hydra._internal.callbacks import Callbacks
from hydra._internal.hydra import Hydra
from hydra._internal.utils import (
    _run_hydra,
    create_automatic_config_search_path,
    detect_calling_file_or_module_from_task_function,
    detect_task_name,
    get_args_parser,
    run_and_report,
)
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import configure_log, run_job, setup_globals
from hydra.errors import HydraException, InstantiationException, MissingConfigException
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ablate.config import CONF_DIR, CONF_MODULE, CONF_PATH, ConfigError
from ablate.files import disk_errors
from ablate.oneline import explain, first_line, one_line

__all__ = ["JOB_MODULES", "App", "basic_sweeper", "check_presets", "hydra_node", "parse_args", "resolved_task"]

# What of Hydra's internals a job imports when it runs (hydra.core.utils.configure_log imports its
# logging set-up lazily): the warm worker loads them before it forks its jobs (sweep/launch/worker.py).
JOB_MODULES = ("hydra._internal.logging_config",)

# The errors of a composition: a bad override, an unknown preset, a value a typed key refuses.
COMPOSE_ERRORS = (HydraException, OmegaConfBaseException)

# A preset's bounds, checked before Hydra composes it: YAML aliases expand when OmegaConf copies
# the tree, so 9 levels of 9 aliases (a "billion laughs" preset of 1 KB) never finish composing.
MAX_PRESET_BYTES, MAX_PRESET_ALIASES = 1 << 20, 64


class App:
    """A Hydra app over conf/<config_name>.yaml and a user's own presets (`--config-dir`)."""

    def __init__(self, config_name: str, config_dir: str | None = None) -> None:
        self.config_name = config_name
        self.config_dir = config_dir

    def compose(self, overrides: list[str]) -> DictConfig:
        """The config `overrides` compose, with Hydra's own node (`return_hydra_config`); ConfigError,
        one line, for a preset past its bounds or a composition Hydra refuses."""
        check_presets(self.config_dir)
        try:
            return self._compose(overrides)
        except COMPOSE_ERRORS as exc:
            raise ConfigError(self.explain(exc, overrides)) from None

    def _compose(self, overrides: list[str]) -> DictConfig:
        extra = [f"hydra.searchpath=[file://{os.path.abspath(self.config_dir)}]"] if self.config_dir else []
        GlobalHydra.instance().clear()
        try:
            with initialize_config_module(config_module=CONF_MODULE, version_base="1.3"):
                return compose_api(
                    config_name=self.config_name, overrides=[*overrides, *extra], return_hydra_config=True
                )
        finally:
            GlobalHydra.instance().clear()

    def explain(self, exc: Exception, overrides: list[str]) -> str:
        """A composition error in one line (oneline.explain), an unknown key with the keys that are."""
        return explain(
            exc,
            overrides,
            self.config_dir,
            missing=isinstance(exc, MissingConfigException),
            compose=self._compose,
        )

    def start(
        self,
        task: Callable,
        overrides: list[str],
        multirun: bool = False,
        setup: Callable | None = None,
        sweep_setup: Callable | None = None,
    ) -> dict[str, Any] | None:
        """The command: composed once, then one run (`setup(cfg)`: a context manager that checks the
        config before anything is created and yields the task's other arguments) or, where the
        config or `multirun` says so, a sweep (`sweep_setup(cfg)`: held while it runs). A sweep
        returns the callbacks it made (multirun)."""
        with one_line():
            hydra = self._hydra(task)
            try:
                cfg = self._compose_master(hydra, [*overrides, *(["hydra.mode=MULTIRUN"] if multirun else [])])
                if cfg.hydra.mode == RunMode.MULTIRUN:
                    return self.multirun(hydra, cfg, task, sweep_setup)
                self.run(hydra, cfg, task, setup)
                return None
            finally:
                GlobalHydra.instance().clear()

    def _hydra(self, task: Callable) -> Hydra:
        """Hydra's own object over the presets, its job named after the task's module, as hydra.main
        names it (the run's log file is NAME.log)."""
        calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
        search_path = create_automatic_config_search_path(calling_file, calling_module, CONF_PATH)
        if self.config_dir is not None:
            path = os.path.abspath(self.config_dir)
            if not os.path.isdir(path):
                raise ConfigError(f"--config-dir {self.config_dir} is not a directory")
            search_path.prepend(
                provider="command-line", path=f"file://{path}", anchor=SearchPathQuery(provider="schema")
            )
        return Hydra.create_main_hydra2(
            task_name=detect_task_name(calling_file, calling_module), config_search_path=search_path
        )

    def _compose_master(self, hydra: Hydra, overrides: list[str]) -> DictConfig:
        """The command's one composition, as Hydra composes a multirun's master config (sweep values
        allowed until the mode is known). A single run's overrides are then checked as Hydra checks
        them for a run, and its mode recorded as Hydra records it."""
        check_presets(self.config_dir)
        try:
            cfg = hydra.compose_config(
                self.config_name, overrides, run_mode=RunMode.MULTIRUN, validate_sweep_overrides=False
            )
            if cfg.hydra.mode is None:
                parsed = OverridesParser.create().parse_overrides(overrides)
                hydra.config_loader.validate_sweep_overrides_legal(parsed, run_mode=RunMode.RUN, from_shell=True)
                cfg.hydra.mode = RunMode.RUN
                cfg.hydra.overrides.hydra.append("hydra.mode=RUN")
        except COMPOSE_ERRORS as exc:
            raise ConfigError(self.explain(exc, overrides)) from None
        return cfg

    def run(self, hydra: Hydra, cfg: DictConfig, task: Callable, setup: Callable | None = None) -> None:
        """Hydra.run's steps on the composed config; `setup` first, whose context spans the run."""
        HydraConfig.instance().set_config(cfg)  # the config's ${hydra:...} values resolve from here on
        with setup(cfg) if setup is not None else contextlib.nullcontext({}) as task_kwargs:
            configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
            callbacks = Callbacks(cfg)
            callbacks.on_run_start(config=cfg, config_name=self.config_name)

            def run():
                with one_line():  # inside: Hydra's report of an exception would print a traceback
                    # Hydra's own files of the run (.hydra/, the log) on a disk that takes none: one line
                    with disk_errors(Path(cfg.hydra.run.dir), "hydra.run.dir"):
                        ret = run_job(
                            hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                            task_function=partial(task, **task_kwargs),
                            config=cfg,
                            job_dir_key="hydra.run.dir",
                            job_subdir_key=None,
                        )
                    callbacks.on_run_end(config=cfg, config_name=self.config_name, job_return=ret)
                    return _returned(ret)

            run_and_report(run)

    def multirun(self, hydra: Hydra, cfg: DictConfig, task: Callable, setup: Callable | None = None) -> dict[str, Any]:
        """Hydra.multirun's steps on the composed config, inside `setup(cfg)`. Returns the callbacks
        it made, by their name in hydra.callbacks (conf/config.yaml's `sweep`: the sweep's session,
        whose summary is the command's exit status)."""
        with setup(cfg) if setup is not None else contextlib.nullcontext():
            callbacks = Callbacks(cfg)  # Hydra builds each in the order hydra.callbacks lists it
            made = dict(zip(OmegaConf.select(cfg, "hydra.callbacks") or {}, callbacks.callbacks, strict=True))

            def refused(message: str) -> str:
                # an error said in one line (sbatch's reason) ends the sweep: its parent run FAILED
                for callback in made.values():
                    if hasattr(callback, "refused"):
                        callback.refused(message)
                return message

            def sweep():
                callbacks.on_multirun_start(config=cfg, config_name=self.config_name)
                with one_line(refused):
                    context = HydraContext(config_loader=hydra.config_loader, callbacks=callbacks)
                    with plugin_errors():
                        sweeper = Plugins.instance().instantiate_sweeper(
                            config=cfg, hydra_context=context, task_function=task
                        )
                    sweeper.sweep(arguments=OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False))
                callbacks.on_multirun_end(config=cfg, config_name=self.config_name)

            run_and_report(sweep)
        return made

    def check_launcher(self, cfg: DictConfig) -> None:
        """A sweep's launcher built as the sweep would build it (its plugin parses its settings when
        built), with no callbacks: ConfigError for settings it refuses. Nothing is launched."""
        setup_globals()
        HydraConfig.instance().set_config(cfg)
        context = HydraContext(config_loader=None, callbacks=Callbacks())
        with plugin_errors():
            Plugins.instance().instantiate_launcher(hydra_context=context, task_function=lambda cfg: None, config=cfg)

    def as_hydra_main(self, task: Callable, args) -> None:
        """Everything as hydra.main does it, from Hydra's parsed arguments (parse_args): its
        print-only flags (--cfg, --info, ...), and any command under HYDRA_FULL_ERROR."""
        _run_hydra(
            args=args,
            args_parser=get_args_parser(),
            task_function=task,
            config_path=CONF_PATH,
            config_name=self.config_name,
        )


def _returned(ret) -> Any:
    """A job's return value; what its task raised is raised again here. Hydra has logged that as
    "Error executing job ..." (caught here): said again after it, unless it is a ConfigError, which
    one_line replaces with its own line."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return ret.return_value
    except BaseException as exc:
        if not isinstance(exc, ConfigError):
            sys.stderr.write(said.getvalue())
        raise


@contextlib.contextmanager
def plugin_errors() -> Iterator[None]:
    """A plugin's ConfigError as itself: Hydra builds plugins with `instantiate`, which wraps what
    their constructor raises in an InstantiationException."""
    try:
        yield
    except InstantiationException as exc:
        if isinstance(exc.__cause__, ConfigError):
            raise exc.__cause__ from None
        raise


def basic_sweeper() -> type:
    """Hydra's grid sweeper (BasicSweeper), for ablate's to extend, as Hydra's plugin scan last made
    it: the scan runs the module of each core plugin again, so a class imported before the scan is
    not the one its own methods name (`super()` refuses an instance of a subclass of the old one)."""
    from hydra._internal.core_plugins import basic_sweeper as module

    return module.BasicSweeper


def parse_args(argv: list[str]):
    """A Hydra app's arguments as Hydra's own parser reads them: its flags (and their values) apart
    from the overrides (`args.overrides`)."""
    return get_args_parser().parse_args(argv)


def parse_overrides(overrides: list[str]) -> list:
    """Hydra's overrides, parsed; ConfigError in one line for one its grammar refuses."""
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise ConfigError(first_line(exc)) from None


def check_presets(config_dir: str | None = None) -> None:
    """Every YAML file among the presets (conf/ and --config-dir) within MAX_PRESET_BYTES and
    MAX_PRESET_ALIASES, read by YAML's scanner (nothing is built). ConfigError (one line) otherwise."""
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


def hydra_node(cfg, key: str):
    """cfg.hydra.KEY resolved, as plain data."""
    node = OmegaConf.select(cfg, f"hydra.{key}")
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def resolved_task(cfg) -> dict:
    """The task's part of a composed config (all but `hydra`), resolved, as a plain dict."""
    return {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in cfg
        if k != "hydra"
    }
