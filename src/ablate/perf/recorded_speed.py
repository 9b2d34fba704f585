"""Training speeds that earlier runs measured on this machine, for estimating a sweep before it runs.

A run records its steady training speed (tokens_per_s, perf/clock.py: the warm-up apart, measured
as the user waits for it) in its result.json and as the MLflow metric final/tokens_per_s, beside its
model, precision and device and the CPU (and GPU) it ran on (provenance.environment; MLflow's
ablate.cpu and ablate.gpu tags). `recorded_speeds` reads both: result.json files under the given
folders (a sweep's own folder and its siblings, a bounded walk) and the runs of sqlite MLflow
stores (read-only SQL on MLflow's own tables: the launching process of a sweep loads neither torch
nor MLflow). Only runs on this machine's CPU model count, and GPU runs only on its GPU: a speed is
a property of the hardware as much as of the model.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

MAX_FILES = 20_000  # entries a walk looks at, so that a folder of millions costs at most seconds
MAX_DEPTH = 5  # sweep/job/branches/tokens=.../result.json
MAX_RUNS = 5_000  # the latest runs of a store that are read


@dataclass(frozen=True)
class Speed:
    """One finished run's steady training speed."""

    model: str
    precision: str
    device: str
    tokens_per_s: float
    flops_per_token: float
    source: str  # "result.json" or "MLflow"
    tokens: float = 0.0  # how many it trained on: a short run's speed is mostly its warm-up's (0: unknown)


def recorded_speeds(folders: list[Path], stores: list[str], cpu: str, gpu: str | None = None) -> list[Speed]:
    """Every speed that runs on this machine (its CPU model `cpu`, its GPU `gpu`) recorded in the
    result.json files under `folders` and in the sqlite MLflow stores `stores` (tracking URIs; other
    backends are passed over). Files and stores that cannot be read are passed over."""
    found = [s for folder in folders for s in _from_results(Path(folder), cpu, gpu)]
    for uri in dict.fromkeys(stores):
        found += _from_store(uri, cpu, gpu)
    return found


def _from_results(folder: Path, cpu: str, gpu: str | None) -> list[Speed]:
    out: list[Speed] = []
    seen = 0
    for root, dirs, files in os.walk(folder):
        depth = len(Path(root).relative_to(folder).parts)
        seen += len(dirs) + len(files)
        if depth >= MAX_DEPTH or seen > MAX_FILES:
            dirs[:] = []
        if "result.json" in files:
            speed = _result_speed(Path(root) / "result.json", cpu, gpu)
            if speed is not None:
                out.append(speed)
        if seen > MAX_FILES:
            break
    return out


def _result_speed(path: Path, cpu: str, gpu: str | None) -> Speed | None:
    try:
        with contextlib.suppress(OSError):
            if path.stat().st_size > 1 << 20:
                return None
        doc = json.loads(path.read_text())
        env = doc.get("environment") or {}
        if doc.get("status") != "finished" or env.get("cpu") != cpu or not _same_gpu(doc.get("device"), env, gpu):
            return None
        tps, tokens, flops = float(doc["tokens_per_s"]), float(doc["tokens"]), float(doc["flops"])
        if not (tps > 0 and tokens > 0 and flops > 0):
            return None
        model, precision, device = str(doc["model"]), str(doc["precision"]), str(doc["device"])
        return Speed(model, precision, device, tps, flops / tokens, "result.json", tokens)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _same_gpu(device, env: dict, gpu: str | None) -> bool:
    return device != "cuda" or (gpu is not None and env.get("gpu") == gpu)


QUERY = """
SELECT
  (SELECT value FROM params p WHERE p.run_uuid = r.run_uuid AND p.key = 'model.name'),
  (SELECT value FROM params p WHERE p.run_uuid = r.run_uuid AND p.key = 'precision.name'),
  (SELECT value FROM params p WHERE p.run_uuid = r.run_uuid AND p.key = 'derived.device'),
  (SELECT value FROM params p WHERE p.run_uuid = r.run_uuid AND p.key = 'derived.flops_per_token'),
  (SELECT value FROM latest_metrics m WHERE m.run_uuid = r.run_uuid AND m.key = 'final/tokens_per_s'),
  (SELECT value FROM latest_metrics m WHERE m.run_uuid = r.run_uuid AND m.key = 'tokens'),
  (SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = 'ablate.cpu'),
  (SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = 'ablate.gpu')
FROM runs r
WHERE r.status = 'FINISHED' AND r.lifecycle_stage = 'active'
ORDER BY r.start_time DESC
LIMIT ?
"""


def _from_store(uri: str, cpu: str, gpu: str | None) -> list[Speed]:
    """The finished runs of a sqlite MLflow store (MLflow's tables: runs, params, latest_metrics,
    tags), read-only; [] for another backend or a store that cannot be read."""
    if not uri.startswith("sqlite:///"):
        return []
    path = Path(uri[len("sqlite:///") :])
    if not path.is_file():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)) as db:
            rows = db.execute(QUERY, (MAX_RUNS,)).fetchall()
    except sqlite3.Error:
        return []
    out = []
    for model, precision, device, per_token, tps, tokens, run_cpu, run_gpu in rows:
        if run_cpu != cpu or (device == "cuda" and (gpu is None or run_gpu != gpu)):
            continue
        try:
            tps, per_token = float(tps), float(per_token)
        except (TypeError, ValueError):
            continue
        if model and precision and tps > 0 and per_token > 0:
            out.append(Speed(model, precision, device or "", tps, per_token, "MLflow", float(tokens or 0.0)))
    return out


def this_gpu() -> str | None:
    """The name of this machine's first GPU by NVML (as torch.cuda.get_device_name gives it), without
    a CUDA context (a sweep's launcher forks workers); None without NVML or a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no device: NVML raises its own errors for each
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


def nearest_in_length(speeds: list[Speed], tokens: float) -> list[Speed]:
    """The speeds of the runs nearest `tokens` in length (within a factor 2 of the nearest): a run's
    speed includes its warm-up (compilation, caches, allocator), which weighs on a short run far
    more than on a long one (femto on a shared CPU: 1,568 tokens/s over 20 steps, 4,311 over 200)."""
    known = [s for s in speeds if s.tokens > 0]
    if not known or tokens <= 0:
        return speeds
    distance = {s: abs(math.log(s.tokens / tokens)) for s in known}
    best = min(distance.values())
    return [s for s in known if distance[s] <= best + math.log(2)]
