"""The launchers' settings (hydra.launcher): the process launchers' (sequential, parallel) and the
submitit launcher's (slurm, submitit_local). These dataclasses are the schema Hydra composes against:
each plugin registers them in Hydra's ConfigStore with its `_target_` (hydra_plugins/*/config.py),
so an unknown key or a value of the wrong type stops at composition, in one line (oneline.explain);
the launcher parses its arguments with them again when Hydra builds it, for the ranges a type cannot
say, before the sweep's first job is planned, so that a bad `hydra.launcher.*` leaves nothing behind."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ablate.config.schema import build
from ablate.errors import ConfigError

SUBMITIT_CLUSTERS = ("slurm", "local")  # submitit's executors: a SLURM job array, or local processes


@dataclass
class ProcessSettings:
    """hydra.launcher of the process launchers: each job in its own process on this machine."""

    workers: int | None = None  # runs at once; None: one per core
    threads_per_job: int | None = None  # torch threads per run; None: cores // workers
    stop_timeout_s: float = 60.0  # after SIGTERM, how long a job may take to stop before SIGKILL
    # The GPUs shared out among the runs (indices or UUIDs, as CUDA_VISIBLE_DEVICES takes them);
    # None: every GPU this machine lets the launcher see. Each run at once holds gpus_per_job of
    # them (more than one: a DDP run per job); workers is at most len(gpus) // gpus_per_job.
    gpus: list[str] | None = None
    gpus_per_job: int = 1

    def validate(self) -> None:
        if self.gpus_per_job < 1:
            raise ConfigError(
                f"hydra.launcher.gpus_per_job={self.gpus_per_job} is invalid (valid: a whole number >= 1)"
            )
        for key in ("workers", "threads_per_job"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(
                    f"hydra.launcher.{key}={value} is invalid (valid: a whole number >= 1, or null for automatic)"
                )
        if self.stop_timeout_s < 0:
            raise ConfigError(f"hydra.launcher.stop_timeout_s={self.stop_timeout_s} is negative (valid: >= 0 seconds)")


@dataclass
class SubmititSettings:
    """hydra.launcher of the submitit launcher: a multirun as one job array, on SLURM or locally."""

    cluster: str = "slurm"  # slurm: sbatch job arrays; local: submitit's local executor (debugging)
    # submitit's pickles and the jobs' logs, relative to the sweep dir (or absolute). Compute nodes
    # must see it, as they must see the sweep dir, the MLflow store and the venv.
    submitit_folder: str = ".submitit/%j"
    partition: str | None = None  # None: the cluster's default partition
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None  # a node feature, e.g. h100
    timeout_min: int = 60  # each job's time limit; USR2 arrives signal_delay_s before it
    # None: from the hardware config; GPUs hardware.gpus_per_node for a CUDA preset, CPUs one per
    # training process
    gpus_per_task: int | None = None
    cpus_per_task: int | None = None
    # A run over several processes that SLURM starts (one task per rank, joined with env://,
    # run/distributed.py): nodes x tasks_per_node ranks. Both 1: one task per run, which starts its
    # own DDP ranks on its node (hardware.gpus_per_node).
    nodes: int = 1
    tasks_per_node: int = 1
    mem_gb: float | None = None  # None: the partition's default
    array_parallelism: int = 256  # tasks of the array running at once
    max_num_timeout: int = 3  # requeues after hitting the time limit; preemptions do not count
    signal_delay_s: int = 120  # seconds between USR2 and the end of the time limit
    job_name: str = "ablate"
    # `ablate submit`: the time limit of the job that waits for the array (None: the partition's)
    driver_timeout_min: int | None = None
    python: str | None = None  # the interpreter compute nodes run; None: the one launching
    setup: list[str] = field(default_factory=list)  # shell lines before each job, e.g. module load cuda
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # any other sbatch option
    poll_s: float = 5.0  # seconds between checks of the jobs' states

    def validate(self) -> None:
        if self.cluster not in SUBMITIT_CLUSTERS:
            raise ConfigError(
                f"hydra.launcher.cluster={self.cluster} is not a submitit executor "
                f"(valid: {', '.join(SUBMITIT_CLUSTERS)})"
            )
        for key in ("timeout_min", "array_parallelism", "poll_s", "driver_timeout_min", "nodes", "tasks_per_node"):
            _at_least(key, getattr(self, key), 1)
        for key in ("max_num_timeout", "signal_delay_s", "gpus_per_task"):
            _at_least(key, getattr(self, key), 0)
        _at_least("cpus_per_task", self.cpus_per_task, 1)
        if self.cluster == "local" and self.nodes > 1:
            raise ConfigError(
                f"hydra.launcher.nodes={self.nodes} with cluster=local: local processes run on this one "
                "machine (valid: nodes=1, with tasks_per_node for several ranks)"
            )
        if self.mem_gb is not None and self.mem_gb <= 0:
            raise ConfigError(
                f"hydra.launcher.mem_gb={self.mem_gb} must be positive (valid: > 0, or null for the cluster's default)"
            )
        if self.signal_delay_s >= self.timeout_min * 60:
            raise ConfigError(
                f"hydra.launcher.signal_delay_s={self.signal_delay_s} is not shorter than the time limit "
                f"({self.timeout_min} min) (valid: < {self.timeout_min * 60})"
            )
        check_script_values(self)


# A SLURM job name: written unquoted into the sbatch script's #SBATCH --job-name= line.
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
# Keys whose values are names on an #SBATCH line, where a space would end the value.
SBATCH_NAMES = ("partition", "account", "qos")
# Keys whose values are written into the sbatch script, each on its own line or in one.
SCRIPT_KEYS = ("submitit_folder", "constraint", "python", *SBATCH_NAMES)


def _one_line(key: str, value) -> None:
    text = str(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ConfigError(
            f"hydra.launcher.{key}={text!r} holds a newline or control character, which would end its line of "
            "the sbatch script and start another (valid: printable text on one line)"
        )


def check_script_values(settings: SubmititSettings) -> None:
    """Every value submitit writes into the sbatch script stays on its own line: submitit writes
    `#SBATCH --KEY=VALUE` unquoted, the setup lines as they are and `python` before the command, so a
    newline in any of them would end the #SBATCH header early and put a command of its own in the
    script. Job names keep to letters, digits and . _ + -; names on #SBATCH lines have no spaces."""
    if not isinstance(settings.job_name, str) or not JOB_NAME.fullmatch(settings.job_name):
        raise ConfigError(
            f"hydra.launcher.job_name={settings.job_name!r} is not a job name sbatch takes safely "
            "(valid: 1-128 letters, digits, '.', '_', '+' or '-', starting with a letter or digit)"
        )
    for key in SCRIPT_KEYS:
        value = getattr(settings, key)
        if value is not None:
            _one_line(key, value)
            if key in SBATCH_NAMES and any(c.isspace() for c in str(value)):
                raise ConfigError(f"hydra.launcher.{key}={value!r} holds a space (valid: a name without spaces)")
    for i, line in enumerate(settings.setup):
        _one_line(f"setup[{i}]", line)
    for name, value in settings.additional_parameters.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", str(name)):
            raise ConfigError(
                f"hydra.launcher.additional_parameters has the key {str(name)!r} (valid: an sbatch option's "
                "name: letters, digits, '_' and '-')"
            )
        _one_line(f"additional_parameters.{name}", value)


def _at_least(key: str, value, minimum: int) -> None:
    if value is not None and value < minimum:
        raise ConfigError(f"hydra.launcher.{key}={value} is too small (valid: >= {minimum})")


def parse_process_settings(tree: dict) -> ProcessSettings:
    """The process launchers' settings from the arguments Hydra builds the launcher with."""
    settings = build(ProcessSettings, _plain(tree), "hydra.launcher")
    settings.validate()
    return settings


def parse_submitit_settings(tree: dict) -> SubmititSettings:
    """The submitit launcher's settings from the arguments Hydra builds it with (`ablate submit`: from
    the composed hydra.launcher)."""
    settings = build(SubmititSettings, _plain(tree), "hydra.launcher")
    settings.validate()
    return settings


def _plain(tree: dict | None) -> dict:
    """Hydra's arguments as plain values: nested configs resolved, the plugin's `_target_` left out."""
    from omegaconf import OmegaConf

    plain = {
        k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in (tree or {}).items()
    }
    plain.pop("_target_", None)
    return plain
