"""Each config group's schema in Hydra's ConfigStore, as GROUP/base_GROUP: every key of the group's
dataclass at the default its field declares. The primary configs (conf/config.yaml, conf/plan.yaml)
list each schema before the group's preset (`- model/base_model@model`, then `- model: micro`), so a
preset writes only what it changes, a key it leaves out stands at its default, and every key can be
overridden from the command line (Hydra's "schema for config files").

The nodes are untyped: a Literal or a budget that may be a list is no type OmegaConf holds, and the
one-line errors of `parse_run` (schema.coerce and each part's validate) stay the only checks. The
data sources (data=synthetic|text|tokens) have a schema each and no common one: they keep every key
in their presets.

Importing ablate.config registers them, as a Hydra plugin registers its nodes on import: every
process that composes has imported it first (Hydra's plugin discovery imports ablate's plugins,
which import it)."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from ablate.config.run import SECTIONS
from ablate.config.schema import as_dict

SCHEMAS: dict[str, type] = SECTIONS  # a run's sections, each group's schema
SCHEMA_PREFIX = "base_"


def schema_name(group: str) -> str:
    return f"{SCHEMA_PREFIX}{group}"


def store_schemas() -> None:
    """Register every group's schema in Hydra's ConfigStore (once per interpreter; storing again
    replaces a node with the same one)."""
    store = ConfigStore.instance()
    for group, cls in SCHEMAS.items():
        store.store(group=group, name=schema_name(group), node=as_dict(cls()), provider="ablate")


store_schemas()
