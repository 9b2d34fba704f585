"""Every command's config schema: typed dataclasses and the parse functions that build them from a
composed tree, and the one place where user input is checked.

Hydra composes YAML from the presets (`presets`: ablate/conf, and a user's own `--config-dir`);
a parse function turns the composed tree into these dataclasses, and each component receives only
its own slice. Bad input raises `ConfigError`, whose message is one line: key, bad value, what is valid.

    run.py      one training run: model, precision, hardware, optim, train, tracking; parse_run
    data.py     the token sources, the synthetic language among them; parse_data; ablate prepare, parse_prepare
    fit.py      ablate fit, backtest and compare; parse_fit, parse_backtest, parse_compare
    plan.py     ablate plan; parse_plan
    sample.py   ablate sample; parse_sample
    search.py   the Optuna sweeper's settings; parse_search
    keys.py     a key's one declaration: `setting`, its default and how it enters the config hash (Hashing)
    schemas.py  each group's schema in Hydra's ConfigStore (GROUP/base_GROUP), so a preset lists what it changes
    schema.py   build and coerce: a tree to a dataclass, key by key; the shared range checks
    launch.py   the launchers' settings (hydra.launcher), which the plugins register in Hydra's ConfigStore
    presets.py  where the presets live: pkg://ablate.conf (a user's own come in with --config-dir); a preset as
                composed, and the name of what a config holds (real_name: nano.n_layer_12)
"""

from ablate.config.data import (
    DATA_KINDS,
    DataConfig,
    PrepareConfig,
    SyntheticDataConfig,
    TextDataConfig,
    TokenDataConfig,
    parse_data,
    parse_prepare,
)
from ablate.config.fit import (
    DEFAULT_CUTS,
    MAX_TARGET,
    PARAM_KINDS,
    Approach2Config,
    BacktestConfig,
    CompareConfig,
    FitConfig,
    FitSourceConfig,
    FitTrackingConfig,
    TargetConfig,
    check_source,
    parse_backtest,
    parse_compare,
    parse_fit,
)
from ablate.config.keys import Hashing, declared_fields, hashing, section_classes, setting
from ablate.config.launch import (
    SUBMITIT_CLUSTERS,
    ProcessSettings,
    SubmititSettings,
    parse_process_settings,
    parse_submitit_settings,
)
from ablate.config.plan import (
    COMPUTE_BUDGETS,
    PLAN_KEYS,
    BudgetConfig,
    PlanConfig,
    PlanDataConfig,
    PlanInputs,
    parse_plan,
)
from ablate.config.presets import (
    CONF_DIR,
    CONF_MODULE,
    CONF_PATH,
    group_options,
    preset_folders,
    read_preset,
    real_name,
)
from ablate.config.run import (
    BUDGET_KEYS,
    DEVICE_KINDS,
    MAX_EVAL_BATCHES,
    MAX_FLUSH_INTERVAL_S,
    PRECISION_NAMES,
    REAL_FP8,
    SECTIONS,
    HardwareConfig,
    ModelConfig,
    OptimConfig,
    PrecisionConfig,
    RunConfig,
    TrackingConfig,
    TrainConfig,
    budget,
    is_user_class,
    parse_run,
)
from ablate.config.sample import SampleConfig, parse_sample
from ablate.config.schema import (
    MAX_INT,
    as_dict,
    build,
    coerce,
    reject_unknown,
    require_at_most,
    require_fraction,
    require_positive,
)
from ablate.config.schemas import SCHEMAS, schema_name, store_schemas
from ablate.config.search import COSTS, PRUNER_KEYS, SAMPLER_KEYS, SearchConfig, flatten_params, parse_search
from ablate.errors import ConfigError, UnsupportedError

__all__ = [
    "SUBMITIT_CLUSTERS",
    "ProcessSettings",
    "SubmititSettings",
    "parse_process_settings",
    "parse_submitit_settings",
    "group_options",
    "PrepareConfig",
    "parse_prepare",
    # errors
    "ConfigError",
    "UnsupportedError",
    # one training run
    "BUDGET_KEYS",
    "REAL_FP8",
    "DEVICE_KINDS",
    "MAX_EVAL_BATCHES",
    "MAX_FLUSH_INTERVAL_S",
    "PRECISION_NAMES",
    "SECTIONS",
    "HardwareConfig",
    "ModelConfig",
    "OptimConfig",
    "PrecisionConfig",
    "RunConfig",
    "TrackingConfig",
    "TrainConfig",
    "budget",
    "is_user_class",
    "parse_run",
    # its data
    "DATA_KINDS",
    "DataConfig",
    "SyntheticDataConfig",
    "TextDataConfig",
    "TokenDataConfig",
    "parse_data",
    # fit, backtest, compare
    "DEFAULT_CUTS",
    "MAX_TARGET",
    "PARAM_KINDS",
    "Approach2Config",
    "BacktestConfig",
    "CompareConfig",
    "FitConfig",
    "FitSourceConfig",
    "FitTrackingConfig",
    "TargetConfig",
    "check_source",
    "parse_backtest",
    "parse_compare",
    "parse_fit",
    # plan
    "COMPUTE_BUDGETS",
    "PLAN_KEYS",
    "BudgetConfig",
    "PlanConfig",
    "PlanDataConfig",
    "PlanInputs",
    "parse_plan",
    # sample
    "SampleConfig",
    "parse_sample",
    # search
    "COSTS",
    "PRUNER_KEYS",
    "SAMPLER_KEYS",
    "SearchConfig",
    "flatten_params",
    "parse_search",
    # a key's one declaration
    "Hashing",
    "declared_fields",
    "hashing",
    "section_classes",
    "setting",
    # each group's schema in Hydra's ConfigStore
    "SCHEMAS",
    "schema_name",
    "store_schemas",
    # building a dataclass from a tree
    "MAX_INT",
    "as_dict",
    "build",
    "coerce",
    "reject_unknown",
    "require_at_most",
    "require_fraction",
    "require_positive",
    # where the presets live, and the name of what a config holds
    "read_preset",
    "preset_folders",
    "real_name",
    "CONF_DIR",
    "CONF_MODULE",
    "CONF_PATH",
]
