"""The reliability suite's ledger: each case records what was tried and what its test asserted, and
the session writes docs/RELIABILITY.md from it (conftest.pytest_sessionfinish, under `make test`).

A row exists from collection on (`@pytest.mark.ledger(section, case)`), so a case skipped or failed
in set-up still has its row; its result is pytest's own outcome of the whole test (set-up, call,
tear-down): passed, FAILED, or skipped with pytest's reason. Every section counts all three, and a
skip counts against "passed". The detail is what the test recorded after its checks, so a row never
says more than the test asserted; a case that failed shows what it had recorded so far.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ablate.files import write_text

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RELIABILITY.md"

# nodeid -> {"section", "case", "detail"}; OUTCOMES: nodeid -> "passed" | "FAILED" | "skipped: why"
LEDGER: dict[str, dict] = {}
OUTCOMES: dict[str, str] = {}

SECTIONS = {
    "bad_input": (
        "Bad input: the real command line, then exit code 2, exactly one line on stderr that starts with `error:` "
        "and names the key or file, no traceback, and nothing created: no file or folder in the working directory "
        "(no Hydra run dir, no MLflow store, no state dir) and none beside the inputs"
    ),
    "fault": "Faults injected: each row lists what its test asserted after the fault",
    "points": "Metric points expected and found",
    "security": "Security",
}


def register(item) -> None:
    """At collection: the row of a test marked `ledger(section, case)`; `case` may name the test's
    parameters, e.g. "{seed}", or "{id}" for its parametrization id."""
    marker = item.get_closest_marker("ledger")
    if marker is None:
        return
    item.add_marker(pytest.mark.reliability)  # a ledger row is part of the suite that writes the ledger
    section, case = marker.args
    params = getattr(getattr(item, "callspec", None), "params", {})
    ident = getattr(getattr(item, "callspec", None), "id", "")
    LEDGER[item.nodeid] = {"section": section, "case": case.format(id=ident, **params), "detail": ""}


def row_id(nodeid: str) -> str:
    """The row of a test's nodeid: under xdist's loadgroup a test in a group runs as NODEID@GROUP,
    after its row was made under NODEID (a parametrization id may hold an @ too)."""
    if nodeid in LEDGER or "@" not in nodeid:
        return nodeid
    base = nodeid.rsplit("@", 1)[0]
    return base if base in LEDGER else nodeid


def record(request, detail: str, case: str | None = None) -> None:
    """What the test found, once it has asserted it (and a better name for the case, if any)."""
    nodeid = row_id(request.node.nodeid)
    entry = LEDGER.setdefault(nodeid, {"section": "fault", "case": request.node.name, "detail": ""})
    entry["detail"] = detail
    if case:
        entry["case"] = case


def outcome(nodeid: str, report) -> None:
    """pytest's report of one phase: a failure anywhere or a skip anywhere decides the row."""
    nodeid = row_id(nodeid)
    if nodeid not in LEDGER:
        return
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        OUTCOMES[nodeid] = f"skipped: {reason.removeprefix('Skipped: ')}"
    elif report.failed:
        OUTCOMES[nodeid] = "FAILED"
    elif report.when == "call":
        OUTCOMES.setdefault(nodeid, "passed")


def merge(worker: dict | None) -> None:
    """An xdist worker's rows and outcomes (its workeroutput): every worker collects every row, and
    each test ran in one worker, the one whose row has its detail and outcome."""
    if not worker:
        return
    for nodeid, entry in worker["ledger"].items():
        if nodeid not in LEDGER or (entry["detail"] and not LEDGER[nodeid]["detail"]):
            LEDGER[nodeid] = entry
    OUTCOMES.update(worker["outcomes"])


def write_doc(selection: str = "") -> Path | None:
    """docs/RELIABILITY.md from this session's rows; `selection` is the session's -m/-k, so a row a
    narrower session did not select reads "not run" for a stated reason."""
    if not LEDGER:
        return None
    chosen = f" with `{selection}`" if selection else ""
    lines = [
        "# Reliability",
        "",
        "Written by the reliability suite (`pytest -m reliability`, part of `make test`) on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{chosen}. Each row is a test of that session; a row's "
        "result is pytest's outcome of the whole test, a skipped test counts as not passed, and a test the "
        'session did not select reads "not run".',
        "",
    ]
    for key, title in SECTIONS.items():
        rows = [(nid, e) for nid, e in LEDGER.items() if e["section"] == key]
        if not rows:
            continue
        results = [OUTCOMES.get(nid, "not run") for nid, _ in rows]
        passed = results.count("passed")
        skipped = sum(r.startswith("skipped") for r in results)
        failed = results.count("FAILED")
        not_run = len(rows) - passed - skipped - failed
        lines += [
            f"## {title}",
            "",
            f"{passed} of {len(rows)} passed, {skipped} skipped, {failed} failed, {not_run} not run.",
            "",
            "| case | result | found |",
            "|---|---|---|",
        ]
        for (_, e), result in zip(rows, results, strict=True):
            cells = [_cell(e["case"]), _cell(result), _cell(e["detail"])]
            lines.append(f"| {' | '.join(cells)} |")
        lines.append("")
    return write_text(DOC, "\n".join(lines))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
