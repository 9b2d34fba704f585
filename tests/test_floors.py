"""The floors of pyproject.toml's ranges are true: every requirement at its lowest allowed version
resolves together (pip's resolver, against the package index, binary wheels only but for Hydra's
sdist-only parser runtime), and the project trains a sweep and fits it with the floors that differ
from the tested versions (requirements.lock) in front of them on the path. The floors are installed
once per set into a folder outside the checkout (about 270 MB; a minute the first time)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from support import ROOT, SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

# pip's flags for the floors: wheels only, as a user without a compiler gets them; Hydra's grammar
# runtime (antlr4-python3-runtime 4.9) exists only as an sdist.
BINARY = ["--only-binary", ":all:", "--no-binary", "antlr4-python3-runtime"]


def floors() -> dict[str, str]:
    """name -> the lowest version [project.dependencies] allows."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {}
    for line in deps:
        req = Requirement(line)
        lows = [s.version for s in req.specifier if s.operator in (">=", "==")]
        assert lows, f"{line}: no lower bound (every requirement states the oldest version it works with)"
        found[req.name] = lows[0]
    return found


def pip(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_floors_resolve_together(tmp_path):
    report = tmp_path / "report.json"
    pinned = [f"{name}=={version}" for name, version in floors().items()]
    pip(
        "install", "--dry-run", "--ignore-installed", "--quiet", *BINARY, "--report", str(report), *pinned, cwd=tmp_path
    )
    chosen = {
        i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
    }
    for name, version in floors().items():  # each at its floor (a local build label aside: torch 2.13.0+cpu)
        assert Version(Version(chosen[name.lower()]).public) == Version(version), (name, chosen[name.lower()])


@pytest.fixture(scope="module")
def floor_packages(tmp_path_factory) -> Path:
    """The floors that differ from what this environment has, installed (without their own
    requirements, which the environment's satisfy) into a cached folder put first on the path."""
    differ = {n: v for n, v in floors().items() if Version(Version(metadata.version(n)).public) != Version(v)}
    key = hashlib.sha256(json.dumps(sorted(differ.items())).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ablate-tests" / f"floors-{key}"
    if not (cache / "installed.json").is_file():
        shutil.rmtree(cache, ignore_errors=True)
        cache.parent.mkdir(parents=True, exist_ok=True)
        pinned = [f"{n}=={v}" for n, v in differ.items()]
        pip("install", "--quiet", "--no-deps", *BINARY, "--target", str(cache), *pinned, cwd=cache.parent)
        (cache / "installed.json").write_text(json.dumps(differ))
    return cache


def test_at_the_floors_it_trains_a_sweep_and_fits_it(floor_packages, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | {"PYTHONPATH": str(floor_packages)}
    installed = json.loads((floor_packages / "installed.json").read_text())
    assert {"numpy", "scipy", "matplotlib"} <= set(installed)  # the floors that matter most are below the lock's
    names = sorted(installed)
    shown = subprocess.run(
        [sys.executable, "-c", f"from importlib import metadata; print([metadata.version(n) for n in {names!r}])"],
        env=env,
        capture_output=True,
        text=True,
    )
    running = dict(zip(names, json.loads(shown.stdout.replace("'", '"')), strict=True))
    assert all(Version(running[n]) == Version(installed[n]) for n in names), running  # the floors are what runs

    def ablate(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "ablate", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr[-3000:]

    tiny = ["train.batch_size=4", "train.eval_interval=2", "train.eval_batches=1", "train.progress=false", *SMALL_DATA]
    ablate(
        "--multirun", "model=pico,nano,micro", "train.steps=2,4", "hydra/launcher=parallel", "hydra.sweep.dir=s", *tiny
    )
    ablate("fit", "points=s/points.csv", "n_boot=20", "held_out=0")
    assert len((tmp_path / "s" / "points.csv").read_text().splitlines()) == 7
    assert list((tmp_path / "exports").glob("*/fit.json")) and list((tmp_path / "s").glob("*.png"))
