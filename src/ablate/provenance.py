"""Where a result came from: the code version, the environment it ran in, and a hash of the config
that determines it."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ablate import __version__
from ablate.config import RunConfig, as_dict

# Keys that cannot change a run's numbers: where things are written, how progress is shown,
# how often state is saved, and the switches that only decide whether to run at all.
HASH_EXCLUDED = {
    "tracking",
    "state_dir",
    "skip_unsupported",
    "train.progress",
    "train.checkpoint_interval",
    "train.flush_interval_s",
    "train.rerun",
    "train.retry_failed",
    "train.compile",
    "train.activation_checkpointing",
    "train.compile_blocks",
    "train.profile",
    "train.profile_start",
    "train.profile_steps",
    "hardware.workers",
    "hardware.price_per_hour",
    "hardware.peak_flops",
    "hardware.memory_gb",
    "hardware.memory_bandwidth_gbs",
    "hardware.nvlink_gbs",
    "hardware.network_gbs",
    "hardware.name",
    "hardware.device",
    "data.cache_dir",
}


# Each key's value before it existed: a run at it hashes as it did then, so its records stay found.
BASELINE_ARMS = {
    "model.position": "learned",
    "model.norm": "layernorm",
    "model.mlp": "gelu",
    "model.qk_norm": False,
    "model.n_kv_head": None,
    "model.tie_embeddings": True,
    "train.tokens_per_param": None,
    "train.grad_accum": 1,
    "train.z_loss": 0.0,
    "precision.emulate": False,
    "train.parallel": "ddp",
}


def config_hash(cfg: RunConfig, hardware=None) -> str:
    """sha256 of the canonical JSON of the result-determining config; 16 hex characters.

    The resolved device (not the hardware preset's name) is part of the key: `auto` on a GPU
    machine and `cpu` are different runs. The model is keyed by its preset's name and its sizes,
    each its own key, so the name derived from them (nano.n_layer_12) changes no hash.
    """
    flat = {k: v for k, v in flatten(as_dict(cfg)).items() if not _excluded(k)}
    preset = flat.pop("model.preset", None)
    if preset is not None:  # the preset's name, as runs were hashed before names told sizes (ModelConfig.named)
        flat["model.name"] = preset
    if not flat.get("model.mup"):  # options that change nothing when off keep older hashes valid
        flat.pop("model.mup", None)
        flat.pop("model.mup_base_width", None)
    for key, baseline in BASELINE_ARMS.items():  # keys added after runs were recorded, at their old values
        if key in flat and flat[key] == baseline:
            flat.pop(key)
    if flat.get("model.position") != "rope":
        flat.pop("model.rope_base", None)
    if flat.get("optim.name") != "muon":
        for key in [k for k in flat if k.startswith("optim.muon_")]:
            flat.pop(key)
    if flat.get("optim.schedule") != "wsd":
        flat.pop("optim.cooldown_fraction", None)
        flat.pop("optim.cooldown_shape", None)
    if flat.get("data.kind") == "text" and flat.get("data.tokenizer") == "bytes":
        flat.pop("data.tokenizer", None)
        flat.pop("data.vocab_size", None)
    if flat.get("data.val_split") == "tail":  # the split every text run had before there was a choice
        flat.pop("data.val_split", None)
    if flat.get("data.kind") == "tokens" and not flat.get("data.dir"):
        flat.pop("data.dir", None)
    if hardware is not None:
        flat["hardware.resolved_device"] = hardware.device
    blob = json.dumps(flat, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def hashed(key: str) -> bool:
    """Whether a flattened config key is part of the config hash (where a cache lives is not)."""
    return not _excluded(key)


def _excluded(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in HASH_EXCLUDED)


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


@functools.cache
def code_version() -> dict:
    """Git commit and dirty flag of the source tree this package runs from."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = _git(root, "rev-parse", "HEAD")
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {"git.commit": "unknown", "git.dirty": "unknown"}
    return {"git.commit": commit, "git.dirty": str(dirty).lower()}


def _git(root: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10)
    return out.stdout.strip()


# The CPU features that decide which kernels torch runs (vector width, bf16/fp16/int8 dot products,
# AMX tiles): two runs whose sets differ may differ in speed and in the last bits of their losses.
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)


def environment(device: str | None = None, cwd: str | None = None) -> dict:
    """What a result was made with, as result.json and MLflow record it: the user's working tree
    (the git repository `cwd` is in, default the current folder: its commit and whether it had
    uncommitted changes; None outside a repository), ablate's version and, where it runs from a
    checkout, that checkout's commit, the versions of Python and torch, the platform, the CPU's model
    and flags, and the GPU a run on `device` trains on (None off CUDA)."""
    ablate_code = code_version()
    return {
        **workspace(os.path.abspath(cwd or os.getcwd())),
        "ablate": ablate_version(),
        "ablate_commit": None if ablate_code["git.commit"] == "unknown" else ablate_code["git.commit"],
        "python": platform.python_version(),
        "torch": torch_version(),
        "platform": platform.platform(),
        **cpu(),
        "gpu": gpu_name(device),
    }


@functools.cache
def workspace(cwd: str) -> dict:
    """{"commit", "dirty"} of the git repository `cwd` is in; None for both outside one."""
    try:
        commit = _git(Path(cwd), "rev-parse", "HEAD")
        dirty = bool(_git(Path(cwd), "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def ablate_version() -> str:
    return __version__


def torch_version() -> str | None:
    """The torch this process runs: the imported module's version where it is imported (it may be
    another installation than the first one metadata finds), else the installed distribution's."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def cpu() -> dict:
    """{"cpu": the model name, "cpu_flags": every flag the kernel lists} from /proc/cpuinfo (x86:
    "model name", "flags"; Arm: "Features"), else platform's processor name and no flags."""
    model, flags = "", []
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = value.split()
    return {"cpu": model or platform.processor() or platform.machine(), "cpu_flags": flags}


def isa(flags: list[str]) -> list[str]:
    """The flags of ISA_FLAGS that `flags` has, in ISA_FLAGS' order."""
    have = set(flags)
    return [f for f in ISA_FLAGS if f in have]


def gpu_name(device: str | None) -> str | None:
    """The name of the CUDA device `device` is (cuda, cuda:N); None for any other device. Called in
    the run's own process, which uses that device anyway: never in a launcher that forks workers."""
    if not device or not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index
    return torch.cuda.get_device_name(torch.cuda.current_device() if index is None else index)
