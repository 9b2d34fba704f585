"""Everything decided about a run before its first step: the device, the data, the model's final
config, the step budget and the config hash, and whether this machine can hold it. Cheap enough to
do for every job of a sweep (whose jobs share one `caches` dict: each distinct hardware and data
config is resolved and loaded once). A single run is prepared once, by the command line before
Hydra creates anything (cli/train.one_run), which passes the result to the run.
"""

from __future__ import annotations

import dataclasses
import json
import math

from ablate.config import MAX_INT, ConfigError, RunConfig, UnsupportedError, as_dict
from ablate.data import TokenData, check_fits, load_data
from ablate.files import check_writable_dir
from ablate.model import accounting, measure_part
from ablate.perf import Hardware, available_memory, gpu_memory, profiling, resolve, unsupported_reason
from ablate.provenance import config_hash
from ablate.run import distributed
from ablate.tracking import check_store


@dataclasses.dataclass
class Prepared:
    """Everything decided before the first step; cheap enough to build for every run of a sweep."""

    cfg: RunConfig
    hardware: Hardware
    data: TokenData
    total_steps: int
    config_hash: str

    @property
    def epochs(self) -> float:
        """How many times the run reads its training split over: tokens trained / tokens in the split
        (batches are random windows, so past 1 some text is seen again)."""
        tokens = self.total_steps * self.cfg.train.sequences_per_step * self.cfg.model.block_size
        return tokens / max(len(self.data.train), 1)

    def repeat_warning(self) -> str | None:
        """One line when the run repeats its data, else None."""
        if self.epochs <= 1.0:
            return None
        return (
            f"warning: this run reads its {len(self.data.train):,}-token training split ({self.data.name}) "
            f"{self.epochs:.2f} times over: its loss is not a fresh-data loss (scaling laws assume no repeated "
            "data; fewer steps, or more data)"
        )


def prepare(cfg: RunConfig, caches: dict | None = None) -> Prepared:
    """Validate against this machine, its filesystem and the data; raises ConfigError with one line."""
    caches = caches if caches is not None else {}
    hw = _cached(caches, "hardware", cfg.hardware, lambda: resolve(cfg.hardware))
    reason = unsupported_reason(hw, cfg.precision)
    if reason:
        raise UnsupportedError(reason)
    check_writable_dir(cfg.state_dir, "state_dir")
    if cfg.tracking.backend == "mlflow":
        _cached(caches, "store", cfg.tracking.uri, lambda: check_store(cfg.tracking.uri))
    data = _cached(caches, "data", cfg.data, lambda: load_data(cfg.data))
    model_cfg = cfg.model
    if model_cfg.vocab_size is None:
        model_cfg = dataclasses.replace(model_cfg, vocab_size=data.vocab_size)
    elif model_cfg.vocab_size < data.vocab_size:
        raise ConfigError(
            f"model.vocab_size={model_cfg.vocab_size} is smaller than the data's vocabulary "
            f"({data.vocab_size}) (valid: >= {data.vocab_size}, or null to take it from the data)"
        )
    check_fits(data, model_cfg.block_size)
    for key in model_cfg.custom_parts():  # a user's part: built, checked and measured before any work
        measure_part(model_cfg, key)
    distributed.check(cfg, hw.device)  # batch must split across DDP ranks
    cfg = dataclasses.replace(cfg, model=model_cfg)
    check_memory(cfg, hw)
    steps = total_steps(cfg)
    check_token_count(cfg, steps)
    profiling.check_window(cfg.train, steps)  # the captured steps fit in the run
    return Prepared(cfg, hw, data, steps, config_hash(cfg, hw))


def _cached(caches: dict, kind: str, key, make):
    text = json.dumps(as_dict(key) if dataclasses.is_dataclass(key) else key, sort_keys=True, default=str)
    found = caches.setdefault(kind, {})
    if text not in found:
        found[text] = make()
    return found[text]


def total_steps(cfg: RunConfig) -> int:
    """The step budget; a token or FLOP budget smaller than one step is refused, not rounded up.
    train.tokens_per_param is a token budget of that many tokens per parameter (accounting.params)."""
    tokens_per_step = cfg.train.sequences_per_step * cfg.model.block_size
    if cfg.train.steps is not None:
        return cfg.train.steps
    if cfg.train.tokens is not None or cfg.train.tokens_per_param is not None:
        tokens, key = budget_tokens(cfg)
        if tokens < tokens_per_step:
            raise ConfigError(
                f"{key} is less than one step "
                f"({cfg.train.sequences_per_step} x {cfg.model.block_size} = {tokens_per_step} tokens) "
                f"(valid: >= {tokens_per_step} tokens, or a smaller train.batch_size or model.block_size)"
            )
        return math.ceil(tokens / tokens_per_step)
    step_flops = accounting.flops_per_token(cfg.model) * tokens_per_step
    if cfg.train.flops < step_flops:
        raise ConfigError(
            f"train.flops={cfg.train.flops:.3g} is less than one step of model={cfg.model.name} "
            f"({step_flops:.3g} FLOPs) (valid: >= {step_flops:.3g}, or a smaller model or train.batch_size)"
        )
    return math.ceil(cfg.train.flops / step_flops)


def check_token_count(cfg: RunConfig, steps: int) -> None:
    """The run's tokens (steps x sequences x block) are counted in float64 by the schedule, the
    FLOP accounting and MLflow's metrics: past 2^53 a count is no longer exact, and no machine trains
    that many tokens in one run (GPT-4 class runs are ~1e13)."""
    tokens = steps * cfg.train.sequences_per_step * cfg.model.block_size
    if tokens > MAX_INT:
        raise ConfigError(
            f"{steps:,} steps of {cfg.train.sequences_per_step} x {cfg.model.block_size} tokens are {tokens:.3g} "
            f"tokens, past what a float counts exactly (valid: at most 2^53 = {MAX_INT:.3g} tokens in a run: "
            "fewer steps, or a smaller batch or block)"
        )


def budget_tokens(cfg: RunConfig) -> tuple[float, str]:
    """The token budget and how it was given (for a message)."""
    if cfg.train.tokens is not None:
        return cfg.train.tokens, f"train.tokens={cfg.train.tokens}"
    n = accounting.params(cfg.model)
    tokens = cfg.train.tokens_per_param * n
    return tokens, f"train.tokens_per_param={cfg.train.tokens_per_param:g} x {n:,} parameters = {tokens:,.0f} tokens"


def check_memory(cfg: RunConfig, hw: Hardware) -> None:
    """One training step's peak memory (perf/memory.py: weights, gradients, AdamW's moments and the
    activations of train.batch_size sequences, per rank) against what the device has free now."""
    free = available_memory(hw)
    if free is None:
        return
    ranks = distributed.world_size(cfg, hw.device)
    micro = max(1, cfg.train.batch_size // ranks)
    need = gpu_memory(cfg.model, cfg.precision, micro, device=hw.device, optimizer=cfg.optim.name).total * ranks
    if need > free:
        raise ConfigError(
            f"model={cfg.model.name} with train.batch_size={cfg.train.batch_size} needs about {need / 1e9:.3g} GB "
            f"for one training step, and this {hw.device} has {free / 1e9:.3g} GB free "
            "(valid: a smaller model or train.batch_size, or a device with more memory)"
        )
