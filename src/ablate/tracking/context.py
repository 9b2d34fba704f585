"""The tags that say where an MLflow run came from, as MLflow's own fluent `start_run` sets them
(which `MlflowClient.create_run`, used here, does not): the user, the source's name and type, the git
commit of the user's working tree; and ablate's own: its version and the environment that
provenance.environment records in result.json (torch, Python, CPU, ISA flags, GPU)."""

from __future__ import annotations

import getpass

from ablate.provenance import code_version, environment, isa
from ablate.tracking.tags import (
    ABLATE_VERSION_TAG,
    CPU_ISA_TAG,
    CPU_TAG,
    GPU_TAG,
    PYTHON_TAG,
    SOURCE_DIRTY_TAG,
    TORCH_TAG,
)

# MLflow's system tags (mlflow.utils.mlflow_tags), which its UI shows in the User and Source columns.
USER_TAG = "mlflow.user"
SOURCE_NAME_TAG = "mlflow.source.name"
SOURCE_TYPE_TAG = "mlflow.source.type"
SOURCE_COMMIT_TAG = "mlflow.source.git.commit"
SOURCE_NAME = "ablate"  # the program the user ran, as MLflow names a script by its file
SOURCE_TYPE = "LOCAL"  # MLflow's SourceType for code run on the user's own machine or cluster


def run_tags(device: str | None = None) -> dict[str, str]:
    """Every run's provenance tags; `device`: the one a training run trains on (its GPU's name)."""
    env = environment(device)
    tags = {
        USER_TAG: user(),
        SOURCE_NAME_TAG: SOURCE_NAME,
        SOURCE_TYPE_TAG: SOURCE_TYPE,
        ABLATE_VERSION_TAG: env["ablate"],
        PYTHON_TAG: env["python"],
        CPU_TAG: env["cpu"],
        CPU_ISA_TAG: " ".join(isa(env["cpu_flags"])),
        **code_version(),  # git.commit, git.dirty: ablate's own code, where it runs from a checkout
    }
    if env["torch"]:
        tags[TORCH_TAG] = env["torch"]
    if env["gpu"]:
        tags[GPU_TAG] = env["gpu"]
    if env["commit"]:
        tags[SOURCE_COMMIT_TAG] = env["commit"]
        tags[SOURCE_DIRTY_TAG] = str(env["dirty"]).lower()
    return tags


def user() -> str:
    """The login name, as MLflow takes it (getpass); "unknown" where there is none (a container
    whose uid has no passwd entry), as MLflow writes then."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
