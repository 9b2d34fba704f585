"""What every command shares: where the configs live, one-line errors, the Hydra entry."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from ablate.config import CONF_DIR, ConfigError, parse_run
from ablate.files import check_writable_dir
from ablate.search.space import check_sweeper
from ablate.sweep.launch.settings import check_launcher
from ablate.sweep.plan import BASIC_SWEEPER
from ablate.tracking import agent
from ablate.tracking.store import check_store


def fail(message: str, code: int = 2) -> NoReturn:
    """Bad input: one line on stderr, no traceback, a non-zero exit."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def hydra_main(task: Callable, config_name: str, name: str = "", summary: str = "", example: str = "") -> None:
    """Run `task` as a Hydra app over conf/<config_name>.yaml. `--help` prints this command's own
    help (command_help) instead of Hydra's, which lists every config group in conf/."""
    import hydra

    if not (CONF_DIR / f"{config_name}.yaml").is_file():
        fail(
            f"no {config_name}.yaml in {CONF_DIR} "
            "(valid: run from a checkout installed with `make install`, or set ABLATE_CONF)"
        )
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(command_help(config_name, name or config_name, summary, example))
        return
    if config_name == "config":
        sys.argv += budget_override(sys.argv[1:])
    if not os.environ.get("HYDRA_FULL_ERROR"):
        multirun = any(a in ("-m", "--multirun") for a in sys.argv[1:])
        # --cfg, --help, --info only print: the config is composed, not prepared.
        deep = not any(a in _PRINT_ONLY for a in sys.argv[1:])
        precheck(overrides_only(sys.argv[1:]), config_name, multirun, deep)
    try:
        hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)()
    except KeyboardInterrupt as exc:
        # The run (or each run of a sweep) has recorded itself KILLED and kept its checkpoint; a
        # launcher that stopped its jobs says how many in the exception (sweep/launch/process.py).
        print(
            f"interrupted: {exc}"
            if str(exc)
            else "interrupted (Ctrl-C): runs stopped are KILLED in MLflow; the same command resumes them",
            file=sys.stderr,
        )
        raise SystemExit(130) from None  # 128 + SIGINT, the shell's convention


# Groups a training run takes beyond its defaults list: +sweep=NAME, and Hydra's launchers and sweeper.
EXTRA_GROUPS = {
    "config": [("+sweep", "sweep"), ("hydra/launcher", "hydra/launcher"), ("hydra/sweeper", "hydra/sweeper")]
}


def command_help(config_name: str, name: str, summary: str, example: str) -> str:
    """A command's help: what it does, its config groups and their options, its own keys with their
    defaults (from the composed conf/<config_name>.yaml), and one example."""
    from omegaconf import OmegaConf

    cfg = _compose(config_name, [])
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
            options = sorted(p.stem for p in (CONF_DIR / directory).glob("*.yaml"))
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


# Hydra's own flags that take a value: `--cfg job` is a request, not an override named "job".
_FLAG_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd"}
_FLAG_VALUE |= {"--experimental-rerun"}
_INFO_VALUES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}  # `--info` takes one or none
_PRINT_ONLY = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc"}


def overrides_only(args: list[str]) -> list[str]:
    """The overrides among a Hydra app's arguments: its flags and their values left out."""
    overrides, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg in _FLAG_VALUE or (arg in ("--info", "-i") and i + 1 < len(args) and args[i + 1] in _INFO_VALUES):
            i += 2
            continue
        if not arg.startswith("-"):
            overrides.append(arg)
        i += 1
    return overrides


def budget_override(args: list[str]) -> list[str]:
    """A run has exactly one budget and the default one is train.steps: `train.tokens=...` or
    `train.flops=...` on the command line, without train.steps, replaces it (["train.steps=null"])."""
    keys = {a.split("=", 1)[0].lstrip("+~"): a.split("=", 1)[1] for a in args if "=" in a and not a.startswith("-")}
    if "train.steps" in keys:
        return []
    given = [k for k in ("train.tokens", "train.flops") if keys.get(k, "null") != "null"]
    return ["train.steps=null"] if given else []


def precheck(args: list[str], config_name: str, multirun: bool = False, deep: bool = True) -> None:
    """Before Hydra runs, so before it creates a run dir, a store, a parent run or a file: compose
    the config once per distinct choice (a typo fails in one line that names the valid choices,
    instead of Hydra's multi-line report), and check what the composed config asks for
    (`check_run_config`). Sweep overrides (a,b,c) are checked value by value, except the values of a
    plain key (not a config group) in a grid sweep (Hydra's BasicSweeper): the sweep plan composes
    and checks every job anyway (sweep/plan.py), and composing them here too cost 0.1 s of CPU each.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        fail(_first_line(exc))
    plain = [o.input_line for o in parsed if not o.is_sweep_override()]
    sweeps = [o for o in parsed if o.is_sweep_override()]
    first = plain + [_with_value(o, _values(o)[0]) for o in sweeps]
    trials = [(first, None)]
    for i, o in enumerate(sweeps):
        for v in _values(o)[1:]:
            trial = list(first)
            trial[len(plain) + i] = _with_value(o, v)
            trials.append((trial, o))
    planned = False
    for i, (overrides, varied) in enumerate(trials):
        if planned and not _is_group(varied):
            continue
        try:
            cfg = _compose(config_name, overrides)
        except (HydraException, OmegaConfBaseException) as exc:
            fail(explain(exc, overrides, config_name))
        if i == 0:
            planned = _planned_sweep(cfg, multirun)
        if config_name == "config" and deep:
            try:
                check_run_config(cfg, multirun, [o.input_line for o in parsed], first=i == 0)
            except ConfigError as exc:
                fail(str(exc))
            except (HydraException, OmegaConfBaseException) as exc:
                fail(_first_line(exc))


def _is_group(override) -> bool:
    """Whether an override picks a config group's option (model=nano, +sweep=lr, hydra/launcher=...)."""
    key = override.key_or_group.lstrip("+~")
    return "/" in key or (CONF_DIR / key).is_dir()


def _planned_sweep(cfg, multirun: bool) -> bool:
    """Whether a composed config is a sweep whose every job the sweep plan composes (sweep/plan.py)."""
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    sweep = multirun or OmegaConf.select(cfg, "hydra.mode") == RunMode.MULTIRUN
    return sweep and OmegaConf.select(cfg, "hydra.sweeper._target_") == BASIC_SWEEPER


def check_run_config(cfg, multirun: bool, args: list[str], first: bool) -> None:
    """What `python -m ablate` will do with a composed config (with its `hydra` node), checked
    before Hydra creates anything; ConfigError otherwise. Every key of every group (parse_run);
    the dirs Hydra and the run will write to; a single run is prepared in full (this machine, its
    memory, the data, the store: run/prepare.py) and kept for the run; a sweep's launcher and
    sweeper settings are parsed by the parsers they use, because Hydra builds them only after the
    sweep callback has created the store and a parent run. (A sweep's jobs are prepared by that
    callback's plan, sweep/plan.py, before it creates anything.)"""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    setup_globals()
    HydraConfig.instance().set_config(cfg)

    def hydra_node(key: str):
        node = OmegaConf.select(cfg, f"hydra.{key}")
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node

    tree = _resolved_task(cfg)
    if not (multirun or hydra_node("mode") == RunMode.MULTIRUN):
        run_cfg = parse_run(tree)
        # The cheap checks of what prepare checks too, before its imports (torch) cost seconds.
        check_writable_dir(run_cfg.state_dir, "state_dir")
        tracking = run_cfg.tracking
        if tracking.backend == "mlflow":
            check_store(tracking.uri)
            agent.use(tracking.uri)  # the store's code imported on another core while this process imports torch
        else:
            agent.close()
        check_writable_dir(hydra_node("run.dir"), "hydra.run.dir")
        from ablate.run.branches import is_family, prepare_family  # torch: only once the config parses
        from ablate.run.prepare import prepare, remember

        if is_family(run_cfg):  # a list budget: a trunk and its cooldown branches, each prepared
            prepare_family(run_cfg)
        else:
            remember(run_cfg, prepare(run_cfg))
        if tracking.backend == "mlflow":
            agent.open_store(tracking.uri, tracking.experiment)  # every check passed: the store may be created
        return
    # A sweep's base config may lack what its sweeper's params add (a budget per job): every job
    # is parsed and prepared by the sweep callback's plan (sweep/plan.py), before it creates anything.
    agent.close()  # a sweep's jobs track from their own processes
    check_writable_dir(hydra_node("sweep.dir"), "hydra.sweep.dir")
    if not first:  # the launcher and sweeper settings are the same for every choice
        return

    check_launcher(hydra_node("launcher") or {})
    sweeper = hydra_node("sweeper") or {}
    if str(sweeper.get("_target_", "")).endswith("OptunaSweeper"):
        task_args = [a for a in args if not a.lstrip("+~").startswith("hydra")]
        check_sweeper(sweeper, task_args, tree, hydra_node("runtime.cwd"))


def _resolved_task(cfg) -> dict:
    """The task's part of a composed config (all but `hydra`), resolved, as a plain dict."""
    from omegaconf import OmegaConf

    return {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in cfg
        if k != "hydra"
    }


def _compose(config_name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
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


def explain(exc: Exception, overrides: list[str], config_name: str = "config") -> str:
    """One line for Hydra's composition errors: what was asked for and what is valid."""
    from hydra.errors import MissingConfigException
    from omegaconf import OmegaConf

    if isinstance(exc, MissingConfigException) or "Could not find" in str(exc):
        for o in overrides:
            key, _, value = o.lstrip("+~").partition("=")
            group = CONF_DIR / key
            if group.is_dir() and not (group / f"{value}.yaml").is_file():
                options = sorted(p.stem for p in group.glob("*.yaml"))
                return f"{key}={value} is not a known option (valid: {', '.join(options)})"
    text = str(exc)
    if text.startswith("Could not override '"):
        key = text.split("'")[1]
        parent, _, leaf = key.rpartition(".")
        rest = [o for o in overrides if not o.startswith(f"{key}=")]
        try:
            node = _compose(config_name, rest)
            valid = sorted(OmegaConf.select(node, parent).keys()) if parent else sorted(k for k in node if k != "hydra")
            return f"unknown key {key} (valid: {', '.join(map(str, valid))})"
        except Exception:  # the composition itself is broken: fall back to Hydra's words
            pass
    return _first_line(exc)


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
        return parse_run(_resolved_task(cfg))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(explain(exc, overrides)) from None
