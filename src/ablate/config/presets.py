"""Where the presets live. The package's own (ablate/conf, package data) are found by Hydra as
pkg://ablate.conf wherever the package is installed, so `ablate` works from any folder. A user's
own presets sit in a folder of their own, laid out as the config groups (DIR/model/NAME.yaml,
DIR/sweep/NAME.yaml, ...), and come in through Hydra's `--config-dir DIR`, which puts that folder
after the package's in the search path: a preset of the user's adds an option to its group."""

from __future__ import annotations

from pathlib import Path

CONF_MODULE = "ablate.conf"
CONF_PATH = f"pkg://{CONF_MODULE}"
# The same files on disk, for listing a group's options and reading a preset as plain YAML.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def group_options(group: str, config_dir: str | None = None) -> list[str]:
    """A config group's options: the package's presets (CONF_DIR/GROUP/*.yaml), a user's own
    (`--config-dir DIR`: DIR/GROUP/*.yaml) and the configs that plugins register in Hydra's
    ConfigStore under that group (the launchers, the sweepers)."""
    from hydra.core.config_store import ConfigStore

    roots = [CONF_DIR, *([Path(config_dir)] if config_dir else [])]
    files = {p.stem for root in roots for p in (root / group).glob("*.yaml")}
    try:
        stored = {Path(name).stem for name in ConfigStore.instance().list(group)}
    except OSError:  # ConfigStore raises IOError for a group it does not hold
        stored = set()
    return sorted(files | stored)
