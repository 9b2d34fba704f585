"""`python -m ablate submit OVERRIDES...`: submit a sweep and walk away.

    python -m ablate submit +sweep=precision hydra/launcher=slurm
    python -m ablate jobs            # later, from any terminal: the jobs and how their runs ended

The launching process of a SLURM sweep waits for its jobs (it writes the summary, marks dead runs
FAILED and sets the exit code), so this command submits that process itself as a small SLURM job,
the driver: one CPU, no GPU, the launcher's partition/account/QoS, `hydra.launcher.driver_timeout_min`
(null: the partition's default limit), never requeued. It prints the driver's job id and the sweep
dir, and returns. The driver's log is SWEEP_DIR/driver.log; its exit code (sacct) is the sweep's.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ablate.cli.common import precheck
from ablate.config import SubmititSettings, parse_submitit_settings
from ablate.files import check_writable_dir, write_json
from ablate.oneline import fail, one_line

DRIVER_LOG = "driver.log"


def compose(overrides: list[str]):
    """The config of the sweep's first job (sweep overrides at their first value): enough for
    the launcher settings and the sweep dir, which every job shares."""
    from ablate.hydra_app import App, parse_overrides  # Hydra: loaded by the commands that compose

    first = [
        f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override() else o.input_line
        for o in parse_overrides(overrides)
    ]
    return App("config").compose(first)


def driver_script(cwd: Path, sweep_dir: Path, overrides: list[str], settings) -> str:
    """The sbatch script of the driver job."""
    options = {
        "job-name": f"{settings.job_name}-driver",
        "output": str(sweep_dir / DRIVER_LOG),
        "chdir": str(cwd),
        "cpus-per-task": "1",
        "ntasks": "1",
        "no-requeue": None,
        **{k: getattr(settings, k) for k in ("partition", "account", "qos") if getattr(settings, k)},
    }
    if settings.driver_timeout_min:
        options["time"] = str(settings.driver_timeout_min)
    python = settings.python or sys.executable
    command = [python, "-m", "ablate", "--multirun", *overrides, f"hydra.sweep.dir={sweep_dir}"]
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH --{k}" if v is None else f"#SBATCH --{k}={shlex.quote(str(v))}" for k, v in options.items()]
    lines += [
        *settings.setup,
        # The driver submits the array from inside this job: its own SLURM_* variables must not
        # reach the array's tasks (srun reads several of them as defaults). SLURM_CONF stays.
        'export ABLATE_DRIVER_JOB_ID="$SLURM_JOB_ID"',
        'for v in $(compgen -e | grep "^SLURM_"); do [ "$v" = SLURM_CONF ] || unset "$v"; done',
        "exec " + shlex.join(command),
        "",
    ]
    return "\n".join(lines)


def submit(overrides: list[str]) -> tuple[str, Path]:
    from omegaconf import OmegaConf

    precheck(overrides, "config", multirun=True)  # the driver runs it with --multirun
    cfg = compose(overrides)
    # the composed launcher's schema says which launcher it is (config/launch.py), not its _target_
    schema = OmegaConf.get_type(cfg.hydra.launcher)
    if not (isinstance(schema, type) and issubclass(schema, SubmititSettings)) or cfg.hydra.launcher.cluster != "slurm":
        fail("hydra/launcher is not slurm (valid: add hydra/launcher=slurm; the driver job must submit to SLURM)")
    with one_line():
        settings = parse_submitit_settings(cfg.hydra.launcher)
    if shutil.which("sbatch") is None:
        fail("sbatch is not on PATH (valid: run `ablate submit` where SLURM's client tools are installed)")
    check_writable_dir(str(cfg.hydra.sweep.dir), "hydra.sweep.dir")
    cwd = Path.cwd()
    sweep_dir = (cwd / str(cfg.hydra.sweep.dir)).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    script = sweep_dir / "driver.sbatch"
    script.write_text(driver_script(cwd, sweep_dir, overrides, settings))
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        fail(f"sbatch refused the driver job: {done.stderr.strip() or done.stdout.strip()}", code=1)
    job_id = done.stdout.strip().split(";")[0]
    write_json(
        sweep_dir / "driver.json",
        {
            "job_id": job_id,
            "log": DRIVER_LOG,
            "script": script.name,
            "submitted_at": time.time(),
            "overrides": overrides,
            "cwd": str(cwd),
        },
    )
    return job_id, sweep_dir


def main(argv: list[str] | None = None) -> None:
    overrides = list(sys.argv[1:] if argv is None else argv)  # cli/main.py passes the arguments
    if any(a in ("-h", "--help") for a in overrides):
        print(__doc__)
        return
    if os.environ.get("HYDRA_FULL_ERROR") is None and any(a.startswith("-") for a in overrides):
        fail(
            f"unknown option {next(a for a in overrides if a.startswith('-'))} "
            "(valid: Hydra overrides such as +sweep=precision)"
        )
    job_id, sweep_dir = submit(overrides)
    rel = os.path.relpath(sweep_dir)
    print(json.dumps({"driver_job_id": job_id, "sweep_dir": str(sweep_dir)}))
    print(
        f"submitted driver job {job_id}; sweep dir {rel}\n"
        f"  python -m ablate jobs {rel}        # the jobs and their states\n"
        f"  tail -f {rel}/{DRIVER_LOG}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
