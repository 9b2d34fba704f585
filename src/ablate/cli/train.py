"""`ablate [train] OVERRIDES`: one training run, or a sweep with +sweep=NAME or --multirun (a Hydra
app over conf/config.yaml). The work is in run/ (one run) and sweep/ (many)."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
import time
from pathlib import Path

from ablate.cli.common import hydra_main
from ablate.config import UnsupportedError, parse_run, preset_folders
from ablate.files import check_file_slots, check_writable_dir, redact_files, write_json
from ablate.host import interrupting_signal
from ablate.hydra_app import hydra_node, resolved_task
from ablate.oneline import fail, one_line
from ablate.run import EXIT_BUSY, RESULT_FILE
from ablate.search import trial_hook
from ablate.sweep import PROGRESS_FILE, job_context
from ablate.tracking import agent as tracking_agent
from ablate.tracking import check_store

# What Hydra writes in a run's folder before the task starts (its job log besides).
HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml")
SUMMARY = (
    "One training run, or a sweep with +sweep=NAME or --multirun "
    "(the default command: `ablate ARGS` is `ablate train ARGS`)."
)
EXAMPLE = "ablate model=tiny precision=bf16 train.steps=300"


def task(cfg, run_cfg=None, prepared=None, agent=None, planned=None) -> dict:
    """Hydra task: one run. Returns the RunResult as a dict (the sweep summary reads result.json).
    A single run comes parsed and prepared (`run_cfg`, `prepared`: see one_run) with the tracking
    agent the command started for it. A sweep's job comes parsed by the sweep's plan (`planned`,
    run/planned.py) and prepares that config here, checked to hash as the plan's; a job with no
    plan (an Optuna study's trial) parses its own."""
    from hydra.core.hydra_config import HydraConfig

    from ablate.run import PlanChanged, branches, preemption, train  # torch: once the config is known to be good

    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)
    redact_files(out_dir / ".hydra")  # Hydra wrote the overrides as given: a password in tracking.uri
    context = job_context(hc)
    if prepared is None:
        with one_line():
            try:
                run_cfg, prepared = _parse_and_prepare(cfg, context, preset_folders(hc), planned)
            except PlanChanged as exc:  # the job's row says so, and the sweep goes on
                print(f"error: {exc}", file=sys.stderr)
                record = {"status": "failed", "reason": str(exc)}
                write_json(out_dir / RESULT_FILE, record)
                return record
            except UnsupportedError as exc:
                if not (context.in_sweep and cfg.get("skip_unsupported")):
                    raise
                print(f"skipped: {exc}", file=sys.stderr)
                record = {"status": "unsupported", "reason": str(exc), "precision": cfg.precision.name}
                write_json(out_dir / "result.json", record)
                return record
    family = branches.is_family(run_cfg)
    if family:
        return _family(prepared, out_dir, context)
    train.set_threads(context.threads)
    on_eval = trial_hook(hc)  # a trial of an Optuna study (hydra/sweeper=ablate_optuna) reports and may be pruned
    started = time.time()
    try:
        result = train.run(
            run_cfg,
            out_dir,
            sweep_id=context.sweep_id,
            experiment_id=context.experiment_id,
            prepared=prepared,
            parent_run_id=context.parent_run_id,
            on_eval=on_eval,
            agent=agent,
            progress_file=_progress_file(out_dir, context),
        )
    except KeyboardInterrupt:
        raise
    except preemption.Requeued as exc:  # a signal: checkpointed, KILLED in MLflow, resumable
        if not context.in_sweep:
            print(f"stopped: {exc}", file=sys.stderr)
        raise
    except Exception as exc:  # the run is FAILED in MLflow and result.json; a sweep goes on
        unreachable = store_unreachable(exc, run_cfg.tracking.uri)
        print(unreachable or f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        record = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        _record_failure(out_dir / RESULT_FILE, record, started)
        if not context.in_sweep:
            raise SystemExit(1) from None
        return record
    print(describe(result), file=sys.stderr)
    if result.status == "busy" and not context.in_sweep:  # one line: the run and its owner
        raise SystemExit(EXIT_BUSY)
    if not context.in_sweep:  # a sweep's folder is printed once, at its end
        shown = out_dir.relative_to(Path.cwd()) if out_dir.is_relative_to(Path.cwd()) else out_dir
        print(f"run folder: {shown} (result.json, the resolved config in .hydra/)", file=sys.stderr)
    if result.status == "failed" and not context.in_sweep:
        raise SystemExit(1)
    return result.to_dict()


def _record_failure(path: Path, record: dict, started: float) -> None:
    """result.json for a run that failed before it could write one (its store unreachable at the
    start, for one): a sweep's summary then says why, not "missing"."""
    try:
        if path.stat().st_mtime >= started:
            return  # the run wrote its own ending
    except OSError:
        pass
    write_json(path, record)


def _progress_file(out_dir: Path, context) -> Path | None:
    """A sweep's job reports its progress in its directory, where the sweep's live line reads it."""
    return out_dir / PROGRESS_FILE if context.in_sweep else None


def _parse_and_prepare(cfg, context, folders, planned=None):
    """A sweep job's (RunConfig, Prepared or Family), its run named by what sets it apart from the
    sweep's other jobs: the UI's legends then read "precision=bf16". `planned`: the config as the
    sweep's plan parsed it, prepared to the plan's hashes (PlanChanged otherwise); None: parsed here."""
    from omegaconf import OmegaConf

    from ablate.run import branches, prepare, prepare_planned

    run_cfg = planned.cfg if planned is not None else parse_run(OmegaConf.to_container(cfg, resolve=True), folders)
    if context.label and not context.label.startswith("#") and run_cfg.tracking.run_name is None:
        run_cfg = dataclasses.replace(run_cfg, tracking=dataclasses.replace(run_cfg.tracking, run_name=context.label))
    if planned is not None:
        return run_cfg, prepare_planned(planned, run_cfg)
    return run_cfg, branches.prepare_family(run_cfg) if branches.is_family(run_cfg) else prepare.prepare(run_cfg)


@contextlib.contextmanager
def one_run(cfg):
    """One run checked in full before Hydra creates its folder (common.hydra_main's `setup`):
    every key of every group parsed once, the dirs it will write to, the store, and the run
    prepared (this machine, its memory, the data: run/prepare.py), then passed to the task. A run
    that tracks gets a tracking agent (tracking/agent.py) that imports the store's code while this
    process imports torch, and opens the store only once every check has passed; closed at the
    end of the command."""
    run_cfg = parse_run(resolved_task(cfg), preset_folders(cfg.hydra))
    # The cheap checks of what prepare checks too, before its imports (torch) cost seconds.
    check_writable_dir(run_cfg.state_dir, "state_dir")
    tracking = run_cfg.tracking
    if tracking.backend == "mlflow":
        check_store(tracking.uri)
    run_dir = hydra_node(cfg, "run.dir")
    check_writable_dir(run_dir, "hydra.run.dir")
    check_file_slots(run_dir, (RESULT_FILE, f"{hydra_node(cfg, 'job.name')}.log", *HYDRA_FILES), "hydra.run.dir")
    agent = tracking_agent.start(tracking.uri) if tracking.backend == "mlflow" else None
    try:
        from ablate.run import (
            branches,  # torch: only once the config parses
            prepare,
        )

        prepared = branches.prepare_family(run_cfg) if branches.is_family(run_cfg) else prepare.prepare(run_cfg)
        if agent is not None:
            agent.open(tracking.experiment)  # every check passed: the store may be created
        yield {"run_cfg": run_cfg, "prepared": prepared, "agent": agent}
    finally:
        if agent is not None:
            agent.close()


def _family(fam, out_dir: Path, context) -> dict:
    """A list budget: the trunk, then a cooldown branch per budget (run/branches.py), on this job's
    share of the cores: the process launchers give a job its share as OMP_NUM_THREADS, which is
    torch's thread count."""
    import torch

    from ablate.run import branches

    try:
        result = branches.run_family(
            fam,
            out_dir,
            sweep_id=context.sweep_id,
            experiment_id=context.experiment_id,
            parent_run_id=context.parent_run_id,
            workers=context.threads or torch.get_num_threads(),
            progress_file=_progress_file(out_dir, context),
        )
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if not context.in_sweep:
            raise SystemExit(1) from None
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    for member in [result.trunk, *result.branches]:
        if member is not None:
            print(describe(member), file=sys.stderr)
    if result.failed and not context.in_sweep:
        raise SystemExit(1)
    return result.to_dict()


# How a refused or unanswered connection reads in MLflow's REST client and SQLAlchemy's drivers.
UNREACHABLE = (
    "Connection refused",
    "Max retries exceeded",
    "Failed to establish a new connection",
    "Name or service not known",
    "could not connect to server",
    "Connection timed out",
)


def store_unreachable(exc: Exception, uri: str | None) -> str | None:
    """One line for a tracking store that cannot be reached when the run starts (a server that is
    down, a wrong host or port), instead of MLflow's exception: what, where, and what is valid. None
    for any other failure."""
    text = str(exc)
    if not uri or not any(marker in text for marker in UNREACHABLE):
        return None
    return (
        f"error: the tracking store at {uri} cannot be reached (connection refused or no answer); "
        "nothing was trained (valid: a running server at tracking.uri, tracking.uri=sqlite:///PATH, "
        "or tracking.backend=none)"
    )


def describe(result) -> str:
    name = f"{result.model}/{result.precision}"
    if getattr(result, "kind", "run") != "run":  # a trunk, or a branch with its fork step
        name += f" {result.kind}" + (f" from step {result.fork_step}" if result.fork_step else "")
    if result.status == "skipped":
        return f"skipped {name}: {result.reason} (mlflow run {result.mlflow_run_id})"
    if result.status == "busy":
        return f"busy {name}: run {result.config_hash} is {result.reason}; not started again"
    if result.status != "finished":
        return f"{result.status} {name}: {result.reason}"
    floor = f" (entropy floor {result.entropy_floor:.3f})" if result.entropy_floor else ""
    bpb = f" ({result.final_val_bpb:.4f} bits per byte)" if result.final_val_bpb else ""
    return (
        f"finished {name}: val loss {result.final_val_loss:.4f}{floor}{bpb}, {result.tokens:,} tokens, "
        f"{result.flops:.3g} FLOPs, {result.tokens_per_s:,.0f} tokens/s, mlflow run {result.mlflow_run_id}"
    )


def main(argv: list[str] | None = None) -> None:
    try:
        made = hydra_main(
            task, config_name="config", name="train", summary=SUMMARY, example=EXAMPLE, argv=argv, setup=one_run
        )
    except KeyboardInterrupt as exc:  # the launcher has stopped its jobs (sweep/launch/process.py)
        print(f"interrupted: {exc}" if str(exc) else "interrupted", file=sys.stderr)
        raise SystemExit(128 + (interrupting_signal(exc) or signal.SIGINT)) from None  # the shell's convention
    sweep = (made or {}).get("sweep")  # the sweep's session: conf/config.yaml's hydra.callbacks.sweep
    if sweep is None:
        return
    if sweep.unwritten:  # its summary: the disk took none of it
        fail(sweep.unwritten, code=1)
    if sweep.summary is not None and sweep.summary.failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
