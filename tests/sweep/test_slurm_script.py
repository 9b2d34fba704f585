"""No config value reaches the sbatch script unquoted or on a line of its own, and sbatch refusing a
submission is one line naming its reason. Each case is a ledger row."""

from __future__ import annotations

import sqlite3
import subprocess

import pytest
from submitit.slurm.slurm import _make_sbatch_string

import reliability
from ablate.config import ConfigError, SubmititSettings

pytestmark = [pytest.mark.reliability]

HOSTILE = "ok\ntouch PWNED"
SWEEP = ["+sweep=attention", "hydra/launcher=slurm", "model=nano", "train.steps=2", "hydra.sweep.dir=s"]

# A launcher key -> (its override with a newline, or another character the script cannot take safely)
HOSTILE_KEYS = {
    "job_name (a newline)": f"hydra.launcher.job_name='{HOSTILE}'",
    "job_name (a shell command)": "hydra.launcher.job_name='x;touch PWNED'",
    "partition": f"hydra.launcher.partition='{HOSTILE}'",
    "account (a space)": "hydra.launcher.account='a b'",
    "qos": f"hydra.launcher.qos='{HOSTILE}'",
    "constraint": f"hydra.launcher.constraint='{HOSTILE}'",
    "python": f"hydra.launcher.python='{HOSTILE}'",
    "submitit_folder": f"hydra.launcher.submitit_folder='{HOSTILE}'",
    "setup": f"hydra.launcher.setup=['module load x','{HOSTILE}']",
    "additional_parameters (a value)": f"+hydra.launcher.additional_parameters.comment='{HOSTILE}'",
}


@pytest.mark.ledger(
    "security", "`ablate +sweep=attention hydra/launcher=slurm` with {name} that would break the sbatch script"
)
@pytest.mark.parametrize("name", list(HOSTILE_KEYS))
def test_a_value_that_would_break_the_sbatch_script_is_refused(cli, request, tmp_path, name):
    proc = cli([*SWEEP, HOSTILE_KEYS[name]], tmp_path, process=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: hydra.launcher."), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no sweep folder, no store, no script
    reliability.record(request, f"exit 2: {lines[0][:170]}; nothing created")


def _header(script: str) -> list[str]:
    """The lines of an sbatch script before its first command (sbatch reads #SBATCH lines only there)."""
    header = []
    for line in script.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        header.append(line)
    return header


@pytest.mark.ledger("security", "the sbatch script submitit would write for a job name with a newline")
def test_the_sbatch_script_for_a_hostile_job_name(request, tmp_path):
    # What submitit writes, unchecked: the name ends the #SBATCH header and its second line runs.
    unchecked = _make_sbatch_string(command="python -m job", folder=tmp_path, job_name=HOSTILE)
    lines = unchecked.splitlines()
    assert "#SBATCH --job-name='ok" in lines and any(ln.startswith("touch PWNED") for ln in lines)
    assert not any("--output" in ln for ln in _header(unchecked))  # sbatch stops reading options there
    # The launcher refuses it before any script exists; a name it takes keeps the header whole.
    with pytest.raises(ConfigError, match="job_name="):
        SubmititSettings(job_name=HOSTILE).validate()
    SubmititSettings(job_name="exp-1.v2+a_b").validate()
    safe = _make_sbatch_string(command="python -m job", folder=tmp_path, job_name="exp-1.v2+a_b")
    header = _header(safe)
    assert any(ln == "#SBATCH --job-name=exp-1.v2+a_b" for ln in header) and any("--output" in ln for ln in header)
    reliability.record(
        request,
        "unchecked, the name's second line `touch PWNED'` is a line of the script's own and the header ends before "
        "--output; the launcher refuses the name (one line), and a name it takes keeps every #SBATCH line",
    )


@pytest.mark.slurm
@pytest.mark.ledger("fault", "a SLURM sweep that sbatch refuses (hydra.launcher.partition=nosuch)")
def test_a_submission_sbatch_refuses_is_one_line_with_its_reason(cli, request, tmp_path):
    queued = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout
    proc = cli([*SWEEP, "hydra.launcher.partition=nosuch"], tmp_path, process=True)
    last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith("error: hydra.launcher: slurm refused") and "Invalid partition" in last, last
    with sqlite3.connect(tmp_path / "mlflow.db") as con:
        statuses = [r[0] for r in con.execute("SELECT status FROM runs")]
    assert statuses == ["FAILED"], statuses  # the sweep's parent, with sbatch's reason; no run started
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout == queued
    reliability.record(request, f"exit 2: {last[:170]}; the sweep's parent run FAILED, nothing queued")
