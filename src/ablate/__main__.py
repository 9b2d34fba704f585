"""`python -m ablate`: one training run, or a sweep with +sweep=NAME (a Hydra app)."""

from __future__ import annotations

import sys
from pathlib import Path

from ablate.cli import fail, hydra_main


def task(cfg) -> dict:
    """Hydra task: one run. Returns the RunResult as a dict (the sweep summary reads result.json)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from ablate import sweep, train
    from ablate.config import ConfigError, UnsupportedError, parse_run

    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)
    context = sweep.job_context(hc)
    try:
        run_cfg = parse_run(OmegaConf.to_container(cfg, resolve=True))
        prepared = train.prepare(run_cfg)
    except UnsupportedError as exc:
        if not (context.in_sweep and cfg.get("skip_unsupported")):
            fail(str(exc))
        print(f"skipped: {exc}", file=sys.stderr)
        record = {"status": "unsupported", "reason": str(exc), "precision": cfg.precision.name}
        sweep.write_json(out_dir / "result.json", record)
        return record
    except ConfigError as exc:
        fail(str(exc))
    train.set_threads(context.threads)
    from ablate.search import trial_hook

    on_eval = trial_hook(hc)  # a trial of an Optuna study (hydra/sweeper=optuna) reports and may be pruned
    try:
        result = train.run(run_cfg, out_dir, sweep_id=context.sweep_id, experiment_id=context.experiment_id,
                           prepared=prepared, parent_run_id=context.parent_run_id, on_eval=on_eval)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the run is FAILED in MLflow and result.json; a sweep goes on
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if not context.in_sweep:
            raise SystemExit(1)
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    print(describe(result), file=sys.stderr)
    if result.status == "failed" and not context.in_sweep:
        raise SystemExit(1)
    return result.to_dict()


def describe(result) -> str:
    if result.status == "skipped":
        return f"skipped {result.model}/{result.precision}: {result.reason} (mlflow run {result.mlflow_run_id})"
    if result.status != "finished":
        return f"{result.status} {result.model}/{result.precision}: {result.reason}"
    floor = f" (entropy floor {result.entropy_floor:.3f})" if result.entropy_floor else ""
    return (
        f"finished {result.model}/{result.precision}: val loss {result.final_val_loss:.4f}{floor}, "
        f"{result.flops:.3g} FLOPs, {result.tokens_per_s:,.0f} tokens/s, mlflow run {result.mlflow_run_id}"
    )


def main() -> None:
    from ablate import sweep

    hydra_main(task, config_name="config")
    if sweep.LAST_SUMMARY is not None and sweep.LAST_SUMMARY.failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
