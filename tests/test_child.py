"""The one child entry point (ablate/child.py): a request survives its trip on the command line, a
bad one fails in one line before anything runs, and a child's exit status is its target's."""

import os
import signal
import subprocess
import sys

import pytest

from ablate import child
from ablate.host import Interrupted

WATCHDOG = "ablate.run.watchdog:main"


def test_a_request_survives_the_command_line():
    request = child.Request(WATCHDOG, {"uri": "sqlite:///x.db", "run_id": "r1", "lock_dir": None}, parent_pid=4242)
    line = child.command(request)
    assert line[:3] == [sys.executable, "-m", "ablate.child"]
    assert child.Request.decode(line[3]) == request
    assert child.Request.decode('{"target": "ablate.host:available_cores"}') == child.Request(
        "ablate.host:available_cores"
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("watchdog", "the request is not JSON"),
        ("[1]", "request='[1]'"),
        ('{"args": {}}', "request="),
        (f'{{"target": "{WATCHDOG}", "kwargs": {{}}}}', "request="),
        ('{"target": "os:system"}', "target='os:system' (valid: 'ablate.<module>:<function>')"),
        ('{"target": "ablate.run.watchdog"}', "target='ablate.run.watchdog'"),
        (f'{{"target": "{WATCHDOG}", "args": [1]}}', "args=[1] (valid: an object of keyword arguments)"),
        (f'{{"target": "{WATCHDOG}", "parent_pid": -1}}', "parent_pid=-1 (valid: a process id, or null)"),
    ],
)
def test_a_bad_request_fails_in_one_line(text, reason):
    with pytest.raises(child.BadRequest) as failed:
        child.main([text])
    assert str(failed.value.code).startswith(f"ablate.child: {reason}")
    assert "\n" not in str(failed.value.code)


def test_a_target_that_names_no_function_fails_before_it_runs():
    with pytest.raises(child.BadRequest, match=r"ablate.host has no function nothing$"):
        child.run(child.Request("ablate.host:nothing"))


@pytest.mark.parametrize(
    ("outcome", "status"),
    [(None, 0), (3, 3), (KeyboardInterrupt(), 130), (Interrupted(signal.SIGTERM), 128 + signal.SIGTERM)],
)
def test_the_exit_status_is_the_targets(monkeypatch, outcome, status):
    def target():
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(child, "target_function", lambda name: target)
    assert child.run(child.Request(WATCHDOG)) == status


def test_a_child_runs_its_target_with_its_own_channel_on_stdin():
    """The watchdog as the run starts it: told "done" through its pipe, it exits 0 without MLflow."""
    dog = child.spawn(
        WATCHDOG, {"uri": "sqlite:///unused.db", "run_id": "r1"}, dies_with_parent=False, stdin=subprocess.PIPE
    )
    dog.communicate(b"done", timeout=60)
    assert dog.returncode == 0


def test_a_child_whose_parent_is_gone_stops_before_its_target():
    """A child started by a process that has died since (here: one that is not its parent) runs
    nothing: the watchdog, given no "done", would otherwise go on to look for its MLflow run."""
    request = child.Request(WATCHDOG, {"uri": "sqlite:///unused.db", "run_id": "r1"}, parent_pid=os.getpid() + 1)
    done = subprocess.run(child.command(request), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr.strip()) == (1, f"the parent process (pid {os.getpid() + 1}) is gone")
