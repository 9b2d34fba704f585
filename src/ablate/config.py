"""Typed schema of every config slice, and the one place where user input is checked.

Hydra composes YAML from conf/; `parse_run` turns the composed tree into these dataclasses.
Each component receives only its own slice (a `ModelConfig`, never the whole tree).
Bad input raises `ConfigError` whose message is one line: key, bad value, what is valid.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union, get_args, get_origin


class ConfigError(ValueError):
    """A user-facing configuration error; its message is a single line."""


class UnsupportedError(ConfigError):
    """A valid config that this machine cannot run (e.g. fp8 without an sm_89+ GPU)."""


PRECISION_NAMES = ("fp32", "bf16", "bf16_pure", "fp16", "fp8", "fp8_emulated")
DEVICE_KINDS = ("cpu", "cuda", "mps")


@dataclass
class ModelConfig:
    name: str = "custom"
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    # None: taken from the data source (27 for the synthetic language, 256 for bytes).
    vocab_size: Optional[int] = None
    attention: Literal["manual", "sdpa"] = "sdpa"
    dropout: float = 0.0
    init_std: float = 0.02
    # Planning presets (e.g. 1.5B) describe runs to price, not to train on a laptop.
    planning_only: bool = False
    # Maximal update parametrization (Yang et al. 2022, Tensor Programs V): hyperparameters tuned
    # at width mup_base_width carry over to this width. At n_embd == mup_base_width muP and the
    # standard parametrization are the same network; null means this width is the base.
    # mup_base_width is ignored while mup is false, so one preset can serve both in a sweep.
    mup: bool = False
    mup_base_width: Optional[int] = None

    def validate(self) -> None:
        for key in ("n_layer", "n_head", "n_embd", "block_size"):
            _positive(f"model.{key}", getattr(self, key))
        if self.vocab_size is not None:
            _positive("model.vocab_size", self.vocab_size)
        if self.n_embd % self.n_head:
            valid = self.n_embd - self.n_embd % self.n_head or self.n_head
            raise ConfigError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head} "
                f"(valid: a multiple of {self.n_head}, e.g. {valid})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout} is invalid (valid: 0 <= dropout < 1)")
        _positive("model.init_std", self.init_std)
        if self.mup_base_width is not None:
            _positive("model.mup_base_width", self.mup_base_width)


@dataclass
class SyntheticDataConfig:
    kind: Literal["synthetic"] = "synthetic"
    n_words: int = 4000
    successors: int = 64
    zipf_unigram: float = 1.1
    zipf_successor: float = 1.0
    min_len: int = 2
    max_len: int = 9
    seed: int = 0
    # Tokens generated once per run for the training and validation streams.
    train_tokens: int = 4_000_000
    val_tokens: int = 200_000

    def validate(self) -> None:
        for key in ("n_words", "successors", "min_len", "max_len", "train_tokens", "val_tokens"):
            _positive(f"data.{key}", getattr(self, key))
        if self.successors > self.n_words:
            raise ConfigError(
                f"data.successors={self.successors} exceeds data.n_words={self.n_words} "
                f"(valid: 1..{self.n_words})"
            )
        if self.min_len > self.max_len:
            raise ConfigError(f"data.min_len={self.min_len} > data.max_len={self.max_len} (valid: min_len <= max_len)")


@dataclass
class TextDataConfig:
    kind: Literal["text"] = "text"
    # Files or folders; folders are searched with `glob`. "stdlib" means the Python standard
    # library's own source, a real corpus present on every machine that runs this project.
    paths: list = field(default_factory=lambda: ["stdlib"])
    glob: str = "**/*.py"
    max_bytes: int = 20_000_000
    val_fraction: float = 0.05

    def validate(self) -> None:
        if not self.paths:
            raise ConfigError("data.paths=[] is empty (valid: a list of files or folders, or [stdlib])")
        _positive("data.max_bytes", self.max_bytes)
        _fraction("data.val_fraction", self.val_fraction)


@dataclass
class TokenDataConfig:
    kind: Literal["tokens"] = "tokens"
    # uint16 token ids written by the user's tokenizer (numpy .tofile / memmap).
    train_bin: str = ""
    val_bin: str = ""
    vocab_size: int = 50257

    def validate(self) -> None:
        if not self.train_bin or not self.val_bin:
            raise ConfigError(
                "data.train_bin and data.val_bin must name uint16 token files (valid: paths to existing .bin files)"
            )
        _positive("data.vocab_size", self.vocab_size)
        if self.vocab_size > 65536:
            raise ConfigError(f"data.vocab_size={self.vocab_size} does not fit uint16 (valid: <= 65536)")


DataConfig = Union[SyntheticDataConfig, TextDataConfig, TokenDataConfig]
DATA_KINDS = {"synthetic": SyntheticDataConfig, "text": TextDataConfig, "tokens": TokenDataConfig}


@dataclass
class PrecisionConfig:
    name: Literal["fp32", "bf16", "bf16_pure", "fp16", "fp8", "fp8_emulated"] = "fp32"
    # Storage dtype of weights and gradients; optimizer moments stay fp32 in every policy.
    param_dtype: Literal["fp32", "bf16"] = "fp32"
    autocast: Optional[Literal["bf16", "fp16"]] = None
    loss_scaling: bool = False
    fp8: Optional[Literal["real", "emulated"]] = None
    # Which devices can run this policy, and the CUDA compute capability it needs there.
    devices: list = field(default_factory=lambda: list(DEVICE_KINDS))
    min_cuda_capability: Optional[float] = None

    def validate(self) -> None:
        for d in self.devices:
            if d not in DEVICE_KINDS:
                raise ConfigError(f"precision.devices has {d!r} (valid: {', '.join(DEVICE_KINDS)})")
        if self.loss_scaling and self.autocast != "fp16":
            raise ConfigError("precision.loss_scaling=true needs precision.autocast=fp16 (valid: fp16 autocast)")


@dataclass
class HardwareConfig:
    name: str = "auto"
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    # Peak dense FLOP/s per precision (no sparsity). Missing entries: not supported, or
    # (for the cpu) measured on this machine by a short matmul benchmark.
    peak_flops: dict = field(default_factory=dict)
    memory_gb: Optional[float] = None
    memory_bandwidth_gbs: Optional[float] = None
    price_per_hour: Optional[float] = None
    gpus_per_node: int = 1
    # Runs at once on one machine under the parallel launcher; None means from the core count.
    workers: Optional[int] = None
    cuda_capability: Optional[float] = None

    def validate(self) -> None:
        for k, v in self.peak_flops.items():
            if k not in ("fp32", "tf32", "bf16", "fp16", "fp8"):
                raise ConfigError(f"hardware.peak_flops has key {k!r} (valid: fp32, tf32, bf16, fp16, fp8)")
            if v is not None:
                _positive(f"hardware.peak_flops.{k}", v)
        for key in ("memory_gb", "memory_bandwidth_gbs"):
            if getattr(self, key) is not None:
                _positive(f"hardware.{key}", getattr(self, key))
        if self.price_per_hour is not None and self.price_per_hour < 0:
            raise ConfigError(f"hardware.price_per_hour={self.price_per_hour} is negative (valid: >= 0)")
        _positive("hardware.gpus_per_node", self.gpus_per_node)
        if self.workers is not None:
            _positive("hardware.workers", self.workers)


@dataclass
class OptimConfig:
    name: Literal["adamw"] = "adamw"
    lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    # Linear warmup for `warmup_steps`, then cosine decay to lr * min_lr_ratio (Loshchilov & Hutter 2017).
    warmup_steps: int = 20
    schedule: Literal["cosine", "constant"] = "cosine"
    min_lr_ratio: float = 0.1

    def validate(self) -> None:
        _positive("optim.lr", self.lr)
        _fraction("optim.beta1", self.beta1)
        _fraction("optim.beta2", self.beta2)
        _positive("optim.eps", self.eps)
        if self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay={self.weight_decay} is negative (valid: >= 0)")
        if self.grad_clip < 0:
            raise ConfigError(f"optim.grad_clip={self.grad_clip} is negative (valid: >= 0; 0 disables clipping)")
        if self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps={self.warmup_steps} is negative (valid: >= 0)")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"optim.min_lr_ratio={self.min_lr_ratio} is invalid (valid: 0..1)")


@dataclass
class TrainConfig:
    # Exactly one budget: steps, tokens, or training FLOPs (converted to steps by the model's FLOPs/token).
    steps: Optional[int] = None
    tokens: Optional[int] = None
    flops: Optional[float] = None
    batch_size: int = 16
    eval_interval: int = 50
    eval_batches: int = 8
    log_interval: int = 10
    checkpoint_interval: int = 100
    seed: int = 0
    compile: bool = False
    progress: bool = True
    # Seconds between batched MLflow flushes (metrics are buffered, never logged per step).
    flush_interval_s: float = 10.0
    # When a run with the same config hash already exists: FINISHED runs are skipped unless
    # `rerun`; FAILED ones are retried only with `retry_failed`.
    rerun: bool = False
    retry_failed: bool = False
    # torch.profiler (profiling.py): step profile_start is counted op by op (FLOPs, bytes),
    # the next profile_steps steps are traced; files go to the run dir and the run's MLflow artifacts.
    profile: bool = False
    profile_start: int = 10
    profile_steps: int = 3

    def validate(self) -> None:
        budgets = {k: getattr(self, k) for k in ("steps", "tokens", "flops") if getattr(self, k) is not None}
        if len(budgets) != 1:
            given = ", ".join(f"train.{k}={v}" for k, v in budgets.items()) or "none"
            raise ConfigError(
                f"exactly one training budget is needed, got {given} "
                "(valid: one of train.steps, train.tokens, train.flops; set the others to null)"
            )
        for k, v in budgets.items():
            _positive(f"train.{k}", v)
        for key in ("batch_size", "eval_interval", "eval_batches", "log_interval", "checkpoint_interval"):
            _positive(f"train.{key}", getattr(self, key))
        _positive("train.flush_interval_s", self.flush_interval_s)
        if self.profile_start < 0:
            raise ConfigError(f"train.profile_start={self.profile_start} is negative (valid: >= 0, a step index)")
        _positive("train.profile_steps", self.profile_steps)
        if self.profile and self.compile:
            raise ConfigError("train.profile=true with train.compile=true: the operator table counts eager aten "
                              "ops (valid: train.compile=false while profiling)")


@dataclass
class TrackingConfig:
    backend: Literal["mlflow", "none"] = "mlflow"
    uri: str = ""
    experiment: str = "ablate"
    run_name: Optional[str] = None

    def validate(self) -> None:
        if self.backend == "mlflow" and not self.uri:
            raise ConfigError("tracking.uri is empty (valid: sqlite:////abs/path.db, http://host:port, file:...)")


@dataclass
class RunConfig:
    model: ModelConfig
    data: DataConfig
    precision: PrecisionConfig
    hardware: HardwareConfig
    optim: OptimConfig
    train: TrainConfig
    tracking: TrackingConfig
    # Where checkpoints live, keyed by config hash (so a relaunch finds them).
    state_dir: str = ".ablate/state"
    # In a precision sweep, precisions the hardware cannot run are skipped instead of failing.
    skip_unsupported: bool = False


SECTIONS = {
    "model": ModelConfig,
    "precision": PrecisionConfig,
    "hardware": HardwareConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "tracking": TrackingConfig,
}


def parse_run(tree: dict) -> RunConfig:
    """Build and validate a RunConfig from a plain (resolved) dict."""
    tree = dict(tree)
    tree.pop("hydra", None)
    tree.pop("sweep", None)
    known = set(SECTIONS) | {"data", "state_dir", "skip_unsupported"}
    _reject_unknown("", tree, known)
    missing = [k for k in (*SECTIONS, "data") if k not in tree]
    if missing:
        raise ConfigError(f"config is missing section(s) {', '.join(missing)} (valid: a full tree from conf/config.yaml)")
    parts = {name: build(cls, tree[name], name) for name, cls in SECTIONS.items()}
    parts["data"] = parse_data(tree["data"])
    run = RunConfig(
        **parts,
        state_dir=str(tree.get("state_dir", ".ablate/state")),
        skip_unsupported=bool(tree.get("skip_unsupported", False)),
    )
    for part in (run.model, run.data, run.precision, run.hardware, run.optim, run.train, run.tracking):
        part.validate()
    return run


def parse_data(tree: dict) -> DataConfig:
    kind = (tree or {}).get("kind")
    if kind not in DATA_KINDS:
        raise ConfigError(f"data.kind={kind!r} is unknown (valid: {', '.join(DATA_KINDS)})")
    return build(DATA_KINDS[kind], tree, "data")


def build(cls: type, tree: Any, prefix: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, checking keys and coercing scalar types."""
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{prefix}={tree!r} is not a mapping (valid: a config group such as {prefix}=<name>)")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    _reject_unknown(prefix, tree, names)
    values = {k: _coerce(f"{prefix}.{k}", v, hints[k]) for k, v in tree.items()}
    return cls(**values)


def _reject_unknown(prefix: str, tree: dict, valid) -> None:
    for key in tree:
        if key not in valid:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(f"unknown key {where} (valid: {', '.join(sorted(valid))})")


def _coerce(key: str, value: Any, hint: Any) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(key, value, args[0]) if len(args) == 1 else value
    if origin is Literal:
        choices = get_args(hint)
        if value not in choices:
            raise ConfigError(f"{key}={value!r} is invalid (valid: {', '.join(map(str, choices))})")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r} is not a boolean (valid: true, false)")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}={value!r} is not an integer")
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            return int(value)
        if isinstance(value, int):
            return value
        raise ConfigError(f"{key}={value!r} is not an integer (valid: a whole number such as 100 or 1e6)")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{key}={value!r} is not finite (valid: a finite number)")
            return float(value)
        raise ConfigError(f"{key}={value!r} is not a number (valid: e.g. 3e-4)")
    if hint is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}={value!r} is not a string")
        return str(value)
    if hint in (list, dict) or origin in (list, dict):
        expected = list if (hint is list or origin is list) else dict
        if not isinstance(value, expected):
            raise ConfigError(f"{key}={value!r} is not a {expected.__name__}")
        return value
    return value


def _positive(key: str, value: Any) -> None:
    if value is None or value <= 0:
        raise ConfigError(f"{key}={value} must be positive (valid: > 0)")


def _fraction(key: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{key}={value} is invalid (valid: 0 <= value < 1)")


def as_dict(obj: Any) -> dict:
    return dataclasses.asdict(obj)
