"""Do the printed 95% intervals cover? The backtest (ablate.scaling.backtest, `ablate backtest`) on
Epoch's 240 Chinchilla points and on this project's two recorded studies: for each cut point in
compute, the whole fit (approach 3, its bootstrap, its verdict, the calibration of its intervals)
sees the runs below the cut and predicts every run above it.

Targets (issues 13, 26): on Chinchilla, at least 90% of the held-out runs inside their interval at every
distance tested, and within 1.5 decades a median half-width at most 4 times the median absolute error.
Coverage is a count and does not depend on the machine; the CPU time is reported beside it.
Writes benchmarks/results/backtest.json and prints the tables of docs/fitting.md.

`python benchmarks/bench_backtest.py ladders [NAME ...] [methods=adaptive]` is the study of issue 40
instead: the same backtest on every public ladder in tests/fixtures (Epoch's Chinchilla points, the
Llama 3, Marin and fineweb_c4 iso-FLOP ladders, tests/fixtures/ladders/README.md) and on this project's
recorded ladders, with the interval methods named (default both: interval=hull, the law's value, and
interval=adaptive, the value moved by the cuts' drift read against the public ladders'); per ladder and
distance band, the median signed and absolute error, the coverage, the half-width over the error and
the trusted predictions inside; on the public ladders also the default with the past drift learned
without the ladder tested (LOLO, from `past`). ladders.json keeps the ladders and methods not rerun
(among them the default as it was before the drift was read against other ladders', BEFORE, and
before the past drift, PREVIOUS), and the table of docs/fitting.md is printed from all of it.

`python benchmarks/bench_backtest.py past` learns calibration.PAST_DRIFT and PAST_DRIFT_SD from the
public ladders' backtests (results/past_drift.json), and fits the cuts' slopes against the decades of
compute their fits span. `python benchmarks/bench_backtest.py top` is issue 40's own case: each public
ladder fitted on its runs at least 1.3 decades of compute below its largest, the runs of its top
budget predicted (results/top.json).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np
from scipy import stats

from ablate.cli.compare import MEASURED_COLUMNS
from ablate.scaling import CSV_OPTIONAL, CSV_REQUIRED
from ablate.scaling.backtest import BACKTEST_CUTS, backtest
from ablate.scaling.points import FitInputError, Points, load_chinchilla
from ablate.scaling.predict import FitOptions
from ablate.scaling.reports.report import backtest_markdown

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.9
SHARPNESS = 4.0  # median half-width over median abs. error within 1.5 decades (issue 26)
N_BOOT = 200  # per cut's fit: what `ablate backtest` uses by default


def data() -> dict[str, Points]:
    studies = {
        name: Points.from_csv(ROOT / "experiments" / name / "sweep" / "points.csv") for name in ("ladder", "scaling")
    }
    return {"chinchilla": load_chinchilla(ROOT / "tests" / "fixtures" / "chinchilla.csv"), **studies}


def main() -> None:
    load = os.getloadavg()
    results, tables = {}, []
    for name, points in data().items():
        cpu = time.process_time()
        bt = backtest(points, FitOptions(n_boot=N_BOOT))
        cpu = time.process_time() - cpu
        bins = bt.bins()
        results[name] = {
            "n_points": len(points),
            "entropy_floor": points.entropy_floor,
            "cpu_s": round(cpu, 1),
            "coverage": bt.coverage,
            "printed_coverage": bt.printed_coverage,
            "min_coverage_by_distance": min(b.coverage for b in bins) if bins else None,
            "sharpness_within_1.5_decades": bt.sharpness(1.5),
            "decision": bt.decision(),
            "by_distance": [b.to_dict() for b in bins],
            "cuts": [c.to_dict() for c in bt.cuts],
        }
        tables.append(backtest_markdown(bt, f"{name}: {len(points)} runs"))
    chin = results["chinchilla"]
    doc = {
        "what": "ablate.scaling.backtest.backtest with the default cuts and options",
        "cuts": list(BACKTEST_CUTS),
        "n_boot": N_BOOT,
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_at_start": load,
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "results": results,
        "meets_target": {
            "chinchilla_every_distance": all(b["coverage"] >= TARGET for b in chin["by_distance"]),
            "chinchilla_printed_every_distance": all(
                b["printed"] < 20 or b["printed_coverage"] >= TARGET for b in chin["by_distance"]
            ),
            "chinchilla_sharp_within_1.5_decades": chin["sharpness_within_1.5_decades"] <= SHARPNESS,
        },
    }
    out = ROOT / "benchmarks" / "results" / "backtest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print("\n".join(tables))
    print(json.dumps({k: {"coverage": v["coverage"], "cpu_s": v["cpu_s"]} for k, v in results.items()}))


LADDER_BANDS = ((0.5, 1.0), (1.0, 1.5), (1.5, 2.0))  # decades past the largest fitted run
METHODS = ("hull", "adaptive")  # the law's value, and the default (calibration.INTERVAL_METHODS)
PUBLIC = (
    "chinchilla (Epoch)",
    "llama3_isoflops",
    "marin_comma",
    "marin_dclm",
    "marin_nemotron",
    "misfitting_fineweb_c4",
)
LOLO = "adaptive (past drift learned without this ladder)"
# the default as it was before the drift was read against the public ladders' (ladders.json keeps it)
BEFORE = "adaptive, drift shrunk by its own error (before)"
# the default before the drift past the data was learned across ladders (calibration.PAST_DRIFT)
PREVIOUS = "adaptive without the past drift (before)"


def ladders() -> dict[str, Points]:
    """Every public ladder in tests/fixtures, then this project's recorded ladders of 20 runs or more."""
    out = {"chinchilla (Epoch)": load_chinchilla(ROOT / "tests" / "fixtures" / "chinchilla.csv")}
    for path in sorted((ROOT / "tests" / "fixtures" / "ladders").glob("*.csv")):
        out[path.stem] = Points.from_csv(path)
    for path in sorted((ROOT / "experiments").glob("*/sweep/points.csv")):
        points = Points.from_csv(path)
        # a ladder: 20 runs or more over a decade of compute, sweeping sizes, seeds and budgets alone
        # (an ablation's arms, a precision policy or an architecture, are not one law)
        if len(points) >= 20 and np.ptp(np.log10(points.C)) >= 1.0 and sweeps_one_law(path):
            out[f"project: {path.parts[-3]}"] = points
    return out


# a points.csv's columns that are a run's figures, not a key it swept (cli/compare.py pairs runs so too)
RECORDED_COLUMNS = {*CSV_REQUIRED, *CSV_OPTIONAL, *MEASURED_COLUMNS, "label"}


def sweeps_one_law(path: Path) -> bool:
    """Whether a study's points.csv sweeps only what a scaling law takes: the model's size (model, or
    a study's rung), the seed and the budget; every other swept key is an arm of an ablation."""
    swept = set(path.read_text().splitlines()[0].split(",")) - RECORDED_COLUMNS
    return all(k in ("model", "train.seed", "train.tokens", "train.steps") or k.endswith("_rung") for k in swept)


def band_figures(bt, lo: float, hi: float) -> dict | None:
    rows = [r for r in bt.runs if lo < r.decades <= hi]
    if not rows:
        return None
    error = np.array([r.rel_error for r in rows])
    half = np.array([r.half_width for r in rows])
    trusted = [r for r in rows if r.verdict.trusted]
    return {
        "n": len(rows),
        "median_error": float(np.median(error)),  # (predicted - actual) / actual: > 0 predicted too high
        "median_abs_error": float(np.median(np.abs(error))),
        "coverage": float(np.mean([r.inside for r in rows])),
        "half_width_over_error": float(np.median(half) / np.median(np.abs(error))),
        "trusted": len(trusted),
        "trusted_inside": sum(r.inside for r in trusted),
    }


def row(name: str, runs: int, method: str, figures: dict) -> str:
    """One line of the table: per band, median error (median absolute), coverage, half-width / error, n."""
    cells = [
        "-"
        if f is None
        else f"{100 * f['median_error']:+.1f}% ({100 * f['median_abs_error']:.1f}%), "
        f"{100 * f['coverage']:.0f}% in, {f['half_width_over_error']:.1f}x, n={f['n']}"
        for f in figures.values()
    ]
    return f"| {name} | {runs} | {method} | " + " | ".join(cells) + " |"


def ladder_table(results: dict, runs: dict[str, int]) -> str:
    """docs/fitting.md's table from ladders.json's results: every ladder, hull, before and the default."""
    head = "| ladder | runs | interval | " + " | ".join(f"{a:g} to {b:g} decades" for a, b in LADDER_BANDS) + " |"
    lines = [head, "|" + "---|" * (3 + len(LADDER_BANDS))]
    public_first = sorted(results, key=lambda n: (n not in PUBLIC, PUBLIC.index(n) if n in PUBLIC else 0, n))
    for name in public_first:
        by_method = results[name]
        for method, label in (
            ("hull", "hull"),
            (PREVIOUS, "adaptive, before"),
            ("adaptive", "adaptive, now"),
            (LOLO, "adaptive, leaving it out"),
        ):
            if method in by_method:
                lines.append(row(name, runs.get(name, 0), label, by_method[method]["by_distance"]))
    return "\n".join(lines)


def options(name: str, method: str) -> FitOptions:
    """The fit's options for one row: PREVIOUS is the default interval without the past drift, LOLO
    with the past drift learned on the other public ladders (past_drift.json, written by `past`)."""
    if method == PREVIOUS:
        return FitOptions(n_boot=N_BOOT, past_drift=(0.0, 0.0))
    if method != LOLO:
        return FitOptions(n_boot=N_BOOT, interval=method)
    learned = json.loads((ROOT / "benchmarks" / "results" / "past_drift.json").read_text())["leave_one_out"][name]
    return FitOptions(n_boot=N_BOOT, past_drift=(learned["mean"], learned["sd"]))


def ladder_study(names: list[str], methods: tuple[str, ...] = METHODS) -> None:
    """The study on the ladders named (all of them without a name), with the interval methods given;
    ladders.json keeps what it held for the methods and ladders not rerun."""
    out = ROOT / "benchmarks" / "results" / "ladders.json"
    kept = json.loads(out.read_text())["results"] if out.exists() else {}
    results, runs = {}, {}
    for name, points in ladders().items():
        runs[name] = len(points)
        if names and name not in names:
            continue
        results[name] = dict(kept.get(name, {}))
        for method in methods:
            if method == LOLO and name not in PUBLIC:
                continue
            cpu = time.process_time()
            try:
                bt = backtest(points, options(name, method))
            except FitInputError as exc:  # e.g. every run above the lowest cut at one compute budget
                print(f"{name}: {exc}", flush=True)
                break
            figures = {f"{a:g}-{b:g}": band_figures(bt, a, b) for a, b in LADDER_BANDS}
            results[name][method] = {"cpu_s": round(time.process_time() - cpu, 1), "by_distance": figures}
            print(row(name, len(points), method, figures), flush=True)
    merged = {**kept, **results}
    out.write_text(
        json.dumps(
            {
                "what": f"backtest per ladder: interval=hull (the law's value), {BEFORE!r}, {PREVIOUS!r}, "
                f"adaptive (the default) and {LOLO!r}",
                "n_boot": N_BOOT,
                "results": merged,
            },
            indent=2,
        )
        + "\n"
    )
    print(ladder_table(merged, runs))


def cut_slopes(bt) -> list[float]:
    """Per cut of a backtest, the least-squares slope of log(actual / predicted) on decades past the
    cut (through 0): the drift its predictions still missed."""
    out = []
    for k in range(len(bt.cuts)):
        rows = [r for r in bt.runs if r.cut == k and r.decades > 0]
        if rows:
            d = np.array([r.decades for r in rows])
            e = np.log(np.array([r.actual for r in rows]) / np.array([r.predicted for r in rows]))
            out.append(float(d @ e / (d @ d)))
    return out


def cut_spans(bt, points: Points) -> list[float]:
    """Per cut with held-out runs (as cut_slopes), the decades of compute its fit spans."""
    low = float(np.log10(points.C.min()))
    used = {r.cut for r in bt.runs if r.decades > 0}
    return [float(np.log10(cut.C_cut) - low) for k, cut in enumerate(bt.cuts) if k in used]


def past_drift() -> dict:
    """calibration.PAST_DRIFT and PAST_DRIFT_SD: on each public ladder, the backtest with the default
    interval but no past drift; each cut's slope of the log error its predictions still missed; their
    mean and sd over every cut of every public ladder, and leaving each ladder out. Whether the slope
    depends on how many decades of compute the cut's fit spans (the lowest cuts' slopes differ in sign
    from the others' on four ladders): the least-squares line of slope on span, over every cut."""
    slopes, spans = {}, {}
    for name, points in ladders().items():
        if name in PUBLIC:
            bt = backtest(points, FitOptions(n_boot=N_BOOT, past_drift=(0.0, 0.0)))
            slopes[name], spans[name] = cut_slopes(bt), cut_spans(bt, points)
            print(name, " ".join(f"{s:+.4f}" for s in slopes[name]), flush=True)

    def learned(names) -> dict:
        values = np.concatenate([slopes[n] for n in names])
        return {"mean": float(values.mean()), "sd": float(values.std(ddof=1)), "cuts": int(values.size)}

    out = {
        "what": "per public ladder, each backtest cut's slope of log(actual/predicted) per decade past the cut, "
        "the default interval without the past drift; pooled, and leaving each ladder out",
        "n_boot": N_BOOT,
        "slopes": slopes,
        "all": learned(slopes),
        "leave_one_out": {n: learned([m for m in slopes if m != n]) for n in slopes},
        "spans": spans,
        "slope_on_span": on_span(np.concatenate(list(spans.values())), np.concatenate(list(slopes.values()))),
    }
    (ROOT / "benchmarks" / "results" / "past_drift.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("all", "leave_one_out", "slope_on_span")}, indent=1))
    return out


def on_span(spans: np.ndarray, slopes: np.ndarray) -> dict:
    """The least-squares line of the cuts' past slopes on their fits' spans, with its correlation."""
    fit = stats.linregress(spans, slopes)
    return {
        "per_decade_of_span": float(fit.slope),
        "se": float(fit.stderr),
        "intercept": float(fit.intercept),
        "r": float(fit.rvalue),
        "p": float(fit.pvalue),
    }


TOP_GAP = 1.3  # decades of compute between the fit's largest run and the ladder's largest (issue 40's case)
TOP_BUDGET = 0.15  # decades below the ladder's largest compute that count as its top budget


def top_budget() -> dict:
    """Issue 40's case on every public ladder: fitted on the runs at least TOP_GAP decades of compute
    below the ladder's largest, the runs of its top budget predicted, by the default, by the default
    with the past drift learned without the ladder (LOLO) and by the default without the past drift
    (PREVIOUS). Per ladder and method, every run's error, inside or not, and
    verdict (results/top.json)."""
    results = {}
    for name, points in ladders().items():
        if name not in PUBLIC:
            continue
        logC = np.log10(points.C)
        span = float(np.ptp(logC))
        results[name] = {}
        for method in ("adaptive", LOLO, PREVIOUS):
            bt = backtest(points, options(name, method), cuts=((span - TOP_GAP) / span,))
            top = [r for r in bt.runs if np.log10(r.C) >= logC.max() - TOP_BUDGET]
            results[name][method] = {
                "n_fit": bt.cuts[0].n_fit,
                "runs": [
                    {
                        "N": r.N,
                        "D": r.D,
                        "decades": r.decades,
                        "actual": r.actual,
                        "predicted": r.predicted,
                        "ci95": [r.lo, r.hi],
                        "error": r.rel_error,
                        "inside": r.inside,
                        "verdict": r.verdict.level,
                    }
                    for r in top
                ],
                "median_error": float(np.median([r.rel_error for r in top])),
                "coverage": float(np.mean([r.inside for r in top])),
                "trusted": sum(r.verdict.trusted for r in top),
                "trusted_inside": sum(r.verdict.trusted and r.inside for r in top),
            }
            f = results[name][method]
            print(
                f"{name} {method}: {f['n_fit']} runs fitted, {len(top)} at the top budget, median error "
                f"{100 * f['median_error']:+.1f}%, {100 * f['coverage']:.0f}% inside, trusted {f['trusted']} "
                f"({f['trusted_inside']} inside)",
                flush=True,
            )
    out = {
        "what": f"per public ladder, the runs of its top budget (within {TOP_BUDGET} decades of its largest "
        f"compute) predicted from the runs at least {TOP_GAP} decades of compute below it: the default, "
        f"{LOLO!r} and {PREVIOUS!r}",
        "n_boot": N_BOOT,
        "results": results,
    }
    (ROOT / "benchmarks" / "results" / "top.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["past"]:
        past_drift()
    elif sys.argv[1:2] == ["top"]:
        top_budget()
    elif sys.argv[1:2] == ["ladders"]:
        methods = tuple(a.split("=", 1)[1].split(",") for a in sys.argv[2:] if a.startswith("methods="))
        ladder_study([a for a in sys.argv[2:] if "=" not in a], methods[0] if methods else METHODS)
    else:
        main()
