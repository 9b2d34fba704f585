"""`ablate predict`: a fit's prediction for a run, written down before the run is trained, and the
run's outcome recorded beside it afterwards (sweep/prediction.py).

    ablate predict fit=FIT.json out=prediction.json OVERRIDE...   # the run `ablate OVERRIDE...` trains
    ablate predict --outcome RUN_DIR out=prediction.json          # after training: fill `actual`
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ablate.cli.common import compose_run, fail
from ablate.config import ConfigError
from ablate.files import check_writable_dir
from ablate.run import RESULT_FILE, read_result

EXAMPLE = (
    "ablate predict fit=experiments/text_ladder/fit/fit.json out=prediction.json "
    "+sweep=text_ladder hydra.mode=RUN model=medium train.tokens=8388608"
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ablate predict",
        description="A fit's predicted loss for a run, written before the run is trained; its outcome after.",
        epilog=f"example:\n  {EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("args", nargs="*", help="fit=FIT.json out=FILE, then the run's overrides (as for `ablate`)")
    p.add_argument("--outcome", metavar="RUN_DIR", help="record the trained run in RUN_DIR (its result.json) in out=")
    return p


def split_args(args: list[str]) -> tuple[dict, list[str]]:
    """{fit, out} taken from the arguments; the rest are the run's overrides."""
    own = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.split("=", 1)[0] in ("fit", "out")}
    return own, [a for a in args if a.split("=", 1)[0] not in ("fit", "out")]


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_intermixed_args(argv)
    own, overrides = split_args(args.args)
    from ablate.sweep import prediction

    try:
        if not own.get("out"):
            raise ConfigError("out= is missing (valid: out=PATH/prediction.json)")
        out = Path(own["out"])
        if args.outcome:
            if overrides or own.get("fit"):
                raise ConfigError(
                    "--outcome takes RUN_DIR and out= only (valid: ablate predict --outcome RUN_DIR out=FILE)"
                )
            doc = record(out, Path(args.outcome))
        else:
            if not own.get("fit"):
                raise ConfigError("fit= is missing (valid: fit=PATH/fit.json, written by ablate fit)")
            doc = make(Path(own["fit"]), out, overrides)
    except ConfigError as exc:
        fail(str(exc))
    print("\n".join(prediction.render(doc)))
    print(f"wrote {out}", file=sys.stderr)


def make(fit: Path, out: Path, overrides: list[str]) -> dict:
    from ablate.run import prepare
    from ablate.sweep import prediction

    prediction.check_new(out)
    check_writable_dir(out.parent, "out")
    prepared = prepare.prepare(compose_run(overrides))
    doc = prediction.make_prediction(prepared, fit, overrides, out)
    prediction.write_prediction(doc, out)
    return doc


def record(out: Path, run_dir: Path) -> dict:
    from ablate.sweep import prediction

    if not (run_dir / RESULT_FILE).is_file():
        raise ConfigError(f"{run_dir} has no {RESULT_FILE} (valid: the run dir of the predicted run, once trained)")
    return prediction.record_outcome(out, read_result(run_dir))


if __name__ == "__main__":
    main()
