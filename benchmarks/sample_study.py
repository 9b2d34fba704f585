"""`ablate sample` on a recorded study's checkpoint: the text it writes and its decode speed against the bound.

The recorded studies keep their result.json files in git but not their checkpoints, so this script
trains one recorded job again with the study's own overrides (.hydra/overrides.yaml, tracking=none
in place of the study's store), into the state dir layout the study uses, and checks that the new
run's config hash is the recorded one. The job is pico, seed 0, of experiments/text_ladder_long
(the cheapest job of the real-text ladder: 148 CPU-seconds for its trunk, about 370 for its six
cooldown branches); its text is read from the longest branch (8M tokens, the job's lowest loss).
A run already trained in RUN_DIR is reused. Then `ablate sample`, as a user types it, once per
prompt from the corpus's domain (Debian's documentation: the Linux kernel's, Perl's, Python's).

    .venv/bin/python benchmarks/sample_study.py   # -> benchmarks/results/sample_study.json
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import yaml

from ablate.files import write_json

ROOT = Path(__file__).resolve().parents[1]
STUDY = Path("experiments/text_ladder_long")
JOB = "8"
BRANCH = "branches/tokens=8.38861e+06"
RUN_DIR = Path("outputs/sample_study/text_ladder_long") / JOB
RESULTS = ROOT / "benchmarks/results/sample_study.json"
PROMPTS = ["The kernel", "To install the module", "In Python, a list", "The perl interpreter"]
DRAWS = {"tokens": 48, "temperature": 0.8, "top_k": 40, "seed": 0}


def ablate(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ablate {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done


def train_overrides() -> list[str]:
    """The job's own overrides, its store replaced by tracking=none, as one run in RUN_DIR."""
    recorded = yaml.safe_load((ROOT / STUDY / "sweep" / JOB / ".hydra/overrides.yaml").read_text())
    kept = [o for o in recorded if not o.startswith("tracking.uri=")]
    return [*kept, "tracking=none", "hydra.mode=RUN", f"hydra.run.dir={RUN_DIR}"]


def read_result(folder: Path) -> dict:
    return json.loads((ROOT / folder / "result.json").read_text())


def trained() -> bool:
    path = ROOT / RUN_DIR / BRANCH / "result.json"
    return path.exists() and json.loads(path.read_text()).get("status") == "finished"


def compared(sub: str) -> dict:
    """The recorded run beside the one trained here: the same config hash, and their losses."""
    old, new = read_result(STUDY / "sweep" / JOB / sub), read_result(RUN_DIR / sub)
    if old["config_hash"] != new["config_hash"]:
        raise SystemExit(f"{RUN_DIR / sub}: config hash {new['config_hash']}, recorded {old['config_hash']}")
    keys = ("final_val_loss", "final_val_bpb", "tokens", "train_cpu_s")
    return {"config_hash": new["config_hash"], "recorded": {k: old[k] for k in keys}, "new": {k: new[k] for k in keys}}


def sample(prompt: str, out: Path, threads: int | None) -> dict:
    """One prompt's text and speed; threads=None: the command's own choice (one, for pico)."""
    draws = [f"{k}={v}" for k, v in DRAWS.items()]
    chosen = [] if threads is None else [f"threads={threads}"]
    ablate("sample", f"run='{RUN_DIR / BRANCH}'", f"prompt='{prompt}'", *draws, *chosen, f"out={out}")
    made = json.loads(out.read_text())
    return {"prompt": prompt, "text": made["texts"][0], "step": made["step"], "speed": made["speed"]}


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "")
    return {"node": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "load_1min": os.getloadavg()[0]}


def main() -> None:
    command = ["python", "-m", "ablate", *train_overrides()]
    if not trained():
        ablate(*train_overrides())
    out = ROOT / RUN_DIR / "sample_study"
    out.mkdir(exist_ok=True)
    samples = [sample(p, out / f"{i}.json", None) for i, p in enumerate(PROMPTS)]
    # On a machine whose cores other work keeps busy, torch's threads wait on each other at every
    # one of a tiny model's many small ops: the command's one thread against torch's one per core.
    cores = os.cpu_count() or 1
    per_core = [sample(p, out / f"{i}-{cores}threads.json", cores) for i, p in enumerate(PROMPTS)]
    if [s["text"] for s in per_core] != [s["text"] for s in samples]:
        raise SystemExit(f"{cores} threads drew other text from the same seed")
    speeds = [s["speed"] for s in samples]
    per = [s["speed"] for s in per_core]
    figures = {
        "study": str(STUDY),
        "job": JOB,
        "sampled": BRANCH,
        "train_command": command,
        "run_dir": str(RUN_DIR),
        "trunk": compared(""),
        "branch": compared(BRANCH),
        "draws": DRAWS,
        "samples": samples,
        "decode_tokens_per_s": [s["decode_tokens_per_s"] for s in speeds],
        "bound_tokens_per_s": [s["bound_tokens_per_s"] for s in speeds],
        "share_of_bound": [s["share_of_bound"] for s in speeds],
        "threads": [s["threads"] for s in speeds],
        "one_thread_per_core": {
            "threads": cores,
            "decode_tokens_per_s": [s["decode_tokens_per_s"] for s in per],
            "bound_tokens_per_s": [s["bound_tokens_per_s"] for s in per],
            "share_of_bound": [s["share_of_bound"] for s in per],
        },
        "machine": machine(),
    }
    write_json(RESULTS, figures)
    for s, a in zip(samples, per_core, strict=True):
        print(f"{s['prompt']}{s['text']}")
        for name, v in ((f"{s['speed']['threads']} thread(s)", s["speed"]), (f"{cores} threads", a["speed"])):
            print(f"  {name}: {v['decode_tokens_per_s']:.0f} tokens/s, {v['share_of_bound']:.1%} of the bound")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
