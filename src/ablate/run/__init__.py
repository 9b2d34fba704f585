"""One training run, from its config to its result.

prepare.py     prepare: device, data, model config, step budget and config hash, before any step
planned.py     Planned: a sweep job's config as its plan parsed and hashed it, prepared and checked in the job
decision.py    decide: train, resume, skip or leave to a busy launch (one rule for the run and a sweep's plan)
lock.py        RunLock: one launch per config hash at a time (flock, or a lease), and who holds it
train.py       run: the whole run (decision, MLflow run, signals, DDP ranks, how it ended)
trainer.py     Trainer: the loop (step, evaluate, log, checkpoint); StopRun, Diverged
checkpoint.py  save, load_good, meta: atomic checkpoints, their torch-free metadata, quarantine
branches.py    a run with several budgets: a constant-rate trunk and a cooldown branch per budget
watchdog.py    watch: closes the MLflow run of a process that died without closing it (kill -9)
distributed.py DDP inside a step: ranks, batch slicing, means across ranks
ranks.py       helpers: the DDP helper processes of a run; launched_run: a world torchrun or SLURM started
fsdp.py        train.parallel=fsdp: FSDP2 per block, its mixed-precision policy, each rank's bytes
checkpoint_sharded.py  an FSDP run's checkpoint: each rank's shards by torch.distributed.checkpoint
preemption.py  signals become a checkpoint at the next step boundary, then a requeue
progress.py    the progress bar of a run and the live line of a sweep
result.py      RunResult and result.json
saved.py       a trained run found again: its folder, config, checkpoint and model
sample.py      sample: text from a run's checkpoint, and its decode speed
final_model.py save_final_model, load_final_model: a finished run's weights as an MLflow artifact
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "prepare": ("Prepared",),
        "planned": ("Planned", "PlanChanged", "prepare_planned"),
        "decision": ("decide",),
        "lock": ("Busy", "EXIT_BUSY", "busy_with", "output_lock", "sweep_lock"),
        "trainer": ("StopRun",),
        "branches": ("is_family", "with_budget"),
        "progress": ("SweepProgress", "WatchedJob"),
        "result": ("BRANCHES_DIR", "RESULT_FILE", "RunResult", "bits_per_byte", "read_result"),
        "sample": ("SAMPLE_FILE", "write_sample"),
        "final_model": ("MODEL_FILE", "load_final_model"),
    },
    modules=("prepare", "train", "branches", "checkpoint", "preemption", "sample"),
)
