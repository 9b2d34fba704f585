"""Shared helpers: small configs built from the real presets, and the command line in a subprocess."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ablate.config import build, parse_run

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# A small language (500 words) keeps data generation and evaluation quick in tests.
SMALL_DATA = ["data.n_words=500", "data.train_tokens=200000", "data.val_tokens=20000"]


def preset(group: str, name: str) -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


def run_config(tmp_path: Path, tracking: str = "none", **overrides):
    """A RunConfig from the real presets, tiny by default; overrides as {"train.steps": 10}."""
    tree = {
        "model": preset("model", "nano"),
        "data": preset("data", "synthetic"),
        "precision": preset("precision", "fp32"),
        "hardware": preset("hardware", "cpu"),
        "optim": preset("optim", "adamw"),
        "train": preset("train", "default"),
        "tracking": preset("tracking", tracking),
        "state_dir": str(tmp_path / "state"),
    }
    tree["data"].update(n_words=500, train_tokens=200_000, val_tokens=20_000)
    tree["train"].update(steps=20, eval_interval=10, log_interval=5, progress=False)
    if tracking == "mlflow":
        tree["tracking"]["uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for key, value in overrides.items():
        section, _, leaf = key.partition(".")
        if leaf:
            tree[section][leaf] = value
        elif isinstance(value, str) and section in ("model", "precision", "hardware", "data"):
            tree[section] = preset(section, value)
        else:
            tree[section] = value
    return parse_run(tree)


def cli(args: list[str], cwd: Path, timeout: float = 600, env: dict | None = None, module: str = "ablate"):
    """Run `python -m ablate ARGS` in cwd; returns the CompletedProcess (text)."""
    full_env = {**os.environ, "HYDRA_FULL_ERROR": "", **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR")
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
    )


def run_statuses(db: Path) -> list[str]:
    """Statuses of every run in a sqlite MLflow store, read directly from the database."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT status FROM runs")]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_runtest_makereport(item, call):
    import reliability

    if call.when == "call" or (call.when == "setup" and call.excinfo is not None):
        if item.nodeid in reliability.LEDGER or item.get_closest_marker("reliability"):
            reliability.OUTCOMES[item.nodeid] = "passed" if call.excinfo is None else "FAILED"


def pytest_sessionfinish(session, exitstatus):
    """`make test` (the whole suite) rewrites docs/RELIABILITY.md; ad-hoc subsets leave it alone."""
    import reliability

    if os.environ.get("ABLATE_WRITE_RELIABILITY") == "1":
        reliability.write_doc()
