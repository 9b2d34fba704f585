"""The tracking agent's work for one run, phase by phase, in this fresh interpreter (no torch, as in
the agent): CPU and wall seconds of importing MLflow's client and the sqlite store's code, opening
the store, the run's decision query, creating the run, logging its params and the 270-step run's
27 metric batches, and closing it. bench_train.py runs it on the tracked arms' existing store.

    .venv/bin/python benchmarks/store_phases.py PATH/mlflow.db   -> {phase: [cpu_s, wall_s]} on stdout
"""

from __future__ import annotations

import importlib
import json
import sys
import time

from ablate.tracking.agent import mlflow_modules


def main(db: str) -> None:
    uri = f"sqlite:///{db}"
    phases, marks = {}, [(time.process_time(), time.perf_counter())]

    def lap(name: str) -> None:
        marks.append((time.process_time(), time.perf_counter()))
        phases[name] = [b - a for a, b in zip(marks[-2], marks[-1], strict=True)]

    for module in mlflow_modules(uri):
        importlib.import_module(module)
    lap("imports")
    from ablate.tracking.runstore import RunStore

    store = RunStore(uri, "Default")
    lap("open")
    store.find("0" * 16)
    lap("find")
    run_id = store.create_run("phases", {})
    lap("create_run")
    store.log_params(run_id, {f"key{i}": str(i) for i in range(80)})
    lap("log_params")
    names = ("train/loss", "lr", "tokens", "flops", "tokens_per_s", "mfu")
    for step in range(10, 280, 10):
        store.log_metrics(run_id, [(k, 1.0, step, int(time.time() * 1000)) for k in names])
    lap("log_metrics x27")
    store.set_terminated(run_id, "FINISHED")
    lap("set_terminated")
    print(json.dumps(phases))


if __name__ == "__main__":
    main(sys.argv[1])
