"""The MLflow UI shows a finished sweep: a real `mlflow server` on loopback, a real headless Chromium.

MLflow's UI is a JavaScript app that fetches runs through its REST API after the page loads, so
the test reads the DOM Chromium has rendered once its virtual-time budget is spent (network
fetches hold virtual time back), not the HTML the server sends. What MLflow 3.17 renders:
- the experiment page (#/experiments/ID/runs) lists top-level runs: the sweep's parent run by
  name, with the count of matching runs; the sweep's runs are nested under it, collapsed;
- each run's page (#/experiments/ID/runs/RUN) shows its name and a table of its metrics.
Chromium comes from Debian (scripts/install_test_deps.sh, which this test runs when it is missing).
"""

import html
import re
import shutil
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from conftest import ROOT, SMALL_DATA, cli
from test_concurrency import TIMEOUT_S, free_port, stop, wait_healthy

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def chromium() -> str:
    if not shutil.which("chromium"):
        subprocess.run(["bash", str(ROOT / "scripts" / "install_test_deps.sh")], check=True, timeout=1800)
    path = shutil.which("chromium")
    assert path, "chromium is not installed and scripts/install_test_deps.sh could not install it"
    return path


def rendered_text(chromium: str, url: str, profile, budget_ms: int = 30_000) -> str:
    """The page's visible text after its scripts ran (Chromium's --dump-dom), tags and scripts removed."""
    proc = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", proc.stdout, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


def test_the_ui_shows_the_sweeps_runs_with_their_metrics(workdir, chromium):
    proc = cli(["--multirun", "model=nano", "train.seed=0,1", "train.steps=20", "train.eval_interval=10",
                "train.progress=false", "hydra/launcher=parallel", "tracking.experiment=ui", *SMALL_DATA], workdir,
               timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    store = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("ui")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("ablate.kind") == "sweep")
    children = [r for r in runs if r is not parent]
    assert len(children) == 2

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=open(workdir / "server.log", "wb"),
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, server, workdir / "server.log")
        page = rendered_text(chromium, f"{base}/#/experiments/{exp.experiment_id}/runs", workdir / "profile")
        assert "Training runs" in page, page[:2000]
        assert parent.info.run_name in page  # "sweep:sweep", the top-level run of the sweep
        assert f"{len(runs)} matching runs" in page
        for run in children:
            page = rendered_text(chromium, f"{base}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}",
                                 workdir / "profile")
            assert run.info.run_name in page, page[:2000]
            metrics = run.data.metrics
            table = re.search(r"Metrics \(\d+\)(.*?)Parameters \(", page)
            assert table, f"no metrics table on the page of {run.info.run_name}: {page[:2000]}"
            for key in ("val/loss", "final/val_loss", "flops", "tokens", "tokens_per_s"):
                shown = re.search(r"(?:^| )" + re.escape(key) + r" (\S+)", table.group(1))
                assert shown, f"{key} not on the page of {run.info.run_name}: {page[:2000]}"
                assert float(shown.group(1)) == pytest.approx(metrics[key], rel=1e-9), key
    finally:
        stop(server)
