"""The reliability suite's ledger: each case records what was tried and what was found, and the
session writes docs/RELIABILITY.md from it (see conftest.pytest_sessionfinish)."""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RELIABILITY.md"

# nodeid -> {"section", "case", "detail"}; outcomes are filled in by the report hook.
LEDGER: dict[str, dict] = {}
OUTCOMES: dict[str, str] = {}

SECTIONS = {
    "bad_input": "Bad input: exit code not 0, one line, no traceback, no run left RUNNING, nothing written outside the run dir",
    "fault": "Faults injected and survived",
    "points": "Metric points expected and found",
    "security": "Security",
}


def record(request, section: str, case: str, detail: str) -> None:
    LEDGER[request.node.nodeid] = {"section": section, "case": case, "detail": detail}


def write_doc() -> Path | None:
    if not LEDGER:
        return None
    lines = [
        "# Reliability",
        "",
        "Written by the reliability suite (`pytest -m reliability`, part of `make test`) on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Each row is a test that ran in that session.",
        "",
    ]
    for key, title in SECTIONS.items():
        rows = [(nid, e) for nid, e in LEDGER.items() if e["section"] == key]
        if not rows:
            continue
        passed = sum(OUTCOMES.get(nid) == "passed" for nid, _ in rows)
        lines += [f"## {title}", "", f"{passed} of {len(rows)} passed.", "", "| case | result | found |", "|---|---|---|"]
        for nid, e in rows:
            detail = e["detail"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {e['case']} | {OUTCOMES.get(nid, 'not run')} | {detail} |")
        lines.append("")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(lines))
    return DOC
