"""Progress on stderr: a bar per run (step, loss, tokens/s) and a line per sweep (runs done/total, ETA).

Bars are drawn on a terminal only (tqdm's disable=None), so logs and parallel jobs' log files
stay free of carriage returns. Inside a sweep, each run also reports to PROGRESS_FILE in its job
directory (a `status_file` the job's task passes down), and the sweep's line in the launching
process reads those files: the same line works for in-process, parallel and SLURM jobs.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ablate.files import read_regular, write_json
from ablate.run.result import BRANCHES_DIR

STATUS_EVERY_S = 1.0
# Without a terminal (output piped or sent to a log file) there is no bar: a plain line this often
# goes to the log (Hydra's job logging: the console and the run's train.log) instead.
PLAIN_EVERY_S = 30.0
log = logging.getLogger(__name__)


class RunProgress:
    """`status_file`: where a sweep's job reports its progress for the sweep's line (None: nowhere)."""

    def __init__(self, total: int, start: int, enabled: bool, label: str, status_file: Path | None = None):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=start,
                desc=label,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
                mininterval=0.5,
                disable=None,
            )
        self.total, self.start, self.last, self.label = total, start, start, label
        self.status_file = status_file
        self.status_at = 0.0
        self.plain = enabled and (self.bar is None or self.bar.disable)
        self.began = self.plain_at = time.monotonic()

    def update(
        self, step: int, loss: float, tokens_per_s: float, mfu: float | None = None, warmup: bool = False
    ) -> None:
        """`tokens_per_s`, `mfu`: the last log interval's, timed to a synchronization (perf/clock.py);
        `warmup`: that interval compiled (or was a launch's first step), so it is not the steady pace."""
        if self.bar is not None:
            self.bar.update(step - self.last)
            speed = "warm-up" if warmup else f"{tokens_per_s:,.0f}"
            postfix = {"loss": f"{loss:.3f}", "tok_s": speed}
            if mfu is not None and not warmup:
                postfix["mfu"] = f"{mfu:.1%}"
            self.bar.set_postfix(postfix, refresh=False)
        self.last = step
        if self.plain and time.monotonic() - self.plain_at >= PLAIN_EVERY_S:
            self.plain_at = time.monotonic()
            elapsed = self.plain_at - self.began
            log.info(plain_line(self.label, step, self.start, self.total, loss, tokens_per_s, elapsed, mfu, warmup))
        if self.status_file is not None and time.monotonic() - self.status_at >= STATUS_EVERY_S:
            self.status_at = time.monotonic()
            _write_status(
                self.status_file,
                {
                    "label": self.label,
                    "step": step,
                    "start": self.start,
                    "total": self.total,
                    "loss": loss,
                    "tokens_per_s": tokens_per_s,
                    "mfu": mfu,
                    "warmup": warmup,
                },
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.status_file is not None:  # result.json says how it ended
            self.status_file.unlink(missing_ok=True)
            self.status_file = None


def plain_line(
    label: str,
    step: int,
    start: int,
    total: int,
    loss: float,
    tokens_per_s: float,
    elapsed: float,
    mfu: float | None = None,
    warmup: bool = False,
) -> str:
    """One progress line: step of total, loss, speed (MFU; or that it is still warming up), and the
    time left at this launch's pace."""
    done = step - start
    left = (total - step) * elapsed / done if done > 0 else None
    eta = "" if left is None else f", about {_minutes(left)} left"
    speed = f"{tokens_per_s:,.0f} tokens/s" + (f" (MFU {mfu:.1%})" if mfu is not None else "")
    if warmup:
        speed = "warming up"
    return f"{label}: step {step:,}/{total:,} ({step / max(total, 1):.0%}), loss {loss:.3f}, {speed}{eta}"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _write_status(path: Path, status: dict) -> None:
    try:
        write_json(path, {**status, "time": time.time()})
    except OSError:  # progress is best effort: a full disk must not stop a run
        pass


# -- a sweep ----------------------------------------------------------------------------------------


@dataclass
class WatchedJob:
    num: int
    job_dir: Path
    cost: float  # estimated work: the whole run's training FLOPs; 0 for a job that will be skipped
    label: str
    done: bool = False
    fraction: float = 0.0  # of the whole run, done so far
    resumed_at: float = 0.0  # fraction done before this launch (a run resumed from a checkpoint)
    counted: bool = True  # False for a job this hardware cannot run: reported, never counted as done
    # the job's planned steps: a WSD trunk's job counts its cooldown branches' too, which report no
    # progress of their own, so its trunk at its last step is not the whole job done (0: the run's own)
    steps: int = 0


class SweepProgress:
    """Runs done/total and an ETA, polled from the job directories by a background thread.

    ETA = elapsed x (work left / work done), work in estimated training FLOPs, so that a ladder of
    unequal runs does not fool it; a resumed run counts only the steps it has left.
    """

    def __init__(self, name: str, jobs: list[WatchedJob], enabled: bool, poll_s: float = 1.0):
        self.name, self.jobs, self.enabled, self.poll_s = name, jobs, enabled, poll_s
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bar = None

    def start(self) -> SweepProgress:
        if self.enabled and self.jobs:
            from tqdm import tqdm

            if sys.stderr.isatty():
                self.bar = tqdm(
                    total=len(self.jobs),
                    desc=f"sweep {self.name}",
                    unit="run",
                    file=sys.stderr,
                    dynamic_ncols=True,
                    bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar:16}| {elapsed} elapsed{postfix}",
                )
            self._thread = threading.Thread(target=self._loop, name="sweep-progress", daemon=True)
            self._thread.start()
        return self

    def stop(self, final: bool = True) -> None:
        """Stop the line; `final`: report the jobs that ended since the last poll first (the last
        jobs of a sweep end moments before it does)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            if final:
                try:
                    self.poll()
                except Exception:  # a display problem must not end the sweep
                    pass
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception as exc:  # a display problem must not end the sweep
                self._say(f"sweep progress stopped: {type(exc).__name__}: {exc}")
                return

    def poll(self) -> None:
        running = []
        for job in self.jobs:
            if job.done:
                continue
            result = _fresh_json(job.job_dir / "result.json", self.started)
            if result is not None:
                job.done, job.fraction = True, 1.0
                self._say(self._finished_line(job, result))
                continue
            status = _fresh_json(job.job_dir / "progress.json", self.started)
            if status is not None:
                total = max(job.steps, status.get("total") or 1)
                job.resumed_at = min(1.0, (status.get("start") or 0) / total)
                job.fraction = min(1.0, max(job.resumed_at, (status.get("step") or 0) / total))
                running.append((job, status))
        self._show(running)

    def eta_s(self) -> float | None:
        done = sum(j.cost * (j.fraction - j.resumed_at) for j in self.jobs)
        left = sum(j.cost * (1 - j.fraction) for j in self.jobs)
        if left <= 0:
            return 0.0
        if done <= 0:
            return None
        return (time.time() - self.started) * left / done

    def counts(self) -> tuple[int, int]:
        """(runs done, runs to do): a job unsupported here is neither."""
        return sum(j.done and j.counted for j in self.jobs), sum(j.counted for j in self.jobs)

    def _show(self, running: list) -> None:
        if self.bar is None:
            return
        done, _ = self.counts()
        now = ", ".join(
            f"#{j.num} {s['label']} {s['step']}/{s['total']} loss {s['loss']:.3f} {s['tokens_per_s']:,.0f} tok/s"
            for j, s in running[:3]
        )
        self.bar.n = done
        self.bar.set_postfix_str(f"ETA {_duration(self.eta_s())}" + (f" | {now}" if now else ""), refresh=False)
        self.bar.refresh()

    def _finished_line(self, job: WatchedJob, result: dict) -> str:
        if not job.counted:
            return f"sweep {self.name}: #{job.num} {job.label}: {result.get('status', '?')} here, not counted"
        done, total = self.counts()
        loss, which = final_loss(job.job_dir, result)
        what = result.get("status", "?") + (f", val loss {loss:.4f}{which}" if loss is not None else "")
        return f"sweep {self.name}: {done}/{total} done, ETA {_duration(self.eta_s())}: #{job.num} {job.label}: {what}"

    def _say(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)


def final_loss(job_dir: Path, result: dict) -> tuple[float | None, str]:
    """The job's final validation loss and what it is of: a WSD trunk's job ends with its cooldown
    branches (run/branches.py), and its final loss is its largest budget's branch's, not the
    constant-rate trunk's (" (branch tokens=...)"); any other job's is its own ("")."""
    if result.get("kind") != "trunk":
        return result.get("final_val_loss"), ""
    branches = []
    for d in (job_dir / BRANCHES_DIR).glob("*=*"):
        try:
            doc = json.loads(read_regular(d / "result.json"))
            branches.append((float(doc["tokens"]), doc["final_val_loss"], d.name))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    finished = [b for b in branches if b[1] is not None]
    if not finished:
        return result.get("final_val_loss"), " (trunk)"
    _, loss, name = max(finished)
    return loss, f" (branch {name})"


def _fresh_json(path: Path, since: float) -> dict | None:
    """The file's JSON if it was written during this launch (a relaunch finds the old ones)."""
    try:
        if path.stat().st_mtime < since - 1.0:
            return None
        doc = json.loads(read_regular(path))
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"
