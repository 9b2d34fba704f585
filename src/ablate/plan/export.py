"""The planned run handed to torchtitan: `ablate plan ... export=torchtitan` writes torchtitan_job.py
beside plan.json, a config_registry module whose `ablate_plan()` returns torchtitan's Trainer.Config
for the run the plan priced (torchtitan 0.3.0: configs are Python functions that its ConfigManager
loads with --module and --config).

What comes from the plan: the model's width, depth, heads, KV heads and vocabulary; the context;
the micro-batch per GPU, the global batch (micro-batch x data-parallel GPUs) and the steps that make
the planned tokens; the degree of FSDP sharding (every GPU when the plan shards the states, else
replicated data parallelism); full activation checkpointing when the plan recomputes; the float8
converter when the precision runs fp8 matmuls; bf16 weights on the wire and fp32 gradient
reductions (torchtitan's default mixed-precision policy) under autocast, fp32 for an fp32 plan.
The learning-rate schedule is the project's own default shape (optim/: linear warmup, cosine decay
to 0.1 of the peak), with a warmup of 1% of the steps, since a plan has no optimizer of its own.

torchtitan trains its own model families; the plan's model goes over as torchtitan's Llama 3 with the
same sizes (RMSNorm, RoPE, and a SwiGLU MLP of hidden width 8d/3, the parameters of a 4d GELU MLP),
which the file says in its docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.config import ConfigError
from ablate.plan.make import Plan

EXPORT_FILE = "torchtitan_job.py"
EXPORTS = ("torchtitan",)
WARMUP_FRACTION = 0.01
MIN_LR_FACTOR = 0.1  # OptimConfig.min_lr_ratio's default
PEAK_LR = 3e-4  # torchtitan's Llama 3 8B recipe; a plan has no optimizer: set your own


@dataclass(frozen=True)
class TitanJob:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    local_batch_size: int
    global_batch_size: int
    steps: int
    warmup_steps: int
    fsdp_degree: int  # data_parallel_shard_degree
    replicate_degree: int  # data_parallel_replicate_degree
    full_ac: bool
    float8: bool
    param_dtype: str  # mixed_precision_param
    dtype: str  # training.dtype: the weights' own dtype (bf16_pure keeps them in bf16)
    gpus: int
    gpus_per_node: int
    tied: bool


def titan_job(p: Plan) -> TitanJob:
    """The torchtitan job of a plan (ConfigError, one line, for what torchtitan 0.3.0 cannot train)."""
    m, mem = p.model, p.memory
    if p.precision.fp8 == "tensorwise":
        raise ConfigError(
            f"export=torchtitan with precision={p.precision.name}: torchtitan 0.3.0's Float8 converter has "
            "rowwise recipes only (valid: precision=fp8_rowwise, bf16, bf16_pure or fp32)"
        )
    if m.vocab_size is None:
        raise ConfigError("export=torchtitan needs the model's vocabulary (valid: model.vocab_size=N)")
    fallback = mem.gpus_needed_as_configured is None and mem.fallback is not None
    batch = mem.fallback.batch_size if fallback and mem.fallback else p.plan.batch_size
    at = mem.at_gpus if p.gpus_used == p.plan.gpus or mem.needed is None else mem.needed
    tokens_per_step = p.gpus_used * batch * m.block_size
    steps = max(1, math.ceil(p.tokens / tokens_per_step))
    return TitanJob(
        dim=m.n_embd,
        n_layers=m.n_layer,
        n_heads=m.n_head,
        n_kv_heads=m.n_kv_head or m.n_head,
        vocab_size=m.vocab_size,
        seq_len=m.block_size,
        local_batch_size=batch,
        global_batch_size=p.gpus_used * batch,
        steps=steps,
        warmup_steps=max(1, round(steps * WARMUP_FRACTION)),
        fsdp_degree=p.gpus_used if at.sharded else 1,
        replicate_degree=1 if at.sharded else p.gpus_used,
        full_ac=p.plan.activation_checkpointing or fallback,
        float8=p.precision.fp8 is not None,
        param_dtype="float32" if p.precision.matmul_dtype == "fp32" else "bfloat16",
        dtype="bfloat16" if p.precision.param_dtype == "bf16" else "float32",
        gpus=p.gpus_used,
        gpus_per_node=p.hardware.gpus_per_node,
        tied=m.tie_embeddings,
    )


def torchtitan_module(p: Plan) -> str:
    """The source of torchtitan_job.py for plan `p`."""
    j = titan_job(p)
    nodes = math.ceil(j.gpus / j.gpus_per_node)
    per_node = min(j.gpus, j.gpus_per_node)
    ac = "FullAC.Config()" if j.full_ac else "None"
    converters = (
        "[Float8LinearConverter.Config(recipe_name='rowwise', emulate=not float8_hardware())]" if j.float8 else "[]"
    )
    return f'''"""torchtitan job for the run `ablate plan` priced: {p.model.name} on {j.gpus} {p.hardware.name},
precision={p.precision.name}, {p.tokens:.4g} tokens. Written by ablate from plan.json beside this file.

Run it with torchtitan 0.3.0, this folder on PYTHONPATH, on each of the {nodes} node(s):

    torchrun --nnodes={nodes} --nproc_per_node={per_node} --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 \\
        -m torchtitan.train --module torchtitan_job --config ablate_plan

Set hf_assets_path (the tokenizer) and the dataloader to your data: the plan does not know them.
The model is torchtitan's Llama 3 at the plan's sizes (RMSNorm, RoPE, SwiGLU of hidden width 8d/3,
the parameters of the plan's 4d GELU MLP); its FLOPs per token are the plan's within the MLP's
rounding. The learning rate is a placeholder the plan does not decide.
"""

from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.config import ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.distributed.pipeline_parallel import pipeline_llm
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm, compute_ffn_hidden_dim
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import Llama3Model, parallelize_llama
from torchtitan.models.llama3 import _build_llama3_layers as build_layers
from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter
from torchtitan.models.utils import validate_converter_order
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.trainer import Trainer

# The plan's figures (plan.json)
DIM, N_LAYERS, N_HEADS, N_KV_HEADS, VOCAB = {j.dim}, {j.n_layers}, {j.n_heads}, {j.n_kv_heads}, {j.vocab_size}
SEQ_LEN, LOCAL_BATCH, GLOBAL_BATCH = {j.seq_len}, {j.local_batch_size}, {j.global_batch_size}
STEPS, WARMUP = {j.steps}, {j.warmup_steps}
FSDP_DEGREE, REPLICATE_DEGREE = {j.fsdp_degree}, {j.replicate_degree}


def float8_hardware() -> bool:
    """Float8 matmuls need SM 8.9 or later; loaded elsewhere (a laptop checking this file), the
    converter emulates them, as torchtitan's own tests do."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def model_spec() -> ModelSpec:
    model = Llama3Model.Config(
        dim=DIM,
        vocab_size=VOCAB,
        enable_weight_tying={j.tied},
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM),
        norm=RMSNorm.Config(normalized_shape=DIM),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB),
        layers=build_layers(
            n_layers=N_LAYERS,
            dim=DIM,
            n_heads=N_HEADS,
            n_kv_heads=N_KV_HEADS,
            hidden_dim=compute_ffn_hidden_dim(DIM, multiple_of=64),
            rope=ComplexRoPE.Config(dim=DIM // N_HEADS, max_seq_len=SEQ_LEN, theta=10000),
            attn_backend="flex",
        ),
    )
    converters = {converters}
    validate_converter_order(converters)
    for converter in converters:
        model = converter.build().convert(model)
    return ModelSpec(
        name="llama3",
        flavor="ablate_plan",
        model=model,
        parallelize_fn=parallelize_llama,
        pipelining_fn=pipeline_llm,
        post_optimizer_build_fn=None,
        state_dict_adapter=Llama3StateDictAdapter,
    )


def ablate_plan() -> Trainer.Config:
    spec = model_spec()
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(spec))),
        hf_assets_path="./assets/hf/tokenizer",
        model_spec=spec,
        optimizer=default_adamw(lr={PEAK_LR}),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=WARMUP, decay_type="cosine", min_lr_factor={MIN_LR_FACTOR}
        ),
        training=TrainingConfig(
            local_batch_size=LOCAL_BATCH,
            global_batch_size=GLOBAL_BATCH,
            seq_len=SEQ_LEN,
            steps=STEPS,
            dtype="{j.dtype}",
            mixed_precision_param="{j.param_dtype}",
            mixed_precision_reduce="float32",
        ),
        parallelism=ParallelismConfig(
            data_parallel_shard_degree=FSDP_DEGREE, data_parallel_replicate_degree=REPLICATE_DEGREE
        ),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        metrics=MetricsProcessor.Config(log_freq=10),
        checkpoint=CheckpointManager.Config(interval=1000),
        activation_checkpoint={ac},
    )
'''
