"""Where the presets live. The package's own (ablate/conf, package data) are found by Hydra as
pkg://ablate.conf wherever the package is installed, so `ablate` works from any folder. A user's
own presets sit in a folder of their own, laid out as the config groups (DIR/model/NAME.yaml,
DIR/sweep/NAME.yaml, ...), and come in through Hydra's `--config-dir DIR`, which puts that folder
after the package's in the search path: a preset of the user's adds an option to its group. Reading
a preset here, those folders are given by the caller (`folders`: the app's, hydra_app.preset_folders),
never looked up in a running Hydra app.

A config is recorded under the name of what it holds (`real_name`, docs/configuration.md#names):
its preset's name, with each key it changes of those the name stands for (nano.n_layer_12)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import yaml

from ablate.files import safe_name

CONF_MODULE = "ablate.conf"
CONF_PATH = f"pkg://{CONF_MODULE}"
# The same files on disk, for listing a group's options and reading a preset as plain YAML.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
# A preset's defaults list naming presets whose own lists name more: deeper is a loop.
MAX_DEFAULTS_DEPTH = 8


def group_options(group: str, config_dir: str | None = None) -> list[str]:
    """A config group's options: the package's presets (CONF_DIR/GROUP/*.yaml), a user's own
    (`--config-dir DIR`: DIR/GROUP/*.yaml) and the configs that plugins register in Hydra's
    ConfigStore under that group (the launchers, the sweepers)."""
    from hydra.core.config_store import ConfigStore

    roots = [CONF_DIR, *([Path(config_dir)] if config_dir else [])]
    files = {p.stem for root in roots for p in (root / group).glob("*.yaml")}
    try:  # a group's schema (base_GROUP, config/schemas.py) is what every option starts from, not one
        stored = {Path(name).stem for name in ConfigStore.instance().list(group) if not name.startswith("base_")}
    except OSError:  # ConfigStore raises IOError for a group it does not hold
        stored = set()
    return sorted(files | stored)


def preset_folders(hydra_node) -> tuple[Path, ...]:
    """The user's preset folders on a composed config's search path (`hydra_node`: its `hydra` node,
    or HydraConfig.get() in a task): the file sources Hydra composed from (--config-dir), in its
    order. The package's own are pkg:// sources, read from CONF_DIR."""
    sources = (hydra_node.get("runtime") or {}).get("config_sources") or []
    return tuple(Path(s["path"]) for s in sources if s.get("schema") == "file" and s.get("path"))


def read_preset(group: str, name: str, folders: Sequence[Path] = (), depth: int = 0) -> dict | None:
    """The preset GROUP/NAME.yaml as Hydra composes it alone (OmegaConf's YAML: 1.95e13 is a number;
    a defaults list of the group's own presets merged in its order, _self_ last unless placed), from
    the package's presets, else from the user's own `folders` (--config-dir), in Hydra's order. None
    where there is no such file (a name of the user's own, such as custom) or its defaults reach
    beyond its group."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if safe_name(name) != name or depth > MAX_DEFAULTS_DEPTH:  # ../x is no file name of the group
        return None
    path = next((p for p in (root / group / f"{name}.yaml" for root in (CONF_DIR, *folders)) if p.is_file()), None)
    if path is None:
        return None
    try:
        tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except (OSError, OmegaConfBaseException, yaml.YAMLError):
        return None
    if not isinstance(tree, dict):
        return None
    defaults = tree.pop("defaults", None) or []
    if "_self_" not in defaults:
        defaults = [*defaults, "_self_"]
    composed: dict = {}
    for entry in defaults:
        base: dict | None = tree
        if entry != "_self_":
            base = read_preset(group, entry, folders, depth + 1) if isinstance(entry, str) else None
        if base is None:
            return None
        merged = OmegaConf.to_container(OmegaConf.merge(composed, base), resolve=False)
        composed = merged if isinstance(merged, dict) else {}
    return composed


def real_name(
    group: str, part, keys: tuple[str, ...], name: str | None = None, folders: Sequence[Path] = ()
) -> str | None:
    """The name of what `part` (a config slice of `group`) holds, or None where its preset (`name`,
    else part.name: GROUP/NAME.yaml, in the package's presets or the user's `folders`) is not found.
    Each of `keys` the preset fixes and `part` holds otherwise is added to the preset's name as
    .KEY_VALUE, in the order of `keys`, so the name stays
    one path component and one unquoted Hydra value: nano with 12 layers is nano.n_layer_12, an h100
    with 40 GB is h100.memory_gb_40, one entry of a mapping .peak_flops.bf16_2e15. A key the preset
    leaves null or empty (a model's vocab_size: the data's; a device kind's peak_flops: measured)
    takes any value, and a key the file leaves out stands at the schema's default."""
    name = part.name if name is None else name
    fixed = read_preset(group, name, folders)
    if fixed is None:
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(part) if f.default is not dataclasses.MISSING}
    changed = []
    for key in keys:
        was, now = fixed.get(key, defaults.get(key)), getattr(part, key)
        if was is None or was == {}:
            continue
        if isinstance(was, dict) and isinstance(now, dict):
            entries = [*was, *sorted(k for k in now if k not in was)]
            changed += [f"{key}.{k}_{_value(now.get(k))}" for k in entries if now.get(k) != was.get(k)]
        elif now != was:
            changed.append(f"{key}_{_value(now)}")
    return ".".join([name, *changed])


def _value(value) -> str:
    """A value as a name's part: 12, 40, 8.9, 2e15, null, cpu (safe_name's characters only)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:g}".replace("e+", "e")
    return safe_name(str(value))
