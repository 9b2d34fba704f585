"""Many runs as one sweep: planned before it starts, summarized when it ends, launched anywhere.

callback.py  SweepCallback (Hydra): plan, parent MLflow run, live progress, summary
context.py   SWEEP_DIR/sweep.json: what each job knows about its sweep
folder.py    set_aside: what earlier launches left in a sweep's folder that is not what it should be
plan.py      prepare + decide_all: every job's config, hash, cost and action before any job runs
design.py    design_lines: before a sweep over sizes, whether its fit's design checks can pass
summary.py   summarize: the table, the plots and points.csv of a finished sweep
rows.py      SummaryRow: a job's row of the summary, typed, and the passes that compute its figures
plots.py     the summary's plots: loss against FLOPs, final loss against N and D, speed and memory
prediction.py a prediction written before its run is trained, and the outcome beside it
cost.py      what recorded sweeps cost in CPU time, by the value of a swept key
study.py     recorded studies (experiments/NAME): run them and rebuild their README
launch/      the launchers: process.py (local processes), worker.py (their job process), slurm.py (submitit)
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "context": ("PROGRESS_FILE", "job_context", "read_sweep_file"),
        "summary": ("OUTPUT_FILES",),
        "folder": ("set_aside",),
        "study": ("load_study", "refresh", "run_analyses", "run_study", "run_target"),
        "callback": ("sweep_callback",),
        "launch.feed": ("SlotLauncher",),
        "launch.slurm": ("JOBS_FILE",),
        "launch.names": ("register_plugin", "check_plugin_providers"),
    },
    # the two launchers, each `launch` and `launch_as_slots_free` (hydra_plugins call them)
    modules=("callback", "prediction", "rows", "plots", "launch.process", "launch.slurm"),
)
