"""The schema of one training run (`ablate`, ablate/conf/config.yaml): a slice per component, and
`parse_run`, which turns the composed tree into a RunConfig. Each component receives only its own
slice (a `ModelConfig`, never the whole tree).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args

from ablate.config.data import DataConfig, parse_data
from ablate.config.keys import setting
from ablate.config.presets import CONF_DIR, real_name
from ablate.config.schema import (
    as_dict,
    build,
    coerce,
    reject_unknown,
    require_at_most,
    require_fraction,
    require_positive,
)
from ablate.errors import ConfigError

# An evaluation is this many forward passes, run again every eval_interval steps: beyond it one
# evaluation outlasts a training run on this project's machines.
MAX_EVAL_BATCHES = 10_000
# Sequences per optimizer step (batch_size x grad_accum): each step draws this many start offsets
# (8 bytes each) at once; 2^20 is ~500x GPT-3's 3.2M-token batch of 2048-token rows.
MAX_SEQUENCES_PER_STEP = 2**20
# torch.optim.Muon refuses ns_steps of 100 or more ("for computational efficiency"); Muon uses 5.
MAX_MUON_NS_STEPS = 99
# What one GPU can be: a price per hour past any rental, memory and bandwidth past any device
# (an H200: 141 GB at 4.8 TB/s), FLOP/s past any chip (an H100's dense fp8: 2e15).
MAX_PRICE_PER_HOUR = 1e4
MAX_MEMORY_GB = 1e5
MAX_BANDWIDTH_GBS = 1e5
MAX_PEAK_FLOPS = 1e18
# Longer than this between flushes is no batching but metrics held back for good (and beyond what a
# timed wait accepts).
MAX_FLUSH_INTERVAL_S = 3600.0
BUDGET_KEYS = ("steps", "tokens", "flops", "tokens_per_param")
REAL_FP8 = ("tensorwise", "rowwise")  # precision.fp8 values: torchao's float8 training recipes

PrecisionName = Literal[
    "fp32",
    "bf16",
    "bf16_pure",
    "bf16_pure_nearest",
    "fp16",
    "fp8_tensorwise",
    "fp8_rowwise",
    "fp8_tensorwise_emulated",
    "fp8_rowwise_emulated",
]
PRECISION_NAMES: tuple[str, ...] = get_args(PrecisionName)
DEVICE_KINDS = ("cpu", "cuda", "mps")
# The built-in arms of each swappable part of a block; each part also takes PACKAGE.MODULE:CLASS, a
# class of the user's own built as CLASS(model_cfg) that maps (B, T, C) to (B, T, C) (model/parts.py).
ATTENTIONS = ("manual", "sdpa")
MLPS = ("gelu", "swiglu", "relu2")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope", "none")


@dataclass
class ModelConfig:
    # What runs are recorded, compared and planned under: the preset's name where the model holds
    # what its preset fixes of NAMED_BY, else the name of what it holds (nano.n_layer_12, `named`).
    name: str = setting("custom")
    # The preset it was composed from (model=nano), set by parsing: the config hash reads it as
    # model.name, so a run on a preset hashes as it did before its name told its sizes.
    preset: str | None = setting(None, hash_as="name", when=lambda m: m["preset"] is not None)
    n_layer: int = setting(4)
    n_head: int = setting(4)
    n_embd: int = setting(128)
    block_size: int = setting(64)
    # None: taken from the data source (27 for the synthetic language, 256 for bytes).
    vocab_size: int | None = setting(None)
    # Attention kernel: the softmax written out (manual) or torch's fused one (sdpa), same numbers.
    attention: str = setting("sdpa")
    # Positions: a learned table (GPT-2), rotary (Su et al. 2021, RoFormer, base rope_base), or none
    # (NoPE, Kazemnejad et al. 2023: the causal mask alone orders the tokens).
    position: Literal["learned", "rope", "none"] = setting("learned", before="learned")
    rope_base: float = setting(10000.0, when=lambda m: m["position"] == "rope")
    # layernorm (Ba et al. 2016, bias-free) or rmsnorm (Zhang & Sennrich 2019), both with a gain.
    norm: str = setting("layernorm", before="layernorm")
    # gelu (4C, GPT-2), swiglu (Shazeer 2020; hidden round(8C/3) so parameters match 4C), relu2
    # (squared ReLU, So et al. 2021, Primer; 4C).
    mlp: str = setting("gelu", before="gelu")
    # RMS-normalise q and k per head before the dot product, without a gain (Henry et al. 2020;
    # as nanochat), which bounds the attention logits.
    qk_norm: bool = setting(False, before=False)
    # Key/value heads: null is n_head (multi-head); fewer share each k, v among n_head / n_kv_head
    # query heads (GQA, Ainslie et al. 2023); 1 is multi-query attention (Shazeer 2019).
    n_kv_head: int | None = setting(None, before=None)
    # The output head reuses the token embedding (Press & Wolf 2017); false gives it its own V x C.
    tie_embeddings: bool = setting(True, before=True)
    dropout: float = setting(0.0)
    init_std: float = setting(0.02)
    # Planning presets (e.g. 1.5B) describe runs to price, not to train on a laptop.
    planning_only: bool = setting(False)
    # Maximal update parametrization (Yang et al. 2022, Tensor Programs V): hyperparameters tuned
    # at width mup_base_width carry over to this width. At n_embd == mup_base_width muP and the
    # standard parametrization are the same network; null means this width is the base.
    # mup_base_width is ignored while mup is false, so one preset can serve both in a sweep.
    mup: bool = setting(False, when=lambda m: bool(m["mup"]))
    mup_base_width: int | None = setting(None, when=lambda m: bool(m["mup"]))

    # What a model's name says about it: its shape. The architecture arms (position, mlp, n_kv_head,
    # tie_embeddings, ...) are not in it: an arm is compared against its preset's baseline at the
    # same size, and is recorded under its own key.
    NAMED_BY = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")

    def named(self, folders: Sequence[Path] = ()) -> ModelConfig:
        """This model under the name of what it holds (presets.real_name over the package's presets
        and the user's `folders`), its preset kept in `preset`; a name without a preset file (custom,
        a user's own not in `folders`) stays as given."""
        preset = self.preset or self.name
        name = real_name("model", self, self.NAMED_BY, preset, folders)
        return replace(self, name=name or self.name, preset=preset)

    def validate(self) -> None:
        for key in ("n_layer", "n_head", "n_embd", "block_size"):
            require_positive(f"model.{key}", getattr(self, key))
        if self.vocab_size is not None and self.vocab_size < 2:
            raise ConfigError(f"model.vocab_size={self.vocab_size} is too small (valid: >= 2, or null for the data's)")
        if self.n_embd % self.n_head:
            valid = self.n_embd - self.n_embd % self.n_head or self.n_head
            raise ConfigError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head} "
                f"(valid: a multiple of {self.n_head}, e.g. {valid})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout} is invalid (valid: 0 <= dropout < 1)")
        require_positive("model.init_std", self.init_std)
        if self.mup_base_width is not None:
            require_positive("model.mup_base_width", self.mup_base_width)
        for key, builtin in (("attention", ATTENTIONS), ("mlp", MLPS), ("norm", NORMS)):
            check_part(f"model.{key}", getattr(self, key), builtin)
        self._check_heads()
        if self.position == "rope":
            require_positive("model.rope_base", self.rope_base)
            if self.head_dim % 2:
                raise ConfigError(
                    f"model.position=rope needs an even head size, and n_embd / n_head = {self.head_dim} "
                    "(valid: an even model.n_embd / model.n_head, or model.position=learned)"
                )
        self._check_mup()

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def mlp_hidden(self) -> int:
        """The MLP's hidden width: 4C, or for SwiGLU's three matrices round(8C/3), whose 3 C h
        parameters match the 8 C^2 of two 4C matrices (within one row of C)."""
        return round(8 * self.n_embd / 3) if self.mlp == "swiglu" else 4 * self.n_embd

    def custom_parts(self) -> dict[str, str]:
        """The parts that are a user's class (PACKAGE.MODULE:CLASS), by key."""
        return {k: getattr(self, k) for k in ("attention", "mlp", "norm") if is_user_class(getattr(self, k))}

    def _check_heads(self) -> None:
        if self.n_kv_head is None:
            return
        require_positive("model.n_kv_head", self.n_kv_head)
        if self.n_head % self.n_kv_head:
            divisors = [d for d in range(1, self.n_head + 1) if self.n_head % d == 0]
            raise ConfigError(
                f"model.n_kv_head={self.n_kv_head} does not divide model.n_head={self.n_head} "
                f"(valid: {', '.join(map(str, divisors))}, or null for n_head)"
            )

    def _check_mup(self) -> None:
        """muP's rules (Tensor Programs V) are derived for the GPT-2 block with Adam; arms it does not
        cover would carry hyperparameters over by a rule that does not hold for them."""
        if not self.mup:
            return
        uncovered = [f"model.{k}={getattr(self, k)}" for k in self.custom_parts()]
        if self.qk_norm:
            uncovered.append("model.qk_norm=true")
        if uncovered:
            raise ConfigError(
                f"model.mup=true with {', '.join(uncovered)}: muP's scaling rules do not cover it "
                "(valid: model.mup=false, or the built-in parts without qk_norm)"
            )


def is_user_class(spec: str) -> bool:
    return ":" in str(spec)


def check_part(key: str, spec: str, builtin: tuple[str, ...]) -> None:
    """A built-in arm, or PACKAGE.MODULE:CLASS naming a class that can be imported now."""
    if spec in builtin:
        return
    if not is_user_class(spec):
        raise ConfigError(f"{key}={spec!r} is invalid (valid: {', '.join(builtin)}, or PACKAGE.MODULE:CLASS)")
    module, _, name = str(spec).partition(":")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as e:
        raise ConfigError(
            f"{key}={spec}: module {module} cannot be imported ({e}) (valid: an importable module)"
        ) from None
    if not isinstance(found, type):
        raise ConfigError(f"{key}={spec}: {module} has no class {name} (valid: PACKAGE.MODULE:CLASS of a class)")


@dataclass
class PrecisionConfig:
    name: PrecisionName = setting("fp32")
    # Storage dtype of weights and gradients; optimizer moments stay fp32 in every policy.
    param_dtype: Literal["fp32", "bf16"] = setting("fp32")
    # How the optimizer writes an update back to bf16 weights: stochastic (rounds up with probability
    # equal to the discarded fraction, so an update under a bf16 ulp still moves the weight in
    # expectation; Zamirai et al. 2020) or nearest (an update under half an ulp of its weight is lost).
    rounding: Literal["stochastic", "nearest"] = setting("stochastic", before="stochastic")
    autocast: Literal["bf16", "fp16"] | None = setting(None)
    loss_scaling: bool = setting(False)
    # Float8 matmuls: torchao's training recipes (tensorwise: one scale per tensor, cuBLAS, CUDA
    # capability 8.9; rowwise: one per row, CUTLASS, 9.0).
    fp8: Literal["tensorwise", "rowwise"] | None = setting(None)
    # The recipe's float8 matmuls computed in fp32 from the same float8-cast operands and scales
    # (torchao's Float8LinearConfig(emulate=True)): the recipe's numerics on any device, none of its speed.
    emulate: bool = setting(False, before=False)
    # Which devices can run this policy, and the CUDA compute capability it needs there.
    devices: list = setting(factory=lambda: list(DEVICE_KINDS))
    min_cuda_capability: float | None = setting(None)

    @property
    def matmul_dtype(self) -> str:
        """The dtype this policy's matmuls run in, the key of hardware.peak_flops that MFU and time are
        measured against: fp8 with real fp8 kernels, else the autocast dtype, else the weights' dtype.
        (perf/roofline.py refines fp32 to tf32 where CUDA's TF32 tensor cores are on.)"""
        if self.fp8_kernels:
            return "fp8"
        if self.fp8:  # emulated: torch.mm in fp32 on the dequantized operands
            return "fp32"
        if self.autocast:
            return self.autocast
        return "bf16" if self.param_dtype == "bf16" else "fp32"

    @property
    def fp8_kernels(self) -> bool:
        """Whether the matmuls run on float8 kernels (fp8 tensor cores), not emulated."""
        return self.fp8 in REAL_FP8 and not self.emulate

    @property
    def uses_bf16(self) -> bool:
        return self.param_dtype == "bf16" or self.autocast == "bf16"

    def validate(self) -> None:
        for d in self.devices:
            if d not in DEVICE_KINDS:
                raise ConfigError(f"precision.devices has {d!r} (valid: {', '.join(DEVICE_KINDS)})")
        if self.min_cuda_capability is not None:
            require_positive("precision.min_cuda_capability", self.min_cuda_capability)
        if self.loss_scaling and self.autocast != "fp16":
            raise ConfigError("precision.loss_scaling=true needs precision.autocast=fp16 (valid: fp16 autocast)")
        if self.rounding == "nearest" and self.param_dtype != "bf16":
            raise ConfigError(
                "precision.rounding=nearest needs precision.param_dtype=bf16 (valid: rounding=stochastic, "
                "or nearest with bf16 weights)"
            )
        if self.emulate and not self.fp8:
            raise ConfigError("precision.emulate=true needs an fp8 recipe (valid: precision.fp8=tensorwise or rowwise)")
        self._check_name()

    # What a precision's name says about its numbers: runs are recorded, compared and priced by name.
    NAMED_BY = ("param_dtype", "rounding", "autocast", "fp8", "emulate")

    def _check_name(self) -> None:
        """A policy named fp32 that computes in bf16 would be recorded, compared and priced as fp32:
        the name must be what its preset (conf/precision/NAME.yaml) says the numbers are."""
        import yaml

        schema = as_dict(PrecisionConfig())  # a key a preset leaves out stands at its default
        presets = {
            n: {**schema, **yaml.safe_load((CONF_DIR / "precision" / f"{n}.yaml").read_text())} for n in PRECISION_NAMES
        }
        differ = [k for k in self.NAMED_BY if getattr(self, k) != presets[self.name].get(k)]
        if differ:
            given = " ".join(f"precision.{k}={getattr(self, k)}" for k in differ)
            named = ", ".join(f"{k}={presets[self.name].get(k)}" for k in differ)
            real = [n for n, p in presets.items() if all(getattr(self, k) == p.get(k) for k in self.NAMED_BY)]
            raise ConfigError(
                f"precision.name={self.name} with {given} is not {self.name} ({self.name} has {named}) "
                f"(valid: {'precision=' + real[0] if real else 'a precision preset as it is'}, "
                "the name these numbers are recorded under)"
            )


@dataclass
class HardwareConfig:
    name: str = setting("auto", hashed=False)
    device: Literal["auto", "cpu", "cuda", "mps"] = setting("auto", hashed=False)
    # Peak dense FLOP/s per precision (no sparsity). Missing entries: not supported, or
    # (for the cpu) measured on this machine by a short matmul benchmark.
    peak_flops: dict = setting(factory=dict, hashed=False)
    memory_gb: float | None = setting(None, hashed=False)
    memory_bandwidth_gbs: float | None = setting(None, hashed=False)
    # Interconnect, GB/s per GPU in one direction (plan/comm.py): to the other GPUs of its node
    # (NVLink, or PCIe without it) and to other nodes (its InfiniBand/RoCE NIC); None: not known.
    nvlink_gbs: float | None = setting(None, hashed=False)
    network_gbs: float | None = setting(None, hashed=False)
    price_per_hour: float | None = setting(None, hashed=False)
    gpus_per_node: int = setting(1)
    # Runs at once on one machine under the parallel launcher; None: one per GPU slot where the runs
    # have GPUs (hydra.launcher.gpus, gpus_per_job), else one per core.
    workers: int | None = setting(None, hashed=False)
    cuda_capability: float | None = setting(None)

    # What a hardware preset's name says: the device and its chip's figures. The price, the node's
    # GPU count and the workers are how it is rented and used, and leave it the same hardware.
    NAMED_BY = ("device", "peak_flops", "memory_gb", "memory_bandwidth_gbs", "cuda_capability")

    def named(self, folders: Sequence[Path] = ()) -> HardwareConfig:
        """This hardware under the name of what it holds (an h100 with 40 GB: h100.memory_gb_40), its
        preset read from the package's presets or the user's `folders`; not hashed, so no preset is
        kept beside it."""
        return replace(self, name=real_name("hardware", self, self.NAMED_BY, folders=folders) or self.name)

    def validate(self) -> None:
        for k, v in self.peak_flops.items():
            if k not in ("fp32", "tf32", "bf16", "fp16", "fp8"):
                raise ConfigError(f"hardware.peak_flops has key {k!r} (valid: fp32, tf32, bf16, fp16, fp8)")
            if v is not None:
                require_positive(f"hardware.peak_flops.{k}", v)
                require_at_most(f"hardware.peak_flops.{k}", v, MAX_PEAK_FLOPS, "FLOP/s per GPU")
        bounds = (
            ("memory_gb", MAX_MEMORY_GB, "GB"),
            ("memory_bandwidth_gbs", MAX_BANDWIDTH_GBS, "GB/s"),
            ("nvlink_gbs", MAX_BANDWIDTH_GBS, "GB/s"),
            ("network_gbs", MAX_BANDWIDTH_GBS, "GB/s"),
        )
        for key, limit, unit in bounds:
            if getattr(self, key) is not None:
                require_positive(f"hardware.{key}", getattr(self, key))
                require_at_most(f"hardware.{key}", getattr(self, key), limit, unit)
        if self.price_per_hour is not None and self.price_per_hour < 0:
            raise ConfigError(f"hardware.price_per_hour={self.price_per_hour} is negative (valid: >= 0)")
        if self.price_per_hour is not None:
            require_at_most("hardware.price_per_hour", self.price_per_hour, MAX_PRICE_PER_HOUR, "dollars per GPU-hour")
        require_positive("hardware.gpus_per_node", self.gpus_per_node)
        if self.workers is not None:
            require_positive("hardware.workers", self.workers)
        if self.cuda_capability is not None:
            require_positive("hardware.cuda_capability", self.cuda_capability)


@dataclass
class OptimConfig:
    # adamw: AdamW for every parameter. muon: Muon (Jordan et al. 2024; torch.optim.Muon) for the
    # blocks' 2-D matrices at muon_lr, AdamW at lr for the embeddings, the head and the gains (as
    # nanochat). Muon's step is momentum, then Newton-Schulz orthogonalisation (ns_steps iterations),
    # scaled by sqrt(max(1, rows / cols)) (Keller Jordan's "original" adjustment).
    name: Literal["adamw", "muon"] = setting("adamw")
    lr: float = setting(3e-3)
    beta1: float = setting(0.9)
    beta2: float = setting(0.95)
    eps: float = setting(1e-8)
    weight_decay: float = setting(0.1)
    grad_clip: float = setting(1.0)
    # Linear warmup for `warmup_steps`, then (model/optim.py lr_at):
    # - cosine: cosine decay to lr * min_lr_ratio at the last step (Loshchilov & Hutter 2017);
    # - wsd: warmup-stable-decay, constant lr, then a cooldown over the last cooldown_fraction of
    #   the steps to lr * min_lr_ratio, shaped by cooldown_shape (Hägele et al. 2024: a 1-sqrt
    #   cooldown of ~20% matches cosine). Runs that differ only in budget share their constant
    #   part: a list budget (train.tokens=[a,b,c]) trains it once and forks a cooldown per budget;
    # - constant: lr after warmup.
    warmup_steps: int = setting(20)
    schedule: Literal["cosine", "wsd", "constant"] = setting("cosine")
    min_lr_ratio: float = setting(0.1)
    cooldown_fraction: float = setting(0.2, when=lambda o: o["schedule"] == "wsd")
    cooldown_shape: Literal["1-sqrt", "linear", "cosine"] = setting("1-sqrt", when=lambda o: o["schedule"] == "wsd")
    muon_lr: float = setting(0.02, when=lambda o: o["name"] == "muon")
    muon_momentum: float = setting(0.95, when=lambda o: o["name"] == "muon")
    muon_weight_decay: float = setting(0.0, when=lambda o: o["name"] == "muon")
    muon_ns_steps: int = setting(5, when=lambda o: o["name"] == "muon")

    def validate(self) -> None:
        require_positive("optim.lr", self.lr)
        require_positive("optim.muon_lr", self.muon_lr)
        require_fraction("optim.muon_momentum", self.muon_momentum)
        require_positive("optim.muon_ns_steps", self.muon_ns_steps)
        require_at_most("optim.muon_ns_steps", self.muon_ns_steps, MAX_MUON_NS_STEPS, "Newton-Schulz iterations")
        if self.muon_weight_decay < 0:
            raise ConfigError(f"optim.muon_weight_decay={self.muon_weight_decay} is negative (valid: >= 0)")
        require_fraction("optim.beta1", self.beta1)
        require_fraction("optim.beta2", self.beta2)
        require_positive("optim.eps", self.eps)
        if self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay={self.weight_decay} is negative (valid: >= 0)")
        if self.grad_clip < 0:
            raise ConfigError(f"optim.grad_clip={self.grad_clip} is negative (valid: >= 0; 0 disables clipping)")
        if self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps={self.warmup_steps} is negative (valid: >= 0)")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"optim.min_lr_ratio={self.min_lr_ratio} is invalid (valid: 0..1)")
        if not 0.0 < self.cooldown_fraction <= 1.0:
            raise ConfigError(
                f"optim.cooldown_fraction={self.cooldown_fraction} is invalid (valid: 0 < fraction <= 1, e.g. 0.2)"
            )


@dataclass
class TrainConfig:
    # Exactly one budget: steps, tokens, or training FLOPs (converted to steps by the model's FLOPs/token).
    # A run that names none trains default_steps steps; naming one (train.tokens=1e6) replaces that,
    # with no other budget to set to null (validate).
    # A list of budgets (train.tokens=[a,b,c], with optim.schedule=wsd) is one constant-rate trunk
    # and a cooldown branch per budget, each branch an ordinary run (run/branches.py).
    steps: int | list | None = setting(None)
    tokens: int | list | None = setting(None)
    flops: float | list | None = setting(None)
    # Tokens per parameter (Hoffmann et al. 2022: ~20 is compute-optimal), times the model's
    # total parameters (model/accounting.params).
    tokens_per_param: float | list | None = setting(None, before=None)
    # The budget of a run that names none (a sweep preset's own: +sweep=precision trains 1000 steps);
    # the run's steps carry it into the hash.
    default_steps: int = setting(300, hashed=False)
    # Sequences per micro-batch; an optimizer step takes grad_accum micro-batches, the same rows as
    # one batch of batch_size x grad_accum, so a batch-size arm is not capped by memory.
    batch_size: int = setting(16)
    grad_accum: int = setting(1, before=1)
    # PaLM's auxiliary z-loss (Chowdhery et al. 2022, Sec. 5): z_loss x mean(log Z)^2 added to the
    # objective, log Z the logsumexp of each position's logits; train/loss stays the cross-entropy.
    z_loss: float = setting(0.0, before=0.0)
    eval_interval: int = setting(50)
    eval_batches: int = setting(8)
    log_interval: int = setting(10)
    checkpoint_interval: int = setting(100, hashed=False)
    seed: int = setting(0)
    # How the ranks of a run share the model (run/distributed.py): ddp replicates it and all-reduces
    # gradients; fsdp shards weights, gradients and optimizer states with FSDP2's fully_shard, one
    # unit per block (run/fsdp.py), and checkpoints them with torch.distributed.checkpoint.
    parallel: Literal["ddp", "fsdp"] = setting("ddp", before="ddp")
    compile: bool = setting(False, hashed=False)
    # With compile: torch.compile each transformer block apart (as torchtitan does) instead of the
    # whole model: the blocks share one compiled graph, compiled once, and the rest runs eagerly.
    compile_blocks: bool = setting(False, hashed=False)
    # Each transformer block's activations recomputed in backward instead of kept (model/checkpointing.py):
    # what `ablate plan` advises when a run does not fit, tried at small scale. Changes no number.
    activation_checkpointing: bool = setting(False, hashed=False)
    progress: bool = setting(True, hashed=False)
    # Seconds between batched MLflow flushes (metrics are buffered, never logged per step).
    flush_interval_s: float = setting(10.0, hashed=False)
    # When a run with the same config hash already exists: FINISHED runs are skipped unless
    # `rerun`; FAILED ones are retried only with `retry_failed`.
    rerun: bool = setting(False, hashed=False)
    retry_failed: bool = setting(False, hashed=False)
    # torch.profiler (profiling.py): step profile_start is counted op by op (FLOPs, bytes),
    # the next profile_steps steps are traced; files go to the run dir and the run's MLflow artifacts.
    profile: bool = setting(False, hashed=False)
    profile_start: int = setting(10, hashed=False)
    profile_steps: int = setting(3, hashed=False)

    @property
    def sequences_per_step(self) -> int:
        """Sequences per optimizer step: grad_accum micro-batches of batch_size."""
        return self.batch_size * self.grad_accum

    def validate(self) -> None:
        """The one-budget rule and every range. A run that names no budget gets default_steps
        steps here, the one place that rule is written."""
        require_positive("train.default_steps", self.default_steps)
        budgets = {k: getattr(self, k) for k in BUDGET_KEYS if getattr(self, k) is not None}
        if not budgets:
            self.steps = self.default_steps
            budgets = {"steps": self.steps}
        if len(budgets) != 1:
            given = ", ".join(f"train.{k}={v}" for k, v in budgets.items()) or "none"
            raise ConfigError(
                f"exactly one training budget is needed, got {given} "
                f"(valid: one of {', '.join('train.' + k for k in BUDGET_KEYS)}; set the others to null)"
            )
        for k, v in budgets.items():
            if isinstance(v, list):
                if not v or len(set(v)) != len(v):
                    raise ConfigError(
                        f"train.{k}={v} is invalid (valid: one budget, or a list of distinct budgets such as [1e6,2e6])"
                    )
                for i, x in enumerate(v):
                    require_positive(f"train.{k}[{i}]", x)
            else:
                require_positive(f"train.{k}", v)
        if self.z_loss < 0:
            raise ConfigError(f"train.z_loss={self.z_loss} is negative (valid: >= 0, e.g. 1e-4 as PaLM)")
        for key in ("batch_size", "grad_accum", "eval_interval", "eval_batches", "log_interval", "checkpoint_interval"):
            require_positive(f"train.{key}", getattr(self, key))
        require_at_most("train.eval_batches", self.eval_batches, MAX_EVAL_BATCHES, "batches per evaluation")
        if self.sequences_per_step > MAX_SEQUENCES_PER_STEP:
            raise ConfigError(
                f"train.batch_size={self.batch_size} x train.grad_accum={self.grad_accum} = "
                f"{self.sequences_per_step:.3g} sequences per step is too many "
                f"(valid: at most {MAX_SEQUENCES_PER_STEP:,} sequences per optimizer step)"
            )
        require_positive("train.flush_interval_s", self.flush_interval_s)
        require_at_most("train.flush_interval_s", self.flush_interval_s, MAX_FLUSH_INTERVAL_S, "seconds")
        if self.seed < 0:
            raise ConfigError(f"train.seed={self.seed} is negative (valid: >= 0; batches are drawn from seed and step)")
        if self.profile_start < 0:
            raise ConfigError(f"train.profile_start={self.profile_start} is negative (valid: >= 0, a step index)")
        require_positive("train.profile_steps", self.profile_steps)
        if self.profile and self.compile:
            raise ConfigError(
                "train.profile=true with train.compile=true: the operator table counts eager aten "
                "ops (valid: train.compile=false while profiling)"
            )


RESERVED_TAG_PREFIXES = ("ablate.", "mlflow.")  # the tags this project and MLflow write themselves


@dataclass
class TrackingConfig:
    backend: Literal["mlflow", "none"] = setting("mlflow")
    uri: str = setting("")
    experiment: str = setting("ablate")
    run_name: str | None = setting(None)
    # Your own tags on every run and sweep parent (+tracking.tags.purpose=baseline); names that
    # tracking.required_tags lists must be among them, so that no run goes untagged.
    tags: dict[str, str] = setting(factory=dict)
    required_tags: list[str] = setting(factory=list)
    # The machine's CPU, memory, disk, network and GPU use over the run, sampled by MLflow's
    # system-metrics monitor (tracking/system_metrics.py): 0.14% of a run's CPU (docs/benchmarks.md).
    system_metrics: bool = setting(True)
    # final: a finished run's weights and model config as its MLflow artifact model.pt (run/final_model.py)
    log_model: Literal["none", "final"] = setting("none")

    def validate(self) -> None:
        for key, value in self.tags.items():
            if str(key).startswith(RESERVED_TAG_PREFIXES) or not str(key).strip():
                raise ConfigError(
                    f"tracking.tags.{key} is not a tag of yours (valid: a name not starting with "
                    f"{' or '.join(RESERVED_TAG_PREFIXES)}, which ablate and MLflow set)"
                )
            if value is None or not str(value).strip():
                raise ConfigError(f"tracking.tags.{key} is empty (valid: +tracking.tags.{key}=VALUE)")
        missing = [t for t in self.required_tags if t not in self.tags]
        if missing:
            raise ConfigError(
                f"tracking.required_tags names {', '.join(missing)}, which tracking.tags does not set "
                f"(valid: {' '.join(f'+tracking.tags.{t}=VALUE' for t in missing)})"
            )
        if self.backend == "mlflow" and not self.uri:
            raise ConfigError(
                "tracking.uri is empty (valid: sqlite:////abs/path.db, http://host:port, postgresql://...)"
            )
        if self.backend == "mlflow" and not self.experiment.strip():
            raise ConfigError("tracking.experiment is empty (valid: an experiment name, e.g. ablate)")
        if self.log_model == "final" and self.backend != "mlflow":
            raise ConfigError(
                "tracking.log_model=final logs the weights to MLflow, and tracking is none "
                "(valid: tracking=mlflow, or tracking.log_model=none)"
            )


@dataclass
class RunConfig:
    model: ModelConfig = setting()
    data: DataConfig = setting()
    precision: PrecisionConfig = setting()
    hardware: HardwareConfig = setting()
    optim: OptimConfig = setting()
    train: TrainConfig = setting()
    tracking: TrackingConfig = setting(hashed=False)
    # Where checkpoints live, keyed by config hash (so a relaunch finds them).
    state_dir: str = setting(".ablate/state", hashed=False)
    # In a precision sweep, precisions the hardware cannot run are skipped instead of failing.
    skip_unsupported: bool = setting(False, hashed=False)


SECTIONS = {
    "model": ModelConfig,
    "precision": PrecisionConfig,
    "hardware": HardwareConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "tracking": TrackingConfig,
}


def parse_run(tree: dict, preset_folders: Sequence[Path] = ()) -> RunConfig:
    """Build and validate a RunConfig from a plain (resolved) dict; its model and hardware named from
    the package's presets and the user's `preset_folders` (--config-dir: hydra_app.preset_folders)."""
    tree = dict(tree)
    tree.pop("hydra", None)
    tree.pop("sweep", None)
    known = set(SECTIONS) | {"data", "state_dir", "skip_unsupported"}
    reject_unknown("", tree, known)
    missing = [k for k in (*SECTIONS, "data") if k not in tree]
    if missing:
        raise ConfigError(
            f"config is missing section(s) {', '.join(missing)} (valid: a full tree from ablate/conf/config.yaml)"
        )
    parts = {name: build(cls, tree[name], name) for name, cls in SECTIONS.items()}
    parts["data"] = parse_data(tree["data"])
    run = RunConfig(
        **parts,
        state_dir=coerce("state_dir", tree.get("state_dir", ".ablate/state"), str),
        skip_unsupported=coerce("skip_unsupported", tree.get("skip_unsupported", False), bool),
    )
    for part in (run.model, run.data, run.precision, run.hardware, run.optim, run.train, run.tracking):
        part.validate()
    # A preset with a size of its own is recorded under the name of what it trains, not the preset's
    # (precision, whose name is its numbers, refuses a contradiction instead: _check_name).
    run.model, run.hardware = run.model.named(preset_folders), run.hardware.named(preset_folders)
    check_optimizer_fits(run)
    key, value = budget(run.train)
    if isinstance(value, list) and run.optim.schedule != "wsd":
        raise ConfigError(
            f"train.{key}={value} is a list of budgets, which needs optim.schedule=wsd, not {run.optim.schedule} "
            f"(valid: optim.schedule=wsd, or one run per budget as a sweep: train.{key}={','.join(map(str, value))})"
        )
    return run


def check_optimizer_fits(run: RunConfig) -> None:
    """optim=muon against the model and precision it would train: muP's per-layer rates are
    derived for Adam (Tensor Programs V), and torch.optim.Muon keeps its momentum in the weights'
    dtype, which bf16_pure would make bf16 with no stochastic rounding of the update."""
    if run.optim.name != "muon":
        return
    if run.model.mup:
        raise ConfigError(
            "optim=muon with model.mup=true: muP's rates are derived for Adam (valid: optim=adamw with muP)"
        )
    if run.precision.param_dtype != "fp32":
        raise ConfigError(
            f"optim=muon with precision={run.precision.name}: Muon would keep bf16 momentum and round its "
            "update to bf16 (valid: a policy with fp32 weights: fp32, bf16, fp16, fp8_tensorwise, fp8_rowwise, "
            "fp8_tensorwise_emulated, fp8_rowwise_emulated)"
        )


def budget(train: TrainConfig) -> tuple[str, Any]:
    """(key, value) of the run's one budget: steps, tokens, flops or tokens_per_param."""
    return next((k, getattr(train, k)) for k in BUDGET_KEYS if getattr(train, k) is not None)
