"""Many runs as one sweep: planned before it starts, summarized when it ends, launched anywhere.

callback.py  SweepCallback (Hydra): plan, parent MLflow run, live progress, summary
context.py   SWEEP_DIR/sweep.json: what each job knows about its sweep
plan.py      prepare + decide_all: every job's config, hash, cost and action before any job runs
summary.py   summarize: the table, the plots and points.csv of a finished sweep
study.py     recorded studies (experiments/NAME): run them and rebuild their README
launch/      the launchers: process.py (local processes), worker.py (their job process), slurm.py (submitit)
"""
