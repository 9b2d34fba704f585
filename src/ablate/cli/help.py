"""`ablate COMMAND --help` for the commands that are Hydra apps: what the command does, its config
groups and their options, its own keys with their defaults (from its composed preset), and one
example, in place of Hydra's help, which lists every config group in conf/."""

from __future__ import annotations

import json

from ablate.config import group_options

# Groups a training run takes beyond its defaults list: +sweep=NAME, and Hydra's launchers and sweeper.
EXTRA_GROUPS = {
    "config": [("+sweep", "sweep"), ("hydra/launcher", "hydra/launcher"), ("hydra/sweeper", "hydra/sweeper")]
}


def command_help(app, name: str, summary: str, example: str) -> str:
    """The help of `app` (hydra_app.App), a command named `name`: ConfigError for a preset past its bounds."""
    from omegaconf import OmegaConf  # a dependency: loaded by the commands that compose

    cfg = app.compose([])
    # Hydra records the choices last-composed first; reversed, they read in the defaults list's order.
    picked = OmegaConf.to_container(cfg.hydra.runtime.choices).items()
    choices = {g: c for g, c in reversed(list(picked)) if not g.startswith("hydra/")}
    lines = [f"usage: ablate {name} [KEY=VALUE ...]" + (" [+sweep=NAME | --multirun KEY=A,B]" * (name == "train"))]
    lines += ["", summary] if summary else []
    extra = EXTRA_GROUPS.get(app.config_name, [])
    groups = [(g, g, c) for g, c in choices.items()] + [(f, d, None) for f, d in extra]
    if groups:
        lines += ["", "config groups (GROUP=OPTION; * the default):"]
        width = max(len(flag) for flag, _, _ in groups)
        for flag, directory, default in groups:
            options = group_options(directory, app.config_dir)
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
