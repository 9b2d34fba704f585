"""One training run, from its config to its result.

prepare.py     prepare: device, data, model config, step budget and config hash, before any step
decision.py    decide: train, resume, skip or leave to a busy launch (one rule for the run and a sweep's plan)
lock.py        RunLock: one launch per config hash at a time (flock, or a lease), and who holds it
train.py       run: the whole run (decision, MLflow run, signals, DDP ranks, how it ended)
trainer.py     Trainer: the loop (step, evaluate, log, checkpoint); StopRun, Diverged
checkpoint.py  save, load_good, meta: atomic checkpoints, their torch-free metadata, quarantine
watchdog.py    watch: closes the MLflow run of a process that died without closing it (kill -9)
distributed.py DDP inside a step: ranks, batch slicing, means across ranks
ranks.py       helpers: the DDP helper processes of a run
preemption.py  signals become a checkpoint at the next step boundary, then a requeue
progress.py    the progress bar of a run and the live line of a sweep
result.py      RunResult and result.json
"""
