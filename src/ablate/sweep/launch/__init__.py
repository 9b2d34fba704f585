"""How a sweep's jobs get run (Hydra launcher plugins in src/hydra_plugins delegate here).

process.py  launch: jobs as local processes, `workers` at a time, threads split among them
gpus.py     GpuSlots: the GPUs each slot owns (CUDA_VISIBLE_DEVICES per job), read without CUDA
pool.py     Pool: the launcher's side of the warm worker (start it early, hand it jobs, hear them end)
worker.py   the warm worker: imports once, forks one process per job (or per command, run_argv)
command.py  run_command: `python -m ablate ARGV` as the process the worker forked for it
feed.py     SlotLauncher: jobs decided as slots free (an Optuna study asks its next trial when one ends)
job.py      run_here: compose one job's config and run it in this process; run_all_here: several, in order
returns.py  a job's JobReturn as JSON (to_json, from_json): nothing a job writes is unpickled
slurm.py    launch: a SLURM job array through submitit (or submitit's local executor)
names.py    the plugins' names in Hydra's ConfigStore (ablate_*), registered only where no one else has them
"""
