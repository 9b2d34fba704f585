"""Whether a launch of a run trains it from scratch, resumes it or skips it: one rule, used by the
run itself (run/train.py) and by a sweep that announces what its jobs will do (sweep/plan.py).

The inputs are the newest MLflow run recorded under the config's hash (or none), the checkpoint in
the run's state dir (or none) and the two flags that ask for more work than the default:
- FINISHED: skipped; train.rerun=true trains it again in a new MLflow run, from step 0.
- FAILED: skipped; train.retry_failed=true trains it again in a new MLflow run, from step 0.
- KILLED with reason "pruned: ..." (an Optuna pruner stopped it on purpose): skipped, like a
  finished run; train.rerun=true trains it again from step 0.
- RUNNING or KILLED otherwise (interrupted): resumed into the same MLflow run, from the checkpoint
  when there is one, else from step 0.
- No MLflow run: resumed from the checkpoint, unless the checkpoint names an MLflow run that the
  store does not have (a deleted or another store), whose earlier metrics are gone: then step 0.
- Busy, before all of the above: another launch is training it right now (it holds the run's lock,
  run/lock.py, or it is the live process that owns the RUNNING MLflow run): left alone, since a
  second writer would log every step twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.run.checkpoint import CheckpointMeta
from ablate.tracking import ExistingRun

RUN, RESUME, SKIP, BUSY = "run", "resume", "skip", "busy"
RESUMABLE = ("RUNNING", "KILLED")
PRUNED_PREFIX = "pruned"


@dataclass(frozen=True)
class Decision:
    action: str  # run | resume | skip | busy
    reason: str
    resume_run_id: str | None = None  # the MLflow run that goes on (resume)
    from_checkpoint: bool = False  # training starts from the checkpoint's step

    @property
    def finished_before(self) -> bool:
        return self.action == SKIP and self.reason.startswith("already finished")


def decide(
    existing: ExistingRun | None,
    checkpoint: CheckpointMeta | None,
    rerun: bool = False,
    retry_failed: bool = False,
    store: str | None = None,
    busy: str | None = None,
) -> Decision:
    """See the module doc. `store`: the tracking URI the run records to (None: tracking.backend=none);
    `busy`: who is training it now (run/lock.busy_with), None when nobody is."""
    if busy:
        return Decision(BUSY, f"being trained by {busy}", existing.run_id if existing else None)
    if existing is not None:
        return _with_history(existing, checkpoint, rerun, retry_failed)
    if checkpoint is None:
        return Decision(RUN, "")
    if store and checkpoint.mlflow_run_id:
        return Decision(
            RUN,
            f"its checkpoint is for MLflow run {checkpoint.mlflow_run_id}, which {store} does not "
            "have; starting from step 0",
        )
    return Decision(RESUME, f"from its checkpoint at step {checkpoint.step}", from_checkpoint=True)


def _with_history(
    existing: ExistingRun, checkpoint: CheckpointMeta | None, rerun: bool, retry_failed: bool
) -> Decision:
    pruned = existing.status == "KILLED" and existing.reason.startswith(PRUNED_PREFIX)
    if existing.status == "FINISHED" or pruned:
        if not rerun:
            what = "already finished" if existing.status == "FINISHED" else existing.reason
            return Decision(SKIP, f"{what} (train.rerun=true runs it again)")
        return Decision(RUN, "again from step 0, as asked (train.rerun=true)")
    if existing.status == "FAILED":
        if not retry_failed:
            return Decision(
                SKIP, f"failed before: {existing.reason or 'no reason recorded'} (train.retry_failed=true retries it)"
            )
        return Decision(RUN, "again from step 0, as asked (train.retry_failed=true)")
    if existing.status in RESUMABLE:
        if checkpoint is not None:
            return Decision(RESUME, f"from its checkpoint at step {checkpoint.step}", existing.run_id, True)
        return Decision(RESUME, "from step 0, into the same MLflow run", existing.run_id)
    return Decision(RUN, f"its MLflow run is {existing.status}; starting again from step 0")
