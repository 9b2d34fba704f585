"""`ablate sync [SPOOL_DIR]`: deliver runs spooled during a tracking outage (tracking/spool.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ablate.files import quarantine
from ablate.oneline import fail
from ablate.tracking import SpoolError, one_sync, sync_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ablate sync",
        description=__doc__.splitlines()[0],
        epilog="example:\n  ablate sync                                 # after a tracking outage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("spool_dir", nargs="?", default=".ablate/state/spool", type=Path)
    args = parser.parse_args(argv)
    if args.spool_dir.exists() and not args.spool_dir.is_dir():
        fail(f"{args.spool_dir} is not a folder (valid: a spool folder, by default .ablate/state/spool)")
    if not args.spool_dir.is_dir():
        print(f"nothing to sync in {args.spool_dir}", file=sys.stderr)
        return 0
    with one_sync(args.spool_dir):  # a second `ablate sync` waits here, then finds what is left
        return _sync_all(args.spool_dir)


def _sync_all(spool_dir: Path) -> int:
    files = sorted(spool_dir.glob("*.json"))
    if not files:
        print(f"nothing to sync in {spool_dir}", file=sys.stderr)
        return 0
    failed = 0
    for path in files:
        if not path.exists():  # delivered meanwhile (a sync of another version, by hand)
            continue
        try:
            n = sync_file(path)
            print(f"synced {path.stem}: {n} metric points", file=sys.stderr)
        except SpoolError as exc:  # no later attempt could deliver it: out of the way of the others
            failed += 1
            print(f"error: {exc}; moved aside to {quarantine(path)}", file=sys.stderr)
        except Exception as exc:  # leave the file for the next attempt
            failed += 1
            print(
                f"error: could not sync {path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                file=sys.stderr,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
