"""Where a recorded study's commands run: the folder that holds its experiments/ folder, found from
the study itself, so a study runs the same from any clone and from an installed package."""

from ablate.sweep.study import command, project_root


def test_a_study_under_experiments_runs_from_the_folder_above_it(tmp_path, monkeypatch):
    study = tmp_path / "project" / "experiments" / "ladder"
    study.mkdir(parents=True)
    monkeypatch.chdir(study)  # run from anywhere inside the project
    assert project_root(study) == tmp_path / "project"
    args = command(study, ["+sweep=scaling"])
    assert args[:2] == ["+sweep=scaling", "hydra.sweep.dir=experiments/ladder/sweep"]
    assert "tracking.uri=sqlite:///${hydra:runtime.cwd}/experiments/ladder/mlflow.db" in args


def test_a_study_kept_elsewhere_runs_from_the_current_folder_with_absolute_paths(tmp_path, monkeypatch):
    study, elsewhere = tmp_path / "studies" / "mine", tmp_path / "work"
    study.mkdir(parents=True)
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert project_root(study) == elsewhere
    assert command(study, ["+sweep=scaling"])[1] == f"hydra.sweep.dir={study}/sweep"
