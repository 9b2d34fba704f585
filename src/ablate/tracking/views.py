"""A sweep's validation loss against training FLOPs in MLflow's UI, stored on the server.

MLflow 3.17's experiment page keeps its chart settings (the x-axis, which runs are shown) in the
browser's local storage. The chart layouts the server stores are saved views: an experiment tag
`mlflow.sharedViewState.<view id>` whose value is the envelope {"name", "createdAt", "updatedAt",
"state"}, "state" being the JSON of the page's search facets and UI state. The page lists them
under "Views" and opens one at `#/experiments/<id>/runs?viewStateShareKey=<view id>`.

What the view written here holds, and why:
- the sweep's runs, by id (or by sweep tag while it runs), grouped by their sweep tag with the
  groups expanded and one line per run (useGroupedValuesInCharts=false): the UI nests a sweep's
  runs under their parent, collapsed, and a saved view cannot expand a parent (runsExpanded is
  left out of saved views), while grouping lists every run;
- every run shown (runsHiddenMode SHOW_ALL; the default shows the first 10 rows);
- one full-width chart of `val/loss` with the metric `flops` as its x-axis (both are logged at
  the same steps, see tracking.tracker); the other line charts use `flops` too. A metric x-axis is
  linear in 3.17: the UI's log scale works only for steps.
The experiment's description (tag mlflow.note.content), shown at the top of its page, links each
sweep's view, newest first: one click from the experiment page. Links carry
workflowType=machine_learning because 3.17's UI picks its GenAI or model-training layout from a
toggle kept in the browser, whatever the experiment's mlflow.experimentKind tag says.
"""

from __future__ import annotations

import json
import re
import time

from ablate.tracking.tags import NOTE_TAG, SHARED_VIEW_PREFIX, SWEEP_TAG

# MLflow's limit on an experiment tag's value; past it the view selects runs by sweep tag.
MAX_TAG_VALUE = 20_000
SECTION = "val"  # the chart's section: the val/* metrics MLflow adds later land beside it
LATEST = "**Latest sweep:**"  # how the description this module writes begins
CHART_SUFFIX = ": val/loss against FLOPs, every run"
MAX_LISTED = 10


def view_id(sweep_id: str) -> str:
    """A view id safe in a tag key and a URL (sweep ids already are: name-date-time-hex)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", sweep_id)


def link(experiment_id: str, vid: str) -> str:
    """The chart's address inside the UI (append it to http://HOST:PORT/)."""
    return (
        f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"
        f"&compareRunsMode=CHART&viewStateShareKey={vid}"
    )


def view_state(sweep_ids: list[str], run_ids: list[str] | None = None) -> dict:
    """The page state of the view: which runs, grouped how, and the chart (module doc)."""
    if run_ids:
        quoted = ", ".join(f"'{r}'" for r in run_ids)
        search = f"attributes.run_id IN ({quoted})"
    else:
        search = " OR ".join(f"tags.`{SWEEP_TAG}` = '{s}'" for s in sweep_ids)
    section = {
        "uuid": "ablate-val",
        "name": SECTION,
        "display": True,
        "isReordered": True,
        "deleted": False,
        "isGenerated": True,
        "columns": 1,  # one chart across the whole width, tall enough for every run's legend entry
        "cardHeight": 560,
    }
    chart = {
        "uuid": "ablate-val-loss-vs-flops",
        "type": "LINE",
        "runsCountToCompare": 1000,
        "metricSectionId": section["uuid"],
        "deleted": False,
        "isGenerated": True,
        "displayName": "val/loss against training FLOPs",
        "metricKey": "val/loss",
        "xAxisKey": "metric",
        "selectedXAxisMetricKey": "flops",
        "xAxisScaleType": "linear",
        "scaleType": "log",
        "lineSmoothness": 0,
        "range": {},
        "yAxisKey": "metric",
        "yAxisExpressions": [],
        "ignoreOutliers": False,
        "useGlobalXaxisKey": False,
        "useGlobalLineSmoothing": False,
    }
    return {
        "searchFilter": search,
        "orderByKey": "attributes.start_time",
        "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": {"aggregateFunction": "min", "groupByKeys": [{"mode": "tag", "groupByData": SWEEP_TAG}]},
        "groupsExpanded": {f"tag.{SWEEP_TAG}.{s}": True for s in sweep_ids},
        "useGroupedValuesInCharts": False,
        "globalLineChartConfig": {"xAxisKey": "metric", "selectedXAxisMetricKey": "flops", "lineSmoothness": 0},
        "compareRunSections": [section],
        "compareRunCharts": [chart],
        "isAccordionReordered": True,
        "hideEmptyCharts": True,
    }


def save_sweep_view(
    client, experiment_id: str, sweep_id: str, name: str, sweep_ids: list[str], run_ids: list[str] | None = None
) -> str:
    """Write (or rewrite) the sweep's saved view and list it in the experiment's description.
    Returns the view's link (see `link`)."""
    vid = view_id(sweep_id)
    key = SHARED_VIEW_PREFIX + vid
    experiment = client.get_experiment(experiment_id)
    created = _created_at(experiment.tags.get(key))
    now = int(time.time() * 1000)
    value = _envelope(name, created or now, now, view_state(sweep_ids, run_ids))
    if run_ids and len(value) > MAX_TAG_VALUE:  # too many runs to list by id: select them by sweep tag
        value = _envelope(name, created or now, now, view_state(sweep_ids))
    client.set_experiment_tag(experiment_id, key, value)
    url = link(experiment_id, vid)
    note = describe(experiment.tags.get(NOTE_TAG, ""), name, url)
    if note is not None:
        client.set_experiment_tag(experiment_id, NOTE_TAG, note)
    return url


def describe(current: str, name: str, url: str) -> str | None:
    """The experiment description: this sweep's link on its first line (the page shows only the
    first line until it is expanded), earlier sweeps below. None leaves a description that someone
    else wrote untouched."""
    if current and not current.startswith(LATEST):
        return None
    earlier = [m for m in re.findall(r"\[([^\]]+)\]\((#[^)]+)\)", current) if m[1] != url]
    earlier = [(n.removesuffix(CHART_SUFFIX), u) for n, u in earlier][: MAX_LISTED - 1]
    lines = [f"{LATEST} [{name}{CHART_SUFFIX}]({url})"]
    if earlier:
        lines += ["", "Earlier sweeps: " + " · ".join(f"[{n}]({u})" for n, u in earlier)]
    return "\n".join(lines)


def latest_views(client) -> list[tuple[str, str, int]]:
    """Every saved view this project wrote, newest first: [(name, link, updatedAt ms)]."""
    found = []
    for experiment in client.search_experiments(max_results=1000):
        for key, value in experiment.tags.items():
            if not key.startswith(SHARED_VIEW_PREFIX):
                continue
            try:
                envelope = json.loads(value)
                state = json.loads(envelope["state"])
            except (ValueError, KeyError, TypeError):
                continue
            if any(c.get("uuid") == "ablate-val-loss-vs-flops" for c in state.get("compareRunCharts") or []):
                vid = key[len(SHARED_VIEW_PREFIX) :]
                found.append((envelope["name"], link(experiment.experiment_id, vid), int(envelope["updatedAt"])))
    return sorted(found, key=lambda v: -v[2])


def _envelope(name: str, created: int, updated: int, state: dict) -> str:
    return json.dumps({"name": name, "createdAt": created, "updatedAt": updated, "state": json.dumps(state)})


def _created_at(value: str | None) -> int | None:
    try:
        return int(json.loads(value)["createdAt"]) if value else None
    except (ValueError, KeyError, TypeError):
        return None
