"""Reliability suite: bad input across commands, kill -9 at chosen and random moments, out of
memory, a full disk, and concurrent load on sqlite and on a PostgreSQL-backed MLflow server.
Every case lands in docs/RELIABILITY.md."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

import reliability
from ablate.run import checkpoint
from ablate.tracking.tags import KIND_TAG
from bad_inputs import materialize, statuses
from support import SMALL_DATA

pytestmark = [pytest.mark.reliability]

# -- bad input ----------------------------------------------------------------------------------
# (command, arguments, words the one line must contain). None: `python -m ablate` (train). Upper-case
# words are files made per case by _inputs (an empty file, a non-database, a directory, ...).
TRAIN = None
BAD_INPUT = [
    (TRAIN, ["model=doesnotexist"], "model=doesnotexist"),
    (TRAIN, ["model.n_embd=100", "model.n_head=3"], "model.n_embd=100"),
    (TRAIN, ["model.n_layer=0"], "model.n_layer=0"),
    (TRAIN, ["model.n_layer=two"], "model.n_layer='two'"),
    (TRAIN, ["model.attention=flash"], "model.attention='flash'"),
    (TRAIN, ["model.position=rotary"], "model.position='rotary'"),
    (TRAIN, ["model.mlp=geglu"], "model.mlp='geglu'"),
    (TRAIN, ["model.norm=nosuch.module:Norm"], "module nosuch.module cannot be imported"),
    (TRAIN, ["model.n_kv_head=3"], "model.n_kv_head=3 does not divide model.n_head=4"),
    (TRAIN, ["model.mup=true", "model.qk_norm=true"], "muP's scaling rules do not cover it"),
    (TRAIN, ["optim=muon", "precision=bf16_pure"], "optim=muon with precision=bf16_pure"),
    (TRAIN, ["train.grad_accum=0"], "train.grad_accum=0"),
    (TRAIN, ["train.z_loss=-1"], "train.z_loss=-1.0 is negative"),
    (TRAIN, ["train.tokens_per_param=0.0001"], "is less than one step"),
    (TRAIN, ["model.dropout=1.5"], "model.dropout=1.5"),
    (TRAIN, ["model.vocab_size=1"], "model.vocab_size=1"),
    (TRAIN, ["model=gpt_1p5b"], "GB free"),
    (TRAIN, ["optim.lr=-0.001"], "optim.lr=-0.001"),
    (TRAIN, ["optim.weight_decay=-1"], "optim.weight_decay=-1"),
    (TRAIN, ["optim.beta2=1.0"], "optim.beta2=1.0"),
    (TRAIN, ["optim.min_lr_ratio=2"], "optim.min_lr_ratio=2"),
    (TRAIN, ["train.steps=0"], "train.steps=0"),
    (TRAIN, ["train.steps=-5"], "train.steps=-5"),
    (TRAIN, ["train.tokens=1e6", "train.steps=100"], "exactly one training budget"),
    (TRAIN, ["train.default_steps=0"], "train.default_steps=0 must be positive"),
    (TRAIN, ["train.tokens=10"], "train.tokens=10 is less than one step"),
    (TRAIN, ["train.flops=1e3"], "train.flops=1e+03 is less than one step"),
    (TRAIN, ["train.batch_size=0"], "train.batch_size=0"),
    (TRAIN, ["train.seed=-1"], "train.seed=-1"),
    (TRAIN, ["train.rerun=maybe"], "train.rerun='maybe'"),
    (TRAIN, ["train.profile=true", "train.compile=true"], "train.compile=false while profiling"),
    (TRAIN, ["model.block_size=300000"], "model.block_size=300000"),
    (TRAIN, ["hardware=tpu"], "hardware=tpu"),
    (TRAIN, ["hardware=h100"], "hardware=h100"),
    (TRAIN, ["hardware.gpus_per_node=0"], "hardware.gpus_per_node=0"),
    (TRAIN, ["hardware=cpu", "hardware.gpus_per_node=2", "train.batch_size=3"], "does not split across 2 DDP ranks"),
    (TRAIN, ["precision=fp8_tensorwise"], "precision=fp8_tensorwise"),
    (TRAIN, ["precision=int4"], "precision=int4"),
    (TRAIN, ["fti", "points=x.csv"], "unknown command 'fti': did you mean fit"),
    (TRAIN, ["precision.loss_scaling=true"], "precision.loss_scaling=true"),
    (TRAIN, ["model.widht=3"], "unknown key model.widht"),
    (TRAIN, ["+model.widht=3"], "unknown key model.widht"),
    (TRAIN, ["skip_unsupported=sometimes"], "skip_unsupported='sometimes'"),
    (TRAIN, ["data.seed=-3"], "data.seed=-3"),
    (TRAIN, ["data.zipf_unigram=-1"], "data.zipf_unigram=-1"),
    (TRAIN, ["data.successors=1"], "data.successors=1"),
    (TRAIN, ["data.max_len=1000"], "data.max_len=1000"),
    (TRAIN, ["data.min_len=1", "data.max_len=1", "data.n_words=30"], "data.n_words=30"),
    (TRAIN, ["data.n_words=300000"], "min of CPU"),
    (TRAIN, ["data.train_tokens=1e10"], "min of CPU"),
    (TRAIN, ["data.kind=images"], "data.kind='images'"),
    (TRAIN, ["data=text", "data.paths=[/nonexistent/corpus]"], "/nonexistent/corpus"),
    (TRAIN, ["data=text", "data.paths=[EMPTY]"], "empty"),
    (TRAIN, ["data=text", "data.glob=/etc/*"], "data.glob='/etc/*'"),
    (TRAIN, ["data=text", "data.val_fraction=0"], "data.val_fraction=0"),
    (TRAIN, ["data=text", "data.paths=[DIR]", "data.glob=*.nothing"], "matched no files"),
    (TRAIN, ["data=tokens", "data.train_bin=/nonexistent.bin", "data.val_bin=/nonexistent.bin"], "does not exist"),
    (TRAIN, ["data=tokens", "data.train_bin=SHORT", "data.val_bin=SHORT"], "longer than"),
    (TRAIN, ["data=tokens", "data.train_bin=BADIDS", "data.val_bin=TOKENS"], "at position 1,200,000"),
    (TRAIN, ["data=tokens", "data.train_bin=DIR", "data.val_bin=TOKENS"], "is not a file"),
    (TRAIN, ["data=tokens", "data.train_bin=TOKENS", "data.val_bin=TOKENS", "data.vocab_size=70000"], "uint16"),
    (TRAIN, ["model.vocab_size=10"], "model.vocab_size=10"),
    (TRAIN, ["state_dir="], "state_dir is empty"),
    (TRAIN, ["state_dir=/proc/ablate-state"], "state_dir='/proc/ablate-state' cannot be written"),
    (TRAIN, ["state_dir=FILE/state"], "is a file"),
    (TRAIN, ["hydra.run.dir=/proc/ablate-run"], "hydra.run.dir='/proc/ablate-run' cannot be written"),
    (TRAIN, ["tracking.backend=wandb"], "tracking.backend='wandb'"),
    (TRAIN, ["tracking.uri=sqlite:///NOTADB"], "is not an SQLite database"),
    (TRAIN, ["tracking.uri=sqlite:///MISSING/mlflow.db"], "does not exist"),
    (TRAIN, ["tracking.uri=mlflow.db"], "is not an MLflow store"),
    (TRAIN, ["tracking.uri=http://127.0.0.1:notaport"], "invalid port"),
    (TRAIN, ["tracking.experiment="], "tracking.experiment is empty"),
    (TRAIN, ["train.steps=="], "Error parsing override"),
    (TRAIN, ["frobnicate"], "frobnicate"),
    (TRAIN, ["+sweep=precision", "model=nope"], "model=nope"),
    (TRAIN, ["+sweep=nope"], "sweep=nope"),
    (TRAIN, ["--multirun", "precision=fp32,fp9"], "precision=fp9"),
    (TRAIN, ["--multirun", "model=nano,micro", "model.n_layer=0"], "model.n_layer=0"),
    (TRAIN, ["--multirun", "model=nano,micro", "hydra.sweep.dir=/proc/ablate-sweep"], "hydra.sweep.dir"),
    (TRAIN, ["+sweep=scaling", "train.seed=-4"], "sweep job #0"),
    (TRAIN, ["+sweep=scaling", "tracking.uri=sqlite:///NOTADB"], "is not an SQLite database"),
    (TRAIN, ["+sweep=attention", "hydra.launcher.workers=0"], "hydra.launcher.workers=0"),
    (TRAIN, ["+sweep=attention", "hydra.launcher.threads_per_job=two"], "threads_per_job=two is not a whole number"),
    (TRAIN, ["+sweep=attention", "hydra.launcher.stop_timeout_s=-1"], "hydra.launcher.stop_timeout_s=-1"),
    (TRAIN, ["+sweep=precision", "hydra/launcher=slurm", "hydra.launcher.timeout_min=0"], "timeout_min=0"),
    (TRAIN, ["+sweep=precision", "hydra/launcher=slurm", "hydra.launcher.signal_delay_s=7200"], "signal_delay_s"),
    (TRAIN, ["+sweep=precision", "hydra/launcher=slurm", "hydra.launcher.partiton=gpu"], "unknown key"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials=0"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.pruner=nope"], "hydra.sweeper.pruner='nope'"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.pruners.median.n_startup_trials=-1"], "hydra.sweeper.pruners.median"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.params.optim.lr='interval(1e-2, 1e-4)'"], "low <= high"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.search=[optim.lrr]"], "optim.lrr"),
    (
        TRAIN,
        ["+sweep=lr", "+hydra.sweeper.params.optim.lrr='interval(0.1, 1.0)'", "hydra.sweeper.search=[optim.lrr]"],
        "not a config key",
    ),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.study_name=.."], "hydra.sweeper.study_name='..'"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.storage=foo://x"], "hydra.sweeper.storage='foo://x'"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.storage=FILE/journal.log"], "hydra.sweeper.storage"),
    ("fit", [], "neither given"),
    ("fit", ["experiment=x", "points=OK"], "both given"),
    ("fit", ["points=/nonexistent/points.csv"], "no such file"),
    ("fit", ["points=NOCOLUMN"], "missing column(s) tokens"),
    ("fit", ["points=NEGATIVE"], "is -1000000.0"),
    ("fit", ["points=BINARY"], "not a CSV text file"),
    ("fit", ["points=DUPLICATE"], "are the same point"),
    ("fit", ["points=HEADERONLY"], "no data rows"),
    ("fit", ["points=DIR"], "not a file"),
    ("fit", ["points=OK", "out=FILE"], "out="),
    ("fit", ["points=OK", "n_boot=-1"], "n_boot=-1"),
    ("fit", ["points=OK", "held_out=50"], "held_out=50"),
    ("fit", ["points=OK", "entropy_floor=-1"], "entropy_floor=-1"),
    ("fit", ["points=OK", "target.N=1e9"], "is not a target"),
    ("fit", ["points=OK", "nboot=10"], "unknown key nboot"),
    ("fit", ["experiment=nonexistent", "tracking.uri=sqlite:///STORE"], "nonexistent"),
    ("fit", ["experiment=scaling", "tracking.uri=sqlite:///NOTADB"], "is not an SQLite database"),
    ("plan", ["model=gpt_1p5b"], "no budget given"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=-5"], "budget.tokens=-5.0 must be positive"),
    ("plan", ["model=gpt_1p5b", "budget.flops=1e21", "budget.dollars=100"], "conflict"),
    ("plan", ["model=gpt_1p5b", "hardware=tpu", "budget.tokens=1e11"], "hardware=tpu"),
    ("plan", ["model=gpt_1p5b", "precision=fp8_tensorwise", "hardware=a100", "budget.tokens=1e11"], "8.9"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "gpus=0"], "gpus=0"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "mfu=1.5"], "mfu=1.5"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=/nonexistent/fit.json"], "/nonexistent/fit.json"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=NOTJSON"], "is not JSON"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "tracking_uri=sqlite:///NOTADB"], "tracking_uri="),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "out=FILE"], "out="),
    ("ui", ["--store", "DIR/none.db"], "no MLflow store"),
    ("ui", ["--store", "NOTADB"], "is not an SQLite database"),
    ("ui", ["--port", "70000"], "--port 70000"),
    ("study", ["BROKENSTUDY"], "is not valid YAML"),
    ("study", ["DIR"], "has no study.yaml"),
    ("study", ["DIR", "model=nano"], "need --run"),
    ("jobs", ["MISSING"], "has no jobs.json"),
    ("sync", ["FILE"], "is not a folder"),
    ("submit", ["+sweep=precision"], "hydra/launcher is not slurm"),
    ("submit", ["+sweep=precision", "hydra/launcher=slurm", "hydra.launcher.timeout_min=0"], "timeout_min=0"),
    # numbers past what a loop, a formula or a machine holds
    (TRAIN, ["train.eval_batches=1e30"], "train.eval_batches=1e+30 is too large"),
    (TRAIN, ["train.eval_batches=20000"], "train.eval_batches=20000 is too large"),
    (TRAIN, ["train.flush_interval_s=1e300"], "train.flush_interval_s=1e+300"),
    (TRAIN, ["train.seed=1e20"], "train.seed=1e+20 is too large"),
    (TRAIN, ["model.n_layer=1e18"], "model.n_layer=1e+18 is too large"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.n_trials=1000000000"], "hydra.sweeper.n_trials=1e+09"),
    (TRAIN, ["+sweep=lr", "hydra.sweeper.n_trials=1e9"], "hydra.sweeper.n_trials=1e9 is not a whole number"),
    ("fit", ["points=OK", "n_boot=1e7"], "n_boot=1e+07 is too large"),
    ("fit", ["points=OK", "target.C=1e300"], "target.C=1e+300 is too large"),
    ("fit", ["points=OK", "approach2.window_decades=1e300"], "approach2.window_decades"),
    ("backtest", ["points=OK", "n_boot=1e30"], "n_boot=1e+30 is too large"),
    ("compare", ["points=OK", "baseline=a", "n_boot=1e7"], "n_boot=1e+07 is too large"),
    ("compare", ["points=OK", "baseline=a", "seed=-1"], "seed=-1"),
    ("plan", ["model=gpt_1p5b", "budget.hours=1e300"], "budget.hours=1e+300 is too large"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e308"], "budget.tokens=1e+308 is too large"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "gpus=1e15"], "gpus=1e+15 is too large"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "mfu=1e-300"], "mfu=1e-300 is too small"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "context=1e15"], "context=1e+15 is too large"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "data.tokens_available=1e-5"], "less than one token"),
    # files a command reads that are not what they say
    ("fit", ["points=HUGEPARAMS"], "column 'params' row 0 (line 2) is 1e+308; every value must be at most 1e+40"),
    ("fit", ["points=RAGGED"], "line 3 has 2 fields and the header 4"),
    ("backtest", ["points=RAGGED"], "line 3 has 2 fields and the header 4"),
    ("compare", ["points=RAGGED", "baseline=a"], "line 3 has 2 fields and the header 4"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=NEGALPHA"], "params.alpha is -0.3"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=HUGEALPHA"], "params.alpha is 1e+300"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=BADRANGE"], "data.N has min"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=WRONGTYPES"], "is malformed"),
    ("predict", ["--outcome", "BROKENRUN", "out=MISSING/prediction.json"], "is not a run's result"),
    # data checked against its own description, a config whose name is not what it holds
    (TRAIN, ["data=tokens", "data.dir=SHORTSPLIT"], "meta.json says 300000"),
    (TRAIN, ["data=tokens", "data.dir=IDSPASTVOCAB"], ">= vocab_size 100"),
    (TRAIN, ["data=tokens", "data.dir=BADDTYPE"], "says dtype 'float32'"),
    (TRAIN, ["data=tokens", "data.dir=BROKENMETA"], "has no readable meta.json"),
    (TRAIN, ["precision=fp32", "precision.param_dtype=bf16"], "precision.name=fp32 with precision.param_dtype=bf16"),
    (TRAIN, ["precision=bf16", "precision.autocast=fp16"], "is not bf16"),
    # the UI: loopback unless --public says otherwise
    ("ui", ["--host", ""], "--host '' is not an IP address"),
    ("ui", ["--host", "not-a-host"], "--host 'not-a-host' is not an IP address"),
    ("ui", ["--host", "0.0.0.0"], "--public"),
    # numbers past what a loop, a formula or a machine holds, and state that is not what it should be
    (TRAIN, ["train.grad_accum=1e9"], "sequences per step is too many"),
    (TRAIN, ["train.steps=1e15"], "past what a float counts exactly"),
    (TRAIN, ["optim=muon", "optim.muon_ns_steps=1000"], "optim.muon_ns_steps=1000 is too large"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "hardware.price_per_hour=1e300"], "price_per_hour=1e+300"),
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "hardware.memory_gb=1e12"], "hardware.memory_gb=1e+12"),
    ("sample", ["run=DIR", "temperature=1e-320"], "is too small to divide fp32 logits"),
    ("sample", ["run=DIR", "bandwidth_gbs=1e9"], "bandwidth_gbs=1e+09 is too large"),
    ("sample", ["run=DIR", "threads=100000"], "threads=100000 is too large"),
    ("jobs", ["BADJOBS"], "jobs.json is not a record of this sweep"),
    (TRAIN, ["hydra.run.dir=RESULTDIR"], "result.json is a folder where a file belongs"),
    (TRAIN, ["hydra.run.dir=LOGDIR"], "train.log is a folder where a file belongs"),
    (TRAIN, ["--multirun", "train.steps=5,6", "hydra.sweep.dir=SUMMARYDIR"], "summary.json is a folder where"),
    ("sample", ["run=DIR", "out=DIR"], "somedir is a folder where a file belongs"),
    # a FIFO where a file belongs: refused, never read (a FIFO with no writer blocks a read for ever)
    ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "fit=FIFO"], "not a regular file"),
    (TRAIN, ["tracking.uri=sqlite:///FIFO"], "not a regular file"),
    (TRAIN, ["data=tokens", "data.dir=FIFOMETA"], "has no readable meta.json"),
]


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def _run_bad_input(cli, tmp: Path, command: str | None, args: list[str]) -> dict:
    inputs, cwd = tmp / "inputs", tmp / "cwd"
    inputs.mkdir(parents=True), cwd.mkdir()
    full = materialize(args, inputs)
    before = _snapshot(inputs)
    proc = cli(full, cwd, command=command, process=True)  # the real command line, and one per thread
    return {
        "proc": proc,
        "created": sorted(p.name for p in cwd.iterdir()),
        "inputs_changed": _snapshot(inputs) != before,
    }


def _case_id(command, args) -> str:
    return " ".join([command or "", *args]).strip()


@pytest.fixture(scope="module")
def bad_input_runs(cli, request, tmp_path_factory):
    """Every selected bad-input case runs once, several at a time (they are separate processes that
    mostly wait on imports); each test then checks its own. {case id: Future of _run_bad_input}.
    Module-scoped, so that its tests share one test worker (the module's group, tests/conftest.py):
    each worker's session lists every test, and a session fixture would run every case on each."""
    selected = [
        item.callspec.params
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_bad_input" and hasattr(item, "callspec")
    ]
    pool = ThreadPoolExecutor(max_workers=max(2, min(6, os.cpu_count() or 2)))
    root = tmp_path_factory.mktemp("bad-input")
    futures = {
        _case_id(p["command"], p["args"]): pool.submit(_run_bad_input, cli, root / str(i), p["command"], p["args"])
        for i, p in enumerate(selected)
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.ledger("bad_input", "`ablate {id}`")
@pytest.mark.parametrize("command, args, words", BAD_INPUT, ids=[_case_id(c, a) for c, a, _ in BAD_INPUT])
def test_bad_input(request, bad_input_runs, command, args, words):
    found = bad_input_runs[_case_id(command, args)].result(timeout=1800)
    proc = found["proc"]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr
    assert found["created"] == [], f"left behind: {found['created']}"
    assert not found["inputs_changed"]
    reliability.record(request, f"exit 2: {lines[0]}")


# -- kill -9, corrupt state, signals ------------------------------------------------------------

# One small run shared by every case of this section: each kills or corrupts it and relaunches, and
# the module's one uninterrupted run of it (`reference`) is what every relaunch must reproduce.
# 60 steps hold five interval checkpoints (12, 24, ...), so failpoints @2 and @3 fall mid-run.
RUN = [
    "model=nano",
    "train.steps=60",
    "train.log_interval=2",
    "train.eval_interval=10",
    "train.checkpoint_interval=12",
    "train.flush_interval_s=0.3",
    "train.progress=false",
    *SMALL_DATA,
]
KEYS = ("train/loss", "val/loss", "flops", "tokens", "lr", "tokens_per_s")


def wait_for(condition, timeout: float, message: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, message
        time.sleep(0.2)


def training_runs(cwd: Path) -> list:
    """The training runs of experiment `ablate` in cwd's store (a sweep's parent run is not one)."""
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("ablate").experiment_id])
    return [r for r in runs if KIND_TAG not in r.data.tags]


def history(cwd: Path) -> tuple[str, dict]:
    """The run's status and each KEY's (step, value) points. A launch's first interval is warm-up, its
    speed logged as warmup/tokens_per_s: a resumed run has one more such interval than an
    uninterrupted one, so the speed at each step is read from either."""
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    (run,) = training_runs(cwd)

    def points(key: str) -> list:
        keys = (key, f"warmup/{key}") if key == "tokens_per_s" else (key,)
        return sorted((m.step, m.value) for k in keys for m in client.get_metric_history(run.info.run_id, k))

    return run.info.status, {k: points(k) for k in KEYS}


@pytest.fixture(scope="module")
def reference(cli, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("reference")
    proc = cli(RUN, cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return history(cwd)[1]


def _compare(cwd: Path, reference: dict) -> str:
    """The run FINISHED with every metric at every step of an uninterrupted run, once, with its values."""
    status, found = history(cwd)
    assert status == "FINISHED"
    for key, ref in reference.items():
        steps = [s for s, _ in found[key]]
        assert steps == sorted(set(steps)), f"duplicate steps in {key}"
        assert steps == [s for s, _ in ref], f"missing steps in {key}"
        if key not in ("tokens_per_s",):  # throughput depends on the machine, not the seed
            for (_, a), (_, b) in zip(found[key], ref, strict=False):
                assert a == pytest.approx(b, rel=1e-5, abs=1e-6), key
    points = sum(len(v) for v in found.values())
    return f"run FINISHED; {points} of {sum(len(v) for v in reference.values())} points, each step once, values equal"


def _start(cwd: Path, args=RUN, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ablate", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _training(cwd: Path, proc: subprocess.Popen, step: int = 1) -> None:
    """Wait until the run has logged a metric at `step` or later (it is past its set-up)."""
    deadline = time.time() + 600
    while _last_logged_step(cwd / "mlflow.db") < step:
        if proc.poll() is not None:
            pytest.fail(
                f"the run ended (exit {proc.returncode}) before it was interrupted: {proc.stderr.read()[-2000:]}"
            )
        assert time.time() < deadline, f"the run logged no step {step} in 600 s"
        time.sleep(0.05)


def _last_logged_step(db: Path) -> int:
    """The highest step of the one training run's `flops` metric, or -1. Read from a read-only sqlite
    connection: a first MlflowClient on a store the run is still creating would migrate its schema too,
    racing the run's own migration."""
    if not db.exists():
        return -1
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
        try:
            (found,) = con.execute("SELECT max(step) FROM metrics WHERE key = 'flops'").fetchone()
        finally:
            con.close()
    except sqlite3.Error:  # the tables are not made yet
        return -1
    return -1 if found is None else int(found)


def _no_running_run(cwd: Path, wait_s: float = 120.0) -> str:
    """After the process is gone, its run is not RUNNING (the watchdog closes it); returns its status."""
    deadline = time.time() + wait_s
    while "RUNNING" in (found := statuses(cwd / "mlflow.db")) and time.time() < deadline:
        time.sleep(0.2)
    assert "RUNNING" not in found, found
    return ", ".join(found)


@pytest.mark.slow
@pytest.mark.ledger("fault", "SIGKILL at failpoint `{point}`, then relaunch")
@pytest.mark.parametrize("point", ["checkpoint.write@2", "tracking.flush@3"])
def test_kill_at_a_failpoint_then_resume(cli, request, tmp_path, reference, point):
    proc = _start(tmp_path, env={"ABLATE_FAILPOINTS": point})
    assert proc.wait(600) == -signal.SIGKILL
    after_kill = _no_running_run(tmp_path)
    for ckpt in (tmp_path / ".ablate" / "state").glob("*/checkpoint.pt"):
        checkpoint.read(ckpt)  # whatever checkpoint exists is a complete one
    relaunch = cli(RUN, tmp_path)
    assert relaunch.returncode == 0, relaunch.stderr[-2000:]
    found = _compare(tmp_path, reference)
    reliability.record(
        request, f"exit -9; run {after_kill} once the process was gone; checkpoint loads; relaunch exit 0; {found}"
    )


@pytest.mark.slow
@pytest.mark.ledger("fault", "SIGKILL at a random step of training (seed {seed}), then relaunch")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_at_a_random_moment_then_resume(cli, request, tmp_path, reference, seed):
    # A random step, not a random delay: how many steps a delay covers depends on the machine, and a
    # fast one finishes the run before the kill. Steps up to 30 of 60 leave room for the poll's lag.
    step = random.Random(seed).randrange(2, 32, 2)
    delay = random.Random(seed).uniform(0.0, 0.2)
    proc = _start(tmp_path)
    _training(tmp_path, proc, step=step)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(600) == -signal.SIGKILL  # killed, not finished before the kill
    after_kill = _no_running_run(tmp_path)
    relaunch = cli(RUN, tmp_path)
    assert relaunch.returncode == 0, relaunch.stderr[-2000:]
    found = _compare(tmp_path, reference)
    reliability.record(
        request,
        f"killed {delay:.2f} s after it logged step {step}: exit -9; run {after_kill} once the process was gone; "
        f"relaunch exit 0; {found}",
    )


@pytest.mark.slow
@pytest.mark.ledger("fault", "SIGKILL during a checkpoint write, then the checkpoint truncated by hand, then relaunch")
def test_kill_during_a_checkpoint_write_then_a_truncated_checkpoint(cli, request, tmp_path, reference):
    proc = _start(tmp_path, env={"ABLATE_FAILPOINTS": "checkpoint.write@3"})
    assert proc.wait(600) == -signal.SIGKILL
    after_kill = _no_running_run(tmp_path)
    (ckpt,) = (tmp_path / ".ablate" / "state").glob("*/checkpoint.pt")
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    relaunch = cli(RUN, tmp_path)
    assert relaunch.returncode == 0, relaunch.stderr[-2000:]
    named = [ln for ln in relaunch.stderr.splitlines() if str(ckpt) in ln]
    assert len(named) == 1 and "does not load" in named[0] and "moved aside" in named[0], relaunch.stderr
    assert len(list((ckpt.parent / "quarantine").iterdir())) == 1
    found = _compare(tmp_path, reference)
    reliability.record(
        request,
        f"exit -9; run {after_kill} once the process was gone; relaunch exit 0 and one line naming {ckpt.name} "
        f"(moved to quarantine/, the checkpoint before it used); {found}; no run RUNNING",
    )


@pytest.mark.slow
@pytest.mark.ledger("fault", "a checkpoint of another config copied into a run's state dir, then launch")
def test_a_foreign_checkpoint_is_quarantined_and_the_run_starts_over(cli, request, tmp_path, reference):
    other = tmp_path / "other"
    other.mkdir()
    # the smallest other config that writes a checkpoint: another seed, two steps, one checkpoint
    assert cli([*RUN, "train.steps=2", "train.checkpoint_interval=2", "train.seed=7"], other).returncode == 0
    (theirs,) = (other / ".ablate" / "state").glob("*/checkpoint.pt")
    from ablate.run.prepare import prepare

    ours = tmp_path / ".ablate" / "state" / _hash_of(RUN, tmp_path, prepare)
    ours.mkdir(parents=True)
    shutil.copy(theirs, ours / "checkpoint.pt")
    shutil.copy(theirs.with_name("checkpoint.json"), ours / "checkpoint.json")
    launch = cli(RUN, tmp_path)
    assert launch.returncode == 0, launch.stderr[-2000:]
    (line,) = [ln for ln in launch.stderr.splitlines() if "checkpoint" in ln and "moved aside" in ln]
    assert "belongs to config" in line
    found = _compare(tmp_path, reference)
    reliability.record(request, f"exit 0; one line: `{line[line.index('checkpoint.pt') :][:70]}...`; {found}")


def _hash_of(args: list[str], cwd: Path, prepare) -> str:
    """The config hash `python -m ablate ARGS` gets in `cwd`, composed as the command line does."""
    from hydra import compose, initialize_config_dir

    from ablate.config import CONF_DIR, parse_run

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[a for a in args if not a.startswith("train.progress")])
    tree = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items()}
    tree["tracking"]["uri"] = f"sqlite:///{cwd / 'mlflow.db'}"
    tree["state_dir"] = str(cwd / ".ablate" / "state")
    return prepare(parse_run(tree)).config_hash


@pytest.mark.slow
@pytest.mark.ledger("fault", "{name} to a single run mid-training, then relaunch")
@pytest.mark.parametrize("name", ["SIGINT (Ctrl-C)", "SIGTERM"])
def test_a_signal_to_a_single_run_leaves_one_line_and_a_resumable_run(cli, request, tmp_path, reference, name):
    signum = signal.SIGINT if name.startswith("SIGINT") else signal.SIGTERM
    proc = _start(tmp_path)
    _training(tmp_path, proc, step=20)
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=600)
    lines = [ln for ln in err.splitlines() if ln.strip() and "INFO" not in ln]
    assert proc.returncode == 128 + signum, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("stopped: ") and "checkpointed at step" in lines[0], err
    assert "Traceback" not in err
    (status,) = statuses(tmp_path / "mlflow.db")
    assert status == "KILLED"
    step = int(re.search(r"at step (\d+)", lines[0]).group(1))
    (state_dir,) = [d for d in (tmp_path / ".ablate" / "state").iterdir() if d.name != "spool"]
    assert checkpoint.load(state_dir)["step"] == step  # written at the signal, not at an interval
    relaunch = cli(RUN, tmp_path)
    assert relaunch.returncode == 0, relaunch.stderr[-2000:]
    found = _compare(tmp_path, reference)
    reliability.record(
        request,
        f"exit {128 + signum}, one line: `{lines[0][:90]}`; run KILLED; checkpoint at that step; "
        f"relaunch exit 0; {found}",
    )


# -- two launches of one run --------------------------------------------------------------------

# Long enough that the second launch, started at the same moment, meets the first one still training.
TWICE_STEPS = 100
TWICE = [*RUN[:1], f"train.steps={TWICE_STEPS}", *RUN[2:]]


def _two_at_once(cwd: Path) -> list[subprocess.Popen]:
    procs = [_start(cwd, TWICE) for _ in range(2)]
    for proc in procs:
        proc.wait(900)
    return procs


def _one_trained(cwd: Path, procs: list) -> str:
    """Exactly one launch trained (exit 0, "finished"); the other exit 75 with one line naming the run and
    its owner; one MLflow training run, FINISHED, every step once."""
    outs = [
        (p.returncode, [ln for ln in p.stderr.read().splitlines() if ln.strip() and "INFO" not in ln]) for p in procs
    ]
    codes = sorted(rc for rc, _ in outs)
    assert codes == [0, 75], outs
    (busy,) = [lines for rc, lines in outs if rc == 75]
    assert len(busy) == 1 and busy[0].startswith("busy ") and "being trained by pid" in busy[0], busy
    (trained,) = [lines for rc, lines in outs if rc == 0]
    assert any(ln.startswith("finished ") for ln in trained), trained
    runs = training_runs(cwd)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    for key in KEYS:
        steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, key)]
        assert steps == sorted(set(steps)), f"duplicate steps in {key}"
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")]
    assert steps == list(range(2, TWICE_STEPS + 1, 2))
    return (
        f"exit codes 0 and 75; the second said `{busy[0][:100]}...`; one run FINISHED; "
        f"{len(steps)} train/loss steps, each once"
    )


@pytest.mark.slow
@pytest.mark.ledger("fault", "the same run launched twice at once, on a fresh store")
def test_two_launches_at_once_on_a_fresh_store(request, tmp_path):
    procs = _two_at_once(tmp_path)
    reliability.record(request, _one_trained(tmp_path, procs))


@pytest.mark.slow
@pytest.mark.ledger("fault", "the same run launched twice at once, on an existing store")
def test_two_launches_at_once_on_an_existing_store(request, tmp_path):
    from ablate.tracking.store import ensure_experiment

    ensure_experiment(f"sqlite:///{tmp_path / 'mlflow.db'}", "ablate")
    procs = _two_at_once(tmp_path)
    reliability.record(request, _one_trained(tmp_path, procs))


@pytest.mark.slow
@pytest.mark.ledger("fault", "12 processes opening one fresh sqlite store at once")
def test_a_fresh_store_is_created_once(request, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, "-c", FORKED_RACE, uri, "12"], capture_output=True, text=True, timeout=600, check=False
    )
    *ids, codes = done.stdout.splitlines()
    assert done.returncode == 0 and json.loads(codes) == [0] * 12, done.stderr[-3000:]
    assert len(ids) == 12 and len(set(ids)) == 1, ids
    reliability.record(request, "12 of 12 exit 0 (no schema-migration race); all got the same experiment id")


# 12 processes, each its own connections to the store, forked from one that has imported MLflow but
# not opened the store: what races is the store's creation, not 12 interpreters' imports (~3 s of
# CPU each), and the forks meet the fresh store closer together than 12 staggered starts would.
# Each child prints its experiment id; the parent prints the children's exit codes last.
FORKED_RACE = """
import json, os, sys, traceback
import mlflow.exceptions, mlflow.store.tracking.sqlalchemy_store, mlflow.tracking
from ablate.tracking.store import ensure_experiment

uri, n = sys.argv[1], int(sys.argv[2])
pids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.write(1, (ensure_experiment(uri, "race") + "\\n").encode())
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    pids.append(pid)
print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]))
"""


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.ledger("fault", "the same sweep launched twice at once through the SLURM launcher")
def test_two_sweeps_at_once_through_slurm(request, tmp_path):
    args = [
        "--multirun",
        "model=nano",
        "train.steps=200",
        "train.log_interval=2",
        "train.eval_interval=50",
        "train.progress=false",
        "hydra/launcher=slurm",
        "hydra.launcher.poll_s=1",
        "hydra.launcher.timeout_min=20",
        *SMALL_DATA,
    ]
    procs = [_start(tmp_path, [*args, f"hydra.sweep.dir=multirun/{i}"]) for i in range(2)]
    try:
        outs = [p.communicate(timeout=1800) for p in procs]
    finally:  # only this test's jobs: the cluster is shared
        ids = [j["job_id"] for f in tmp_path.glob("multirun/*/jobs.json") for a in json.loads(f.read_text())["arrays"]
               for j in a["jobs"]]  # fmt: skip
        subprocess.run(["scancel", *ids], capture_output=True, timeout=60) if ids else None
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    results = [json.loads((tmp_path / "multirun" / str(i) / "0" / "result.json").read_text()) for i in range(2)]
    statuses = sorted(r["status"] for r in results)
    # Both jobs ran at once when the cluster had two free CPUs (busy); on a full cluster SLURM ran one
    # after the other, and the second found the run finished (skipped). Never two trainers.
    assert statuses in (["busy", "finished"], ["finished", "skipped"]), results
    (busy,) = [r for r in results if r["status"] != "finished"]
    assert "being trained by pid" in busy["reason"] or "already finished" in busy["reason"]
    runs = training_runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")]
    assert steps == list(range(2, 201, 2))
    reliability.record(
        request,
        f"both sweeps exit 0; one job finished, the other's result.json says {busy['status']}: "
        f"`{busy['reason'][:80]}...`; "
        f"one run FINISHED; {len(steps)} train/loss steps, each once",
    )


# -- divergence, out of memory, full disk -------------------------------------------------------


@pytest.mark.ledger("fault", "a diverging run (optim.lr=100, no warm-up, no clipping)")
def test_a_diverging_run_is_failed_with_its_reason(cli, request, workdir):
    proc = cli(
        ["model=nano", "train.steps=60", "optim.lr=100", "optim.warmup_steps=0", "optim.grad_clip=0", *SMALL_DATA,
         "train.progress=false", "train.log_interval=1"],
        workdir,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    (run,) = training_runs(workdir)
    reason = run.data.tags["ablate.status_reason"]
    assert run.info.status == "FAILED" and "loss became" in reason
    reliability.record(request, f"exit 1; run FAILED with reason `{reason}`")


@pytest.mark.slow
@pytest.mark.ledger("fault", "gpt2_124m on the CPU under a 4 GiB address-space cap, in a sweep with nano")
def test_out_of_memory_is_a_failed_run_and_the_sweep_goes_on(request, workdir):
    cap = (
        "import resource,runpy,sys; resource.setrlimit(resource.RLIMIT_AS,(4<<30,4<<30)); "
        "sys.argv=['ablate']+sys.argv[1:]; runpy.run_module('ablate', run_name='__main__')"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            cap,
            "--multirun",
            "model=gpt2_124m,nano",
            "train.steps=4",
            "train.batch_size=2",
            "train.eval_interval=2",
            "train.progress=false",
            *SMALL_DATA,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    runs = {r.data.params.get("model.name"): r for r in training_runs(workdir)}
    assert runs["nano"].info.status == "FINISHED"
    assert runs["gpt2_124m"].info.status == "FAILED"
    reason = runs["gpt2_124m"].data.tags["ablate.status_reason"]
    assert "memory" in reason.lower() or "alloc" in reason.lower()
    reliability.record(request, f"exit 1; gpt2_124m FAILED with reason `{reason[:90]}`; nano FINISHED")


@pytest.fixture
def tiny_disk(tmpfs):
    return tmpfs("size=128k")


@pytest.mark.slow
@pytest.mark.ledger("fault", "checkpoints on a full 128 KiB filesystem")
def test_full_disk_for_checkpoints_is_a_killed_run(cli, request, workdir, tiny_disk):
    proc = cli([*RUN, f"state_dir={tiny_disk}"], workdir)
    assert proc.returncode == 1
    (run,) = training_runs(workdir)
    reason = run.data.tags["ablate.status_reason"]
    # stopped by where it writes, not by what it is: resumable, as a signal's KILLED run is
    assert run.info.status == "KILLED" and "No space left" in reason and "resumes it" in reason
    leftovers = [p.name for p in tiny_disk.rglob("*") if p.is_file()]
    assert not any(name.endswith(".tmp") for name in leftovers), leftovers  # no torn temporary files
    reliability.record(request, f"exit 1; run KILLED with reason `{reason[:80]}`; no temporary file left")


# -- load ---------------------------------------------------------------------------------------

LOAD_RUN = [
    "model=nano",
    "train.steps=20",
    "train.log_interval=1",
    "train.eval_interval=10",
    "train.flush_interval_s=0.5",
    "train.progress=false",
    *SMALL_DATA,
]
N_CONCURRENT = 16


def _concurrent(cli, cwd: Path, uri: str) -> list[subprocess.CompletedProcess]:
    """N_CONCURRENT runs at once, each a process of its own writing to the store (forked warm, so the
    test pays for training and tracking, not for N interpreters importing torch)."""
    from ablate.tracking.store import ensure_experiment

    ensure_experiment(uri, "load")  # the store and experiment exist before the fan-out
    args = [*LOAD_RUN, f"tracking.uri={uri}", "tracking.experiment=load"]
    with ThreadPoolExecutor(N_CONCURRENT) as pool:
        runs = [
            pool.submit(
                cli, [*args, f"train.seed={i}", f"hydra.run.dir=outputs/{i}"], cwd, 900, {"OMP_NUM_THREADS": "1"}
            )
            for i in range(N_CONCURRENT)
        ]
        return [run.result() for run in runs]


def _check_load(request, uri: str, outcomes) -> None:
    assert all(p.returncode == 0 for p in outcomes), [p.stderr[-500:] for p in outcomes if p.returncode]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("load")
    runs = client.search_runs([exp.experiment_id])
    others = [e for e in client.search_experiments() if e.experiment_id != exp.experiment_id]
    stray = sum(len(client.search_runs([e.experiment_id])) for e in others)
    # six metrics at each of 20 steps per run; the speed of an interval that warmed up (the first
    # step's) is logged as warmup/tokens_per_s and warmup/mfu, apart from the steady figures
    expected = N_CONCURRENT * 20 * 6
    found = sum(
        len(client.get_metric_history(r.info.run_id, k))
        for r in runs
        for k in ("train/loss", "lr", "tokens", "flops", "tokens_per_s", "mfu", "warmup/tokens_per_s", "warmup/mfu")
    )
    assert len(runs) == N_CONCURRENT and all(r.info.status == "FINISHED" for r in runs)
    assert stray == 0
    assert found == expected
    reliability.record(
        request, f"{N_CONCURRENT} exit 0; {len(runs)} runs FINISHED, {found} of {expected} points, {stray} elsewhere"
    )


@pytest.mark.slow
@pytest.mark.ledger("points", f"{N_CONCURRENT} concurrent runs, sqlite store")
@pytest.mark.load
def test_16_concurrent_runs_on_sqlite(cli, request, workdir):
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    _check_load(request, uri, _concurrent(cli, workdir, uri))


@pytest.mark.slow
@pytest.mark.ledger("points", f"{N_CONCURRENT} concurrent runs, `mlflow server` on PostgreSQL")
@pytest.mark.load
def test_16_concurrent_runs_on_a_postgres_backed_server(cli, request, workdir, postgres, mlflow_server):
    server = mlflow_server(postgres)
    _check_load(request, server.uri, _concurrent(cli, workdir, server.uri))


# -- security -----------------------------------------------------------------------------------


@pytest.mark.ledger("security", "a checkpoint holding a pickled object, in a run's state dir")
def test_a_pickled_object_in_a_checkpoint_never_runs(run_config, request, tmp_path, capsys):
    from ablate.run import train

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    cfg = run_config(tmp_path, **{"train.steps": 10})
    from ablate.run.prepare import prepare

    state_dir = tmp_path / "state" / prepare(cfg).config_hash
    state_dir.mkdir(parents=True)
    with open(state_dir / "checkpoint.pt", "wb") as f:
        torch.save({"step": 5, "evil": Payload()}, f)
    result = train.run(cfg, tmp_path / "out")
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "checkpoint" in ln and "moved aside" in ln]
    assert not marker.exists()  # torch.load(weights_only=True) refused to build the object
    assert "UnpicklingError" in line
    assert result.status == "finished" and result.steps == 10  # started over, from step 0
    reliability.record(
        request,
        "the payload never ran (its marker file absent); the file quarantined with one line naming it and "
        f"`{line[line.index('(') + 1 :].split(':')[0]}`; the run trained from step 0 and finished",
    )


@pytest.mark.slow
@pytest.mark.ledger("security", "`ablate ui` binds loopback unless --host is given")
def test_the_ui_listens_on_loopback_only(request, tmp_path, mlflow_server):
    from ablate.tracking.store import ensure_experiment

    ensure_experiment(f"sqlite:///{tmp_path / 'ui.db'}", "ablate")
    server = mlflow_server(str(tmp_path / "ui.db"), ui=True)  # `ablate ui --store ... --port ...`, no --host
    wait_for(lambda: _listening(server.proc.pid, server.port), 60, "the UI never listened")
    addresses = _listening(server.proc.pid, server.port)
    assert addresses == {"127.0.0.1"}, addresses
    reliability.record(
        request, f"the server answered /health; its listening sockets on port {server.port}: {sorted(addresses)}"
    )


def _listening(pid: int, port: int) -> set:
    import psutil

    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return set()
    found = set()
    for proc in tree:
        try:
            found |= {c.laddr.ip for c in proc.net_connections("inet") if c.status == "LISTEN" and c.laddr.port == port}
        except psutil.Error:
            continue
    return found


@pytest.mark.ledger("security", "`ablate plan` with model.name=../../escape (a name that becomes a folder)")
def test_a_name_that_becomes_a_path_stays_inside(cli, request, tmp_path):
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    proc = cli(["model=gpt_1p5b", "model.name=../../escape", "budget.tokens=1e11"], cwd, command="plan")
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written and all(p.startswith("a/b/plans/") for p in written), written
    reliability.record(request, f"exit 0; every file under plans/: {', '.join(written)}")


@pytest.mark.ledger(
    "security",
    "names with ../ in them (an experiment, a CSV column, a model and hardware name, a study) that become folders",
)
def test_names_that_become_folders_stay_inside_their_root(request, tmp_path, monkeypatch):
    from ablate.config import BacktestConfig, CompareConfig, FitConfig, parse_plan
    from ablate.files import inside

    monkeypatch.chdir(tmp_path)
    escape = "../../../ESCAPED"
    plan = parse_plan(
        {"model": {"name": escape, "vocab_size": 27}, "hardware": {"name": escape}, "budget": {"tokens": 1e9}}
    )
    outs = {
        "fit experiment=../../../ESCAPED": FitConfig(experiment=escape).out_dir,
        "backtest experiment=../../../ESCAPED": BacktestConfig(experiment=escape).out_dir,
        "compare arm=../../../ESCAPED (a CSV column)": CompareConfig(points="p.csv", arm=escape, baseline="a").out_dir,
        "plan model.name= hardware.name=../../../ESCAPED": Path(plan.plan.out),
        "study hydra.sweeper.study_name": inside("studies", escape),
    }
    roots = {(tmp_path / r).resolve() for r in ("exports", "plans", "studies")}
    for case, out in outs.items():
        assert any((tmp_path / out).resolve().is_relative_to(r) for r in roots), (case, out)
    reliability.record(request, "each stays in its root: " + "; ".join(f"{c} -> {o}" for c, o in outs.items()))


@pytest.mark.ledger("security", "{where} a link to a folder outside, then `ablate {command}`")
@pytest.mark.parametrize(
    "command, args, where",
    [
        ("fit", ["points=OK", "n_boot=10", "held_out=0"], "exports/ok"),
        ("plan", ["model=gpt_1p5b", "budget.tokens=1e11"], "plans/gpt_1p5b-h100"),
    ],
)
def test_a_link_out_of_the_output_root_is_refused(cli, request, tmp_path, command, args, where):
    cwd, elsewhere = tmp_path / "cwd", tmp_path / "elsewhere"
    (cwd / where).parent.mkdir(parents=True), elsewhere.mkdir()
    (cwd / where).symlink_to(elsewhere)  # planted where the command's output folder goes
    proc = cli(materialize(args, cwd), cwd, command=command)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "outside" in lines[0], proc.stderr[-2000:]
    assert list(elsewhere.iterdir()) == []
    reliability.record(request, f"exit 2: {lines[0][:160]}; nothing written in the folder the link leads to")


def _fill(disk: Path) -> None:
    """Write zeros until the filesystem has no room left."""
    try:
        with open(disk / "filler", "wb") as f:
            while True:
                f.write(bytes(4096))
                f.flush()
    except OSError:
        pass


@pytest.fixture
def read_only_disk(tmpfs):
    return tmpfs("size=1m,ro")


# The runs of this section: a few steps of nano on the small language (OUT is the folder on the disk).
SHORT_RUN = ["model=nano", "train.steps=5", "train.progress=false", *SMALL_DATA]
# (command, its arguments with OUT for the output on the bad disk): every command that writes a file.
DISK_WRITERS = {
    "plan": ("plan", ["model=gpt_1p5b", "budget.tokens=1e11", "out=OUT"]),
    "fit": ("fit", ["points=OK", "n_boot=10", "held_out=0", "out=OUT"]),
    "backtest": ("backtest", ["points=OK", "n_boot=10", "out=OUT"]),
    "compare": ("compare", ["points=ARMS", "arm=arm", "baseline=a", "n_boot=10", "out=OUT"]),
    "prepare": ("prepare", ["paths=stdlib", "max_bytes=200000", "vocab_size=300", "progress=false", "out=OUT"]),
    "predict": ("predict", ["fit=FITOK", "out=OUT/prediction.json", *SHORT_RUN]),
    "train (its run folder)": (TRAIN, [*SHORT_RUN, "hydra.run.dir=OUT"]),
    "train (its BPE cache)": (
        TRAIN,
        [
            *SHORT_RUN[:3],
            "data=text",
            "data.max_bytes=200000",
            "data.tokenizer=bpe",
            "data.vocab_size=300",
            "data.cache_dir=OUT",
        ],
    ),  # fmt: skip
    "a sweep (its folder)": (TRAIN, ["--multirun", *SHORT_RUN, "train.steps=5,6", "hydra.sweep.dir=OUT"]),
}
DISK_SAYS = {"full": "No space left on device", "read-only": "Read-only file system"}


@pytest.mark.slow
@pytest.mark.ledger("fault", "`ablate {what}` writing on a {disk} filesystem")
@pytest.mark.parametrize("disk", ["full", "read-only"])
@pytest.mark.parametrize("what", list(DISK_WRITERS))
def test_outputs_on_a_full_or_read_only_disk_are_whole_or_absent(cli, request, tmp_path, disk, what):
    mount = request.getfixturevalue("tiny_disk" if disk == "full" else "read_only_disk")
    if disk == "full":
        _fill(mount)
    command, args = DISK_WRITERS[what]
    out = mount / "out"
    full = [a.replace("OUT", str(out)) for a in materialize(args, tmp_path)]
    proc = cli(full, tmp_path, command=command)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and DISK_SAYS[disk] in lines[0], proc.stderr
    left = sorted(str(p.relative_to(mount)) for p in mount.rglob("*") if p.name != "filler")
    assert left == [], left
    assert statuses(tmp_path / "mlflow.db") == []  # refused before any MLflow run exists
    reliability.record(request, f"exit 2: {lines[0][:150]}; nothing of the output on the disk; no MLflow run")


@pytest.fixture(scope="module")
def sampled_run(cli, tmp_path_factory) -> Path:
    """A finished 5-step run (its folder `run` and state dir) that `ablate sample` reads."""
    cwd = tmp_path_factory.mktemp("sampled")
    proc = cli([*SHORT_RUN, "hydra.run.dir=run"], cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return cwd


def _one_state(cwd: Path) -> Path:
    (state,) = [d for d in (cwd / ".ablate" / "state").iterdir() if (d / "checkpoint.pt").exists()]
    return state


# What is done to a trained run before `ablate sample` reads it -> the words its one line must hold.
SAMPLE_STATE = {
    "checkpoint.pt cut to 1,000 bytes": (lambda c: os.truncate(_one_state(c) / "checkpoint.pt", 1000), "does not load"),
    "checkpoint.pt of random bytes": (
        lambda c: (_one_state(c) / "checkpoint.pt").write_bytes(random.Random(0).randbytes(5000)),
        "does not load",
    ),
    ".hydra/config.yaml that is not YAML": (
        lambda c: (c / "run" / ".hydra" / "config.yaml").write_text("model: [\n"),
        "cannot be read as a run's config",
    ),
    "result.json that holds a list": (
        lambda c: (c / "run" / "result.json").write_text("[1, 2]"),
        "is not a run's result",
    ),
}


@pytest.mark.ledger("fault", "a finished run with {name}, then `ablate sample`")
@pytest.mark.parametrize("name", list(SAMPLE_STATE))
def test_a_run_in_a_bad_state_is_refused_by_sample_in_one_line(cli, request, tmp_path, sampled_run, name):
    cwd = tmp_path / "copy"
    shutil.copytree(sampled_run, cwd)
    damage, words = SAMPLE_STATE[name]
    damage(cwd)
    before = _snapshot(cwd)
    proc = cli(["run=run", "state_dir=.ablate/state", "tokens=4"], cwd, command="sample")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr
    assert _snapshot(cwd) == before  # the run left as it was: no sample.json, nothing moved
    reliability.record(request, f"exit 2: {lines[0][:150]}; the run's files left as they were")


@pytest.mark.ledger("fault", "{name} where a run's checkpoint belongs, then launch")
@pytest.mark.parametrize("name", ["a folder checkpoint.pt", "a folder checkpoint.json", "a link checkpoint.pt"])
def test_a_checkpoint_that_is_not_a_file_is_quarantined(run_config, request, tmp_path, capsys, name):
    from ablate.run import train
    from ablate.run.prepare import prepare

    cfg = run_config(tmp_path, **{"train.steps": 10, "train.checkpoint_interval": 5})
    state_dir = tmp_path / "state" / prepare(cfg).config_hash
    state_dir.mkdir(parents=True)
    target = state_dir / name.split()[-1]
    if "link" in name:
        target.symlink_to(tmp_path / "elsewhere.pt")
    else:
        target.mkdir()
        (target / "inside").write_text("x")
    result = train.run(cfg, tmp_path / "out")
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "not a file; moved aside" in ln]
    assert result.status == "finished" and result.steps == 10
    assert (state_dir / "checkpoint.pt").is_file() and not (state_dir / "checkpoint.pt").is_symlink()
    assert len(list((state_dir / "quarantine").iterdir())) == 1
    reliability.record(request, f"one line: `{line[:110]}...`; the run trained 10 of 10 steps and finished")


@pytest.mark.ledger("security", "`ablate ui` on a port another process holds")
def test_the_ui_on_a_taken_port_is_one_line(cli, request, tmp_path):
    import socket

    from ablate.tracking.store import ensure_experiment

    ensure_experiment(f"sqlite:///{tmp_path / 'ui.db'}", "ablate")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = cli(["--store", str(tmp_path / "ui.db"), "--port", str(port)], tmp_path, command="ui", timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and f"--port {port} on 127.0.0.1 is in use" in lines[0], proc.stderr
    reliability.record(request, f"exit 2: {lines[0]}")


def test_a_grouped_test_fills_its_own_ledger_row(monkeypatch):
    """Under `make test` (xdist's loadgroup) a grouped test runs as NODEID@GROUP; its result and what
    it found must land in the row made for NODEID, also when the parametrization id holds an @."""
    row = "tests/test_reliability.py::test_kill_at_a_failpoint_then_resume[checkpoint.write@2]"
    monkeypatch.setattr(reliability, "LEDGER", {row: {"section": "fault", "case": "kill", "detail": ""}})
    assert reliability.row_id(f"{row}@module:tests/test_reliability.py") == row
    assert reliability.row_id(row) == row
    assert reliability.row_id("tests/x.py::test_other@slurm") == "tests/x.py::test_other@slurm"
