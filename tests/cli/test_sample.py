"""`ablate sample`: text from a tiny run's checkpoint through the real command line, decoded with
the run's tokenizer, its speed below the bandwidth bound, and bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import SMALL_DATA, one_line_error

TRAIN = ["model=nano", "train.steps=6", "train.eval_interval=6", "train.eval_batches=1", "tracking=none", *SMALL_DATA]
# The architecture arms a sample must build from the run's config: rotary positions, SwiGLU, one KV head.
ARM = ["model.position=rope", "model.mlp=swiglu", "model.n_kv_head=1", "model.norm=rmsnorm"]


def trained(cli, cwd: Path, folder: str, *extra: str) -> Path:
    result = cli([*TRAIN, *extra, f"hydra.run.dir={folder}"], cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return cwd / folder


@pytest.fixture(scope="module")
def run_dir(cli, tmp_path_factory) -> Path:
    return trained(cli, tmp_path_factory.mktemp("sample"), "run")


def sample(cli, run: Path, *args: str) -> tuple[dict, list[str]]:
    out = run.parent / f"{run.name}-{abs(hash(args))}.json"
    result = cli([f"run={run.name}", f"out={out.name}", *args], run.parent, command="sample")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text()), result.stdout.splitlines()


def test_a_sample_is_text_of_the_requested_length_in_the_runs_alphabet(cli, run_dir):
    doc, lines = sample(cli, run_dir, "prompt=the", "tokens=20", "samples=2")
    assert doc["schema"] == "ablate.sample/1" and doc["step"] == 6 and doc["model"] == "nano"
    assert doc["prompt_tokens"] == [19, 7, 4]  # t h e in a..z
    assert [len(t) for t in doc["texts"]] == [20, 20] and [len(t) for t in doc["tokens"]] == [20, 20]
    assert set("".join(doc["texts"])) <= set("abcdefghijklmnopqrstuvwxyz ")
    assert lines == [f"the{text}" for text in doc["texts"]]
    speed = doc["speed"]
    assert speed["kv_cache"] is True and speed["device"] == "cpu" and speed["dtype"] == "fp32"
    assert speed["threads"] == 1  # nano's 83K weights: below perf/decode.py's ONE_THREAD_BELOW
    assert 0 < speed["decode_tokens_per_s"] < speed["bound_tokens_per_s"]
    assert speed["share_of_bound"] == pytest.approx(speed["decode_tokens_per_s"] / speed["bound_tokens_per_s"])
    assert speed["wall_s"] == pytest.approx(speed["prefill_s"] + speed["decode_s"])


def test_the_default_fills_the_context_and_writes_beside_the_run(cli, run_dir):
    result = cli([f"run={run_dir.name}"], run_dir.parent, command="sample")
    assert result.returncode == 0, result.stderr
    doc = json.loads((run_dir / "sample.json").read_text())
    assert len(doc["prompt_tokens"]) + doc["new_tokens"] - 1 == 64  # model.block_size of nano
    assert "of the bandwidth bound" in result.stderr and "with a KV cache" in result.stderr


def test_threads_decode_the_same_text_and_are_recorded(cli, run_dir):
    one, _ = sample(cli, run_dir, "tokens=20", "seed=3")
    two, _ = sample(cli, run_dir, "tokens=20", "seed=3", "threads=2")
    assert (one["speed"]["threads"], two["speed"]["threads"]) == (1, 2)
    assert two["tokens"] == one["tokens"]


def test_temperature_zero_and_top_k_one_pick_the_most_likely_token(cli, run_dir):
    greedy, _ = sample(cli, run_dir, "temperature=0", "tokens=30", "seed=1")
    again, _ = sample(cli, run_dir, "temperature=0", "tokens=30", "seed=2")
    top1, _ = sample(cli, run_dir, "temperature=1.5", "top_k=1", "tokens=30", "seed=3")
    assert greedy["tokens"] == again["tokens"] == top1["tokens"]


def test_a_seed_gives_the_same_draws_and_another_seed_others(cli, run_dir):
    first, _ = sample(cli, run_dir, "temperature=1.0", "top_k=null", "tokens=40", "seed=7")
    same, _ = sample(cli, run_dir, "temperature=1.0", "top_k=null", "tokens=40", "seed=7")
    other, _ = sample(cli, run_dir, "temperature=1.0", "top_k=null", "tokens=40", "seed=8")
    assert first["tokens"] == same["tokens"] != other["tokens"]


def test_a_run_of_the_architecture_arms_samples_from_its_own_config(cli, run_dir):
    run = trained(cli, run_dir.parent, "arm", *ARM)
    doc, _ = sample(cli, run, "tokens=10", "temperature=0")
    assert len(doc["texts"][0]) == 10 and doc["speed"]["kv_cache"] is True
    assert doc["speed"]["decode_tokens_per_s"] < doc["speed"]["bound_tokens_per_s"]


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "error: run is empty (valid: run=DIR"),
        (["run=missing"], "error: run=missing is not a folder"),
        (["run=run", "tokens=100"], "error: tokens=100 after a 1-token prompt do not fit model.block_size=64"),
        (["run=run", "prompt=Hi"], "error: prompt='Hi': 'H' is outside the synthetic language's alphabet"),
        (["run=run", "temperature=-1"], "error: temperature=-1.0 is negative"),
        (["run=run", "top_k=0"], "error: top_k=0 must be positive"),
        (["run=run", "device=tpu"], "error: device=tpu is unknown (valid: auto, cpu, cuda)"),
        (["run=run", "threads=0"], "error: threads=0 must be positive"),
        (["run=run", "threads=100000"], "error: threads=100000 is too large (valid: at most 1024 threads)"),
        (["run=run", "state_dir=elsewhere"], "has no checkpoint in elsewhere/"),
        (["run=run", "tokenz=3"], "error: unknown key tokenz (valid: bandwidth_gbs,"),
    ],
)
def test_bad_input_fails_in_one_line(cli, run_dir, args, expected):
    line = one_line_error(cli(args, run_dir.parent, command="sample"))
    assert expected in line
