"""MLflow's conventions as its users expect them (tracking/context.py, conf/tracking/mlflow.yaml):
MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME are the defaults, explicit keys win, and every run
carries MLflow's user and source tags, the git commit of the user's working tree, ablate's version
and the environment that result.json records (provenance.environment)."""

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate import __version__
from ablate.provenance import environment, isa
from ablate.tracking import run_tags
from support import SMALL_DATA

pytestmark = pytest.mark.slow

ONE_STEP = ["model=nano", "train.steps=2", "train.eval_interval=2", "train.progress=false", *SMALL_DATA]


def user_repository(path: Path) -> str:
    """A user's working tree: a git repository with one commit; its commit."""
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    (path / "notes.md").write_text("my experiments\n")
    subprocess.run(["git", "add", "notes.md"], cwd=path, check=True)
    subprocess.run(
        ["git", "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-qm", "start"], cwd=path, check=True
    )
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True).stdout.strip()


def ablate(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    shell = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | env
    done = subprocess.run(
        [sys.executable, "-m", "ablate", *args], cwd=cwd, env=shell, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_mlflow_tracking_uri_is_where_the_run_lands_with_user_source_and_git_tags(tmp_path, mlflow_server):
    from mlflow import MlflowClient

    server = mlflow_server()
    work = tmp_path / "work"
    commit = user_repository(work)
    ablate(ONE_STEP, work, MLFLOW_TRACKING_URI=server.uri, MLFLOW_EXPERIMENT_NAME="team")

    assert not (work / "mlflow.db").exists()  # nothing written into a local store beside the server
    client = MlflowClient(server.uri)
    (run,) = client.search_runs([client.get_experiment_by_name("team").experiment_id])
    tags = run.data.tags
    assert tags["mlflow.user"] == getpass.getuser()
    assert (tags["mlflow.source.name"], tags["mlflow.source.type"]) == ("ablate", "LOCAL")
    assert tags["mlflow.source.git.commit"] == commit and tags["ablate.source.git.dirty"] == "false"
    assert tags["ablate.version"] == __version__
    (result,) = work.glob("outputs/*/*/result.json")
    env = json.loads(result.read_text())["environment"]
    assert (env["commit"], env["dirty"], env["ablate"]) == (commit, False, __version__)
    assert tags["ablate.torch"] == env["torch"] and tags["ablate.cpu"] == env["cpu"]
    assert tags["ablate.cpu_isa"] == " ".join(isa(env["cpu_flags"]))

    # explicit keys win over the variables
    ablate([*ONE_STEP, "tracking.experiment=mine", "train.seed=7"], work, MLFLOW_EXPERIMENT_NAME="team")
    local = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    (mine,) = local.search_runs([local.get_experiment_by_name("mine").experiment_id])
    assert mine.data.tags["mlflow.source.git.commit"] == commit


def test_the_environment_names_the_working_tree_the_versions_and_the_machine(tmp_path):
    outside = tmp_path / "plain"
    outside.mkdir()
    env = environment(cwd=str(outside))
    assert (env["commit"], env["dirty"]) == (None, None)  # not a repository: nothing claimed
    commit = user_repository(tmp_path / "repo")
    (tmp_path / "repo" / "notes.md").write_text("changed\n")
    env = environment(cwd=str(tmp_path / "repo"))
    assert (env["commit"], env["dirty"]) == (commit, True)
    assert env["torch"] and env["python"] and env["cpu"] and env["gpu"] is None
    if Path("/proc/cpuinfo").is_file():
        assert env["cpu_flags"] and set(isa(env["cpu_flags"])) <= set(env["cpu_flags"])
    tags = run_tags()
    assert "mlflow.user" in tags and all(isinstance(v, str) and v for v in tags.values())


def test_version_names_ablate_torch_mlflow_and_hydra():
    from importlib import metadata

    done = subprocess.run([sys.executable, "-m", "ablate", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    line = done.stdout.strip()
    assert line.startswith(f"ablate {__version__} (torch {metadata.version('torch')}")
    assert f"MLflow {metadata.version('mlflow')}" in line and f"Hydra {metadata.version('hydra-core')}" in line


def test_on_another_mlflow_the_sweep_view_is_left_out_in_one_line(tmp_path, monkeypatch, capsys):
    """The saved view is MLflow 3.17's private UI state (tracking/views.py): another MLflow records
    the runs as usual and says in one line that the view is not written, instead of being refused."""
    from mlflow import MlflowClient

    from ablate.tracking import ensure_experiment, views

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment_id = ensure_experiment(uri, "ablate")
    client = MlflowClient(uri)
    real = views.metadata.version
    monkeypatch.setattr(views.metadata, "version", lambda d: "3.18.0" if d == "mlflow" else real(d))
    assert views.save_sweep_view(client, experiment_id, "s1", "sweep x", ["s1"]) == ""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "written for MLflow 3.17's UI, this is MLflow 3.18.0" in err
    tags = client.get_experiment(experiment_id).tags
    assert not any(k.startswith("mlflow.sharedViewState.") for k in tags)
    monkeypatch.undo()
    assert views.save_sweep_view(client, experiment_id, "s1", "sweep x", ["s1"])  # 3.17: written
