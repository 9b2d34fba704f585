"""A sweep's validation loss against training FLOPs in MLflow's UI, stored on the server.

MLflow 3.17's experiment page keeps its chart settings (the x-axis, which runs are shown) in the
browser's local storage. The chart layouts the server stores are saved views: an experiment tag
`mlflow.sharedViewState.<view id>` whose value is the envelope {"name", "createdAt", "updatedAt",
"state"}, "state" being the JSON of the page's search facets and UI state. The page lists them
under "Views" and opens one at `#/experiments/<id>/runs?viewStateShareKey=<view id>`.

What MLflow 3.17.2's UI honours, read from its bundle (mlflow/server/js/build/static/js):
- a line chart's `xAxisScaleType: "log"` only when its `xAxisKey` is "step" (LineChart's x-axis
  type is "log" iff key == step and scale == log); a metric x-axis is always linear. So a run's
  val/loss is also kept as the metric CURVE, logged at step = its FLOPs (an int64; MLflow steps
  are), and the ended view charts CURVE against step on a log axis;
- the legend: one entry per drawn line, "<run name> (<metric>)", in a strip two lines high
  (32 px, RunsMetricsLegendWrapper) that scrolls beyond them; entries are cut only to the card's
  width. So the chart is one full row (`columns: 1`) and the run list is hidden (runListHidden),
  and where the entries would not fit in the strip the runs are grouped by a swept param
  (groupBy with useGroupedValuesInCharts: one line, and one entry, per group);
- run selection: the search filter; runsExpanded/runsHidden are left out of saved views. The
  sweep's parent run (ablate.kind=sweep) has no metrics and is left out by the filter
  (`tags.ablate.kind IS NULL` while it runs, run ids once it ended); its runs then list flat;
- every run shown: runsHiddenMode SHOW_ALL (the default draws the first 10 rows).
While the sweep runs the view charts val/loss against the metric `flops` (linear; CURVE is
written when the sweep ends); once it ended, CURVE on log axes, and a parallel-coordinates chart
of the params its runs differ in against val/loss (swept_params), text values numbered where the
view groups its runs (numbered_axes).
The experiment's description (tag mlflow.note.content) is rendered as markdown on the
experiment's page and shown raw in the experiments lists, so it is plain words with one markdown
link (no emphasis marks): each sweep's view, newest first. Links carry
workflowType=machine_learning because 3.17's UI picks its GenAI or model-training layout from a
toggle kept in the browser, whatever the experiment's mlflow.experimentKind tag says.
"""

from __future__ import annotations

import json
import re
import sys
import time
from importlib import metadata
from typing import NamedTuple

from ablate.tracking.tags import KIND_TAG, NOTE_TAG, SHARED_VIEW_PREFIX, STEP_KEY, SWEEP_TAG

# MLflow's limit on an experiment tag's value; past it the view selects runs by sweep tag.
MAX_TAG_VALUE = 20_000
SECTION = "val"  # the chart's section: the val/* metrics MLflow adds later land beside it
LATEST = "Latest sweep, val/loss against FLOPs of every run:"  # how the description this module writes begins
# How the description began before it was plain words; its links' names ended with the suffix.
FORMER_LATEST, FORMER_SUFFIX = "**Latest sweep:**", ": val/loss against FLOPs, every run"
CHART_UUID = "ablate-val-loss-vs-flops"
MAX_LISTED = 10
CURVE = "val/loss by FLOPs"  # val/loss logged at step = training FLOPs, for the log x-axis
MAX_STEP = 2**63 - 1  # MLflow's step is an int64
SEED_KEY = "train.seed"
# The legend strip: two lines of entries across the card. Its width is the full-row card's at a
# 1400-px-wide window with MLflow's assistant panel open; an entry is a 24 px swatch, 4 + 16 px
# margins and its label at about 7 px a character (12 px sans-serif).
# The chart's card: at a 1400x900 window MLflow 3.17 draws the first card's top 470 px down (below
# the description, the shared-view banner, the filters and the section header), so a card 400 px
# high, legend included, ends above the fold (tests/cli/test_mlflow_ui.py checks it in Chromium).
CARD_HEIGHT_PX = 400
LEGEND_ROWS = 2
LEGEND_WIDTH_PX = 760
ENTRY_PX = 44
CHAR_PX = 7


def view_id(sweep_id: str) -> str:
    """A view id safe in a tag key and a URL (sweep ids already are: name-date-time-hex)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", sweep_id)


def experiment_link(experiment_id: str) -> str:
    """The experiment's runs page in the model-training layout (append it to http://HOST:PORT/):
    without workflowType a fresh browser lands on the GenAI overview, whatever the experiment's kind."""
    return f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def link(experiment_id: str, vid: str) -> str:
    """The chart's address inside the UI (append it to http://HOST:PORT/)."""
    return f"{experiment_link(experiment_id)}&compareRunsMode=CHART&viewStateShareKey={vid}"


def view_state(
    sweep_ids: list[str],
    run_ids: list[str] | None = None,
    swept: list[str] | None = None,
    group_by: list | None = None,
) -> dict:
    """The page state of the view (module doc). With `run_ids` the sweep has ended: CURVE on log
    axes and, given `swept`, the parallel-coordinates chart; `group_by`: what to group the runs by,
    each a param's name or a (mode, key) pair of MLflow's ("tag", "precision")."""
    if run_ids:
        quoted = ", ".join(f"'{r}'" for r in run_ids)
        search = f"attributes.run_id IN ({quoted})"
    else:
        search = " OR ".join(f"tags.`{SWEEP_TAG}` = '{s}'" for s in sweep_ids) + f" AND tags.`{KIND_TAG}` IS NULL"
    section = {
        "uuid": "ablate-val",
        "name": SECTION,
        "display": True,
        "isReordered": True,
        "deleted": False,
        "isGenerated": True,
        "columns": 1,  # one chart across the whole width, its legend as wide as the page
        "cardHeight": CARD_HEIGHT_PX,
    }
    charts = [loss_chart(section["uuid"], ended=bool(run_ids))]
    if run_ids and swept:
        charts.append(parallel_chart(section["uuid"], swept))
    grouping = None
    if group_by:
        grouping = {
            "aggregateFunction": "average",
            "groupByKeys": [
                {"mode": "param", "groupByData": k} if isinstance(k, str) else {"mode": k[0], "groupByData": k[1]}
                for k in group_by
            ],
        }
    return {
        "searchFilter": search,
        # Ordered by start time (or unordered and unfiltered) the page also fetches the runs'
        # parents and nests the runs under them, collapsed; by name it lists just the runs found.
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": grouping,
        "useGroupedValuesInCharts": bool(group_by),
        "runListHidden": True,
        "globalLineChartConfig": {"xAxisKey": "metric", "selectedXAxisMetricKey": STEP_KEY, "lineSmoothness": 0},
        "compareRunSections": [section],
        "compareRunCharts": charts,
        "isAccordionReordered": True,
        "hideEmptyCharts": True,
    }


def loss_chart(section_id: str, ended: bool) -> dict:
    """val/loss against training FLOPs: CURVE against its step (FLOPs) on log axes once the sweep
    ended, val/loss against the metric flops (a linear axis) while it runs."""
    x_axis = (
        {"metricKey": CURVE, "xAxisKey": "step", "selectedXAxisMetricKey": "", "xAxisScaleType": "log"}
        if ended
        else {
            "metricKey": "val/loss",
            "xAxisKey": "metric",
            "selectedXAxisMetricKey": STEP_KEY,
            "xAxisScaleType": "linear",
        }
    )
    return {
        "uuid": CHART_UUID,
        "type": "LINE",
        "runsCountToCompare": 1000,
        "metricSectionId": section_id,
        "deleted": False,
        "isGenerated": True,
        "displayName": "val/loss against training FLOPs" + (" (x: FLOPs, log)" if ended else ""),
        **x_axis,
        "scaleType": "log",
        "lineSmoothness": 0,
        "range": {},
        "yAxisKey": "metric",
        "yAxisExpressions": [],
        "ignoreOutliers": False,
        "useGlobalXaxisKey": False,
        "useGlobalLineSmoothing": False,
    }


def parallel_chart(section_id: str, swept: list[str]) -> dict:
    """MLflow's parallel-coordinates card: one axis per param, then the metric."""
    return {
        "uuid": "ablate-swept-params-vs-val-loss",
        "type": "PARALLEL",
        "runsCountToCompare": 1000,
        "metricSectionId": section_id,
        "deleted": False,
        "isGenerated": True,
        "displayName": "the swept params against val/loss",
        "selectedParams": swept,
        "selectedMetrics": ["val/loss"],
    }


def swept_params(params: list[dict]) -> list[str]:
    """The params that a sweep's runs (their params dicts) set differently, each a number in every run;
    the derived.* ones follow from the others and are left out."""
    return [k for k in differing(params) if all(_number(p[k]) for p in params)]


def differing(params: list[dict]) -> list[str]:
    """The params, derived.* and numbered axes left out, that the runs set differently, sorted."""
    if len(params) < 2:
        return []
    keys = set.intersection(*(set(p) for p in params))
    # a name with ": " is a numbered axis of an earlier view (numbered_axes), no config key
    return sorted(k for k in keys if not k.startswith("derived.") and ": " not in k and len({p[k] for p in params}) > 1)


def legend_fits(labels: list[str], width_px: int = LEGEND_WIDTH_PX, rows: int = LEGEND_ROWS) -> bool:
    """Whether entries with these labels, laid out as the legend wraps them, fill at most `rows` lines."""
    used, lines = 0, 1
    for label in labels:
        entry = ENTRY_PX + CHAR_PX * len(label)
        if used and used + entry > width_px:
            lines, used = lines + 1, 0
        used += entry
    return lines <= rows


def swept_param(key: str, params: list[dict]) -> str | None:
    """The MLflow param that holds a swept key as the user wrote it: the key itself (train.seed,
    optim.lr), or a config group's name (precision -> precision.name, model -> model.name), whose
    values are the names the user chose; None where the runs record neither."""
    key = key.lstrip("+~")
    for candidate in (key, f"{key}.name"):
        if params and all(candidate in p for p in params):
            return candidate
    return None


def legend_groups(runs: list[SweepRun], swept: list[str] | None = None) -> list[str]:
    """The params to group the runs by in the chart: none when every run's entry fits in the
    legend; else the keys the sweep swept (`swept`, as the user wrote them; its seed left out, so a
    group is one configuration's seeds, their spread the band around its line), each by the param
    that records it, those that differ between the runs. Without `swept` (a view saved by an older
    ablate), the differing param with the fewest values, names before numbers and seeds last."""
    if legend_fits([f"{r.name} ({CURVE})" for r in runs]):
        return []
    params = [r.params for r in runs]
    if swept:
        keys = [swept_param(k, params) for k in swept if k.lstrip("+~") != SEED_KEY]
        keys = list(dict.fromkeys(k for k in keys if k and len({p[k] for p in params}) > 1))
        if keys and len({tuple(p[k] for k in keys) for p in params}) < len(runs):
            return keys
    keys = [k for k in differing(params) if len({p[k] for p in params}) < len(runs)]  # a group holds two runs or more
    if not keys:
        return []
    # A group's legend entry is its value alone: a name ("nano") reads, a width ("64") less so.
    return [
        min(keys, key=lambda k: (k == SEED_KEY, all(_number(p[k]) for p in params), len({p[k] for p in params}), k))
    ]


def tag_groups(client, runs: list[SweepRun], swept: list[str] | None) -> list:
    """What the view groups by (legend_groups), each swept key as the user wrote it: MLflow names a
    group by its keys ("model.name: nano, train.tokens: 262144" where two are grouped), so each run
    gets a tag per grouped key named as it was swept (model, precision, train.tokens) holding its
    value, and the view groups by those tags ("model: nano, train.tokens: 262144")."""
    from mlflow.entities import RunTag

    groups = legend_groups(runs, swept)
    params = [r.params for r in runs]
    named = {swept_param(k, params): k.lstrip("+~") for k in swept or []}
    tags = {g: named[g] for g in groups if g in named}
    if not tags:
        return groups
    for r in runs:
        client.log_batch(r.run_id, tags=[RunTag(name, r.params[g]) for g, name in tags.items()])
    return [("tag", tags[g]) if g in tags else g for g in groups]


def parallel_params(runs: list[SweepRun], swept: list[str] | None = None) -> list[str]:
    """The axes of the parallel-coordinates chart: every swept key that differs between the runs,
    by the param that records it (names too: MLflow draws them as categories), then any other
    numeric param they differ in."""
    params = [r.params for r in runs]
    keys = [swept_param(k, params) for k in swept or []]
    keys = [k for k in keys if k and len({p[k] for p in params}) > 1]
    return list(dict.fromkeys([*keys, *swept_params(params)]))


# What MLflow allows in a param's name (mlflow.utils.validation, on POSIX) and how long it may be.
PARAM_NAME_UNSAFE = re.compile(r"[^/\w.\- :]")
MAX_PARAM_NAME = 250


def numbered_axes(client, runs: list[SweepRun], axes: list[str]) -> list[str]:
    """The parallel-coordinates axes of a grouped view, each a number in every run. MLflow 3.17
    averages a group's params for its charts, and its parallel-coordinates card then refuses a
    param holding text ("does not support aggregated string values"): the whole card is that
    message. So each axis whose values are text (precision names, model names) gets a param per
    run holding the value's number, 1, 2, ... in the order the runs first show them, named with the
    key and what each number stands for ("precision.name: 1 fp32 2 bf16 3 fp16"), which the chart
    prints as the axis' title; numeric axes are kept as they are."""
    from mlflow.entities import Param

    out = []
    for axis in axes:
        values = list(dict.fromkeys(r.params[axis] for r in runs))
        if all(_number(v) for v in values):
            out.append(axis)
            continue
        legend = " ".join(f"{i} {PARAM_NAME_UNSAFE.sub('_', v)}" for i, v in enumerate(values, start=1))
        name = f"{axis}: {legend}"
        if len(name) > MAX_PARAM_NAME:
            name = name[: MAX_PARAM_NAME - 4].rsplit(" ", 1)[0] + " ..."
        number = {v: str(i) for i, v in enumerate(values, start=1)}
        for r in runs:
            client.log_batch(r.run_id, params=[Param(name, number[r.params[axis]])])
        out.append(name)
    return out


def log_curves(client, run_ids: list[str]) -> list[str]:
    """Log each run's val/loss as CURVE at step = the flops logged at the same step (module doc);
    logging again adds nothing (MLflow skips a point it has). Returns the runs left out: FLOPs past
    an int64."""
    from mlflow.entities import Metric

    skipped = []
    for run_id in run_ids:
        flops = {m.step: m.value for m in client.get_metric_history(run_id, STEP_KEY)}
        loss = client.get_metric_history(run_id, "val/loss")
        points = [(m, round(flops[m.step])) for m in loss if m.step in flops]
        if any(step > MAX_STEP for _, step in points):
            skipped.append(run_id)
            continue
        metrics = [Metric(CURVE, m.value, m.timestamp, step) for m, step in points]
        for start in range(0, len(metrics), 1000):  # MLflow's limit of metrics in one batch
            client.log_batch(run_id, metrics=metrics[start : start + 1000])
    return skipped


class SweepRun(NamedTuple):
    """One run of an ended sweep, as its view needs it."""

    run_id: str
    name: str
    params: dict


# The MLflow whose UI state the views are written for (above: read from its bundle). The state is
# the UI's private format: on another version the view is left out, with one line, instead of
# holding every user of ablate to this MLflow.
VIEW_MLFLOW = "3.17"


def views_supported() -> bool:
    """Whether the installed MLflow is the minor version whose UI state the views are written in."""
    version = metadata.version("mlflow")
    return version == VIEW_MLFLOW or version.startswith(VIEW_MLFLOW + ".")


def save_sweep_view(
    client,
    experiment_id: str,
    sweep_id: str,
    name: str,
    sweep_ids: list[str],
    runs: list[SweepRun] | None = None,
    swept: list[str] | None = None,
) -> str:
    """Write (or rewrite) the sweep's saved view and list it in the experiment's description.
    `runs`: the ended sweep's runs, its parent left out, their CURVE logged (log_curves); None
    while it runs. `swept`: the keys the sweep varied, as the user wrote them (precision, model,
    train.seed), which the chart groups by and the parallel coordinates show. Returns the view's
    link (see `link`); "" where the installed MLflow's UI is not the one the view is written for."""
    if not views_supported():
        if runs is None:  # once a sweep: at its start
            print(
                f"ablate: no saved chart view: it is written for MLflow {VIEW_MLFLOW}'s UI, this is MLflow "
                f"{metadata.version('mlflow')} (the runs and their metrics are recorded as usual)",
                file=sys.stderr,
            )
        return ""
    vid = view_id(sweep_id)
    key = SHARED_VIEW_PREFIX + vid
    experiment = client.get_experiment(experiment_id)
    created = _created_at(experiment.tags.get(key))
    now = int(time.time() * 1000)
    if runs:
        run_ids = [r.run_id for r in runs]
        groups = tag_groups(client, runs, swept)
        axes = parallel_params(runs, swept)
        chosen = {"swept": numbered_axes(client, runs, axes) if groups else axes, "group_by": groups}
        value = _envelope(name, created or now, now, view_state(sweep_ids, run_ids, **chosen))
        if len(value) > MAX_TAG_VALUE:  # too many runs to list by id: select them by sweep tag
            value = _envelope(name, created or now, now, view_state(sweep_ids, **chosen))
    else:
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
    if current and not current.startswith((LATEST, FORMER_LATEST)):
        return None
    found = re.findall(r"\[([^\]]+)\]\((#[^)]+)\)", current)
    earlier = [(n.removesuffix(FORMER_SUFFIX), u) for n, u in found if u != url]
    lines = [f"{LATEST} [{name}]({url})"]
    if earlier[: MAX_LISTED - 1]:
        lines += ["", "Earlier sweeps: " + " · ".join(f"[{n}]({u})" for n, u in earlier[: MAX_LISTED - 1])]
    return "\n".join(lines)


def latest_views(client) -> list[tuple[str, str, int, str]]:
    """Every saved view this project wrote, newest first: [(name, link, updatedAt ms, its experiment's link)]."""
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
            if any(c.get("uuid") == CHART_UUID for c in state.get("compareRunCharts") or []):
                vid = key[len(SHARED_VIEW_PREFIX) :]
                eid = experiment.experiment_id
                found.append((envelope["name"], link(eid, vid), int(envelope["updatedAt"]), experiment_link(eid)))
    return sorted(found, key=lambda v: -v[2])


def _number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _envelope(name: str, created: int, updated: int, state: dict) -> str:
    return json.dumps({"name": name, "createdAt": created, "updatedAt": updated, "state": json.dumps(state)})


def _created_at(value: str | None) -> int | None:
    try:
        return int(json.loads(value)["createdAt"]) if value else None
    except (ValueError, KeyError, TypeError):
        return None
