"""The machine's CPU, memory, disk, network and GPU use over a run, logged by MLflow's own system-metrics
monitor (`mlflow.system_metrics`): metrics `system/cpu_utilization_percentage`,
`system/system_memory_usage_megabytes`, `system/gpu_0_utilization_percentage` (with nvidia-ml-py
where an NVIDIA GPU is present), ..., shown on the run's "System metrics" tab.

MLflow's monitor is a thread in the process that holds the store's client: this process, or the
tracking agent's (tracking/agent.py). What it samples is the whole machine's, so the agent samples
the run's machine as well as the run itself would. It samples every 10 s (MLflow's default;
MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL sets another) and logs one point per sample at its own
steps 0, 1, 2, ... (a resumed run's continue after its last), which are not training steps. It stops
when the run is no longer RUNNING in the store, or when the store cannot be reached (an outage: the
run's own metrics are buffered, its system metrics are not).
"""

from __future__ import annotations

import logging

# The monitor says at INFO that it starts, stops, and has no GPU to watch: lines on every run.
MONITOR_LOGGER = "mlflow.system_metrics"


class SystemMetrics:
    """The running monitors of one store's runs, by run id."""

    def __init__(self, uri: str):
        self.uri = uri
        self.monitors: dict = {}

    def start(self, run_id: str, resumed: bool) -> None:
        """Sample the machine for `run_id` from now on; `resumed` continues its earlier points' steps."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        logging.getLogger(MONITOR_LOGGER).setLevel(logging.WARNING)
        self.stop(run_id)
        monitor = SystemMetricsMonitor(run_id, resume_logging=resumed, tracking_uri=self.uri)
        monitor.start()
        self.monitors[run_id] = monitor

    def stop(self, run_id: str) -> None:
        """End the run's sampling and deliver what it sampled; nothing if it has none."""
        monitor = self.monitors.pop(run_id, None)
        if monitor is not None:
            monitor.finish()
