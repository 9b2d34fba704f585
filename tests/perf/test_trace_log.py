"""The profiler's Kineto log lines stay off the console; anything else said meanwhile is kept."""

import os

import torch

from ablate.perf import profiling
from ablate.perf.trace_log import kineto_quiet


def test_a_profiled_step_writes_no_kineto_line_to_stderr(capfd):
    a = torch.randn(16, 16)
    profiling.profile_function(lambda: a @ a, steps=2)
    err = capfd.readouterr().err
    assert "USDT:" not in err and "STAGE:" not in err and "profiler_start" not in err


def test_other_lines_written_while_the_profiler_starts_are_written_back(capfd):
    with kineto_quiet():
        os.write(2, b"USDT:2026-12-04 23:51:28 1378:1378 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"UserWarning: something the user should read\n")
        os.write(2, b"STAGE:2026-12-04 23:51:43 1486:1486 SyncActivityProfilerHandler.cpp:51] Completed Stage\n")
    err = capfd.readouterr().err
    assert err == "UserWarning: something the user should read\n"
