"""Constants the tests need at collection time: the repository's paths, the small-data overrides,
and the presets read from the package's own (ablate/conf). Set-up (configs, command-line runs,
stores, servers, clusters) is in fixtures (tests/conftest.py); this module holds nothing that
starts or writes anything."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import yaml

from ablate.config import CONF_DIR

ROOT = Path(__file__).resolve().parents[1]
CONF = CONF_DIR
DATA = ROOT / "tests" / "fixtures"  # committed input files (Epoch's Chinchilla CSV)

# A small language (500 words) keeps data generation and evaluation quick in tests.
SMALL_DATA = ["data.n_words=500", "data.train_tokens=200000", "data.val_tokens=20000"]


def nano_pair(steps: int, log_every: int, eval_every: int, checkpoint_every: int) -> list[str]:
    """A sweep of two nano runs (seeds 0 and 1) on the small language, both at once under the
    parallel launcher, one thread each, flushing their metrics often."""
    return [
        "--multirun",
        "model=nano",
        *SMALL_DATA,
        "train.progress=false",
        f"train.steps={steps}",
        f"train.log_interval={log_every}",
        f"train.eval_interval={eval_every}",
        f"train.checkpoint_interval={checkpoint_every}",
        "train.flush_interval_s=0.3",
        "train.seed=0,1",
        "hydra/launcher=parallel",
        "hydra.launcher.workers=2",
        "hydra.launcher.threads_per_job=1",
    ]


def preset(group: str, name: str) -> dict:
    """The preset GROUP/NAME.yaml as a plain dict, as the tests build configs from it."""
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


# Hoffmann et al. 2022's rounded approach-3 law, L = E + A/N^alpha + B/D^beta: the truth synthetic
# scaling data are drawn from.
TRUE_LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def run_config(path: Path, tracking: str = "none", **overrides):
    """A RunConfig as `ablate model=nano hardware=cpu ... OVERRIDES` composes and parses it (the app
    users run, hydra_app.App, through cli.common.compose_run), tiny by default, its state (and its
    sqlite store with tracking="mlflow") under path; overrides as {"train.steps": 10}, a preset name
    for a whole group ({"precision": "bf16"}), or a group's keys as a dict ({"optim": {...}}).
    Building it starts and writes nothing."""
    from ablate.cli.common import compose_run

    choices = {**TINY_PRESETS, "tracking": tracking}
    values = {**TINY_VALUES, "state_dir": str(path / "state")}
    if tracking == "mlflow":  # its own store, named as the preset names it without MLflow's variables
        values.update({"tracking.uri": f"sqlite:///{path / 'mlflow.db'}", "tracking.experiment": "ablate"})
    for key, value in overrides.items():
        if key in choices and isinstance(value, str):
            choices[key] = value
        elif "." not in key and isinstance(value, dict):  # a group's keys, each over its preset's
            values.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            values[key] = value
    return compose_run([f"{k}={v}" for k, v in choices.items()] + [as_override(k, v) for k, v in values.items()])


# run_config's presets and keys: a tiny run on the small language
TINY_PRESETS = {"model": "nano", "data": "synthetic", "precision": "fp32", "hardware": "cpu", "optim": "adamw"}
TINY_VALUES = {
    "data.n_words": 500,
    "data.train_tokens": 200_000,
    "data.val_tokens": 20_000,
    "train.steps": 20,
    "train.eval_interval": 10,
    "train.log_interval": 5,
    "train.progress": False,
}


def as_override(key: str, value) -> str:
    """key=VALUE as a user writes it; a mapping (tracking.tags, hardware.peak_flops) replaced whole,
    with ++ since its keys are the user's own."""
    return f"{'++' if isinstance(value, dict) else ''}{key}={hydra_value(value)}"


def hydra_value(value) -> str:
    """A Python value as a Hydra override writes it: null, true, a number, a list, a mapping, a quoted
    string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("'", "\\'") + "'"


def one_line_error(result) -> str:
    """The one `error: ...` line of a command that exited 2 with no traceback (the bad-input contract)."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def law_points_csv(seed: int) -> str:
    """points.csv text of TRUE_LAW over 5 sizes (2e4 to 2e5) x 5 budgets (5e3 to 1e5), 1% log noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = ["params,tokens,loss"]
    for N in np.geomspace(2e4, 2e5, 5):
        for D in np.geomspace(5e3, 1e5, 5):
            law = TRUE_LAW["E"] + TRUE_LAW["A"] / N ** TRUE_LAW["alpha"] + TRUE_LAW["B"] / D ** TRUE_LAW["beta"]
            rows.append(f"{N:.0f},{D:.0f},{law * np.exp(rng.normal(0, 0.01)):.6f}")
    return "\n".join(rows) + "\n"


# The architecture arms as ModelConfig changes, one key each, and two that combine them
# (tests/model/test_arms.py, tests/perf/test_memory.py).
ARCH_ARMS = {
    "rope": dict(position="rope"),
    "nope": dict(position="none"),
    "rmsnorm": dict(norm="rmsnorm"),
    "swiglu": dict(mlp="swiglu"),
    "relu2": dict(mlp="relu2"),
    "qk_norm": dict(qk_norm=True),
    "gqa": dict(n_kv_head=2),
    "mqa": dict(n_kv_head=1),
    "untied": dict(tie_embeddings=False),
    "gqa_rope_qk_norm": dict(n_kv_head=2, position="rope", qk_norm=True),
    "modern": dict(position="rope", norm="rmsnorm", mlp="swiglu", qk_norm=True, n_kv_head=2, tie_embeddings=False),
}


def free_port() -> int:
    """A loopback port nothing listens on: bound once by the OS, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environ_now() -> dict[str, str]:
    """A copy of os.environ that any thread may take. pytest's main thread sets and deletes
    PYTEST_CURRENT_TEST around every test phase; a copy taken meanwhile by another thread (the
    bad-input cases run on a pool while later tests go on) reads each key back one at a time and can
    find one gone (KeyError) or the mapping resized under it (RuntimeError). Such a copy is taken again."""
    while True:
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue
