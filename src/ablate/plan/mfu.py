"""The model FLOPs utilisation a plan assumes: given, measured on the user's own FINISHED runs on the
same hardware and precision (the median, read from MLflow), or a stated default.

Only MFUs timed between device synchronizations count (perf/clock.py: the steady pace, warm-up and
compilation apart). A run on an asynchronous device (CUDA, MPS) recorded by an ablate that summed
host time per step has no `final/warmup_steps`; its MFU was the host's queueing pace with the
compilation inside (an H200's 3.8% for a 30% loop), so it is left out and the plan says how many."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from ablate.config import PlanConfig
from ablate.model import recorded_mfu
from ablate.tracking import check_store


@dataclass(frozen=True)
class MfuChoice:
    value: float
    source: str  # "override", "measured" or "default"
    detail: str
    run_ids: tuple[str, ...] = ()


def choose_mfu(plan: PlanConfig, hardware: str, device: str, precision: str) -> MfuChoice:
    if plan.mfu is not None:
        return MfuChoice(plan.mfu, "override", f"mfu={plan.mfu:g}")
    runs, problem, left_out = measured_mfu_runs(plan.tracking_uri, hardware, device, precision)
    untimed = f" ({left_out} older run(s) on an asynchronous device, timed without synchronization, left out)"
    untimed = untimed if left_out else ""
    if runs:
        value = statistics.median(v for _, v in runs)
        return MfuChoice(
            value,
            "measured",
            f"median of {len(runs)} FINISHED run(s) on hardware={hardware}, "
            f"precision={precision} in {plan.tracking_uri}{untimed}",
            tuple(r for r, _ in runs),
        )
    why = problem or f"no FINISHED runs on hardware={hardware}, precision={precision} in {plan.tracking_uri}{untimed}"
    return MfuChoice(plan.default_mfu, "default", why)


def measured_mfu_runs(uri: str, hardware: str, device: str, precision: str) -> tuple[list[tuple[str, float]], str, int]:
    """(run id, MFU) of every FINISHED training run on this hardware and precision, in any experiment;
    why there are none (or ""); how many were left out for their unsynchronized clock (module doc).

    A run's MFU is its `final/mfu` metric, else its last `mfu`; a run whose MFU is impossible (above 1,
    from an older ablate whose CPU peak a busy machine fooled) does not count. Runs launched with hardware=auto
    count for the device they resolved to (param derived.device) when planning for that device.
    A missing sqlite store is not created: it just has no runs.
    """
    if not uri:
        return [], "no tracking_uri", 0
    check_store(uri, "tracking_uri")  # a URI that is no store is bad input, not "no runs"
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file():
        return [], f"no MLflow store at {uri}", 0
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    filters = [f"params.`hardware.name` = '{hardware}'"]
    if hardware in ("cpu", "cuda", "mps"):
        filters.append(f"params.`hardware.name` = 'auto' and params.`derived.device` = '{hardware}'")
    try:
        client = MlflowClient(tracking_uri=uri)
        experiments = [e.experiment_id for e in client.search_experiments()]
        found, untimed = {}, set()
        for f in filters:
            query = f"{f} and params.`precision.name` = '{precision}' and attributes.status = 'FINISHED'"
            for run in _all_runs(client, experiments, query):
                metrics = run.data.metrics
                value = recorded_mfu(metrics.get("final/mfu", metrics.get("mfu")))
                if value is None:
                    continue
                if _asynchronous(run.data.params) and "final/warmup_steps" not in metrics:
                    untimed.add(run.info.run_id)
                    continue
                found[run.info.run_id] = value
    except (MlflowException, OSError) as exc:
        return [], f"could not read {uri}: {str(exc).splitlines()[0]}", 0
    return sorted(found.items()), "", len(untimed)


def _asynchronous(params: dict) -> bool:
    """Whether the run trained on a device whose steps return before their work is done."""
    device = params.get("derived.device") or params.get("hardware.device") or ""
    return device.startswith("cuda") or device == "mps"


def _all_runs(client, experiments: list[str], query: str):
    token = None
    while experiments:
        page = client.search_runs(experiments, filter_string=query, max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return
