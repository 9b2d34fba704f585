"""ablate.scaling.runs on a real MLflow store whose runs are written the way train.py and sweep.py write
them: which runs become points, which are skipped and why, and the fit run written back."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from ablate.scaling.points import FitInputError
from ablate.scaling.runs import log_fit_run, read_experiment

FLOOR = 0.5038
STEPS = 40  # each run evaluates every 10 steps; tokens per step 1024


def loss_at(N: float, D: float) -> float:
    return FLOOR + 400 / N**0.34 + 400 / D**0.28


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """One store for the module (creating a sqlite store takes seconds); each test has its experiment."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


class Store:
    def __init__(self, uri: str, experiment: str):
        self.uri, self.name = uri, experiment
        self.client = MlflowClient(uri)
        self.exp = self.client.create_experiment(experiment)
        self.clock = 1_700_000_000_000

    def run(
        self, status="FINISHED", N=1e5, steps=STEPS, final=True, tags=None, floor=FLOOR, params=True, total=None
    ) -> str:
        """A training run as train.py records it: derived.* params, flops/tokens/val/loss at shared steps."""
        self.clock += 1000  # distinct start times: the reader keeps the newest run of a config
        run = self.client.create_run(self.exp, start_time=self.clock, tags=tags or {})
        rid = run.info.run_id
        if params:
            self.client.log_batch(
                rid,
                params=[
                    Param("derived.params", str(int(N))),
                    Param("derived.params_non_embedding", str(int(N * 0.99))),
                    Param("derived.total_steps", str(total or steps)),
                    Param("derived.entropy_floor", str(floor)),
                ],
            )
        metrics = []
        for step in range(0, steps + 1, 10):
            D = 1024.0 * step
            metrics += [Metric("tokens", D, 0, step), Metric("flops", 6.3 * N * D, 0, step)]
            metrics.append(Metric("val/loss", loss_at(N, D) if D else 3.3, 0, step))
        if final:
            metrics.append(Metric("final/val_loss", loss_at(N, 1024.0 * steps), 0, steps))
            metrics.append(Metric("final/tokens_per_s", 2048.0, 0, steps))
        self.client.log_batch(rid, metrics=metrics)
        if status != "RUNNING":
            self.client.set_terminated(rid, status=status)
        return rid


def test_finished_training_runs_become_points_and_the_rest_are_counted(uri):
    s = Store(uri, "grid")
    sizes, budgets = (6e4, 1.5e5, 4.5e5), (20, 40, 80)
    kept = {}
    for N, steps in itertools.product(sizes, budgets):
        kept[s.run(N=N, steps=steps, tags={"ablate.config_hash": f"{N}-{steps}"})] = (N, steps)
    s.run(tags={"ablate.kind": "sweep"})
    s.run(tags={"ablate.kind": "fit"})
    s.run(status="FAILED")
    s.run(status="KILLED")
    s.run(status="RUNNING")
    s.run(params=False)
    s.run(N=6e4, steps=20, total=40, final=False)  # its last evaluation is not at its last step
    runs = read_experiment(s.uri, s.name)
    assert sorted(zip(runs.points.N, runs.points.D, strict=False)) == sorted(
        (N, 1024.0 * st) for N, st in kept.values()
    )
    i = int(np.argmax(runs.points.C))
    assert runs.points.L[i] == pytest.approx(loss_at(4.5e5, 1024.0 * 80))
    assert runs.points.C[i] == pytest.approx(6.3 * 4.5e5 * 1024 * 80)  # the recorded flops, not 6ND
    assert set(runs.points.run_ids) == set(kept)
    assert runs.points.N_non_embedding is not None
    assert len(runs.curves) == 9 and all(c.flops[0] > 0 for c in runs.curves)  # step 0 (no flops) left out
    assert runs.entropy_floor == pytest.approx(FLOOR) and runs.points.entropy_floor == runs.entropy_floor
    # training seconds = tokens / final/tokens_per_s, for the time a suggested run would take
    np.testing.assert_allclose(runs.points.seconds, runs.points.D / 2048.0)
    assert runs.skipped == {
        "sweep parent runs (tag ablate.kind=sweep)": 1,
        "earlier fit runs (tag ablate.kind=fit)": 1,
        "runs FAILED, not FINISHED": 1,
        "runs KILLED, not FINISHED": 1,
        "runs RUNNING, not FINISHED": 1,
        "FINISHED runs without the param derived.params (not ablate training runs)": 1,
        "FINISHED runs without a final loss (final/val_loss, or val/loss at the last step)": 1,
    }


def test_a_run_without_final_val_loss_takes_its_last_evaluation(uri):
    s = Store(uri, "recovered")
    for N in (6e4, 1.5e5):
        s.run(N=N)
    recovered = s.run(N=4.5e5, final=False)
    runs = read_experiment(s.uri, s.name)
    i = runs.points.run_ids.index(recovered)
    assert runs.points.L[i] == pytest.approx(loss_at(4.5e5, 1024.0 * STEPS))
    assert any(n.startswith("1 run has no final/val_loss metric") for n in runs.notes)


def test_only_the_newest_run_of_a_config_counts(uri):
    s = Store(uri, "newest")
    s.run(N=6e4, tags={"ablate.config_hash": "same"})
    newest = s.run(N=6e4, tags={"ablate.config_hash": "same"})
    s.run(N=1.5e5)
    runs = read_experiment(s.uri, s.name)
    assert newest in runs.points.run_ids and len(runs.points) == 2
    assert runs.skipped == {"older FINISHED runs of a config that has a newer one (tag ablate.config_hash)": 1}


def test_differing_entropy_floors_are_not_compared(uri):
    s = Store(uri, "floors")
    s.run(N=6e4, floor=0.5)
    s.run(N=1.5e5, floor=0.7)
    runs = read_experiment(s.uri, s.name)
    assert runs.entropy_floor is None
    assert any("entropy floors differ (0.5, 0.7)" in n for n in runs.notes)


def test_an_experiment_of_unusable_runs_is_one_line(uri):
    s = Store(uri, "unusable")
    s.run(status="FAILED")
    s.run(tags={"ablate.kind": "sweep"})
    with pytest.raises(FitInputError) as info:
        read_experiment(s.uri, s.name)
    assert str(info.value) == (
        "experiment=unusable has no FINISHED training runs to fit "
        "(1 run FAILED, not FINISHED; 1 sweep parent run (tag ablate.kind=sweep))"
    )


def test_the_fit_run_is_closed_with_its_files(uri, tmp_path):
    s = Store(uri, "fitrun")
    files = [tmp_path / "fit.json", tmp_path / "fit.md"]
    for f in files:
        f.write_text("{}")
    metrics = {"approach3/E": 1.7, "nan": float("nan")}
    ok = log_fit_run(s.uri, s.exp, files, {"n_boot": 10}, metrics, True, "", "wide")
    bad = log_fit_run(s.uri, s.exp, files, {"n_boot": 10}, {}, False, "DID NOT CONVERGE: best start", "not_determined")
    runs = {r.info.run_id: r for r in s.client.search_runs([s.exp])}
    assert runs[ok].info.status == "FINISHED" and runs[ok].data.metrics == {"approach3/E": 1.7}
    assert runs[ok].data.tags["ablate.kind"] == "fit" and runs[ok].data.tags["ablate.fit_status"] == "converged"
    assert (
        runs[ok].data.tags["ablate.fit_verdict"] == "wide"
        and runs[bad].data.tags["ablate.fit_verdict"] == "not_determined"
    )
    assert {a.path for a in s.client.list_artifacts(ok)} == {"fit.json", "fit.md"}
    assert runs[bad].info.status == "FAILED"
    assert runs[bad].data.tags["ablate.status_reason"].startswith("DID NOT CONVERGE")


# -- points CSVs as people write them ---------------------------------------------------------


def test_a_csv_with_a_byte_order_mark_and_spaces_in_its_header_is_read(tmp_path):
    from ablate.scaling.points import Points

    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffparams , tokens,loss \n1e6, 1e8 ,3.0\n4e6,1e8,2.9\n".encode())
    points = Points.from_csv(path)
    assert list(points.N) == [1e6, 4e6] and list(points.D) == [1e8, 1e8]


def test_a_row_pasted_twice_is_refused_naming_both_lines(tmp_path):
    from ablate.scaling.points import FitInputError, Points

    path = tmp_path / "dup.csv"
    path.write_text("params,tokens,loss\n1e6,1e8,3.0\n4e6,1e8,2.9\n1e6,1e8,3.0\n")
    with pytest.raises(FitInputError, match=r"rows 0 and 2 \(lines 2 and 4\) are the same point"):
        Points.from_csv(path)
    path.write_text("params,tokens,loss,run_id\n1e6,1e8,3.0,a\n1e6,1e8,3.0,b\n")  # two runs, same numbers: fine
    assert len(Points.from_csv(path)) == 2
