"""The planned run handed to torchtitan: `ablate plan ... export=torchtitan` writes torchtitan_job.py,
and torchtitan 0.3.0's own ConfigManager loads it (scripts/install_torchtitan.sh installs it for
the tests) into the run the plan priced."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Run in a process of its own: torchtitan's imports (its models, torchao's float8) stay out of the
# test process, and the job module is found the way a user's torchrun finds it, on PYTHONPATH.
LOAD = """
import json, sys
from torchtitan.config import ConfigManager
from torchtitan.distributed.activation_checkpoint import FullAC
c = ConfigManager().parse_args(["--module", "torchtitan_job", "--config", "ablate_plan"])
m = c.model_spec.model
layer = m.layers[0]
print(json.dumps({
    "dim": m.dim, "layers": len(m.layers), "vocab": m.vocab_size, "tied": m.enable_weight_tying,
    "heads": layer.attention.n_heads, "kv_heads": layer.attention.n_kv_heads,
    "steps": c.training.steps, "local_batch": c.training.local_batch_size,
    "global_batch": c.training.global_batch_size, "seq_len": c.training.seq_len,
    "dtype": c.training.dtype, "param_dtype": c.training.mixed_precision_param,
    "warmup": c.lr_scheduler.warmup_steps, "decay": c.lr_scheduler.decay_type,
    "min_lr": c.lr_scheduler.min_lr_factor,
    "fsdp": c.parallelism.data_parallel_shard_degree, "replicate": c.parallelism.data_parallel_replicate_degree,
    "full_ac": isinstance(c.activation_checkpoint, FullAC.Config), "no_ac": c.activation_checkpoint is None,
    "float8": "Float8" in repr(layer.feed_forward),
}))
"""


# Where scripts/install_torchtitan.sh puts torchtitan: beside the project's environment, not in it.
TORCHTITAN_SITE = Path(os.environ.get("TORCHTITAN_SITE", Path(sys.prefix) / "torchtitan-site"))


def torchtitan_loads(folder: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", LOAD],
        cwd=folder,
        env={"PYTHONPATH": f"{folder}:{TORCHTITAN_SITE}", "PATH": "/usr/bin:/bin", "HOME": str(folder)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def plan(cli, workdir, out: str, *args: str) -> dict:
    done = cli([*args, "export=torchtitan", f"out={out}"], workdir, command="plan")
    assert done.returncode == 0, done.stderr
    return json.loads((workdir / out / "plan.json").read_text())


@pytest.mark.slow
def test_the_readmes_plan_is_a_torchtitan_job(cli, workdir):
    """README's plan (gpt_1p5b, bf16_pure, one H200, 1e11 tokens): replicated on the GPU it fits on."""
    p = plan(
        cli, workdir, "plans/readme", "model=gpt_1p5b", "precision=bf16_pure", "hardware=h200", "budget.tokens=1e11"
    )
    job = torchtitan_loads(workdir / "plans/readme")
    m = p["inputs"]["model"]
    assert (job["dim"], job["layers"], job["heads"], job["vocab"]) == (1600, 48, 25, 50257)
    assert (job["dim"], job["layers"], job["heads"], job["vocab"]) == (
        m["n_embd"],
        m["n_layer"],
        m["n_head"],
        m["vocab_size"],
    )
    assert job["kv_heads"] in (None, 25) and job["tied"]
    assert (job["local_batch"], job["global_batch"], job["seq_len"]) == (4, 4, 1024)
    assert job["steps"] * job["global_batch"] * job["seq_len"] >= p["tokens"] > (job["steps"] - 1) * 4 * 1024
    assert (job["dtype"], job["param_dtype"]) == ("bfloat16", "bfloat16")  # bf16_pure: bf16 weights
    assert job["warmup"] == round(job["steps"] * 0.01) and job["decay"] == "cosine" and job["min_lr"] == 0.1
    assert (job["fsdp"], job["replicate"], job["no_ac"], job["float8"]) == (1, 1, True, False)


@pytest.mark.slow
def test_a_sharded_fp8_plan_with_recomputation_is_fsdp_float8_and_full_ac(cli, workdir):
    """chinchilla_70b on 64 H100s: states sharded over all 64 (FSDP degree 64), activation checkpointing
    switched on by the plan's fallback, fp8 rowwise matmuls as torchtitan's Float8 converter."""
    p = plan(
        cli,
        workdir,
        "plans/70b",
        "model=chinchilla_70b",
        "precision=fp8_rowwise",
        "hardware=h100",
        "gpus=64",
        "budget.tokens=1.4e12",
    )
    job = torchtitan_loads(workdir / "plans/70b")
    assert p["gpus"] == 64 and p["memory_at_gpus_needed"]["sharded"]
    assert (job["fsdp"], job["replicate"]) == (64, 1)
    assert job["full_ac"] and p["gpus_needed_with"]["activation_checkpointing"]
    assert job["float8"] and job["param_dtype"] == "bfloat16" and job["dtype"] == "float32"
    assert job["global_batch"] == 64 * job["local_batch"]


def test_a_tensorwise_fp8_plan_is_refused_in_one_line(cli, workdir):
    done = cli(
        ["model=gpt_1p5b", "precision=fp8_tensorwise", "hardware=h100", "budget.tokens=1e9", "export=torchtitan"],
        workdir,
        command="plan",
    )
    assert done.returncode == 2
    assert "rowwise recipes only (valid: precision=fp8_rowwise" in done.stderr
    assert not (workdir / "plans").exists() or not list((workdir / "plans").rglob("*"))


def test_an_unknown_export_is_refused_in_one_line(cli, workdir):
    done = cli(["model=gpt_1p5b", "budget.tokens=1e9", "export=megatron"], workdir, command="plan")
    assert done.returncode == 2 and "export=megatron is not an engine ablate writes jobs for" in done.stderr
