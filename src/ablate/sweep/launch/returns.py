"""A job's Hydra JobReturn as JSON, the only thing a job process hands back to the process launcher.

A pickle read back from the sweep directory would run whatever code the file names; JSON cannot.
What crosses: the overrides, the job's config and Hydra config (as plain containers, interpolations
unresolved), its working directory, task name and status, and the task's return value when it is
plain data (a RunResult dict; anything else is described in one string). A failed job's exception
comes back as JobFailed with the original type's name, message and traceback text.

The SLURM launcher's jobs still come back through submitit's pickles (launch/slurm.py): submitit
pickles every job's callable and result, and those files are written and read by the same user's
jobs on the cluster's shared filesystem.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

FORMAT = 1


class JobFailed(RuntimeError):
    """A job's task raised: its exception, described (type, message, traceback) rather than unpickled."""

    def __init__(self, type_name: str, message: str, traceback: str = ""):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message, self.traceback = type_name, message, traceback


def to_json(ret) -> dict:
    """A JobReturn as a JSON-safe dict."""
    from hydra.core.utils import JobStatus
    from omegaconf import OmegaConf

    doc: dict[str, Any] = {
        "format": FORMAT,
        "overrides": list(ret.overrides or []),
        "cfg": OmegaConf.to_container(ret.cfg, resolve=False) if ret.cfg is not None else None,
        "hydra_cfg": OmegaConf.to_container(ret.hydra_cfg, resolve=False) if ret.hydra_cfg is not None else None,
        "working_dir": ret.working_dir,
        "task_name": ret.task_name,
        "status": ret.status.name,
    }
    value = ret._return_value
    if ret.status == JobStatus.FAILED and isinstance(value, BaseException):
        doc["error"] = {
            "type": type(value).__name__,
            "message": str(value),
            "traceback": "".join(traceback.format_exception(value)),
        }
    else:
        doc["return_value"] = _plain(value)
    return doc


def from_json(doc: dict):
    """The JobReturn that `to_json` described."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    ret = JobReturn(
        overrides=doc.get("overrides"),
        cfg=OmegaConf.create(doc["cfg"]) if doc.get("cfg") is not None else None,
        hydra_cfg=OmegaConf.create(doc["hydra_cfg"]) if doc.get("hydra_cfg") is not None else None,
        working_dir=doc.get("working_dir"),
        task_name=doc.get("task_name"),
        status=JobStatus[doc.get("status", "UNKNOWN")],
    )
    error = doc.get("error")
    ret.return_value = (
        JobFailed(error["type"], error["message"], error.get("traceback", "")) if error else doc.get("return_value")
    )
    return ret


def _plain(value: Any) -> Any:
    """`value` when JSON can carry it unchanged, else a one-line description of it."""
    try:
        return json.loads(json.dumps(value, allow_nan=True))
    except (TypeError, ValueError) as exc:
        return f"{type(value).__name__} (not JSON: {exc})"
