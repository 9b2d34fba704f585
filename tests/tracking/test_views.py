"""tracking/views.py and the experiment tags of store.py: what MLflow's UI reads from the server.

The UI itself is exercised in tests/cli/test_ui_chart.py (a real server and browser); these tests
check the stored documents against the shapes MLflow 3.17's UI reads (its saved-view envelope,
page state keys, group ids)."""

import json

import pytest
from mlflow.tracking import MlflowClient

from ablate.tracking import views
from ablate.tracking.store import ensure_experiment
from ablate.tracking.tags import EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND, NOTE_TAG, SHARED_VIEW_PREFIX, SWEEP_TAG


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


def test_the_view_groups_the_sweeps_runs_and_plots_val_loss_against_flops():
    state = views.view_state(["s1", "s2"], ["a" * 32, "b" * 32])
    assert state["searchFilter"] == f"attributes.run_id IN ('{'a' * 32}', '{'b' * 32}')"
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": SWEEP_TAG}]
    assert state["groupsExpanded"] == {f"tag.{SWEEP_TAG}.s1": True, f"tag.{SWEEP_TAG}.s2": True}
    assert state["useGroupedValuesInCharts"] is False and state["runsHiddenMode"] == "SHOW_ALL"
    (chart,) = state["compareRunCharts"]
    assert (chart["type"], chart["metricKey"], chart["xAxisKey"], chart["selectedXAxisMetricKey"]) == (
        "LINE",
        "val/loss",
        "metric",
        "flops",
    )
    assert chart["metricSectionId"] == state["compareRunSections"][0]["uuid"]
    # while the sweep runs, its runs are found by its tag
    assert views.view_state(["s1"])["searchFilter"] == f"tags.`{SWEEP_TAG}` = 's1'"


def test_a_saved_view_is_an_experiment_tag_in_the_uis_envelope_and_selects_the_runs(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    parent = client.create_run(eid, tags={SWEEP_TAG: "sw-1"}).info.run_id
    kids = [client.create_run(eid, tags={SWEEP_TAG: "sw-1", "mlflow.parentRunId": parent}).info.run_id for _ in "ab"]
    client.create_run(eid, tags={SWEEP_TAG: "other"})
    link = views.save_sweep_view(client, eid, "sw-1", "sweep precision", ["sw-1"], [parent, *kids])
    assert (
        link == f"#/experiments/{eid}/runs?workflowType=machine_learning&compareRunsMode=CHART&viewStateShareKey=sw-1"
    )
    envelope = json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "sw-1"])
    assert envelope["name"] == "sweep precision" and envelope["createdAt"] <= envelope["updatedAt"]
    state = json.loads(envelope["state"])
    found = client.search_runs([eid], filter_string=state["searchFilter"])
    assert {r.info.run_id for r in found} == {parent, *kids}  # the filter MLflow's search accepts
    assert ("sweep precision", link) in [v[:2] for v in views.latest_views(client)]


def test_too_many_runs_to_list_fall_back_to_the_sweep_tag(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    views.save_sweep_view(client, eid, "big", "big sweep", ["big"], [f"{i:032x}" for i in range(600)])
    state = json.loads(json.loads(client.get_experiment(eid).tags[SHARED_VIEW_PREFIX + "big"])["state"])
    assert state["searchFilter"] == f"tags.`{SWEEP_TAG}` = 'big'"


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


def test_a_description_someone_wrote_is_left_alone(store, name):
    client = MlflowClient(store)
    eid = ensure_experiment(store, name)
    client.set_experiment_tag(eid, NOTE_TAG, "my notes")
    views.save_sweep_view(client, eid, "s1", "sweep a", ["s1"])
    assert client.get_experiment(eid).tags[NOTE_TAG] == "my notes"
    assert SHARED_VIEW_PREFIX + "s1" in client.get_experiment(eid).tags  # the view is saved all the same
