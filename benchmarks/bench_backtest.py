"""Do the printed 95% intervals cover? The backtest (ablate.scaling.backtest, `ablate backtest`) on
Epoch's 240 Chinchilla points and on this project's two recorded studies: for each cut point in
compute, the whole fit (approach 3, its bootstrap, its verdict, the calibration of its intervals)
sees the runs below the cut and predicts every run above it.

Targets (issues 13, 26): on Chinchilla, at least 90% of the held-out runs inside their interval at every
distance tested, and within 1.5 decades a median half-width at most 4 times the median absolute error.
Coverage is a count and does not depend on the machine; the CPU time is reported beside it.
Writes benchmarks/results/backtest.json and prints the tables of docs/fitting.md.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from ablate.scaling.backtest import BACKTEST_CUTS, backtest
from ablate.scaling.points import Points, load_chinchilla
from ablate.scaling.predict import FitOptions
from ablate.scaling.reports.report import backtest_markdown

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.9
SHARPNESS = 4.0  # median half-width over median abs. error within 1.5 decades (issue 26)
N_BOOT = 200  # per cut's fit: what `ablate backtest` uses by default


def data() -> dict[str, Points]:
    studies = {
        name: Points.from_csv(ROOT / "experiments" / name / "sweep" / "points.csv") for name in ("ladder", "scaling")
    }
    return {"chinchilla": load_chinchilla(ROOT / "tests" / "fixtures" / "chinchilla.csv"), **studies}


def main() -> None:
    load = os.getloadavg()
    results, tables = {}, []
    for name, points in data().items():
        cpu = time.process_time()
        bt = backtest(points, FitOptions(n_boot=N_BOOT))
        cpu = time.process_time() - cpu
        bins = bt.bins()
        results[name] = {
            "n_points": len(points),
            "entropy_floor": points.entropy_floor,
            "cpu_s": round(cpu, 1),
            "coverage": bt.coverage,
            "printed_coverage": bt.printed_coverage,
            "min_coverage_by_distance": min(b.coverage for b in bins) if bins else None,
            "sharpness_within_1.5_decades": bt.sharpness(1.5),
            "decision": bt.decision(),
            "by_distance": [b.to_dict() for b in bins],
            "cuts": [c.to_dict() for c in bt.cuts],
        }
        tables.append(backtest_markdown(bt, f"{name}: {len(points)} runs"))
    chin = results["chinchilla"]
    doc = {
        "what": "ablate.scaling.backtest.backtest with the default cuts and options",
        "cuts": list(BACKTEST_CUTS),
        "n_boot": N_BOOT,
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_at_start": load,
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "results": results,
        "meets_target": {
            "chinchilla_every_distance": all(b["coverage"] >= TARGET for b in chin["by_distance"]),
            "chinchilla_printed_every_distance": all(
                b["printed"] < 20 or b["printed_coverage"] >= TARGET for b in chin["by_distance"]
            ),
            "chinchilla_sharp_within_1.5_decades": chin["sharpness_within_1.5_decades"] <= SHARPNESS,
        },
    }
    out = ROOT / "benchmarks" / "results" / "backtest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print("\n".join(tables))
    print(json.dumps({k: {"coverage": v["coverage"], "cpu_s": v["cpu_s"]} for k, v in results.items()}))


if __name__ == "__main__":
    main()
