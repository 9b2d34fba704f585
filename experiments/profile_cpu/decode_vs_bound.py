"""Measured greedy decoding on this CPU against the memory-bandwidth bound, for the CPU model ladder.

    .venv/bin/python experiments/profile_cpu/decode_vs_bound.py [--out experiments/profile_cpu]

Writes decode.json (one row per model and batch) and decode.png. Weights are random: decode speed
does not depend on their values. The bandwidth is this machine's cached copy benchmark
(roofline.measured_cpu_bandwidth), the same figure the roofline uses.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import yaml
from tqdm import tqdm

from ablate import accounting, decode, roofline
from ablate.cli import CONF_DIR
from ablate.config import ModelConfig, build
from ablate.model import GPT

MODELS = ("nano", "micro", "tiny", "small", "medium", "large")
BATCHES = (1, 8)
PROMPT, NEW_TOKENS = 16, 48  # positions 0..62 of the presets' 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    bandwidth = roofline.measured_cpu_bandwidth()
    rows = []
    for name, batch in tqdm([(m, b) for m in MODELS for b in BATCHES], desc="decode", unit="run"):
        cfg = build(
            ModelConfig,
            {**yaml.safe_load((CONF_DIR / "model" / f"{name}.yaml").read_text()), "vocab_size": 27},
            "model",
        )
        torch.manual_seed(0)
        run = decode.measure(GPT(cfg), batch, PROMPT, NEW_TOKENS)
        bound = decode.loop_bound(cfg, bandwidth, PROMPT, NEW_TOKENS, batch, "fp32")
        rows.append(
            {
                "model": name,
                "params": accounting.params(cfg),
                "batch": batch,
                "weight_mb": decode.weight_bytes(cfg, "fp32") / 1e6,
                **run.to_dict(),
                "bound_tokens_per_s": bound,
                "fraction_of_bound": run.tokens_per_s / bound,
            }
        )
    doc = {
        "bandwidth_gbs": bandwidth / 1e9,
        "threads": torch.get_num_threads(),
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot(doc, args.out / "decode.png")
    for r in rows:
        print(
            f"{r['model']:>7} batch {r['batch']}: {r['tokens_per_s']:9,.0f} tokens/s measured, "
            f"<= {r['bound_tokens_per_s']:11,.0f} bound ({r['fraction_of_bound']:.1%})"
        )


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for batch, color in zip(BATCHES, ("tab:blue", "tab:orange")):
        rows = [r for r in doc["rows"] if r["batch"] == batch]
        mb = [r["weight_mb"] for r in rows]
        ax.plot(mb, [r["bound_tokens_per_s"] for r in rows], "--", color=color, label=f"bandwidth bound, batch {batch}")
        ax.plot(mb, [r["tokens_per_s"] for r in rows], "o-", color=color, label=f"measured, batch {batch}")
        for r in rows:
            ax.annotate(
                r["model"], (r["weight_mb"], r["tokens_per_s"]), textcoords="offset points", xytext=(3, -10), fontsize=7
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fp32 weights read per decode step (MB)")
    ax.set_ylabel("decode tokens/s (whole batch)")
    ax.set_title(
        f"Greedy decoding on this CPU vs bandwidth / bytes per token ({doc['bandwidth_gbs']:.3g} GB/s)", fontsize=10
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
