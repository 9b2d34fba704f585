"""Decode on a CPU at one thread and at one thread per core, model by model: what `ablate sample`'s
default threads rest on (perf/decode.py ONE_THREAD_BELOW).

Each CPU-trainable preset from nano to large, built with random weights (the speed of a step does not
depend on what the weights are), generates the same 48 tokens after a 4-token prompt with its KV
cache (perf/decode.py generate), at one thread and at torch's default, alternating, `repeats`
times each; the figure is each arm's median tokens/s and their ratio.

    .venv/bin/python benchmarks/bench_decode.py [--quick]
        -> benchmarks/results/decode.json (quick: benchmarks/results/quick/decode.json), and its table
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ablate.files import write_json  # noqa: E402
from ablate.model import GPT, accounting  # noqa: E402
from ablate.perf import decode  # noqa: E402
from support import run_config  # noqa: E402  (the tests' preset loader)

MODELS = ("nano", "micro", "tiny", "small", "medium", "large")
VOCAB = 512  # a byte-level vocabulary and then some; the presets leave vocab_size to the data
NEW_TOKENS = 48


def tokens_per_s(model, threads: int) -> float:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        prompt = torch.zeros((1, 4), dtype=torch.long)
        return decode.generate(model, prompt, NEW_TOKENS).tokens_per_s
    finally:
        torch.set_num_threads(before)


def measure(name: str, repeats: int, cores: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cfg = run_config(Path(d), model=name).model
    cfg = dataclasses.replace(cfg, vocab_size=cfg.vocab_size or VOCAB)
    torch.manual_seed(0)
    model = GPT(cfg)
    arms: dict[int, list[float]] = {1: [], cores: []}
    for i in range(repeats):
        for threads in (1, cores) if i % 2 == 0 else (cores, 1):
            arms[threads].append(tokens_per_s(model, threads))
    one, per_core = statistics.median(arms[1]), statistics.median(arms[cores])
    return {
        "params": accounting.params(cfg),
        "one_thread_tokens_per_s": arms[1],
        "per_core_tokens_per_s": arms[cores],
        "one_over_per_core": one / per_core,
        "default_threads": decode.cpu_threads(cfg, cores),
    }


def table(figures: dict) -> str:
    cores = figures["cores"]
    rows = [
        f"Decode on a CPU ({cores} cores, load average {figures['load'][0]:.1f}..{figures['load'][1]:.1f})",
        "",
        f"| model | weights | 1 thread, tokens/s | {cores} threads, tokens/s | 1 over {cores} | sample's default |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in figures["models"].items():
        rows.append(
            f"| {name} | {m['params']:,} | {statistics.median(m['one_thread_tokens_per_s']):,.0f} | "
            f"{statistics.median(m['per_core_tokens_per_s']):,.0f} | {m['one_over_per_core']:.2f}x | "
            f"{m['default_threads']} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two models, two repeats: a check, not the figures")
    args = parser.parse_args()
    cores = torch.get_num_threads()
    load = [os.getloadavg()[0]]
    models = MODELS[:2] if args.quick else MODELS
    figures = {"cores": cores, "torch": torch.__version__, "new_tokens": NEW_TOKENS}
    figures["models"] = {name: measure(name, 2 if args.quick else 5, cores) for name in models}
    figures["load"] = [*load, os.getloadavg()[0]]
    out = ROOT / "benchmarks" / "results" / ("quick" if args.quick else "") / "decode.json"
    write_json(out, figures)
    print(table(figures))


if __name__ == "__main__":
    main()
