"""tracking/views.py and the experiment tags of store.py: what MLflow's UI reads from the server.

The UI itself is exercised in tests/cli/test_mlflow_ui.py (a real server and browser); these tests
check the stored documents against the shapes MLflow 3.17's UI reads (its saved-view envelope,
page state keys, group ids)."""

import json

import pytest
from mlflow.tracking import MlflowClient

from ablate.tracking import views
from ablate.tracking.store import ensure_experiment
from ablate.tracking.tags import (
    EXPERIMENT_KIND_TAG,
    KIND_TAG,
    MODEL_TRAINING_KIND,
    NOTE_TAG,
    SHARED_VIEW_PREFIX,
    SWEEP_TAG,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module (creating a sqlite store's tables takes seconds); each test uses
    experiments of its own."""
    return f"sqlite:///{tmp_path_factory.mktemp('views') / 'mlflow.db'}"


@pytest.fixture
def name(request):
    return request.node.name


def test_a_new_experiment_is_marked_as_model_training(store, name):
    eid = ensure_experiment(store, name)
    assert MlflowClient(store).get_experiment(eid).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, MODEL_TRAINING_KIND),  # made before the tag existed
        ("genai_development_inferred", MODEL_TRAINING_KIND),  # the UI's guess
        ("genai_development", "genai_development"),  # someone's choice stays
    ],
)
def test_an_existing_experiment_gets_the_kind_unless_someone_chose_one(store, name, before, after):
    client = MlflowClient(store)
    eid = client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: before} if before else None)
    assert ensure_experiment(store, name) == eid
    assert client.get_experiment(eid).tags.get(EXPERIMENT_KIND_TAG) == after


def test_an_ended_view_charts_the_curve_on_a_log_flops_axis_without_the_parent():
    state = views.view_state(["s1", "s2"], ["a" * 32, "b" * 32])
    assert state["searchFilter"] == f"attributes.run_id IN ('{'a' * 32}', '{'b' * 32}')"
    assert state["groupBy"] is None and state["useGroupedValuesInCharts"] is False  # one line per run
    assert state["runsHiddenMode"] == "SHOW_ALL" and state["runListHidden"] is True
    # ordered by start time the page would fetch the runs' parents and nest the runs under them
    assert state["orderByKey"] != "attributes.start_time"
    (chart,) = state["compareRunCharts"]
    assert (chart["type"], chart["metricKey"], chart["xAxisKey"], chart["xAxisScaleType"], chart["scaleType"]) == (
        "LINE",
        views.CURVE,
        "step",  # MLflow 3.17 draws a log x-axis for steps only
        "log",
        "log",
    )
    assert chart["metricSectionId"] == state["compareRunSections"][0]["uuid"]
    assert state["compareRunSections"][0]["columns"] == 1  # the legend as wide as the page


def test_while_the_sweep_runs_its_view_finds_its_runs_by_tag_and_charts_val_loss_against_the_flops_metric():
    state = views.view_state(["s1"])
    assert state["searchFilter"] == f"tags.`{SWEEP_TAG}` = 's1' AND tags.`{KIND_TAG}` IS NULL"
    (chart,) = state["compareRunCharts"]
    assert (chart["metricKey"], chart["xAxisKey"], chart["selectedXAxisMetricKey"]) == ("val/loss", "metric", "flops")


def test_a_saved_view_is_an_experiment_tag_in_the_uis_envelope_and_selects_the_runs_not_the_parent(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    parent = client.create_run(eid, tags={SWEEP_TAG: "sw-1", KIND_TAG: "sweep"}).info.run_id
    kids = [client.create_run(eid, tags={SWEEP_TAG: "sw-1", "mlflow.parentRunId": parent}).info.run_id for _ in "ab"]
    client.create_run(eid, tags={SWEEP_TAG: "other"})
    live = views.save_sweep_view(client, eid, "sw-1", "sweep precision", ["sw-1"])
    state = json.loads(json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "sw-1"])["state"])
    found = client.search_runs([eid], filter_string=state["searchFilter"])
    assert {r.info.run_id for r in found} == set(kids)  # the filter MLflow's search accepts, the parent left out
    runs = [views.SweepRun(k, f"train.seed={i}", {"train.seed": str(i)}) for i, k in enumerate(kids)]
    link = views.save_sweep_view(client, eid, "sw-1", "sweep precision", ["sw-1"], runs)
    assert (
        link
        == live
        == (f"#/experiments/{eid}/runs?workflowType=machine_learning&compareRunsMode=CHART&viewStateShareKey=sw-1")
    )
    envelope = json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "sw-1"])
    assert envelope["name"] == "sweep precision" and envelope["createdAt"] <= envelope["updatedAt"]
    state = json.loads(envelope["state"])
    found = client.search_runs([eid], filter_string=state["searchFilter"])
    assert {r.info.run_id for r in found} == set(kids)
    assert ("sweep precision", link) in [v[:2] for v in views.latest_views(client)]


def test_the_curve_is_val_loss_at_step_flops_and_logging_it_again_adds_nothing(store, name):
    client = MlflowClient(store)
    run_id = client.create_run(ensure_experiment(store, name)).info.run_id
    for step, loss, flops in ((10, 3.1, 4.2e9), (20, 3.0, 8.4e9)):
        client.log_metric(run_id, "val/loss", loss, step=step)
        client.log_metric(run_id, "flops", flops, step=step)
    client.log_metric(run_id, "flops", 12.6e9, step=30)  # a step without val/loss: no point
    assert views.log_curves(client, [run_id]) == []
    views.log_curves(client, [run_id])
    curve = [(m.step, m.value) for m in client.get_metric_history(run_id, views.CURVE)]
    assert sorted(curve) == [(4_200_000_000, 3.1), (8_400_000_000, 3.0)]


def test_a_run_past_an_int64_of_flops_gets_no_curve(store, name):
    client = MlflowClient(store)
    run_id = client.create_run(ensure_experiment(store, name)).info.run_id
    client.log_metric(run_id, "val/loss", 2.0, step=1)
    client.log_metric(run_id, "flops", 1e19, step=1)
    assert views.log_curves(client, [run_id]) == [run_id]
    assert client.get_metric_history(run_id, views.CURVE) == []


def test_the_legend_lists_every_run_until_they_overflow_its_two_lines_then_groups_by_the_swept_key():
    few = [views.SweepRun(f"{i:032x}", f"train.seed={i}", {"train.seed": str(i)}) for i in range(3)]
    assert views.legend_groups(few) == []
    models = (("nano", "32"), ("micro", "64"), ("tiny", "128"))
    many = [
        views.SweepRun(
            f"{m}{s}", f"model={m} train.seed={s}", {"model.name": m, "model.n_embd": e, "train.seed": str(s)}
        )
        for (m, e) in models
        for s in range(4)
    ]
    assert not views.legend_fits([f"{r.name} ({views.CURVE})" for r in many])
    assert views.legend_groups(many) == ["model.name"]  # 3 values that name, before the widths; seeds last
    state = views.view_state(["s"], [r.run_id for r in many], group_by=["model.name"])
    assert state["groupBy"]["groupByKeys"] == [{"mode": "param", "groupByData": "model.name"}]
    assert state["useGroupedValuesInCharts"] is True  # one line and one legend entry per group
    seeds_only = [views.SweepRun(f"{i:032x}", f"train.seed={i}", {"train.seed": str(i)}) for i in range(40)]
    assert views.legend_groups(seeds_only) == []  # a group per run would list them all again


PRECISIONS = {"fp32": "None", "bf16": "None", "fp16": "None", "fp8_tensorwise_emulated": "tensorwise"}


def demo_runs() -> list:
    """The demo's runs as MLflow records them: precision.fp8 differs too, constant inside groups."""
    return [
        views.SweepRun(
            f"{name}{seed}",
            f"precision={name} train.seed={seed}",
            {"precision.name": name, "precision.fp8": fp8, "train.seed": str(seed), "model.name": "nano"},
        )
        for name, fp8 in PRECISIONS.items()
        for seed in range(3)
    ]


def test_the_demo_is_grouped_by_the_swept_precision_never_a_sub_key():
    runs = demo_runs()
    assert views.legend_groups(runs, ["precision", "train.seed"]) == ["precision.name"]
    assert views.parallel_params(runs, ["precision", "train.seed"]) == ["precision.name", "train.seed"]
    # without the swept keys (an older ablate's view): precision.fp8 would have been picked
    assert views.legend_groups(runs) == ["precision.fp8"]


def test_a_ladder_is_grouped_by_size_and_budget_its_seeds_averaged():
    runs = [
        views.SweepRun(
            f"{m}{d}{s}",
            f"model={m} train.seed={s} train.tokens={d}",
            {"model.name": m, "model.n_embd": e, "train.tokens": d, "train.seed": str(s), "optim.schedule": "wsd"},
        )
        for m, e in (("pico", "16"), ("nano", "48"), ("micro", "64"), ("tiny", "128"))
        for d in ("262144", "524288", "1048576")
        for s in range(2)
    ]
    swept = ["model", "train.seed", "train.tokens"]
    assert views.legend_groups(runs, swept) == ["model.name", "train.tokens"]
    assert views.parallel_params(runs, swept)[:3] == ["model.name", "train.seed", "train.tokens"]
    state = views.view_state(
        ["s"], [r.run_id for r in runs], **{"swept": ["model.name"], "group_by": ["model.name", "train.tokens"]}
    )
    assert [k["groupByData"] for k in state["groupBy"]["groupByKeys"]] == ["model.name", "train.tokens"]


def test_a_swept_key_no_run_records_is_passed_over():
    runs = demo_runs()
    assert views.swept_param("+ablation", [r.params for r in runs]) is None
    assert views.legend_groups(runs, ["+ablation", "precision"]) == ["precision.name"]


def test_too_many_runs_to_list_fall_back_to_the_sweep_tag(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    runs = [views.SweepRun(f"{i:032x}", f"train.seed={i}", {"train.seed": str(i)}) for i in range(600)]
    views.save_sweep_view(client, eid, "big", "big sweep", ["big"], runs)
    state = json.loads(json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "big"])["state"])
    assert state["searchFilter"] == f"tags.`{SWEEP_TAG}` = 'big' AND tags.`{KIND_TAG}` IS NULL"


def test_the_description_links_the_newest_sweep_first_and_keeps_the_earlier_ones(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    first = views.save_sweep_view(client, eid, "s1", "sweep a", ["s1"])
    second = views.save_sweep_view(client, eid, "s2", "sweep b", ["s2"])
    note = client.get_experiment(eid).tags[NOTE_TAG]
    top, *rest = note.splitlines()
    assert top.startswith(views.LATEST) and f"]({second})" in top  # the page shows the first line
    assert f"[sweep a]({first})" in "\n".join(rest)
    views.save_sweep_view(client, eid, "s1", "sweep a", ["s1"])  # relaunched: back on top, listed once
    note = client.get_experiment(eid).tags[NOTE_TAG]
    assert f"]({first})" in note.splitlines()[0] and note.count(f"]({first})") == 1


def test_the_description_reads_as_plain_words_where_the_ui_shows_it_raw(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    url = views.save_sweep_view(client, eid, "s1", "sweep a, 2026-12-02 13:23", ["s1"])
    note = client.get_experiment(eid).tags[NOTE_TAG]
    # the experiments list shows the description unrendered: words first, no emphasis marks
    assert note == f"Latest sweep, val/loss against FLOPs of every run: [sweep a, 2026-12-02 13:23]({url})"
    assert "*" not in note and "_" not in note.split("](")[0]


def test_a_description_written_the_former_way_is_rewritten_with_its_sweeps(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    old = "#/experiments/1/runs?viewStateShareKey=old"
    client.set_experiment_tag(eid, NOTE_TAG, f"**Latest sweep:** [sweep z: val/loss against FLOPs, every run]({old})")
    views.save_sweep_view(client, eid, "s1", "sweep a", ["s1"])
    top, _, earlier = client.get_experiment(eid).tags[NOTE_TAG].splitlines()
    assert top.startswith(views.LATEST) and earlier == f"Earlier sweeps: [sweep z]({old})"


def test_the_swept_params_are_the_numbers_the_runs_differ_in():
    runs = [
        {"optim.lr": "0.001", "train.seed": "0", "model.name": "nano", "derived.params": "10", "model.n_embd": "32"},
        {"optim.lr": "0.003", "train.seed": "0", "model.name": "tiny", "derived.params": "20", "model.n_embd": "64"},
    ]
    assert views.swept_params(runs) == ["model.n_embd", "optim.lr"]  # not a string, a constant or derived.*
    assert views.swept_params(runs[:1]) == [] and views.swept_params([]) == []


def test_an_ended_sweeps_view_adds_a_parallel_coordinates_chart_of_its_swept_params(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    runs = [
        views.SweepRun(f"{i:032x}", f"optim.lr={lr}", {"optim.lr": lr, "model.n_embd": e, "model.name": m})
        for i, (lr, e, m) in enumerate((("0.001", "32", "nano"), ("0.003", "64", "micro")))
    ]
    views.save_sweep_view(client, eid, "sw-p", "search lr", ["sw-p"], runs)
    state = json.loads(json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "sw-p"])["state"])
    line, parallel = state["compareRunCharts"]
    assert line["uuid"] == views.CHART_UUID and parallel["type"] == "PARALLEL"
    assert parallel["selectedParams"] == ["model.n_embd", "optim.lr"] and parallel["selectedMetrics"] == ["val/loss"]
    assert parallel["metricSectionId"] == state["compareRunSections"][0]["uuid"]
    assert len(views.view_state(["s1"])["compareRunCharts"]) == 1  # while it runs: the line chart alone


def test_a_description_someone_wrote_is_left_alone(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    client.set_experiment_tag(eid, NOTE_TAG, "my notes")
    views.save_sweep_view(client, eid, "s1", "sweep a", ["s1"])
    assert client.get_experiment(eid).tags[NOTE_TAG] == "my notes"
    assert SHARED_VIEW_PREFIX + "s1" in client.get_experiment(eid).tags  # the view is saved all the same


def test_a_grouped_views_parallel_chart_numbers_the_text_values_it_shows(store, name):
    # Grouped, MLflow 3.17 averages each group's params and its parallel-coordinates card refuses
    # any param holding text: every axis must then be a number in every run.
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    runs = []
    for r in demo_runs():
        run = client.create_run(eid, run_name=r.name)
        for key, value in r.params.items():
            client.log_param(run.info.run_id, key, value)
        runs.append(views.SweepRun(run.info.run_id, r.name, r.params))
    views.save_sweep_view(client, eid, "sw-t", "demo", ["sw-t"], runs, ["precision", "train.seed"])
    state = json.loads(json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "sw-t"])["state"])
    assert state["useGroupedValuesInCharts"] is True
    axes = next(c for c in state["compareRunCharts"] if c["type"] == "PARALLEL")["selectedParams"]
    assert axes == ["precision.name: 1 fp32 2 bf16 3 fp16 4 fp8_tensorwise_emulated", "train.seed"]
    for r in runs:
        params = client.get_run(r.run_id).data.params
        assert all(float(params[a]) == float(params[a]) for a in axes)  # a number, never NaN
        assert axes[0].split()[2 * int(params[axes[0]])] == r.params["precision.name"]
    again = [views.SweepRun(r.run_id, r.name, client.get_run(r.run_id).data.params) for r in runs]
    assert views.parallel_params(again, ["precision", "train.seed"]) == ["precision.name", "train.seed"]


def test_an_ungrouped_view_keeps_text_axes_which_mlflow_draws_as_categories():
    runs = demo_runs()[:6:3]  # fp32 and bf16, one seed each: both entries fit in the legend
    assert views.legend_groups(runs, ["precision"]) == []
    assert views.parallel_params(runs, ["precision"]) == ["precision.name"]
