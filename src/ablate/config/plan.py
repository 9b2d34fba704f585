"""The schema of `ablate plan` (conf/plan.yaml): the budget, the data the user has, the cluster and
how to use it. `parse_plan` turns the composed tree into them, with the model, precision and
hardware slices of the training schema (config/run.py)."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ablate.config.run import HardwareConfig, ModelConfig, PrecisionConfig
from ablate.config.schema import build, coerce, require_at_most, require_positive
from ablate.errors import ConfigError
from ablate.files import inside

COMPUTE_BUDGETS = ("flops", "hours", "dollars")
# What a plan can price: a few decades past the largest runs trained to date (about 4e13 tokens and
# 5e25 FLOPs, clusters of about 1e5 GPUs), so that an exponent typed wrong is refused rather than
# priced; beyond them the formulas overflow (budget.hours=1e300) or the table prints nonsense.
BUDGET_LIMITS = {
    "tokens": (1e16, "tokens"),
    "flops": (1e30, "FLOPs"),
    "hours": (1e6, "hours"),
    "dollars": (1e13, "dollars"),
}
MAX_GPUS = 10_000_000
MAX_CONTEXT = 100_000_000  # tokens of one sequence
MAX_BATCH = 1_000_000  # sequences per GPU
# An MFU below this is no measurement of a run but a typo; the hours it prices are unbounded.
MIN_MFU = 1e-3


@dataclass
class BudgetConfig:
    """What the run may spend. tokens fixes D; at most one of flops, hours, dollars caps compute."""

    tokens: float | None = None
    flops: float | None = None
    hours: float | None = None
    dollars: float | None = None

    def validate(self) -> None:
        for key in ("tokens", *COMPUTE_BUDGETS):
            if getattr(self, key) is not None:
                require_positive(f"budget.{key}", getattr(self, key))
                require_at_most(f"budget.{key}", getattr(self, key), *BUDGET_LIMITS[key])
        given = [k for k in COMPUTE_BUDGETS if getattr(self, k) is not None]
        if len(given) > 1:
            pairs = " and ".join(f"budget.{k}={getattr(self, k):g}" for k in given)
            raise ConfigError(
                f"{pairs} conflict (valid: at most one of budget.flops, budget.hours, "
                "budget.dollars, with or without budget.tokens)"
            )
        if self.tokens is None and not given:
            raise ConfigError(
                "no budget given (valid: budget.tokens=N, and/or one of budget.flops, budget.hours, budget.dollars)"
            )

    @property
    def compute_key(self) -> str | None:
        return next((k for k in COMPUTE_BUDGETS if getattr(self, k) is not None), None)


@dataclass
class PlanDataConfig:
    # Unique training tokens the user has; None: not a constraint.
    tokens_available: float | None = None

    def validate(self) -> None:
        if self.tokens_available is not None:
            if not self.tokens_available >= 1:
                raise ConfigError(
                    f"data.tokens_available={self.tokens_available:g} is less than one token (valid: >= 1)"
                )
            require_at_most("data.tokens_available", self.tokens_available, *BUDGET_LIMITS["tokens"])


@dataclass
class PlanConfig:
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    data: PlanDataConfig = field(default_factory=PlanDataConfig)
    # GPUs the user has; the plan says when it needs more.
    gpus: int = 1
    # Micro-batch per GPU in sequences (the global batch comes from data parallelism and gradient
    # accumulation, which do not change memory per GPU).
    batch_size: int = 4
    # Training context; None: the model's block_size.
    context: int | None = None
    activation_checkpointing: bool = False
    # MFU to assume; None: the median of the user's own runs on this hardware and precision, else default_mfu.
    mfu: float | None = None
    default_mfu: float = 0.4
    # Fraction of each GPU's memory kept free (CUDA context, allocator fragmentation).
    memory_reserve: float = 0.1
    # Fraction of a link's bandwidth that NCCL's collectives reach on large messages (plan/comm.py).
    comm_efficiency: float = 0.8
    # Also write the planned run as another engine's job (plan/export.py): torchtitan.
    export: str | None = None
    fit: str | None = None
    tracking_uri: str = ""
    # None: plans/<model.name>-<hardware.name>, each name made one safe path component (parse_plan).
    out: str | None = None

    def validate(self) -> None:
        self.budget.validate()
        self.data.validate()
        for key in ("gpus", "batch_size"):
            require_positive(key, getattr(self, key))
        require_at_most("gpus", self.gpus, MAX_GPUS, "GPUs")
        require_at_most("batch_size", self.batch_size, MAX_BATCH, "sequences per GPU")
        if self.context is not None:
            require_positive("context", self.context)
            require_at_most("context", self.context, MAX_CONTEXT, "tokens")
        for key in ("mfu", "default_mfu"):
            v = getattr(self, key)
            if v is not None and not 0.0 < v <= 1.0:
                raise ConfigError(f"{key}={v} is invalid (valid: 0 < {key} <= 1)")
            if v is not None and v < MIN_MFU:
                raise ConfigError(f"{key}={v:g} is too small (valid: {MIN_MFU:g} <= {key} <= 1)")
        if self.export is not None and self.export not in ("torchtitan",):
            raise ConfigError(
                f"export={self.export} is not an engine ablate writes jobs for (valid: torchtitan, or null)"
            )
        if not 0.0 < self.comm_efficiency <= 1.0:
            raise ConfigError(f"comm_efficiency={self.comm_efficiency} is invalid (valid: 0 < comm_efficiency <= 1)")
        if not 0.0 <= self.memory_reserve < 1.0:
            raise ConfigError(f"memory_reserve={self.memory_reserve} is invalid (valid: 0 <= memory_reserve < 1)")
        if self.out is not None and not self.out.strip():
            raise ConfigError("out is empty (valid: a directory path, e.g. plans/my-run, or null for the default)")


@dataclass(frozen=True)
class PlanInputs:
    model: ModelConfig
    precision: PrecisionConfig
    hardware: HardwareConfig
    plan: PlanConfig


PLAN_KEYS = {"model", "precision", "hardware", "budget", "data"} | {
    f for f in PlanConfig.__dataclass_fields__ if f not in ("budget", "data")
}


def parse_plan(tree: dict, preset_folders: Sequence[Path] = ()) -> PlanInputs:
    """Typed, validated slices from the composed conf/plan.yaml tree (a plain dict); the model and
    hardware named from the package's presets and the user's `preset_folders` (--config-dir)."""
    tree = {k: v for k, v in tree.items() if k != "hydra"}
    for key in tree:
        if key not in PLAN_KEYS:
            raise ConfigError(f"unknown key {key} (valid: {', '.join(sorted(PLAN_KEYS))})")
    model = build(ModelConfig, tree.get("model"), "model")
    precision = build(PrecisionConfig, tree.get("precision"), "precision")
    hardware = build(HardwareConfig, tree.get("hardware"), "hardware")
    hints = typing.get_type_hints(PlanConfig)
    top = {
        k: coerce(k, v, hints[k])
        for k, v in tree.items()
        if k not in ("model", "precision", "hardware", "budget", "data")
    }
    plan = PlanConfig(
        budget=build(BudgetConfig, tree.get("budget"), "budget"),
        data=build(PlanDataConfig, tree.get("data"), "data"),
        **top,
    )
    if model.vocab_size is None:
        raise ConfigError(
            f"model.vocab_size is null for model={model.name} (valid: a vocabulary size, "
            "e.g. model.vocab_size=27 for the synthetic language or 50257 for GPT-2's BPE)"
        )
    # Named as the user chose them (ModelConfig.named); the context is the plan's own key, and the plan says it.
    model, hardware = model.named(preset_folders), hardware.named(preset_folders)
    if plan.context is not None:
        model = replace(model, block_size=plan.context)
    for part in (model, precision, hardware, plan):
        part.validate()
    if plan.out is None:  # names from configs never climb out of plans/ ('../x' is '_x')
        plan = replace(plan, out=str(inside("plans", f"{model.name}-{hardware.name}")))
    return PlanInputs(model, precision, hardware, plan)
