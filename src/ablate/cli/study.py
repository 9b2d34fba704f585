"""`ablate study experiments/NAME [--run] [OVERRIDE ...]`: run (with --run) and refresh a recorded
study; the work is in sweep/study.py."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from ablate.host import interrupting_signal
from ablate.oneline import fail, one_line
from ablate.sweep import load_study, refresh, run_analyses, run_study, run_target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="ablate study",
        description=__doc__.splitlines()[0],
        epilog="example:\n  ablate study experiments/scaling          # rewrite README.md from the records",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("study", type=Path, help="the study folder, e.g. experiments/scaling")
    parser.add_argument("--run", action="store_true", help="run the study's command first (finished runs are skipped)")
    parser.add_argument("--analyze", action="store_true", help="run the study's analyses (fit, compare, cost) first")
    parser.add_argument("overrides", nargs="*", help="extra overrides for --run, e.g. hydra.launcher.workers=4")
    args = parser.parse_intermixed_args(argv)  # overrides may follow --run
    if args.overrides and not args.run:
        fail(f"overrides {' '.join(args.overrides)} need --run (valid: --run OVERRIDE ...)")
    try:
        with one_line():
            study = load_study(args.study)
            code = run_study(args.study, study, args.overrides) if args.run else 0
            if (args.run or args.analyze) and study.get("analyses"):
                refresh(args.study, study, just_run=args.run)  # the sweep's points.csv and summary, which analyses read
                code = code or run_analyses(args.study, study)
            if args.run and study.get("target") and not code:
                code = run_target(args.study, study)
            path = refresh(args.study, study, just_run=args.run)
    except KeyboardInterrupt as exc:  # its command was stopped too and has closed its records
        signum = interrupting_signal(exc)
        print(
            f"ablate study: stopped by {'Ctrl-C' if signum is None else signal.Signals(signum).name}", file=sys.stderr
        )
        raise SystemExit(128 + (signum or signal.SIGINT)) from None
    print(f"wrote {path}", file=sys.stderr)
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
