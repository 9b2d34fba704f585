"""`ablate sync` with a spool folder that holds something other than spool records: each such file
is named in one line and moved into quarantine/, so that it blocks no later sync."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize(
    "content", [b"\x00\xff garbage", b'{"run_id": "abc"', b"[1, 2]", json.dumps({"uri": "x"}).encode()]
)
def test_a_file_that_is_not_a_spool_record_is_set_aside_in_one_line(cli, tmp_path, content):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "bad.json").write_bytes(content)
    done = cli([str(spool)], tmp_path, command="sync")
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {spool / 'bad.json'} is not a spool record") and "moved aside to" in line, line
    assert "Traceback" not in done.stderr
    assert not (spool / "bad.json").exists()
    (moved,) = (spool / "quarantine").iterdir()
    assert moved.read_bytes() == content  # kept as it was, for a person to look at
    again = cli([str(spool)], tmp_path, command="sync")
    assert again.returncode == 0 and "nothing to sync" in again.stderr
