"""The driver's schedule: a trial asked as each slot frees (or in batches on a launcher that cannot),
pruned trials freeing their slot at once, n_trials counting the whole study, a stopped driver's
trials given back, and what Optuna is told for costs and the memory constraint."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from ablate.config import ConfigError, parse_search
from ablate.search import storage as study_storage
from ablate.search.driver import run_study
from ablate.search.space import search_space

CATALOGUE = {"optim": {"lr": "tag(log, interval(1e-4, 3e-2))"}, "train": {"batch_size": "choice(8, 16, 32)"}}


def search(tmp_path, **kw):
    tree = {"study_name": "t", "params": CATALOGUE, "search": ["optim.lr"], "n_trials": 6, "n_jobs": 2, **kw}
    return parse_search(tree)


def lr(overrides) -> float:
    return next(float(o.split("=", 1)[1]) for o in overrides if o.startswith("optim.lr="))


def opened(tmp_path, cfg):
    resolved = cfg.resolved(str(tmp_path))
    return study_storage.open_study(resolved, search_space(resolved, [])[0])


def test_a_trial_is_asked_whenever_a_slot_frees(tmp_path, hydra_config, fake_launcher, trials_json):
    launcher = fake_launcher(duration=lambda o: 1.0 + 100 * lr(o))
    run_study(search(tmp_path), hydra_config, launcher, [])
    asks = [e for e in launcher.events if e[0] == "ask"]
    assert [num for _, num, _ in asks] == list(range(6))
    # After the first two, each trial is asked while the other slot's trial still runs (its value
    # stood in for by TPE's constant liar), not after a barrier.
    assert [running for _, _, running in asks[2:]] == [1, 1, 1, 1]
    trials = opened(tmp_path, search(tmp_path)).get_trials()
    assert len(trials) == 6 and all(t.state == TrialState.COMPLETE for t in trials)
    assert {t.user_attrs["schedule"] for t in trials} == {"asynchronous"}
    (launch,) = trials_json()["summary"]["launches"]
    assert (launch["schedule"], launch["slots"], launch["trials"]) == ("asynchronous", 2, 6)


def test_a_launcher_without_slots_gets_batches(tmp_path, hydra_config, fake_launcher, capsys):
    launcher = fake_launcher(slots=False)
    run_study(search(tmp_path, n_trials=5), hydra_config, launcher, [])
    assert "launches batches only" in capsys.readouterr().err
    trials = opened(tmp_path, search(tmp_path)).get_trials()
    assert len(trials) == 5 and {t.user_attrs["schedule"] for t in trials} == {"batch"}


def test_a_pruned_trial_frees_its_slot_at_once(tmp_path, hydra_config, fake_launcher):
    cfg = search(tmp_path, n_trials=4)
    study = opened(tmp_path, cfg)
    for value in (1e-4, 3e-3, 1e-3, 2e-3):
        study.enqueue_trial({"optim.lr": value})
    launcher = fake_launcher(duration=lambda o: 10.0 if lr(o) == 3e-3 else 1.0, pruned=lambda o: lr(o) == 1e-4)
    run_study(cfg, hydra_config, launcher, [])
    events = launcher.events
    # Trial 0 is pruned early: trials 2 and 3 run in its slot while trial 1 (10 s) still runs.
    assert events.index(("end", 0)) < events.index(("ask", 2, 1)) < events.index(("end", 1))
    assert events.index(("ask", 3, 1)) < events.index(("end", 1))
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.PRUNED, TrialState.COMPLETE, TrialState.COMPLETE, TrialState.COMPLETE]


def test_n_trials_counts_the_whole_study_across_launches(tmp_path, hydra_config, fake_launcher, trials_json):
    run_study(search(tmp_path, n_trials=3), hydra_config, fake_launcher(), [])
    second = fake_launcher()
    run_study(search(tmp_path, n_trials=5), hydra_config, second, [])
    assert len([e for e in second.events if e[0] == "ask"]) == 2
    assert len(opened(tmp_path, search(tmp_path)).get_trials()) == 5
    assert [launch["trials"] for launch in trials_json()["summary"]["launches"]] == [3, 2]


class StoppedAfterTwoAsks:
    """A slot launcher whose driver is stopped (Ctrl-C) once two trials are running."""

    def launch_as_slots_free(self, feed, slots: int, initial_job_idx: int) -> list:
        feed.next_job(initial_job_idx)
        feed.next_job(initial_job_idx + 1)
        raise KeyboardInterrupt


def test_a_stopped_driver_gives_its_running_trials_back(tmp_path, hydra_config, fake_launcher):
    cfg = search(tmp_path, n_trials=3)
    with pytest.raises(KeyboardInterrupt):
        run_study(cfg, hydra_config, StoppedAfterTwoAsks(), [])
    stopped = opened(tmp_path, cfg).get_trials()
    assert [t.state for t in stopped] == [TrialState.FAIL, TrialState.FAIL, TrialState.WAITING, TrialState.WAITING]
    run_study(cfg, hydra_config, fake_launcher(), [])
    trials = opened(tmp_path, cfg).get_trials()
    counted = [t for t in trials if not t.user_attrs.get("retried_as_new_trial")]
    assert len(counted) == 3 and all(t.state == TrialState.COMPLETE for t in counted)
    assert {counted[0].params["optim.lr"], counted[1].params["optim.lr"]} == {t.params["optim.lr"] for t in stopped[:2]}


def test_costs_make_a_multi_objective_study_with_its_pareto_front(
    tmp_path, hydra_config, fake_launcher, trials_json, bowl
):
    cfg = search(tmp_path, n_trials=8, costs=["flops"], pruner="none")
    # Higher learning rates cost more here, so the front trades loss against FLOPs.
    run_study(cfg, hydra_config, fake_launcher(duration=lambda o: 100 * lr(o)), [])
    study = opened(tmp_path, cfg)
    assert len(study.directions) == 2
    doc = trials_json()
    front = doc["summary"]["pareto_front"]
    assert front == sorted(t.number for t in study.best_trials) and front
    complete = [r for r in doc["trials"] if r["state"] == "COMPLETE"]
    assert doc["summary"]["best"]["value"] == min(r["value"] for r in complete)
    assert all(set(r["objectives"]) == {"val_loss", "flops"} for r in complete)
    cheapest = min(complete, key=lambda r: r["objectives"]["flops"])
    assert cheapest["number"] in front  # the cheapest trial is never dominated
    study_md = (tmp_path / "studies" / "t" / "study.md").read_text()
    assert "Pareto front (val_loss, flops, each minimised)" in study_md
    assert (tmp_path / "studies" / "t" / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_a_trial_over_the_memory_limit_is_never_the_best(tmp_path, hydra_config, fake_launcher, trials_json, bowl):
    cfg = search(tmp_path, n_trials=4, memory_limit_gb=1.0)
    study = opened(tmp_path, cfg)
    for value in (3e-3, 1e-3, 1e-2, 3e-4):
        study.enqueue_trial({"optim.lr": value})
    # The best learning rate (3e-3) needs 2 GB a device, over the 1 GB limit.
    run_study(cfg, hydra_config, fake_launcher(memory_bytes=lambda o: 2e9 if lr(o) == 3e-3 else 5e8), [])
    doc = trials_json()
    rows = {r["params"]["optim.lr"]: r for r in doc["trials"]}
    assert rows[3e-3]["feasible"] is False and rows[3e-3]["constraints"] == {"memory_gb_over_limit": 1.0}
    assert min(rows.values(), key=lambda r: r["value"])["params"]["optim.lr"] == 3e-3
    assert doc["summary"]["best"]["params"]["optim.lr"] == 1e-3
    assert opened(tmp_path, cfg).best_trial.params["optim.lr"] == 1e-3  # Optuna agrees: feasible trials only


def test_relaunching_with_other_costs_fails_in_one_line(tmp_path, hydra_config, fake_launcher):
    run_study(search(tmp_path, n_trials=1), hydra_config, fake_launcher(), [])
    with pytest.raises(ConfigError) as err:
        run_study(search(tmp_path, n_trials=2, costs=["wall_s"], pruner="none"), hydra_config, fake_launcher(), [])
    assert str(err.value) == (
        "study t minimises 1 objective(s), not 2 (val_loss, wall_s) "
        "(valid: its own costs, or another hydra.sweeper.study_name)"
    )
