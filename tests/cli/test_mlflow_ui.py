"""`ablate ui` shows a finished sweep: the real `mlflow server` it starts on loopback, a real headless Chromium.

MLflow's UI is a JavaScript app that fetches runs through its REST API after the page loads, so
the test reads the DOM Chromium has rendered once its virtual-time budget is spent (network
fetches hold virtual time back), not the HTML the server sends. What MLflow 3.17 renders:
- the experiment page (#/experiments/ID/runs) lists top-level runs: the sweep's parent run by
  name, with the count of matching runs; the sweep's runs are nested under it, collapsed;
- each run's page (#/experiments/ID/runs/RUN) shows its name and a table of its metrics.
Chromium comes from Debian (scripts/install_test_deps.sh, which this test runs when it is missing).
"""

import html
import os
import re
import shutil
import subprocess

import pytest
from mlflow.tracking import MlflowClient

from support import ROOT, SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TIMEOUT_S = 1800  # a sweep on a 2-core machine shared with other work

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


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
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", proc.stdout, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


@pytest.fixture(scope="module")
def sweep(cli, tmp_path_factory):
    """One finished sweep (three runs, two at a time) in its own folder, shared by this module's tests."""
    workdir = tmp_path_factory.mktemp("ui")
    proc = cli(
        [
            "--multirun",
            "model=nano",
            "train.seed=0,1,2",
            "train.steps=20",
            "train.eval_interval=10",
            "train.progress=false",
            "hydra/launcher=parallel",
            "tracking.experiment=ui",
            *SMALL_DATA,
        ],
        workdir,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir, proc.stderr


def test_the_ui_shows_the_sweeps_runs_with_their_metrics(sweep, chromium, mlflow_server):
    workdir, _ = sweep
    store = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("ui")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("ablate.kind") == "sweep")
    children = [r for r in runs if r is not parent]
    assert len(children) == 3

    server = mlflow_server(store, ui=True)
    base = server.uri
    page = rendered_text(chromium, f"{base}/#/experiments/{exp.experiment_id}/runs", workdir / "profile")
    assert "Training runs" in page, page[:2000]
    assert parent.info.run_name in page  # "sweep:train.seed", the top-level run of the sweep
    assert f"{len(runs)} matching runs" in page
    for run in children:
        page = rendered_text(
            chromium, f"{base}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}", workdir / "profile"
        )
        assert run.info.run_name in page, page[:2000]
        metrics = run.data.metrics
        table = re.search(r"Metrics \(\d+\)(.*?)Parameters \(", page)
        assert table, f"no metrics table on the page of {run.info.run_name}: {page[:2000]}"
        for key in ("val/loss", "final/val_loss", "flops", "tokens", "tokens_per_s"):
            shown = re.search(r"(?:^| )" + re.escape(key) + r" (\S+)", table.group(1))
            assert shown, f"{key} not on the page of {run.info.run_name}: {page[:2000]}"
            assert float(shown.group(1)) == pytest.approx(metrics[key], rel=1e-9), key


def test_val_loss_against_flops_of_every_run_is_one_link_from_the_experiment_page(sweep, chromium, mlflow_server):
    """What a user does: opens the experiment (the experiment list links to #/experiments/ID), clicks
    the latest sweep's link in its description, and sees val/loss against FLOPs with every run of
    the sweep in the legend. MLflow's GenAI view shows a "Detect Issues" tip once per browser; a
    fresh browser has to close it first: two clicks at most. Screenshots of both pages are kept
    (docs/images/ with ABLATE_WRITE_DOCS=1: docs/ui.md shows them)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    workdir, output = sweep
    store = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("ui")
    runs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("ablate.kind") != "sweep"]
    assert sorted(r.info.run_name for r in runs) == ["train.seed=0", "train.seed=1", "train.seed=2"]
    link = re.search(r"http://127\.0\.0\.1:5000/(#/experiments/\S+)", output).group(1)  # the sweep's last lines

    server = mlflow_server(store, ui=True)
    log = server.log.read_text()
    assert f"{server.uri}/{link}" in log  # `ablate ui` names the latest sweep's chart
    shots = workdir / "screenshots"
    shots.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1250})
        page = context.new_page()
        page.goto(f"{server.uri}/#/experiments/{exp.experiment_id}")
        clicks = 0
        try:
            page.get_by_role("button", name="Got it").click(timeout=90_000)
            clicks += 1
        except PlaywrightTimeout:  # no tip: this MLflow or this browser does not show one
            pass
        anchor = page.locator("a", has_text="val/loss against FLOPs, every run").first
        anchor.wait_for(timeout=90_000)
        assert anchor.get_attribute("href") == link
        page.screenshot(path=str(shots / "ui-experiment-page.png"))
        with context.expect_page(timeout=90_000) as opened:
            anchor.click()
            clicks += 1
        chart = opened.value
        card = chart.locator("[data-testid='experiment-view-compare-runs-card']").first
        card.locator(".scatterlayer .trace").first.wait_for(timeout=180_000)
        chart.wait_for_timeout(2000)  # the legend settles after the first trace
        text = card.inner_text()
        assert "val/loss" in text and "flops" in text  # y: val/loss, x: the metric flops
        for r in runs:
            assert f"{r.info.run_name} (val/loss)" in text, text  # every run in the legend
        assert card.locator(".scatterlayer .trace").count() >= len(runs)
        chart.screenshot(path=str(shots / "ui-sweep-chart.png"))
        browser.close()
    assert clicks <= 2
    assert "StarletteDeprecationWarning" not in server.log.read_text()
    if os.environ.get("ABLATE_WRITE_DOCS") == "1":
        for shot in shots.iterdir():
            shutil.copyfile(shot, ROOT / "docs" / "images" / shot.name)
