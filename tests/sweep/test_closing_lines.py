"""A sweep's closing lines fit how ablate was installed: the command that is there, and `make ui`
only in a checkout whose Makefile has it for that store."""

from ablate.sweep.callback import ui_command


def test_make_ui_is_offered_only_where_a_makefile_serves_that_store(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    store = str(tmp_path / "mlflow.db")
    assert ui_command(store, tmp_path) == f"python -m ablate ui --store {store}"  # a user's project: no Makefile
    (tmp_path / "Makefile").write_text("demo:\n\techo\nui: install\n\t$(PY) -m ablate ui\n")
    assert ui_command(store, tmp_path).endswith("   (or make ui)")
    other = str(tmp_path / "elsewhere" / "mlflow.db")
    assert "make ui" not in ui_command(other, tmp_path)  # make ui opens ./mlflow.db, not this store


def test_the_installed_script_is_named_where_it_is_on_the_path(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: "/usr/local/bin/ablate" if name == "ablate" else None)
    assert ui_command("x.db", tmp_path) == "ablate ui --store x.db"
