"""`ablate predict`: a fit's prediction, written down before the run is trained, and the run's outcome
scored beside it afterwards (sweep/prediction.py).

    ablate predict fit=FIT.json out=prediction.json OVERRIDE...        # the run `ablate OVERRIDE...` trains
                                                                       # (and prediction.png: the target on
                                                                       # the law with its interval)
    ablate predict fit=FIT.json out=prediction.json target.N=3.3e9 target.D=6.6e10
                                                                       # a target outside this project:
                                                                       # target.N (or .params), target.D
                                                                       # (or .tokens), target.C (or .flops)
    ablate predict --outcome RUN_DIR out=prediction.json               # after training here: its result.json
    ablate predict --outcome loss=2.91 [tokens=..] [params=..] [flops=..] out=prediction.json
    ablate predict --outcome results.csv out=prediction.json           # an outside result: a CSV row
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from ablate.cli.common import compose_run
from ablate.config import ConfigError
from ablate.files import check_writable_dir, write_bytes
from ablate.oneline import one_line
from ablate.run import RESULT_FILE, read_result

EXAMPLE = (
    "ablate predict fit=experiments/text_ladder/fit/fit.json out=prediction.json "
    "+sweep=text_ladder hydra.mode=RUN model=medium train.tokens=8388608\n"
    "  ablate predict fit=experiments/text_ladder/fit/fit.json out=big.json target.N=1e8 target.D=2e9\n"
    "  ablate predict --outcome loss=3.46 tokens=2e9 out=big.json"
)
OWN = ("fit", "out")
TARGET_PREFIX = "target."
OUTCOME_KEYS = ("loss", "params", "tokens", "flops")  # an outside outcome's fields (a CSV's columns too)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ablate predict",
        description="A fit's predicted loss for a run, written before the run is trained; its outcome after.",
        epilog=f"examples:\n  {EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "args",
        nargs="*",
        help="fit=FIT.json out=FILE, then the run's overrides (as for `ablate`) or target.N= target.D= "
        "(target.tokens=, target.C=, target.flops=) for a target outside this project",
    )
    p.add_argument(
        "--outcome",
        metavar="RUN_DIR|CSV|loss=L",
        help="score the outcome in out=: a run dir of this project (its result.json), a CSV with columns "
        "loss[,params,tokens,flops], or loss=L with optional tokens=, params=, flops= arguments",
    )
    return p


def split_args(args: list[str]) -> tuple[dict, list[str]]:
    """{fit, out} taken from the arguments; the rest are the run's overrides (or the target's keys)."""
    own = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.split("=", 1)[0] in OWN}
    return own, [a for a in args if a.split("=", 1)[0] not in OWN]


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_intermixed_args(argv)
    own, rest = split_args(args.args)
    from ablate.sweep import prediction

    with one_line():
        if not own.get("out"):
            raise ConfigError("out= is missing (valid: out=PATH/prediction.json)")
        out = Path(own["out"])
        if args.outcome:
            if own.get("fit"):
                raise ConfigError(
                    "--outcome takes the outcome and out= only "
                    "(valid: ablate predict --outcome RUN_DIR|CSV|loss=L out=FILE)"
                )
            doc = record(out, args.outcome, rest)
        else:
            if not own.get("fit"):
                raise ConfigError("fit= is missing (valid: fit=PATH/fit.json, written by ablate fit)")
            doc = make(Path(own["fit"]), out, rest)
    print("\n".join(prediction.render(doc)))
    if doc.get("vocabulary"):
        print(doc["vocabulary"])
    settle = settling_runs(doc)
    if settle:
        print(settle)
    print(f"wrote {out}", file=sys.stderr)


def settling_runs(doc: dict) -> str | None:
    """For a prediction that is not determined, the runs that would determine it (scaling/predict.py's
    runs_to_determine), each checked against the target's training split: a run that would read it
    more than once is no fresh-data point."""
    runs = doc.get("runs_to_determine") or []
    if doc.get("predicted") is not None or not runs:
        return None
    split = doc.get("train_split_tokens")
    named = "; ".join(
        f"N={r['N']:.3g}, D={r['D']:.3g}"
        + (" (more tokens than the training split holds)" if split and r["D"] > split else "")
        for r in runs
    )
    corpus = f"; the training split holds {split:,} tokens" if split else ""
    return f"runs that would determine it: {named}{corpus}"


def make(fit: Path, out: Path, args: list[str]) -> dict:
    from ablate.sweep import prediction

    prediction.check_new(out)
    check_writable_dir(out.parent, "out")
    target = outside_target(args)
    if target is not None:
        doc = prediction.make_outside_prediction(fit, target, args, out)
    else:
        from ablate.run import prepare

        prepared = prepare.prepare(compose_run(args))
        doc = prediction.make_prediction(prepared, fit, args, out)
    prediction.write_prediction(doc, out)
    draw(fit, doc, out.with_suffix(".png"))
    return doc


def draw(fit: Path, doc: dict, path: Path) -> None:
    """The target on the law, beside the prediction (scaling/reports/prediction_plot.py)."""
    from ablate.scaling import load_fit, predict, render_prediction

    predictor = load_fit(str(fit)).predictor
    t = {**doc["target"], **(doc.get("law_units") or {})}  # the law's own tokens where the run's are another's
    p = predict.predict(predictor, N=t["params"], D=t["tokens"], C=t["flops"])
    write_bytes(path, render_prediction(predictor, p, doc["verdict"]))


def outside_target(args: list[str]) -> dict[str, float] | None:
    """predict()'s N, D, C from target.* arguments; None when there are none (a run config's overrides).
    Mixing the two, naming one quantity twice or an unknown key is refused in one line."""
    from ablate.sweep import prediction

    keyed = [a for a in args if a.startswith(TARGET_PREFIX)]
    if not keyed:
        return None
    if len(keyed) != len(args):
        other = next(a for a in args if not a.startswith(TARGET_PREFIX))
        raise ConfigError(
            f"{other} beside target.* (valid: a run's overrides, or target.N= target.D= for a target outside "
            "this project, not both)"
        )
    target: dict[str, float] = {}
    for a in keyed:
        key, _, text = a[len(TARGET_PREFIX) :].partition("=")
        if key not in prediction.OUTSIDE_TARGET:
            raise ConfigError(f"target.{key} is not a target key (valid: {', '.join(prediction.OUTSIDE_TARGET)})")
        name = prediction.OUTSIDE_TARGET[key]
        if name in target:
            raise ConfigError(f"{a} names {name} a second time (valid: each of N, D, C once)")
        target[name] = positive(f"target.{key}", text)
    if set(target) not in ({"N", "D"}, {"C"}, {"N", "C"}, {"D", "C"}):
        raise ConfigError(
            f"{' '.join(keyed)} is not a target (valid: target.N and target.D, target.C alone, or target.C "
            "with target.N or target.D)"
        )
    return target


def positive(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}={text} is not a positive number (valid: e.g. {name}=3.3e9)")
    return value


def record(out: Path, outcome: str, args: list[str]) -> dict:
    """Score the outcome `outcome` names in the prediction at out=."""
    from ablate.sweep import prediction

    if "=" in outcome:
        fields = outcome_fields([outcome, *args])
        return prediction.score_outside(out, fields, "outside: " + " ".join([outcome, *args]))
    if args:
        raise ConfigError(
            f"{args[0]} beside --outcome {outcome} (valid: a run dir or a CSV alone, or loss=L tokens=..)"
        )
    path = Path(outcome)
    if path.is_file():
        doc = prediction.read_prediction(out)
        fields, row = csv_outcome(path, doc["target"])
        return prediction.score_outside(out, fields, f"outside: {path}, line {row}")
    if not (path / RESULT_FILE).is_file():
        raise ConfigError(
            f"{path} has no {RESULT_FILE} (valid: the run dir of the predicted run, once trained, a CSV, or loss=L)"
        )
    return prediction.record_outcome(out, read_result(path))


def outcome_fields(args: list[str]) -> dict[str, float]:
    fields: dict[str, float] = {}
    for a in args:
        key, _, text = a.partition("=")
        if key not in OUTCOME_KEYS:
            raise ConfigError(f"{a} is not part of an outcome (valid: {'=, '.join(OUTCOME_KEYS)}=)")
        fields[key] = positive(key, text)
    if "loss" not in fields:
        raise ConfigError("the outcome has no loss= (valid: loss=L, with optional tokens=, params=, flops=)")
    return fields


def csv_outcome(path: Path, target: dict) -> tuple[dict[str, float], int]:
    """The row of a CSV (columns loss and any of params, tokens, flops) whose params, tokens and FLOPs
    are the target's (each given one within prediction.OUTSIDE_MATCH); a CSV of one row needs none of them."""
    from ablate.sweep import prediction

    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{path} cannot be read as CSV: {exc} (valid: columns loss[,params,tokens,flops])") from None
    if not rows or "loss" not in rows[0]:
        raise ConfigError(f"{path} has no loss column or no rows (valid: columns loss[,params,tokens,flops])")
    keys = [k for k in ("params", "tokens", "flops") if k in rows[0]]
    for line, row in enumerate(rows, start=2):
        fields = {k: positive(f"{path} line {line} {k}", row[k]) for k in ("loss", *keys)}
        if all(math.isclose(fields[k], target[k], rel_tol=prediction.OUTSIDE_MATCH) for k in keys) and (
            keys or len(rows) == 1
        ):
            return fields, line
    shown = ", ".join(f"{k}={target[k]:.4g}" for k in keys) or "a key"
    raise ConfigError(
        f"{path} has no row for the target ({shown}) (valid: a row with the target's "
        f"{', '.join(keys) or 'params and tokens'} within {prediction.OUTSIDE_MATCH:.0%})"
    )


if __name__ == "__main__":
    main()
