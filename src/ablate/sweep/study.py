"""Recorded studies (`ablate study experiments/NAME [--run] [OVERRIDE ...]`).

A study is a folder under experiments/ that holds everything its README shows:
  study.yaml   title, question, notes, the overrides of `python -m ablate` that make the study, and
               optionally `analyses`: what is computed from its runs (see ANALYSES)
  sweep/       the sweep dir: each job's result.json and resolved config, sweep.json, launches.jsonl
  mlflow.db    the MLflow store of its runs (artifacts in mlartifacts/ beside it)
  <out>/       each analysis' files (fit.md, multiplier.md, cost.md and their JSON and plots)
This command rewrites README.md (and the sweep's summary table, plots and points.csv) from those
records; with --run it first runs the study's command, which skips every run already finished
and resumes interrupted ones, so it also completes a study that was stopped halfway, and then its
analyses (--analyze runs only those). Nothing in README.md is edited by hand: change study.yaml or
the code and refresh.

An analysis in study.yaml:
    - kind: fit | compare | cost
      out: fit                     # folder in the study for its files
      title: ...                   # the README section's title
      args: [held_out=1]           # fit and compare: their options (`ablate fit --help`)
      points: sweep/points.csv     # fit and compare: a points file instead of the study's MLflow store,
      points: {cosine: ../ladder/sweep/points.csv, wsd: sweep/points.csv}   # or several, one per arm
      sweeps: {cosine: ../ladder/sweep, wsd: sweep}   # cost: recorded sweeps, side by side
      by: model                    # cost: the swept key to total CPU time by
Paths are relative to the study folder.

A study may name a target (`target:` in study.yaml) to be predicted before it is trained:
    target:
      fit: fit/fit.json            # the fit that predicts it (an analysis' out, above)
      overrides: [+sweep=NAME, hydra.mode=RUN, model=medium, train.tokens=8388608]
With --run, once the analyses have run: `ablate predict` writes prediction.json from that fit (once;
a made prediction is never rewritten), the target trains into target/ (finished: skipped), and its
outcome is recorded in prediction.json; the README shows predicted against actual.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from ablate.config import ConfigError
from ablate.files import read_regular, within, write_text
from ablate.host import interrupting_signal
from ablate.sweep.context import LAUNCHES_FILE, read_sweep_file
from ablate.sweep.cost import cost_table, export_cost
from ablate.sweep.rows import SummaryRow
from ablate.sweep.summary import POINTS, SweepSummary, recorded_summary, summarize

STUDY_FILE = "study.yaml"
# How long a study waits for its command to close its records after passing it a signal.
CHILD_STOP_S = 120.0
SWEEP_SUBDIR = "sweep"
STORE = "mlflow.db"
STATE_SUBDIR = ".state"  # checkpoints (not kept in git)
TARGET_SUBDIR = "target"  # the predicted run's run dir
PREDICTION_FILE = "prediction.json"
ANALYSES = {"fit": "fit.md", "compare": "multiplier.md", "cost": "cost.md"}  # kind -> the file the README shows
EXPERIMENTS = "experiments"  # the folder a project keeps its studies in


def project_root(study_dir: Path) -> Path:
    """The folder a study's commands run from and its recorded paths are relative to: the one that
    holds the experiments/ folder the study sits in (the checkout, for the studies recorded here),
    so the same command works from any clone; the current folder for a study kept elsewhere."""
    for parent in study_dir.resolve().parents:
        if parent.name == EXPERIMENTS:
            return parent.parent
    return Path.cwd()


def command(study_dir: Path, overrides: list[str]) -> list[str]:
    """The study's `python -m ablate` arguments: its overrides, then its own sweep dir, MLflow
    store and checkpoints, all inside the study folder (a fresh store must not meet old checkpoints)."""
    return [*overrides, f"hydra.sweep.dir={_relative(study_dir)}/{SWEEP_SUBDIR}", *_records(study_dir)]


def target_command(study_dir: Path, target: dict) -> list[str]:
    """The target run's `python -m ablate` arguments: one run into the study's target/ folder."""
    return [*target["overrides"], f"hydra.run.dir={_relative(study_dir)}/{TARGET_SUBDIR}", *_records(study_dir)]


def _records(study_dir: Path) -> list[str]:
    rel = _relative(study_dir)
    base = rel if Path(rel).is_absolute() else f"${{hydra:runtime.cwd}}/{rel}"
    return [f"tracking.uri=sqlite:///{base}/{STORE}", f"state_dir={base}/{STATE_SUBDIR}"]


def load_study(study_dir: Path) -> dict:
    import yaml

    path = study_dir / STUDY_FILE
    if not path.is_file():
        raise ConfigError(f"{study_dir} has no {STUDY_FILE} (valid: a folder under experiments/ with a {STUDY_FILE})")
    try:
        study = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(
            f"{path} is not valid YAML{line} (valid: a mapping with title, question, overrides)"
        ) from None
    if not isinstance(study, dict):
        raise ConfigError(
            f"{path} holds a {type(study).__name__}, not a mapping (valid: title, question, overrides keys)"
        )
    if not isinstance(study.get("overrides"), list) or not study["overrides"]:
        raise ConfigError(
            f"{path}: overrides={study.get('overrides')!r} is invalid (valid: a list such as [+sweep=scaling])"
        )
    for i, a in enumerate(study.get("analyses") or []):
        where = f"{path}: analyses[{i}]"
        if not isinstance(a, dict) or a.get("kind") not in ANALYSES:
            kind = a.get("kind") if isinstance(a, dict) else a
            raise ConfigError(f"{where}.kind={kind!r} is invalid (valid: {', '.join(ANALYSES)})")
        if not isinstance(a.get("out"), str) or not a["out"]:
            raise ConfigError(f"{where}.out={a.get('out')!r} is invalid (valid: a folder name such as {a['kind']})")
        within(study_dir, a["out"], f"{where}.out")
        if a["kind"] == "cost" and not (isinstance(a.get("sweeps"), dict) and a.get("by")):
            raise ConfigError(f"{where}: a cost analysis needs sweeps: {{label: sweep dir}} and by: a swept key")
    target = study.get("target")
    if target is not None and not (
        isinstance(target, dict) and isinstance(target.get("fit"), str) and isinstance(target.get("overrides"), list)
    ):
        raise ConfigError(
            f"{path}: target={target!r} is invalid "
            "(valid: fit: a fit.json in the study, overrides: [the run's overrides])"
        )
    return study


def launches(sweep_dir: Path) -> list[dict]:
    """The launch log, one JSON object a line; a line torn by a crash mid-append is left out with one line."""
    try:
        lines = read_regular(sweep_dir / LAUNCHES_FILE).decode(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line) if line.strip() else None
        except ValueError:
            entry = "torn"
        if isinstance(entry, dict):
            found.append(entry)
        elif entry is not None:
            print(
                f"ablate: {sweep_dir / LAUNCHES_FILE} line {number} is not a launch record; left out", file=sys.stderr
            )
    return found


def run_analyses(study_dir: Path, study: dict) -> int:
    """Each analysis of study.yaml, in order; returns the first non-zero exit code (0 when all ran)."""
    code = 0
    for a in study.get("analyses") or []:
        out = study_dir / a["out"]
        if a["kind"] == "cost":
            export_cost(cost_table({k: study_dir / v for k, v in a["sweeps"].items()}, str(a["by"])), out)
            continue
        args = [a["kind"], *_analysis_inputs(study_dir, a, out), *[str(x) for x in a.get("args") or []], f"out={out}"]
        print("+ python -m ablate " + " ".join(shlex.quote(x) for x in args), file=sys.stderr)
        done = run_ablate(args, project_root(study_dir))
        code = code or done
    return code


def _analysis_inputs(study_dir: Path, a: dict, out: Path) -> list[str]:
    """The points an analysis reads: its `points` file(s), else the study's MLflow store."""
    points = a.get("points")
    if isinstance(points, dict):  # several recorded sweeps, one arm each
        column = "arm"
        return [f"points={_merge_points({k: study_dir / v for k, v in points.items()}, column, out)}", f"arm={column}"]
    if points:
        return [f"points={study_dir / points}"]
    store = study_dir / STORE
    info = read_sweep_file(study_dir / SWEEP_SUBDIR)
    if not store.is_file() or not info.get("experiment"):
        return [f"points={study_dir / SWEEP_SUBDIR / 'points.csv'}"]
    return [f"experiment={info['experiment']}", f"tracking.uri=sqlite:///{store.resolve()}"]


def _merge_points(files: dict[str, Path], column: str, out: Path) -> Path:
    """One CSV of several points files with a column naming the file each row came from."""
    rows, header = [], []
    for label, path in files.items():
        try:
            with open(path, newline="") as fh:
                reader = csv.DictReader(fh)
                header += [c for c in reader.fieldnames or [] if c not in header and c != column]
                rows += [{**r, column: label} for r in reader]
        except OSError:
            raise ConfigError(f"{path}: no such points file (valid: a recorded sweep's points.csv)") from None
    text = io.StringIO()
    writer = csv.DictWriter(text, [*header, column], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return write_text(out / "points.csv", text.getvalue())


def run_study(study_dir: Path, study: dict, extra: list[str]) -> int:
    args = command(study_dir, list(study["overrides"]) + extra)
    print("+ python -m ablate " + " ".join(shlex.quote(a) for a in args), file=sys.stderr)
    return run_ablate(args, project_root(study_dir))


def run_ablate(args: list[str], cwd: Path) -> int:
    """`python -m ablate ARGS` in a child process that this command's end reaches too. Stopped by
    SIGTERM or SIGHUP, this command forwards the signal and waits for the child, so that a sweep it
    runs stops its jobs and closes its runs (KILLED) before this command exits; subprocess.run would
    SIGKILL it and leave them RUNNING. Ctrl-C reaches the child from the terminal itself (one process
    group), and is waited for the same way."""
    child = subprocess.Popen([sys.executable, "-m", "ablate", *args], cwd=cwd)
    try:
        return child.wait()
    except KeyboardInterrupt as exc:
        signum = interrupting_signal(exc)
        if signum is not None:
            child.send_signal(signum)
        try:
            child.wait(timeout=CHILD_STOP_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise


def run_target(study_dir: Path, study: dict) -> int:
    """Predict the study's target (once), train it, record its outcome; the first non-zero exit code."""
    from ablate.sweep.prediction import read_prediction

    target = study["target"]
    out = study_dir / PREDICTION_FILE
    if out.is_file() and read_prediction(out).get("actual") is not None:
        return 0  # predicted, trained and recorded: nothing is left to do
    args = target_command(study_dir, target)
    steps = [] if out.is_file() else [["predict", f"fit={study_dir / target['fit']}", f"out={out}", *args]]
    steps += [args, ["predict", "--outcome", str(study_dir / TARGET_SUBDIR), f"out={out}"]]
    for step in steps:
        print("+ python -m ablate " + " ".join(shlex.quote(x) for x in step), file=sys.stderr)
        code = run_ablate(step, project_root(study_dir))
        if code:
            return code
    return 0


def _target_section(study_dir: Path, study: dict) -> list[str]:
    """Predicted against actual, from prediction.json (absent until --run has predicted it)."""
    from ablate.sweep.prediction import TIMING, read_prediction, render, when_made

    path = study_dir / PREDICTION_FILE
    if not path.is_file():
        head = [f"## The prediction, {TIMING[None]}", ""]
        return [*head, f"Not predicted yet: `ablate study {_relative(study_dir)} --run` predicts, then trains it.", ""]
    doc = read_prediction(path)
    head = [f"## The prediction, {TIMING[when_made(doc)]}", ""]
    cmd = "python -m ablate " + " ".join(shlex.quote(a) for a in target_command(study_dir, study["target"]))
    return [
        *head,
        f"`{PREDICTION_FILE}`, written by `ablate predict` from `{study['target']['fit']}`; the target is "
        f"trained by `{cmd}`.",
        "",
        *render(doc),
        *_fit_changed(path.parent / doc["fit"], doc["fit_sha256"]),
        "",
    ]


def _fit_changed(fit: Path, sha256: str) -> list[str]:
    """A line when the fit has been rewritten since the prediction (a later analysis): the prediction
    stands as it was made, from the fit whose hash it records."""
    try:
        now = hashlib.sha256(fit.read_bytes()).hexdigest()
    except OSError:
        return ["", f"The fit it was made from is no longer at `{fit.name}`; the prediction stands as made."]
    if now == sha256:
        return []
    return ["", f"`{fit.name}` has been rewritten since (sha256 {now[:12]}); the prediction stands as made."]


def refresh(study_dir: Path, study: dict, just_run: bool = False) -> Path:
    """Re-summarize the recorded sweep against the study's own store and rewrite README.md.
    just_run: the study's command has just run here, so the summary its sweep wrote at its end is
    this code's summary of these records and is read back, not made again (the summary imports
    MLflow, reads every run's curve and draws the plots)."""
    sweep_dir = study_dir / SWEEP_SUBDIR
    info = read_sweep_file(sweep_dir)
    if not info:
        raise ConfigError(
            f"{sweep_dir} holds no recorded sweep (valid: run `ablate study {_relative(study_dir)} --run` first)"
        )
    # The store recorded in sweep.json is an absolute path on the machine that ran it.
    # The store is run output and stays out of git: on a fresh clone the README is rebuilt from
    # the job dirs alone (the training-curve plot needs the store and is kept as last drawn).
    store = study_dir / STORE
    info["tracking_uri"] = f"sqlite:///{store.resolve()}" if store.is_file() else None
    summary = recorded_summary(sweep_dir, info.get("sweep_id")) if just_run else None
    if summary is None:
        if info["tracking_uri"] and "experiment" not in info and info.get("experiment_id"):
            from mlflow.tracking import MlflowClient

            info["experiment"] = MlflowClient(info["tracking_uri"]).get_experiment(info["experiment_id"]).name
        summary = summarize(sweep_dir, info)
    return write_text(study_dir / "README.md", readme(study_dir, study, summary, launches(sweep_dir), info))


def readme(study_dir: Path, study: dict, summary: SweepSummary, launch_log: list[dict], info: dict) -> str:
    rel = _relative(study_dir)
    args = command(study_dir, list(study["overrides"]))
    finished = [r for r in summary.rows if r.final_val_loss is not None]
    run_wall = sum(r.wall_s or 0.0 for r in finished)
    parts = [
        f"# {study.get('title', study_dir.name)}",
        "",
        str(study.get("question", "")).strip(),
        "",
        f"*Generated by `ablate study {rel}` from the runs recorded in this folder "
        f"(`{SWEEP_SUBDIR}/` and `{STORE}`); edit `{STUDY_FILE}` or the code, not this file.*",
        "",
        "## Command",
        "",
        "From the repository root:",
        "",
        "    python -m ablate " + " ".join(shlex.quote(a) for a in args),
        "",
        f"or `ablate study {rel} --run`, which runs it and then refreshes this README. "
        "Finished runs are skipped and interrupted ones resume, so the same command completes a study "
        "that was stopped halfway.",
        "",
        "## Launches",
        "",
        "| sweep | started (UTC) | wall time | planned | outcome | host, cores |",
        "|---|---|---|---|---|---|",
        *[_launch_row(launch) for launch in launch_log],
        "",
        f"{len(finished)} runs with a final loss; their own wall times add up to {run_wall / 60:.1f} min.",
        _cpu_line(summary.rows, launch_log),
        "",
        "## Results",
        "",
        str(study.get("notes", "")).strip(),
        "",
        summary.table.replace("## Sweep", "### Sweep", 1),
        "",
    ]
    for name, caption in (
        ("loss_vs_flops.png", "Validation loss against training FLOPs, every run"),
        ("final_loss.png", "Final validation loss against parameters and against tokens"),
    ):
        if (study_dir / SWEEP_SUBDIR / name).is_file():
            parts += [f"![{caption}]({SWEEP_SUBDIR}/{name})", ""]
    for a in study.get("analyses") or []:
        parts += _analysis_section(study_dir, a)
    if study.get("target"):
        parts += _target_section(study_dir, study)
    parts += [
        "## Data",
        "",
        f"- `{SWEEP_SUBDIR}/{POINTS}`: one row per finished run ({_points_columns(study_dir / SWEEP_SUBDIR)}), "
        "the input format of `ablate fit`.",
        f"- `{SWEEP_SUBDIR}/summary.json`: every row of the table with all recorded figures.",
        f"- `{STORE}`: the MLflow runs (experiment `{info.get('experiment', '?')}`), with every metric's history; "
        f"`mlflow ui --backend-store-uri sqlite:///$PWD/{rel}/{STORE}` shows them.",
        "",
    ]
    return "\n".join(parts)


def _points_columns(sweep_dir: Path) -> str:
    """The columns of the sweep's points file as its header names them (the fit's inputs, then the
    row's label and one column per swept key), so the README lists what the file holds."""
    try:
        header = read_regular(sweep_dir / POINTS).decode(errors="replace").split("\n", 1)[0]
    except OSError:
        return "params, tokens, loss, flops, ..."
    return ", ".join(next(csv.reader([header]), []))


def _analysis_section(study_dir: Path, a: dict) -> list[str]:
    """The analysis' Markdown under a README heading: its headings one level down, its images and
    links relative to the study folder. Absent until the analysis has run (--analyze)."""
    path = study_dir / a["out"] / ANALYSES[a["kind"]]
    title = a.get("title") or {"fit": "Fit", "compare": "Compute multipliers", "cost": "CPU time"}[a["kind"]]
    if not path.is_file():
        return [f"## {title}", "", f"Not computed yet: `ablate study {_relative(study_dir)} --analyze` writes it.", ""]
    text = path.read_text()
    text = re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", text, flags=re.M)
    text = re.sub(r"\]\((?!https?:|/|#)([^)]+)\)", lambda m: f"]({a['out']}/{m.group(1)})", text)
    return [f"## {title}", "", f"*From `{a['out']}/` ({a['kind']}).*", "", text.strip(), ""]


def _cpu_line(rows: list[SummaryRow], launch_log: list[dict]) -> str:
    """CPU time of the job processes (usage.json, process launchers only): what the study costs
    on idle cores, whatever else shared the machine while it ran. A trunk's job holds its branches."""
    jobs = {r.job.split("/")[0]: r.job_cpu_s for r in rows if "/" not in r.job}
    measured = [v for v in jobs.values() if v is not None]
    if not measured:
        return ""
    cores = next((launch.get("cores") for launch in reversed(launch_log) if launch.get("cores")), 1)
    total = sum(measured)
    if len(measured) < len(jobs):
        return (
            f"The job processes that recorded their CPU time used {total / 60:.1f} CPU-minutes "
            f"({len(measured)} of {len(jobs)} jobs, start-up included)."
        )
    return (
        f"The job processes used {total / 60:.1f} CPU-minutes (start-up included): about "
        f"{total / 60 / cores:.1f} minutes on {cores} idle cores."
    )


def _launch_row(launch: dict) -> str:
    started = launch.get("started")
    when = datetime.datetime.fromtimestamp(started, datetime.UTC).strftime("%Y-%m-%d %H:%M") if started else "-"
    wall = launch.get("wall_s")
    words = {"run": "to run", "resume": "to resume", "skip": "skipped", "unsupported": "unsupported"}
    planned = ", ".join(f"{v} {words.get(k, k)}" for k, v in sorted((launch.get("planned") or {}).items()))
    outcome = ", ".join(f"{v} {k}" for k, v in sorted((launch.get("statuses") or {}).items()))
    return (
        f"| `{launch.get('sweep_id', '?')}` | {when} | {wall / 60:.1f} min | {planned or '-'} | {outcome or '-'} | "
        f"{launch.get('host', '?')}, {launch.get('cores', '?')} |"
        if wall is not None
        else f"| `{launch.get('sweep_id', '?')}` | {when} | - | {planned or '-'} | {outcome or '-'} | - |"
    )


def _relative(study_dir: Path) -> str:
    try:
        return str(study_dir.resolve().relative_to(project_root(study_dir)))
    except ValueError:
        return str(study_dir.resolve())
