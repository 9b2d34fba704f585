"""The per-precision bound lines of a profiled precision sweep, from its summary.json and each job's profile.json.

    .venv/bin/python experiments/profile_cpu/precision_bounds.py experiments/profile_cpu/precision

Writes SWEEP_DIR/bounds.md: the sweep's table rows (precision, speed-up) followed by
roofline.bound_notes, the lines a sweep summary prints for runs launched with train.profile=true.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ablate import roofline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    sweep_dir = parser.parse_args().sweep_dir
    rows = json.loads((sweep_dir / "summary.json").read_text())["runs"]
    roofline.annotate_rows(rows, sweep_dir)
    lines = ["| run | status | tokens/s | speed-up | bound |", "|---|---|---|---|---|"]
    for r in rows:
        speed = f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "-"
        up = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
        lines.append(
            f"| {r['label']} | {r['status']} | {speed} | {up} | {(r.get('profile') or {}).get('bound') or '-'} |"
        )
    text = "\n".join(lines + [""] + roofline.bound_notes(rows)) + "\n"
    (sweep_dir / "bounds.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
