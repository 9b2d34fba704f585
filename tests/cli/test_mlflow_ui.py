"""`ablate ui` shows a finished sweep: the real `mlflow server` it starts on loopback, a real headless Chromium.

MLflow's UI is a JavaScript app that fetches runs through its REST API after the page loads, so
the test reads the DOM Chromium has rendered once its virtual-time budget is spent (network
fetches hold virtual time back), not the HTML the server sends. What MLflow 3.17 renders:
- the experiment page (#/experiments/ID/runs) lists top-level runs: the sweep's parent run by
  name, with the count of matching runs; the sweep's runs are nested under it, collapsed;
- each run's page (#/experiments/ID/runs/RUN) shows its name and a table of its metrics;
- the sweep's saved view (tracking/views.py) draws its runs' val/loss against FLOPs on a log axis,
  read here as a user reads it (Playwright).
Chromium comes from Debian (scripts/install_test_deps.sh, which this test runs when it is missing).
"""

import html
import json
import os
import re
import shutil
import subprocess
import time

import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from ablate.tracking import views
from ablate.tracking.store import ensure_experiment
from ablate.tracking.tags import KIND_TAG, SHARED_VIEW_PREFIX, SWEEP_TAG
from ablate.tracking.views import CURVE
from support import ROOT, SMALL_DATA

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TIMEOUT_S = 1800  # a sweep on a 2-core machine shared with other work
RUN_NAMES = ["train.steps=10", "train.steps=30", "train.steps=90"]

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
            "train.steps=10,30,90",  # budgets a decade apart: the log FLOPs axis spreads them
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
    assert sorted(r.info.run_name for r in children) == RUN_NAMES

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


# How MLflow's UI names a line in a chart's legend: "<run name> (<metric>)".
def legend_entry(run_name: str) -> str:
    return f"{run_name} ({CURVE})"


# The chart's plotly figure as drawn: the x-axis type and its tick labels, where MLflow draws them.
AXIS_JS = """card => {
    const figure = card.querySelector('.js-plotly-plot');
    const ticks = [...card.querySelectorAll('.xaxislayer-above .xtick text')].map(t => t.textContent);
    return {type: figure._fullLayout.xaxis.type, ticks};
}"""

# Whether an element is what a user sees at its centre: not scrolled out of the legend strip,
# not covered, not cut off at the card's edge.
SEEN_JS = """e => {
    const r = e.getBoundingClientRect();
    const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return r.width > 0 && (top === e || e.contains(top)) && e.scrollWidth <= e.clientWidth;
}"""

DRAWN_WITHIN_S = 15  # issue 27: the chart drawn within 15 s on 2 cores


@pytest.mark.alone  # it times the chart's drawing from the click
def test_the_latest_sweeps_chart_reads_on_a_log_flops_axis_with_every_run_named(sweep, chromium, mlflow_server):
    """What a user does: opens the address `ablate ui` prints first (the latest sweep's experiment,
    model-training layout), clicks the sweep's link in the description and reads the chart: FLOPs
    on a log axis (log ticks), every run's name whole and visible in the legend, as many lines as
    runs, the parent run absent, drawn within 15 s of the click. The experiments list shows the
    description unrendered: it reads as words there. Screenshots are kept (docs/images/ with
    ABLATE_WRITE_DOCS=1: docs/ui.md shows them)."""
    from playwright.sync_api import sync_playwright

    workdir, output = sweep
    store = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("ui")
    found = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in found if r.data.tags.get("ablate.kind") == "sweep"]
    runs = [r for r in found if r is not parent]
    assert sorted(r.info.run_name for r in runs) == RUN_NAMES
    link = re.search(r"http://127\.0\.0\.1:5000/(#/experiments/\S+)", output).group(1)  # the sweep's last lines

    server = mlflow_server(store, ui=True)
    log = server.log.read_text()
    assert f"{server.uri}/{link}" in log  # `ablate ui` names the latest sweep's chart
    landing = re.search(r"^open: +(\S+)", log, re.M).group(1)
    shots = workdir / "screenshots"
    shots.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1250})
        page = context.new_page()
        page.goto(f"{server.uri}/#/experiments?workflowType=machine_learning")
        cell = page.get_by_text(re.compile(r"^Latest sweep, val/loss against FLOPs of every run: ")).first
        cell.wait_for(timeout=90_000)
        assert "*" not in cell.inner_text()  # no markdown emphasis where the UI shows it raw
        page.screenshot(path=str(shots / "ui-experiments-list.png"))

        page.goto(landing)
        page.get_by_role("columnheader", name="Run Name").first.wait_for(
            timeout=90_000
        )  # the runs table: model training
        assert page.get_by_role("button", name="Got it").count() == 0  # no GenAI tip to close
        anchor = page.locator("a", has_text="sweep train.steps").first
        anchor.wait_for(timeout=90_000)
        assert anchor.get_attribute("href") == link
        description = anchor.locator("xpath=..").inner_text()
        assert description.startswith("Latest sweep, val/loss against FLOPs of every run:") and "](" not in description
        page.screenshot(path=str(shots / "ui-experiment-page.png"))

        with context.expect_page(timeout=90_000) as opened:
            anchor.click()
            clicked = time.monotonic()
        chart = opened.value
        card = chart.locator("[data-testid='experiment-view-compare-runs-card']").first
        entries = [card.get_by_text(legend_entry(r.info.run_name), exact=True) for r in runs]
        for entry in entries:
            entry.wait_for(timeout=180_000)
        card.locator(".scatterlayer .trace").first.wait_for(timeout=180_000)
        drawn_s = time.monotonic() - clicked
        chart.wait_for_timeout(1000)  # the legend settles after the first trace
        axis = card.evaluate(AXIS_JS)
        assert axis["type"] == "log", axis
        # a log axis labels its decades (10B) and the digits between them (2, 3, ...); a linear one
        # labels evenly spaced values
        assert any(re.fullmatch(r"\d+[kMBT]", t) for t in axis["ticks"]), axis
        assert any(re.fullmatch(r"[2-9]", t) for t in axis["ticks"]), axis
        for r, entry in zip(runs, entries, strict=True):
            assert entry.evaluate(SEEN_JS), f"{r.info.run_name}'s legend entry is not all in view"
        text = card.inner_text()
        assert text.count(f"({CURVE})") == len(runs)  # one legend entry a run, the parent's none
        assert parent.info.run_name not in text
        assert card.locator(".scatterlayer .trace").count() >= len(runs)
        chart.screenshot(path=str(shots / "ui-sweep-chart.png"))
        browser.close()
    print(f"the chart was drawn {drawn_s:.1f} s after the click")  # shown with pytest -s
    assert drawn_s <= DRAWN_WITHIN_S, f"the chart took {drawn_s:.1f} s from the click"
    assert "StarletteDeprecationWarning" not in server.log.read_text()
    if os.environ.get("ABLATE_WRITE_DOCS") == "1":
        for shot in shots.iterdir():
            shutil.copyfile(shot, ROOT / "docs" / "images" / shot.name)


MODELS = {"nano": 1.0, "micro": 4.0, "tiny": 16.0}  # each model's FLOPs per step, relative


def test_a_sweep_of_many_runs_is_charted_one_line_a_swept_model_each_named(chromium, mlflow_server):
    """Twelve runs (3 models x 4 seeds) overflow the legend's two lines, so the ended view groups
    them by the swept model: one line (the seeds' average, their spread as a band) and one legend
    entry per model, each in view, on the log FLOPs axis. The runs are logged through the server
    (val/loss and flops at the same steps, as a run logs them) rather than trained: twelve runs
    would take minutes on 2 cores, and the view reads only what they logged."""
    from playwright.sync_api import sync_playwright

    server = mlflow_server(ui=False)
    client = MlflowClient(server.uri)
    eid = ensure_experiment(server.uri, "many")
    tags = {SWEEP_TAG: "sw", KIND_TAG: "sweep"}
    parent = client.create_run(eid, run_name="sweep:model x train.seed", tags=tags).info.run_id
    runs = []
    for model, scale in MODELS.items():
        for seed in range(4):
            name = f"model={model} train.seed={seed}"
            tags = {SWEEP_TAG: "sw", "mlflow.parentRunId": parent}
            run_id = client.create_run(eid, run_name=name, tags=tags).info.run_id
            params = {"model.name": model, "train.seed": str(seed)}
            # (step, FLOPs, val/loss): a loss that falls with the steps, lower for a bigger model
            points = [
                (step, 1e9 * scale * step, 3.2 - 0.02 * seed - 0.3 * scale**0.2 * (step / 100) ** 0.5)
                for step in range(10, 110, 10)
            ]
            now = int(time.time() * 1000)
            metrics = [Metric("flops", f, now, s) for s, f, _ in points]
            metrics += [Metric("val/loss", v, now, s) for s, _, v in points]
            client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
            runs.append(views.SweepRun(run_id, name, params))
    views.log_curves(client, [r.run_id for r in runs])
    link = views.save_sweep_view(client, eid, "sw", "sweep model x train.seed", ["sw"], runs)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1250}).new_page()
        page.goto(f"{server.uri}/{link}")
        card = page.locator("[data-testid='experiment-view-compare-runs-card']").first
        entries = [card.get_by_text(legend_entry(model), exact=True) for model in MODELS]
        for entry in entries:
            entry.wait_for(timeout=180_000)
        card.locator(".scatterlayer .trace").first.wait_for(timeout=180_000)
        page.wait_for_timeout(1000)
        assert card.evaluate(AXIS_JS)["type"] == "log"
        for model, entry in zip(MODELS, entries, strict=True):
            assert entry.evaluate(SEEN_JS), f"{model}'s legend entry is not all in view"
        text = card.inner_text()
        assert text.count(f"({CURVE})") == len(MODELS)  # one entry a model, none a run or the parent
        assert "train.seed=" not in text and "sweep:" not in text
        page.screenshot(path=str(server.log.parent / "ui-sweep-chart-grouped.png"))
        browser.close()
    if os.environ.get("ABLATE_WRITE_DOCS") == "1":
        shutil.copyfile(
            server.log.parent / "ui-sweep-chart-grouped.png", ROOT / "docs" / "images" / "ui-sweep-chart-grouped.png"
        )


# Whether an element is drawn whole inside the window, with no scrolling: the fold at 1400x900.
ABOVE_THE_FOLD_JS = """e => {
    const r = e.getBoundingClientRect();
    return r.top >= 0 && r.bottom <= window.innerHeight && r.left >= 0 && r.right <= window.innerWidth;
}"""
PRECISION_RUNS = {"fp32": "None", "bf16": "None", "bf16_pure": "None", "fp16": "None"}
PRECISION_RUNS |= {"fp8_tensorwise_emulated": "tensorwise", "fp8_rowwise_emulated": "rowwise"}
LADDER_SIZES = {"pico": 0.3, "nano": 1.0, "micro": 4.0, "tiny": 16.0}
LADDER_TOKENS = (262144, 524288, 1048576)


def log_run(client, eid: str, parent: str, name: str, params: dict, scale: float, offset: float) -> views.SweepRun:
    """A run as a training run logs it (val/loss and flops at the same steps), not trained: the view
    reads only what runs logged, and dozens of runs would take minutes on 2 cores."""
    run_id = client.create_run(eid, run_name=name, tags={SWEEP_TAG: "sw", "mlflow.parentRunId": parent}).info.run_id
    points = [
        (step, 1e9 * scale * step, 3.2 + offset - 0.3 * scale**0.2 * (step / 100) ** 0.5) for step in range(10, 110, 10)
    ]
    now = int(time.time() * 1000)
    metrics = [Metric("flops", f, now, s) for s, f, _ in points] + [Metric("val/loss", v, now, s) for s, _, v in points]
    client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
    return views.SweepRun(run_id, name, params)


def demo_and_ladder(client) -> dict[str, tuple[str, list[str]]]:
    """{sweep: (its view's link, the legend entries grouped by its swept keys)}: the demo's
    precisions x 3 seeds, whose precision.fp8 also differs (an older view grouped by it), and a
    ladder's sizes x budgets x 2 seeds, its WSD branches (an older view grouped by optim.schedule)."""
    shown = {}
    eid = ensure_experiment(client.tracking_uri, "precision")
    parent = client.create_run(eid, run_name="sweep:precision", tags={SWEEP_TAG: "sw", KIND_TAG: "sweep"}).info.run_id
    runs = [
        log_run(
            client,
            eid,
            parent,
            f"precision={name} train.seed={seed}",
            {"precision.name": name, "precision.fp8": fp8, "train.seed": str(seed)},
            1.0,
            0.01 * i + 0.003 * seed,
        )
        for i, (name, fp8) in enumerate(PRECISION_RUNS.items())
        for seed in range(3)
    ]
    views.log_curves(client, [r.run_id for r in runs])
    link = views.save_sweep_view(client, eid, "sw", "sweep precision", ["sw"], runs, ["precision", "train.seed"])
    shown["precision"] = (link, list(PRECISION_RUNS))
    eid = ensure_experiment(client.tracking_uri, "text_ladder")
    parent = client.create_run(eid, run_name="sweep:text_ladder", tags={SWEEP_TAG: "sl", KIND_TAG: "sweep"}).info.run_id
    runs = []
    for model, scale in LADDER_SIZES.items():
        for tokens in LADDER_TOKENS:
            for seed in range(2):
                params = {
                    "model.name": model,
                    "train.tokens": str(tokens),
                    "train.seed": str(seed),
                    "optim.schedule": "wsd",
                }
                name = f"model={model} train.seed={seed} train.tokens={tokens}"
                runs.append(log_run(client, eid, parent, name, params, scale * tokens / 262144, 0.002 * seed))
    views.log_curves(client, [r.run_id for r in runs])
    link = views.save_sweep_view(
        client, eid, "sl", "sweep text_ladder", ["sl"], runs, ["model", "train.seed", "train.tokens"]
    )
    # MLflow names a group of two keys by both, as the sweep named them: "model: nano, train.tokens: 262144"
    shown["text_ladder"] = (link, [f"model: {m}, train.tokens: {t}" for m in LADDER_SIZES for t in LADDER_TOKENS])
    return shown


def test_the_demo_and_a_ladder_are_grouped_by_their_swept_keys_above_the_fold(chromium, mlflow_server):
    """At 1400x900, each sweep's saved view draws one line and one legend entry per value of the
    keys it swept, its seeds averaged: the demo's six precisions (not precision.fp8's two values),
    the ladder's sizes x budgets (not optim.schedule); the chart whole in the window without
    scrolling, the parallel-coordinates chart's axes the swept keys. Screenshots: docs/images/."""
    from playwright.sync_api import sync_playwright

    server = mlflow_server(ui=False)
    client = MlflowClient(server.uri)
    sweeps = demo_and_ladder(client)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        for sweep_name, (link, groups) in sweeps.items():
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            page.goto(f"{server.uri}/{link}")
            card = page.locator("[data-testid='experiment-view-compare-runs-card']").first
            card.locator(".scatterlayer .trace").first.wait_for(timeout=180_000)
            page.wait_for_timeout(1500)
            shot = server.log.parent / f"ui-sweep-{sweep_name}-grouped.png"
            page.screenshot(path=str(shot))
            text = card.inner_text()
            legend = text[text.index(f"({CURVE})") - 40 :]
            assert text.count(f"({CURVE})") == len(groups), legend
            for group in groups:
                assert legend_entry(group) in text, (group, legend)
            assert "precision.fp8" not in text and ".name" not in text and "train.seed=" not in text
            box = card.bounding_box()
            assert card.evaluate(ABOVE_THE_FOLD_JS), (
                f"{sweep_name}'s chart is not whole above the fold at 1400x900: {box}"
            )
            if os.environ.get("ABLATE_WRITE_DOCS") == "1":
                shutil.copyfile(shot, ROOT / "docs" / "images" / shot.name)
        browser.close()
    state = json.loads(json.loads(client.get_experiment_by_name("precision").tags[SHARED_VIEW_PREFIX + "sw"])["state"])
    parallel = next(c for c in state["compareRunCharts"] if c["type"] == "PARALLEL")
    # grouped: the precision axis is each name's number, titled with the numbering (views.numbered_axes)
    assert parallel["selectedParams"][0].startswith("precision.name: 1 ")
    assert parallel["selectedParams"][1] == "train.seed"


@pytest.fixture(scope="module")
def sampled_run(cli, tmp_path_factory):
    """One run that sampled its system metrics every 0.1 s (MLflow's default, 10 s, is longer than
    a test run; 90 nano steps can take under a second, less than two samples at 0.5 s), in its own
    folder."""
    workdir = tmp_path_factory.mktemp("ui-run")
    proc = cli(
        ["model=nano", "train.steps=300", "train.progress=false", "tracking.experiment=ui-run", *SMALL_DATA],
        workdir,
        env={"MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "0.1"},
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir


def test_a_runs_page_shows_its_dataset_and_its_system_metrics(sampled_run, chromium, mlflow_server):
    """A run's page as MLflow draws it: the tokens it trained on under Datasets (name, fingerprint
    as the digest, its Training context), and on the System metrics tab one chart for every
    system/ metric the run logged. Screenshots kept as the sweep test's are."""
    from playwright.sync_api import sync_playwright

    store = f"sqlite:///{sampled_run / 'mlflow.db'}"
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("ui-run")
    (run,) = client.search_runs([exp.experiment_id])
    (dataset,) = [d.dataset for d in run.inputs.dataset_inputs]
    system = sorted(k for k in run.data.metrics if k.startswith("system/"))
    assert (
        "system/cpu_utilization_percentage" in system and len(client.get_metric_history(run.info.run_id, system[0])) > 1
    )

    server = mlflow_server(store, ui=True)
    shots = sampled_run / "screenshots"
    shots.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1250}).new_page()
        page.goto(
            f"{server.uri}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}?workflowType=machine_learning"
        )
        page.get_by_text(f"{dataset.name} ({dataset.digest})").first.wait_for(timeout=90_000)
        text = re.sub(r"\s+", " ", page.inner_text("body"))
        assert re.search(rf"Datasets {re.escape(dataset.name)} \({re.escape(dataset.digest)}\) Training", text), text[
            :3000
        ]
        page.screenshot(path=str(shots / "ui-run-page.png"))
        page.get_by_role("tab", name="System metrics").first.click()
        for key in system:  # each chart titled by the metric's name after system/, drawn
            page.get_by_text(key.removeprefix("system/"), exact=True).first.wait_for(timeout=90_000)
        page.get_by_text(f"{run.info.run_name} (system/cpu_utilization_percentage)").first.wait_for(timeout=90_000)
        page.screenshot(path=str(shots / "ui-run-system-metrics.png"))
        browser.close()
    if os.environ.get("ABLATE_WRITE_DOCS") == "1":
        for shot in shots.iterdir():
            shutil.copyfile(shot, ROOT / "docs" / "images" / shot.name)
