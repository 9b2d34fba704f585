"""Tokenizer training bounded by its text: degenerate text refused before training, a huge
whitespace-free run trained in seconds, and Ctrl-C or SIGTERM stopping `ablate prepare` mid-training.
Each case is a ledger row, run as the user runs it (`python -m ablate prepare`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import reliability

pytestmark = [pytest.mark.reliability]


def _prepare(args: list[str], cwd: Path, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "ablate", "prepare", "progress=false", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


# text -> (its bytes, the vocabulary asked for, words of the one line)
DEGENERATE = {
    "300 KB of NUL bytes, vocab 4096": (bytes(300_000), 4096, "room for at most"),
    "300 KB of one repeated letter, vocab 4096": (b"a" * 300_000, 4096, "room for at most"),
    "one short line repeated, vocab 4096": (b"hello world\n" * 30_000, 4096, "room for at most"),
    "a few hundred bytes of varied text, vocab 300": (bytes(range(256)) * 2, 300, "not one block"),
}


@pytest.mark.ledger("bad_input", "`ablate prepare` on {name}")
@pytest.mark.parametrize("name", list(DEGENERATE))
def test_degenerate_text_is_refused_in_one_line(request, tmp_path, name):
    data, vocab, words = DEGENERATE[name]
    (tmp_path / "text.txt").write_bytes(data)
    started = time.monotonic()
    proc = _prepare(["paths=text.txt", f"vocab_size={vocab}", "out=tok"], tmp_path)
    took = time.monotonic() - started
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("prepare: ")]
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr[-2000:]
    assert not (tmp_path / "tok").exists() and took < 60
    reliability.record(request, f"exit 2 in {took:.0f} s: {lines[0][:170]}; no output folder")


@pytest.mark.slow
@pytest.mark.ledger("fault", "`ablate prepare` on 5 MB of NUL bytes, vocab 300 (one whitespace-free run)")
def test_a_huge_whitespace_free_run_trains_in_bounded_time(request, tmp_path):
    (tmp_path / "nul.txt").write_bytes(bytes(5_000_000))
    started = time.monotonic()
    proc = _prepare(["paths=nul.txt", "vocab_size=300", "out=tok"], tmp_path)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "tok" / "meta.json").exists() and took < 120
    reliability.record(request, f"exit 0 in {took:.0f} s (20 MB took 15 min and 766 MB before runs were cut at 256)")


def default_sigint() -> None:
    """Ctrl-C as a terminal delivers it: a suite started in the background of a non-interactive
    shell (`make test &`) ignores SIGINT, and exec keeps an ignored signal ignored (POSIX), so the
    command would never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.ledger("fault", "{name} to `ablate prepare` while it trains its tokenizer")
@pytest.mark.parametrize("name, signum", [("SIGTERM", signal.SIGTERM), ("Ctrl-C (SIGINT)", signal.SIGINT)])
def test_a_signal_stops_tokenizer_training_at_once(request, tmp_path, name, signum):
    # Varied text that takes a while to train on at a large vocabulary: 6 MB of numbered lines.
    (tmp_path / "text.txt").write_text(
        "".join(f"line {i} of {i * 7919 % 100003} words {i:x}\n" for i in range(200_000))
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ablate", "prepare", "progress=false", "paths=text.txt", "vocab_size=60000", "out=tok"],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_sigint,
    )  # fmt: skip
    line = proc.stderr.readline()
    assert line.startswith("prepare: "), line
    time.sleep(3)  # into training
    assert proc.poll() is None, proc.stderr.read()
    sent = time.monotonic()
    proc.send_signal(signum)
    code = proc.wait(timeout=60)
    took = time.monotonic() - sent
    rest = proc.stderr.read()
    assert code == 128 + signum and "Traceback" not in rest, rest[-2000:]
    assert took < 10 and not (tmp_path / "tok").exists()
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == [], left  # the training process is gone too
    reliability.record(request, f"exit {code} {took:.1f} s after the signal; no output folder, no process left")
