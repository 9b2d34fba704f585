"""A run with several budgets: one constant-rate trunk, and a cooldown branch forked from it per budget.

Under optim.schedule=wsd a run of S steps trains at the constant rate until its cooldown starts, at
f = cooldown_start(S) (model/optim.py), so its first f steps are those of every other wsd run of the
same config, whatever its budget. `train.tokens=[a,b,c]` (or steps, or flops) therefore trains once:
- the trunk: the same config at optim.schedule=constant for max(f) steps, which is what it is. Its
  MLflow run is tagged ablate.kind=trunk, so fits skip it: its branches are the points. At each
  branch's fork step f it saves its state, with its metric history so far, to
  STATE_DIR/<trunk hash>/fork-<f>/;
- a branch per budget: exactly the wsd run of that one budget (the same config and config hash), so
  it is skipped, resumed or retried by the rule of any run (decision.py). Whenever it would start at
  step 0 it starts from its fork instead, the same state at that step. Its tokens, FLOPs, train
  time and metric history count from step 0, so a fit takes it as an ordinary run. Its MLflow run
  is a child of the trunk's.
Hägele et al. 2024 ("Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations",
Sec. 4) use this to get a whole L(D) curve for about the price of its longest run; MiniCPM (Hu et
al. 2024) and DeepSeek LLM (2024) fit their scaling laws so.

With `workers` > 1 the trunk trains on one core and up to workers - 1 branches run at once, each in
its own process (ablate/child.py, target `branch_main`, its config in its request), as soon as its fork
is saved; with one worker the branches run after the trunk, in this process. A branch whose fork is
missing (the trunk had finished before and its forks were deleted, or it diverged) trains from step
0 like any run.

Files: OUT/result.json is the trunk's, OUT/branches/<key>=<budget>/result.json each branch's.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ablate.child import spawn
from ablate.config import BUDGET_KEYS, ConfigError, RunConfig, as_dict, budget, parse_run
from ablate.files import write_json
from ablate.host import interrupt_on
from ablate.model import cooldown_start
from ablate.run import checkpoint
from ablate.run.decision import SKIP, decide
from ablate.run.prepare import Prepared, prepare
from ablate.run.result import BRANCHES_DIR, RESULT_FILE, RunResult, read_result, write_result
from ablate.tracking import TRUNK_KIND, make_tracker

BRANCH_KIND = "branch"
GRACE_S = 10.0  # after the trunk is interrupted, how long its branch processes get to record themselves


def is_family(cfg: RunConfig) -> bool:
    """True when the run's budget is a list (a trunk and its branches)."""
    return isinstance(budget(cfg.train)[1], list)


@dataclass(frozen=True)
class Family:
    key: str  # the budget's unit: steps, tokens or flops
    budgets: tuple  # ascending
    branches: tuple[Prepared, ...]  # one plain wsd run per budget
    forks: tuple[int, ...]  # per branch: the step its cooldown starts, where it leaves the trunk
    trunk: Prepared | None  # None when no branch has a step before its cooldown

    def fork(self, i: int) -> checkpoint.Fork | None:
        if self.trunk is None or self.forks[i] == 0:
            return None
        directory = Path(self.trunk.cfg.state_dir) / self.trunk.config_hash / f"fork-{self.forks[i]}"
        return checkpoint.Fork(self.forks[i], directory)

    def out_dir(self, out_dir: Path, i: int) -> Path:
        return out_dir / BRANCHES_DIR / f"{self.key}={self.budgets[i]:g}"

    @property
    def cost_steps(self) -> int:
        """Steps trained by the trunk and the cooldowns together (per-budget runs: sum of all steps)."""
        trunk = self.trunk.total_steps if self.trunk else 0
        return trunk + sum(b.total_steps - f for b, f in zip(self.branches, self.forks, strict=True))


def prepare_family(cfg: RunConfig) -> Family:
    """The trunk and the branches of a run with a list budget; raises ConfigError as prepare does."""
    key, values = budget(cfg.train)
    budgets = tuple(sorted(values))
    caches: dict = {}  # the members share hardware and data: resolved and loaded once
    first = prepare(named(with_budget(cfg, key, budgets[0]), key, f"{budgets[0]:g}"), caches)
    branches = [first] + [prepare(named(with_budget(cfg, key, b), key, f"{b:g}"), caches) for b in budgets[1:]]
    steps = [b.total_steps for b in branches]
    for a, b, s, t in zip(budgets, budgets[1:], steps, steps[1:], strict=False):
        if s == t:
            raise ConfigError(
                f"train.{key}={list(values)}: budgets {a:g} and {b:g} are both {s} steps of "
                f"{cfg.train.sequences_per_step * cfg.model.block_size} tokens (valid: budgets at least one step apart)"
            )
    forks = tuple(cooldown_start(b.total_steps, b.cfg.optim) for b in branches)
    trunk = None
    if max(forks) > 0:
        trunk_cfg = dataclasses.replace(
            named(first.cfg, key, "trunk", cfg.tracking.run_name),
            optim=dataclasses.replace(first.cfg.optim, schedule="constant"),
            train=dataclasses.replace(first.cfg.train, steps=max(forks), tokens=None, flops=None),
        )
        trunk = prepare(trunk_cfg, caches)
    return Family(key, budgets, tuple(branches), forks, trunk)


def named(cfg: RunConfig, key: str, what: str, name: str | None = None) -> RunConfig:
    """A family member's run name, when the family has one (a sweep names runs by their overrides):
    "model=tiny train.tokens=[a,b]" becomes "model=tiny train.tokens=a" for a branch and
    "model=tiny train.tokens=trunk" for the trunk, so that the UI's legends tell them apart."""
    name = name if name is not None else cfg.tracking.run_name
    if name is None:
        return cfg
    setting = f"train.{key}={what}"
    renamed, found = re.subn(rf"train\.{key}=\[[^\]]*\]", setting, name)
    tracking = dataclasses.replace(cfg.tracking, run_name=renamed if found else f"{name} {setting}")
    return dataclasses.replace(cfg, tracking=tracking)


def with_budget(cfg: RunConfig, key: str, value) -> RunConfig:
    train = dataclasses.replace(cfg.train, **{k: value if k == key else None for k in BUDGET_KEYS})
    return dataclasses.replace(cfg, train=train)


@dataclass
class FamilyResult:
    trunk: RunResult | None
    branches: list[RunResult]

    @property
    def failed(self) -> bool:
        return any(r.status == "failed" for r in [self.trunk, *self.branches] if r is not None)

    def to_dict(self) -> dict:
        status = "failed" if self.failed else "finished"
        return {
            "status": status,
            "trunk": self.trunk.to_dict() if self.trunk else None,
            "branches": [b.to_dict() for b in self.branches],
        }


def run_family(
    fam: Family,
    out_dir: Path,
    sweep_id: str | None = None,
    experiment_id: str | None = None,
    parent_run_id: str | None = None,
    workers: int = 1,
    progress_file: Path | None = None,
) -> FamilyResult:
    """Train what the family still needs (see the module doc) and return every member's result;
    `progress_file`: where a sweep's job reports the trunk's progress."""
    from ablate.run import train

    cfg = fam.branches[0].cfg
    tracker = make_tracker(cfg.tracking, experiment_id)
    store = cfg.tracking.uri if cfg.tracking.backend != "none" else None
    skipped, ready, waiting = [], [], {}  # branch indices; {fork step: indices that wait for it}
    for i, b in enumerate(fam.branches):
        (fam.out_dir(out_dir, i) / RESULT_FILE).unlink(missing_ok=True)  # each gets this launch's
        own = checkpoint.meta(Path(b.cfg.state_dir) / b.config_hash)
        decision = decide(tracker.find(b.config_hash), own, b.cfg.train.rerun, b.cfg.train.retry_failed, store)
        fork = fam.fork(i)
        past_fork = decision.from_checkpoint and own is not None and own.step >= fam.forks[i]
        if decision.action == SKIP:
            skipped.append(i)
        elif past_fork or fork is None or checkpoint.meta(fork.directory) is not None:
            ready.append(i)
        else:
            waiting.setdefault(fork.step, []).append(i)
    trunk_run = tracker.find(fam.trunk.config_hash) if fam.trunk else None
    runner = _Branches(fam, out_dir, sweep_id, experiment_id, trunk_run.run_id if trunk_run else parent_run_id)
    runner.slots = max(0, workers - 1)
    train.set_threads(1 if runner.slots else workers)
    trunk = None
    try:
        for i in skipped:  # writes its result.json (skipped) here: no process needed
            runner.run_here(i, from_fork=True)
        for i in ready:
            runner.submit(i)
        if waiting:

            def hook_for(step: int):
                def hook(trainer) -> None:
                    save_fork(trainer, fam.fork(waiting[step][0]).directory)
                    runner.parent_run_id = trainer.tracker.run_id or runner.parent_run_id
                    for i in waiting.pop(step):
                        runner.submit(i)

                return hook

            trunk = train.run(
                fam.trunk.cfg,
                out_dir,
                sweep_id=sweep_id,
                experiment_id=experiment_id,
                prepared=fam.trunk,
                parent_run_id=parent_run_id,
                kind=TRUNK_KIND,
                forks={step: hook_for(step) for step in waiting},
                progress_file=progress_file,
            )
            runner.parent_run_id = trunk.mlflow_run_id or runner.parent_run_id
            for step, indices in sorted(waiting.items()):  # forks the trunk did not reach
                if trunk.status == "failed":  # a branch would fail the same way before its cooldown
                    for i in indices:
                        runner.fail(i, f"its trunk failed before the fork at step {step}: {trunk.reason}")
                    continue
                print(
                    f"ablate: the trunk did not save the fork at step {step} ({trunk.status}: {trunk.reason}); "
                    f"{len(indices)} branch(es) train from step 0",
                    file=sys.stderr,
                )
                for i in indices:
                    runner.submit(i, from_fork=False)
        elif fam.trunk is not None:
            trunk = RunResult.not_trained(
                fam.trunk,
                "skipped",
                trunk_run.run_id if trunk_run else None,
                "every branch is finished or has its fork",
                kind=TRUNK_KIND,
            )
            write_result(trunk, out_dir)
        results = runner.finish()
    except BaseException:
        runner.stop()
        raise
    return FamilyResult(trunk, results)


def save_fork(trainer, directory: Path) -> None:
    """The trainer's state as a branch starts from it: its own metric history so far (which the
    branch's MLflow run receives too), and no MLflow run of its own."""
    state = trainer.state()
    state["pending"] = [list(m) for m in trainer.tracker.points_until(trainer.step)]
    state["mlflow_run_id"] = ""
    checkpoint.save(state, directory)


class _Branches:
    """Runs branches: in this process after the trunk (slots = 0), or up to `slots` at once in their
    own processes while the trunk goes on."""

    def __init__(self, fam: Family, out_dir: Path, sweep_id, experiment_id, parent_run_id):
        self.fam, self.out_dir = fam, out_dir
        self.sweep_id, self.experiment_id, self.parent_run_id = sweep_id, experiment_id, parent_run_id
        self.slots = 0
        self.later: list[tuple[int, bool]] = []
        self.pool: ThreadPoolExecutor | None = None
        self.futures = {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.stopped = False

    def submit(self, i: int, from_fork: bool = True) -> None:
        if not self.slots:
            self.later.append((i, from_fork))
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.slots, thread_name_prefix="branch")
        spec = self._spec(i, from_fork)
        # The environment is copied here, not in the pool's thread: a copy reads os.environ key by key,
        # and a key another thread deletes meanwhile fails it.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.futures[i] = self.pool.submit(self._run_process, i, spec, env)

    def run_here(self, i: int, from_fork: bool) -> None:
        """Branch i in this process. A failure other than an interrupt is its result.json's
        (train.run writes it), and the next branch goes on."""
        from ablate.run import train

        b = self.fam.branches[i]
        try:
            train.run(
                b.cfg,
                self.fam.out_dir(self.out_dir, i),
                sweep_id=self.sweep_id,
                experiment_id=self.experiment_id,
                prepared=b,
                parent_run_id=self.parent_run_id,
                kind=BRANCH_KIND,
                fork=self.fam.fork(i) if from_fork else None,
            )
        except Exception as exc:
            print(f"ablate: branch {self.fam.key}={self.fam.budgets[i]:g} failed: {exc}", file=sys.stderr)

    def fail(self, i: int, reason: str) -> None:
        b = self.fam.branches[i]
        result = RunResult.not_trained(b, "failed", None, reason, kind=BRANCH_KIND, fork_step=self.fam.forks[i])
        write_result(result, self.fam.out_dir(self.out_dir, i))

    def finish(self) -> list[RunResult]:
        for i, from_fork in self.later:
            self.run_here(i, from_fork)
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        return [self._result(i) for i in range(len(self.fam.branches))]

    def stop(self) -> None:
        """The trunk was interrupted: branches not started never start; running ones get SIGINT
        (train.run records them KILLED, resumable), then SIGTERM after GRACE_S."""
        with self.lock:
            self.stopped = True
            procs = list(self.procs.values())
        for future in self.futures.values():
            future.cancel()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + GRACE_S
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _spec(self, i: int, from_fork: bool) -> dict:
        fork = self.fam.fork(i) if from_fork else None
        cfg = self.fam.branches[i].cfg  # no progress bar: several processes share the terminal
        return {
            "config": as_dict(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, progress=False))),
            "out_dir": str(self.fam.out_dir(self.out_dir, i)),
            "fork": {"step": fork.step, "directory": str(fork.directory)} if fork else None,
            "sweep_id": self.sweep_id,
            "experiment_id": self.experiment_id,
            "parent_run_id": self.parent_run_id,
        }

    def _run_process(self, i: int, spec: dict, env: dict[str, str]) -> int:
        write_json(Path(spec["out_dir"]) / "branch.json", spec)  # a record of what the branch was asked
        with self.lock:
            if self.stopped:
                return -1
            proc = spawn("ablate.run.branches:branch_main", spec, stdin=subprocess.DEVNULL, env=env)
            self.procs[i] = proc
        return proc.wait()

    def _result(self, i: int) -> RunResult:
        """The branch's result.json; a process that died before writing it is a failed branch."""
        directory = self.fam.out_dir(self.out_dir, i)
        if not (directory / RESULT_FILE).is_file():
            proc = self.procs.get(i)
            self.fail(
                i,
                f"its process exited with code {proc.returncode} before writing a result" if proc else "it did not run",
            )
        return read_result(directory)


def branch_main(
    config: dict,
    out_dir: str,
    fork: dict | None,
    sweep_id: str | None,
    experiment_id: str | None,
    parent_run_id: str | None,
) -> None:
    """A branch in a process of its own, which the trunk's started (`_run_process`) with its config
    and place in its request."""
    from ablate.run import train

    interrupt_on(signal.SIGTERM, signal.SIGINT)
    cfg = parse_run(config)
    train.set_threads(1)
    train.run(
        cfg,
        Path(out_dir),
        sweep_id=sweep_id,
        experiment_id=experiment_id,
        parent_run_id=parent_run_id,
        kind=BRANCH_KIND,
        fork=checkpoint.Fork(fork["step"], Path(fork["directory"])) if fork else None,
    )
