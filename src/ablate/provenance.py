"""Where a result came from: the code version, the environment it ran in, and a hash of the config
that determines it."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from ablate import __version__
from ablate.config import Hashing, RunConfig, as_dict, hashing, section_classes


def config_hash(cfg: RunConfig, hardware=None) -> str:
    """sha256 of the canonical JSON of the result-determining config; 16 hex characters.

    Which keys count is declared where each key is, in its field's metadata (config/keys.py
    `setting`): keys that change no number are left out, keys added after runs were recorded are
    left out at the value runs had before them, and options that act only with another are left out
    without it. The resolved device (not the hardware preset's name) is part of the key: `auto` on a
    GPU machine and `cpu` are different runs. The model is keyed by its preset's name and its sizes,
    each its own key, so the name derived from them (nano.n_layer_12) changes no hash.
    """
    flat = hashed_values(cfg)
    if hardware is not None:
        flat["hardware.resolved_device"] = hardware.device
    blob = json.dumps(flat, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def hashed_values(part: Any, prefix: str = "") -> dict:
    """The flattened keys of a config (a RunConfig, or a slice of one under `prefix`) that its
    hash reads, with their values, as each field's Hashing facts decide."""
    section = as_dict(part)
    out: dict = {}
    for f in dataclasses.fields(part):
        facts = hashing(f) or Hashing()
        if not facts.counts(section[f.name], section):
            continue
        key = prefix + (facts.hash_as or f.name)
        value = getattr(part, f.name)
        if dataclasses.is_dataclass(value):
            out.update(hashed_values(value, key + "."))
        else:
            out.update(flatten({key: section[f.name]}))
    return out


def hashed(key: str) -> bool:
    """Whether a flattened config key (data.cache_dir, hardware.peak_flops.bf16) is ever part of the
    config hash: False where it, or a section above it, is declared hashed=False."""
    classes: tuple[type, ...] = (RunConfig,)
    for name in key.split("."):
        found = [(c, f) for c in classes for f in dataclasses.fields(c) if f.name == name]
        if any(not (hashing(f) or Hashing()).hashed for _, f in found):
            return False
        classes = tuple(m for c, _ in found for m in section_classes(c, name))
        if not classes:  # a value, or a key inside a mapping: its field decided
            return True
    return True


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
