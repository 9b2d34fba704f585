"""A tracking server that is down when a run starts: one line saying so, not MLflow's exception."""

from ablate.cli.train import store_unreachable
from support import SMALL_DATA, free_port


def test_a_server_down_at_start_is_one_line(cli, tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"
    done = cli([f"tracking.uri={uri}", "model=nano", "train.steps=2", "train.progress=false", *SMALL_DATA], tmp_path)
    assert done.returncode == 1
    first = next(line for line in done.stderr.splitlines() if line.strip())
    assert first == (
        f"error: the tracking store at {uri} cannot be reached (connection refused or no answer); nothing was "
        "trained (valid: a running server at tracking.uri, tracking.uri=sqlite:///PATH, or tracking.backend=none)"
    )
    assert "MlflowException" not in done.stderr and "Traceback" not in done.stderr


def test_other_failures_are_left_as_they_are():
    assert store_unreachable(RuntimeError("loss is nan"), "http://h:5000") is None
    assert store_unreachable(RuntimeError("Connection refused"), None) is None
