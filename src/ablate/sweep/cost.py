"""What recorded sweeps cost in CPU time, by the value of a swept key (e.g. per model size), side by side.

A study that runs the same grid two ways (per-budget cosine runs against one WSD trunk with cooldown
branches per size) reads its answer here: each job's CPU seconds come from its usage.json (the process
launchers record them, start-up included; a trunk's job includes its branches' processes), summed per
value of `by` over the values every sweep has. On a shared machine CPU time, not wall time, is what a
sweep costs: it is what the same work takes on idle cores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ablate.config import ConfigError
from ablate.files import write_files

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class CostTable:
    by: str
    sweeps: tuple[str, ...]  # labels, in the order given; the first is the reference
    values: tuple[str, ...]  # values of `by` every sweep has, in the first sweep's order
    cpu_s: dict  # {sweep label: {value: CPU seconds}}
    runs: dict  # {sweep label: {value: finished runs or branches}}

    def total(self, sweep: str) -> float:
        return sum(self.cpu_s[sweep][v] for v in self.values)


def cost_table(sweeps: dict[str, Path], by: str) -> CostTable:
    """`sweeps`: {label: a recorded sweep dir with summary.json}. Raises ConfigError naming what is missing."""
    cpu, runs, orders = {}, {}, []
    for label, directory in sweeps.items():
        rows = _rows(Path(directory))
        jobs = [r for r in rows if "/" not in str(r.get("job"))]  # a trunk's branches share its job
        if any(r.get("job_cpu_s") is None for r in jobs):
            raise ConfigError(
                f"{directory}: some jobs recorded no CPU time (usage.json; valid: sweeps run by the process launchers)"
            )
        cpu[label], runs[label], order = {}, {}, []
        for r in jobs:
            value = str(r.get("overrides", {}).get(by, r.get(by, "?")))
            order.append(value)
            cpu[label][value] = cpu[label].get(value, 0.0) + r["job_cpu_s"]
        for r in rows:
            if r.get("final_val_loss") is not None and r.get("kind") != "trunk":
                value = str(r.get("overrides", {}).get(by, r.get(by, "?")))
                runs[label][value] = runs[label].get(value, 0) + 1
        orders.append(list(dict.fromkeys(order)))
    shared = [v for v in orders[0] if all(v in o for o in orders[1:])]
    if not shared:
        raise ConfigError(f"the sweeps {', '.join(sweeps)} share no value of {by} (valid: sweeps over a common grid)")
    return CostTable(by, tuple(sweeps), tuple(shared), cpu, runs)


def _rows(directory: Path) -> list[dict]:
    try:
        return json.loads((directory / SUMMARY_FILE).read_text())["runs"]
    except (OSError, ValueError, KeyError):
        raise ConfigError(f"{directory} has no {SUMMARY_FILE} (valid: a recorded sweep dir)") from None


def cost_markdown(table: CostTable) -> str:
    first = table.sweeps[0]
    head = f"| {table.by} | " + " | ".join(f"{s}: CPU-min (runs)" for s in table.sweeps)
    head += "".join(f" | {first} / {s}" for s in table.sweeps[1:]) + " |"
    lines = [
        f"# CPU time by {table.by}",
        "",
        "CPU time of the job processes (usage.json, start-up included; a trunk's job includes its branches).",
        "",
        head,
        "|---" * (1 + len(table.sweeps) + len(table.sweeps) - 1) + "|",
    ]
    for v in table.values:
        cells = [f"{table.cpu_s[s][v] / 60:.1f} ({table.runs[s].get(v, 0)})" for s in table.sweeps]
        ratios = [f"{table.cpu_s[first][v] / table.cpu_s[s][v]:.2f}" for s in table.sweeps[1:]]
        lines.append(f"| {v} | " + " | ".join(cells + ratios) + " |")
    totals = [f"**{table.total(s) / 60:.1f}**" for s in table.sweeps]
    ratios = [f"**{table.total(first) / table.total(s):.2f}**" for s in table.sweeps[1:]]
    lines.append("| all | " + " | ".join(totals + ratios) + " |")
    lines += [
        "",
        *[
            f"{first} used {table.total(first) / table.total(s):.2f} times the CPU time of {s} "
            f"({table.total(first) / 60:.1f} against {table.total(s) / 60:.1f} CPU-minutes) on the same "
            f"{len(table.values)} values of {table.by}."
            for s in table.sweeps[1:]
        ],
        "",
    ]
    return "\n".join(lines)


def export_cost(table: CostTable, out_dir: Path) -> list[Path]:
    doc = {
        "by": table.by,
        "sweeps": list(table.sweeps),
        "values": list(table.values),
        "cpu_s": table.cpu_s,
        "runs": table.runs,
        "total_cpu_s": {s: table.total(s) for s in table.sweeps},
    }
    return write_files(
        {
            out_dir / "cost.json": (json.dumps(doc, indent=2) + "\n").encode(),
            out_dir / "cost.md": cost_markdown(table).encode(),
        }
    )
