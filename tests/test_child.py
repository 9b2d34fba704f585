"""The one child entry point (ablate/child.py): a request survives its trip on the command line, a
bad one fails in one line before anything runs, and a child's exit status is its target's."""

import json
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


# -- the channel -----------------------------------------------------------------------------------


def test_a_call_carries_json_as_json_and_pickles_only_the_rest():
    config = {1: "a key JSON would turn into a string"}
    line = child.call_line(3, "run", {"num": 0, "overrides": ("a=1",), "config": config, "payload": b"\x00"})
    message = json.loads(line)
    assert message["args"] == {"num": 0, "overrides": ["a=1"]} and "pickle" in message
    call = child.Call.decode(message)
    assert (call.id, call.name) == (3, "run")
    assert call.args == {"num": 0, "overrides": ["a=1"], "config": config, "payload": b"\x00"}
    plain = json.loads(child.call_line(4, "find", {"config_hash": "abc"}))
    assert plain == {"id": 4, "call": "find", "args": {"config_hash": "abc"}}


def _reply(line: bytes) -> child.Reply:
    message = json.loads(line)
    return child.Reply(message["id"], message)


def test_an_answer_is_its_value_or_its_failure_raised():
    assert _reply(child.ok(1, {"pid": 7, "code": -9})).value() == {"pid": 7, "code": -9}
    assert _reply(child.ok(1, bytes(3))).value() == bytes(3)
    assert _reply(child.ok(1)).value() is None
    with pytest.raises(child.RemoteError, match=r"^ValueError: bad$"):
        _reply(child.error(1, ValueError("bad"))).value()  # the line only: the agent's answers
    failed = _reply(child.error(1, KeyError("missing"), "Traceback (most recent call last): ..."))
    assert failed.failed and failed.trace.startswith("Traceback")
    with pytest.raises(KeyError, match="missing"):  # with its traceback: the exception itself
        failed.value()

    class Local(Exception):  # a class the other side could not import
        def __reduce__(self):
            raise TypeError("cannot pickle")

    with pytest.raises(child.RemoteError, match=r"^Local: x$"):
        _reply(child.error(1, Local("x"), "Traceback ...")).value()


class _Pipes:
    """A child's stdin and stdout as two pipes, this test playing the child."""

    def __init__(self):
        calls_read, calls_write = os.pipe()
        replies_read, replies_write = os.pipe()
        self.stdin = os.fdopen(calls_write, "wb")
        self.stdout = os.fdopen(replies_read, "rb")
        self.calls, self.replies = child.Calls(calls_read), os.fdopen(replies_write, "wb", buffering=0)
        self.pid = os.getpid()


def test_answers_that_come_out_of_order_reach_their_callers():
    """A worker answers a short call while a long one runs: each answer goes to its own call."""
    pipes = _Pipes()
    channel = child.Channel(pipes)
    first, second = channel.send("wait", num=0), channel.send("ready")
    calls = []
    while len(calls) < 2:
        calls += pipes.calls.read_calls()
    assert [(c.id, c.name, c.args) for c in calls] == [(first, "wait", {"num": 0}), (second, "ready", {})]
    pipes.replies.write(child.ok(second, "ready") + child.ok(first, {"code": 0}))
    assert channel.reply(first).value() == {"code": 0} and channel.reply(second).value() == "ready"
    channel.close()
    channel.writer.join(5)
    assert pipes.calls.read() == [] and pipes.calls.eof  # end of input: the child's cue to exit
    pipes.replies.close()
    with pytest.raises(child.ChannelClosed):
        channel.reply(99)
