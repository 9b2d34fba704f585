"""The package as a user installs it, apart from any checkout: a wheel built from a clean clone of
this repository, installed into a fresh virtual environment, run from an empty folder (a sweep that
trains, a fit of its points, a preset of the user's through --config-dir); and the sdist, which
carries the same presets. Nothing is downloaded: the environment reuses the installed dependencies.
Installed into an environment that already holds another torch (a CUDA build, as a cluster's has),
the wheel keeps that torch, resolving its own requirements, and trains with it."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from ablate.config import ModelConfig, build
from ablate.data.synthetic import VOCAB_SIZE
from ablate.model import accounting
from support import ROOT, SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TINY = ["train.batch_size=4", "train.eval_interval=2", "train.eval_batches=1", "train.progress=false", *SMALL_DATA]
MINE = {"name": "mine", "n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 32, "vocab_size": None}
# The user's sweep: their model beside two packaged ones, two budgets each (6 points, what a fit needs).
SWEEP = """# @package _global_
defaults:
  - override /hydra/launcher: parallel
hydra:
  mode: MULTIRUN
  sweeper:
    params:
      model: mine,pico,nano
      train.steps: 2,4
"""


def run(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def checked(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = run(args, cwd, env)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """A clone of what is committed (no uncommitted work, no ignored files), its wheel and its sdist,
    built with the installed setuptools (no build isolation: nothing is downloaded)."""
    root = tmp_path_factory.mktemp("package")
    clone, dist = root / "clone", root / "dist"
    checked(["git", "clone", "-q", ROOT, clone], root)
    checked([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, clone], root)
    sdist = "from setuptools import build_meta; import sys; build_meta.build_sdist(sys.argv[1])"
    checked([sys.executable, "-c", sdist, dist], clone)
    (wheel,) = dist.glob("ablate-*.whl")
    (archive,) = dist.glob("ablate-*.tar.gz")
    return {"root": root, "clone": clone, "wheel": wheel, "sdist": archive}


@pytest.fixture(scope="module")
def installed(built) -> dict:
    """A fresh virtual environment outside the clone with the wheel installed in it. Its
    dependencies come from this interpreter's site-packages folders through a .pth file, whose
    lines add those folders to the path without running the .pth files in them (so this
    checkout's editable install, a .pth there, stays out)."""
    env = built["root"] / "env"
    checked([sys.executable, "-m", "venv", "--without-pip", env], built["root"])
    python = env / "bin" / "python"
    site = Path(
        checked([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).stdout.strip()
    )
    (site / "dependencies.pth").write_text("".join(f"{p}\n" for p in sys.path if Path(p).name == "site-packages"))
    checked(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", built["wheel"]],
        env,
    )
    shell = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "HYDRA_FULL_ERROR")}
    shell |= {"PATH": f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(env)}
    return {**built, "env": env, "site": site, "shell": shell}


def presets(archive_names: list[str], prefix: str) -> set[str]:
    return {n.removeprefix(prefix) for n in archive_names if n.startswith(prefix) and n.endswith(".yaml")}


def test_the_wheel_and_the_sdist_carry_every_preset(built):
    conf = built["clone"] / "src" / "ablate" / "conf"
    expected = {str(p.relative_to(conf.parent.parent)) for p in conf.rglob("*.yaml")}
    assert {"ablate/conf/config.yaml", "ablate/conf/fit.yaml", "ablate/conf/model/pico.yaml"} <= expected
    with zipfile.ZipFile(built["wheel"]) as wheel:
        assert presets(wheel.namelist(), "") == expected
    with tarfile.open(built["sdist"]) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        assert presets(sdist.getnames(), f"{top}/src/") == expected


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    code = "import ablate, ablate.config as c; print(ablate.__file__); print(c.CONF_DIR)"
    shell = installed["shell"]  # a user's shell: this checkout is on no path
    module, conf = checked([installed["env"] / "bin" / "python", "-c", code], installed["root"], shell).stdout.split()
    assert Path(module).is_relative_to(installed["site"]) and Path(conf) == installed["site"] / "ablate" / "conf"


def snapshot(root: Path, skip: Path) -> dict:
    """Every file under root but those under skip, with its size and time of change."""
    return {
        p: (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and not p.is_relative_to(skip) and "__pycache__" not in p.parts
    }


def test_from_an_empty_folder_it_sweeps_your_presets_and_fits_them(installed):
    root, shell = installed["root"], installed["shell"]
    mine = root / "my_presets"
    for group, text in (("model", yaml.safe_dump(MINE)), ("sweep", SWEEP)):
        (mine / group).mkdir(parents=True)
        (mine / group / "mine.yaml").write_text(text)
    work = root / "work"
    work.mkdir()
    before = snapshot(root, work)

    checked(["ablate", "--config-dir", mine, "+sweep=mine", *TINY, "hydra.sweep.dir=sweep"], work, shell)
    with open(work / "sweep" / "points.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["model"] for r in rows) == ["mine", "mine", "nano", "nano", "pico", "pico"]
    checked(["ablate", "fit", "points=sweep/points.csv", "n_boot=20", "held_out=0"], work, shell)

    fit = json.loads((work / "exports" / "sweep-points" / "fit.json").read_text())
    mine_params = accounting.params(build(ModelConfig, {**MINE, "vocab_size": VOCAB_SIZE}, "model"))
    assert fit["data"]["n_points"] == 6 and fit["data"]["N"]["min"] == mine_params  # the preset's model, trained
    assert (work / "mlflow.db").is_file()  # the default store, in the folder the command ran from
    assert snapshot(root, work) == before  # nothing written outside that folder: not the clone, not the environment


# The user's own torch: another release than this project's, a CUDA build as a cluster's Python holds
# (on these machines pip takes it and its NVIDIA libraries from local disk).
USER_TORCH = "2.14.1"


@pytest.fixture(scope="module")
def user_torch() -> Path:
    """USER_TORCH installed once per machine into a folder of its own outside the checkout (about
    5 GB with its CUDA libraries; minutes the first time), which a test environment puts on its path."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ablate-tests" / f"torch-{USER_TORCH}"
    if not list(cache.glob(f"torch-{USER_TORCH}*.dist-info")):
        partial = cache.with_name(cache.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        checked(
            [sys.executable, "-m", "pip", "install", "-q", "--target", partial, f"torch=={USER_TORCH}"], partial.parent
        )
        shutil.rmtree(cache, ignore_errors=True)
        partial.rename(cache)
    return cache


def test_installed_beside_another_torch_it_keeps_that_torch_and_trains(built, user_torch, tmp_path):
    env = tmp_path / "env"
    checked([sys.executable, "-m", "venv", "--without-pip", env], tmp_path)
    python = env / "bin" / "python"
    site = Path(
        checked([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).stdout.strip()
    )
    # The user's environment: their torch first, then the other packages (this interpreter's folders).
    others = [p for p in sys.path if Path(p).name == "site-packages"]
    (site / "user.pth").write_text("".join(f"{p}\n" for p in [user_torch, *others]))
    version = "import torch; print(torch.__version__)"
    assert checked([python, "-c", version], env).stdout.startswith(USER_TORCH)

    # pip resolves the wheel's requirements against what the environment holds (no index: nothing new)
    checked([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index", built["wheel"]], env)
    assert not list(site.glob("torch*")) and list(site.glob("ablate-*.dist-info"))  # no torch installed beside theirs
    assert checked([python, "-c", version], env).stdout.startswith(USER_TORCH)

    work = tmp_path / "work"
    work.mkdir()
    shell = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "HYDRA_FULL_ERROR")}
    shell |= {"PATH": f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(env)}
    checked(["ablate", "model=nano", "train.steps=2", *TINY], work, shell)
    (result,) = work.glob("outputs/*/*/result.json")
    record = json.loads(result.read_text())
    assert record["status"] == "finished" and record["steps"] == 2
    assert record["environment"]["torch"].startswith(USER_TORCH)  # trained with the user's torch
