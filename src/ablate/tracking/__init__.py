"""Runs recorded in MLflow: batched, resumable, and surviving a store that goes away.

tracker.py  Tracker (no-op), MLflowTracker (batched log_batch, resume without duplicates, outage buffer), spool_ending
runstore.py RunStore: a run's MLflow calls on plain data (the one place that builds MLflow entities)
agent.py    the same calls made by a process beside the run, which imports MLflow while the run starts
dataset.py  dataset_input: the tokens a run trained on as its MLflow dataset input (name, fingerprint, source)
system_metrics.py  SystemMetrics: MLflow's system-metrics monitor for a store's runs (CPU, memory, GPU)
store.py    ensure_experiment (create once before fanning out), client_for (an existing store only)
tags.py     every tag and key name this project writes and reads
context.py  run_tags: where a run came from (MLflow's user and source tags, ablate's version, the environment)
views.py    latest_views: a sweep's validation loss against FLOPs as a view in MLflow's UI
spool.py    sync_file: deliver a run's ending spooled during an outage (tracker.spool_ending writes it)
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "tracker": ("Tracker", "make_tracker", "spool_ending"),
        "runstore": ("ExistingRun", "existing_run"),
        "agent": ("mlflow_modules",),
        "store": (
            "bound_http_retries",
            "check_store",
            "client_for",
            "close_orphaned_runs",
            "ensure_experiment",
            "quiet_store_logs",
            "sqlite_path",
        ),
        "tags": (
            "CONFIG_HASH_TAG",
            "DATA_TAG",
            "FIT_STATUS_TAG",
            "FIT_VERDICT_TAG",
            "FORK_TAG",
            "HOST_TAG",
            "KIND_TAG",
            "OWNER_TAG",
            "PID_TAG",
            "REASON_TAG",
            "RESUMED_TAG",
            "SWEEP_TAG",
            "TRUNK_KIND",
        ),
        "spool": ("SpoolError", "one_sync", "sync_file"),
        "context": ("run_tags",),
        "views": ("latest_views",),
    },
    modules=("agent", "views"),
)
