"""The front door: `ablate --help` lists every command; each command's --help shows its own groups,
keys and an example; Hydra's own flags reach Hydra instead of the precheck of overrides; `ablate study`
takes overrides after --run; `ablate prepare` takes a corpus to a run with bits per byte in MLflow."""

import json
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from ablate.cli import main as front
from ablate.cli.common import hydra_args
from ablate.cli.main import COMMANDS


def ablate(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ablate", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_the_front_door_lists_every_command_with_a_line_each():
    out = ablate("--help").stdout
    for name, (_, line, _) in COMMANDS.items():
        assert f"  {name}" in out and line in out


def test_the_process_entry_freezes_the_collector_after_the_command_even_when_it_fails():
    """entry() (the `ablate` script, `python -m ablate`) runs the command, then freezes what it made
    so that the interpreter's teardown does not collect it; an error still exits with its code."""
    probe = "import atexit, gc, sys; atexit.register(lambda: print('frozen', gc.get_freeze_count()))"
    for args, code in ((["--help"], 0), (["model=doesnotexist"], 2)):
        argv = ["ablate", *args]
        done = subprocess.run(
            [sys.executable, "-c", f"{probe}; sys.argv = {argv!r}; from ablate.cli.main import entry; entry()"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == code, done.stderr[-2000:]
        assert int(done.stdout.rsplit("frozen ", 1)[1]) > 1_000  # without the freeze: 0


@pytest.mark.parametrize(
    ("command", "groups", "not_groups", "keys"),
    [
        ("train", ["model", "data", "precision", "hardware", "+sweep", "hydra/launcher"], [], ["state_dir="]),
        ("fit", [], ["model", "data", "hardware"], ["n_boot=1000", "held_out=1", "target.C=null"]),
        ("backtest", [], ["model", "data", "hardware"], ["n_boot=200", "cuts=[0.25,", "entropy_floor=null"]),
        ("plan", ["model", "precision", "hardware"], ["data ", "+sweep"], ["gpus=1", "batch_size=4", "mfu=null"]),
        ("sample", [], ["model", "data", "hardware"], ["run=", "temperature=0.8", "top_k=200", "tokens=null"]),
    ],
)
def test_a_hydra_commands_help_shows_its_own_groups_keys_and_an_example(command, groups, not_groups, keys):
    proc = ablate(command, "--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"usage: ablate {command}")
    listed = out.split("config groups", 1)[1].split("\n\n", 1)[0] if "config groups" in out else ""
    for g in groups:
        assert f"\n  {g} " in listed, g
    for g in not_groups:
        assert f"\n  {g}" not in listed, g
    for k in keys:
        assert f"  {k}" in out, k
    assert "example:\n  ablate " in out
    assert "Hydra" not in out.split("\n")[0] and "== Config ==" not in out  # not Hydra's own help


@pytest.mark.parametrize("command", [c for c, (_, _, style) in COMMANDS.items() if style == "argv"])
def test_every_other_command_has_help_with_an_example(command):
    proc = ablate(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "ablate " in proc.stdout and ("example" in proc.stdout or "python -m ablate" in proc.stdout)


@pytest.mark.parametrize(
    "args, overrides",
    [
        (["model=tiny", "--cfg", "job"], ["model=tiny"]),
        (["-c", "job", "--resolve", "model=tiny"], ["model=tiny"]),
        (["--cfg", "all", "--package", "model", "x=1"], ["x=1"]),
        (["--info", "defaults", "x=1"], ["x=1"]),
        (["x=1", "--info"], ["x=1"]),  # --info's value is optional
        (["-cn", "fit", "--multirun", "a=1,2", "b=2"], ["a=1,2", "b=2"]),
    ],
)
def test_hydra_flags_and_their_values_are_not_overrides(args, overrides):
    assert hydra_args(args).overrides == overrides


def test_study_overrides_follow_run(tmp_path, capsys):
    """`ablate study DIR --run OVERRIDE ...`, as its usage line shows: the overrides after --run are
    the study's extras, not unrecognized arguments."""
    with pytest.raises(SystemExit) as exited:
        front.main(["study", str(tmp_path), "--run", "model=nano", "train.tokens=512"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path} has no study.yaml (valid: a folder under experiments/ with a study.yaml)"
    )


@pytest.mark.slow
@pytest.mark.e2e
def test_a_corpus_becomes_tokens_then_a_run_with_bits_per_byte_in_mlflow(cli, workdir):
    prep = cli(["paths=stdlib", "out=bpe", "vocab_size=1024", "max_bytes=600000"], workdir, command="prepare")
    assert prep.returncode == 0, prep.stderr[-2000:]
    assert "train on it: ablate data=tokens data.dir=bpe" in prep.stderr
    run = cli(
        [
            "data=tokens",
            "data.dir=bpe",
            "model=nano",
            "train.steps=20",
            "train.eval_interval=10",
            "tracking.experiment=bpe",
        ],
        workdir,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "run folder: outputs/" in run.stderr
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    (r,) = client.search_runs([client.get_experiment_by_name("bpe").experiment_id])
    m = r.data.metrics
    meta = json.loads((workdir / "bpe" / "meta.json").read_text())
    assert m["val/bpb"] == pytest.approx(m["val/loss"] / 0.6931471805599453 / meta["bytes_per_token"])
    assert m["final/val_bpb"] == pytest.approx(m["val/bpb"])
    assert r.data.params["data.dir"] == "bpe" and int(r.data.params["model.vocab_size"]) == 1024


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["stdlib", "--out", "bpe"], "--out is now out=DIR (valid: ablate prepare paths=... out=DIR"),
        (["paths=stdlib", "--vocab-size=512", "out=bpe"], "--vocab-size is now vocab_size=N"),
        (["paths=stdlib", "out=bpe", "--no-progress"], "--no-progress is now progress=false"),
        (["stdlib", "out=bpe"], "'stdlib' is not KEY=VALUE (valid: paths=stdlib, or paths=[stdlib,...], then out=DIR)"),
        (["out=bpe"], "paths is empty (valid: paths=FILE, paths=[FILE,FOLDER], or paths=stdlib)"),
        (["paths=stdlib"], "out is empty (valid: out=DIR"),
        (["paths=stdlib", "out=bpe", "vocab_size=100"], "vocab_size=100 is out of range (valid: 257 to 65536)"),
        (["paths=stdlib", "out=bpe", "val_fraction=1.5"], "val_fraction=1.5 is invalid (valid: 0 < val_fraction < 1)"),
        (["paths=stdlib", "out=bpe", "vocab=512"], "unknown key vocab (valid: eot, glob, max_bytes, out, paths"),
    ],
)
def test_prepare_takes_key_value_and_refuses_the_old_flags_in_one_line(tmp_path, args, expected):
    """`ablate prepare` takes KEY=VALUE like every other command; the earlier flags, a bare path and a
    bad value are each one line naming the new spelling or what is valid, and nothing is written."""
    done = ablate("prepare", *args, cwd=tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_prepare_help_lists_its_keys():
    out = ablate("prepare", "--help").stdout
    for key in ("paths", "out", "vocab_size", "tokenizer", "max_bytes", "val_fraction", "progress"):
        assert key in out
    assert "ablate prepare paths=stdlib out=" in out


def test_shell_completion_installs_for_bash_zsh_and_fish():
    """Hydra's `-sc install=SHELL` prints the script the shell sources (its verb is not an override)."""
    for shell, words in (("bash", "complete -o nospace"), ("zsh", "hydra_bash_completion"), ("fish", "complete")):
        done = ablate("-sc", f"install={shell}")
        assert done.returncode == 0 and words in done.stdout, (shell, done.stderr[-2000:])


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ablate f", "fit"),  # the first word: a command's name
        ("ablate model=na", "model=nano"),  # no command: train's config
        ("ablate fit n_b", "n_boot="),  # a command's own keys
        ("ablate plan hardware=h2", "hardware=h200"),
        ("ablate backtest for", "form="),
        ("ablate sample tem", "temperature="),
        ("ablate sa", "sample"),
    ],
)
def test_tab_completes_each_commands_own_keys(line, expected):
    """The query the installed script runs on TAB (`ablate -sc query=bash`, the line in COMP_LINE)."""
    import os

    done = subprocess.run(
        [sys.executable, "-m", "ablate", "-sc", "query=bash"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COMP_LINE": line},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout.split(), done.stdout


def test_tab_completes_the_presets_of_the_lines_config_dir(tmp_path):
    """`ablate --config-dir presets +sweep=my<TAB>` offers the user's own presets: Hydra's query reads
    only its own arguments, so the line's --config-dir is passed on to it."""
    import os

    (tmp_path / "presets" / "sweep").mkdir(parents=True)
    (tmp_path / "presets" / "sweep" / "mysizes.yaml").write_text("# @package _global_\nhydra:\n  mode: MULTIRUN\n")
    for line, expected in (
        ("ablate --config-dir presets +sweep=my", "+sweep=mysizes"),
        ("ablate fit --config-dir=presets +sweep=my", None),  # fit's config has no sweep group
        ("ablate -cd presets +sweep=mys", "+sweep=mysizes"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ablate", "-sc", "query=bash"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "COMP_LINE": line},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        if expected:
            assert expected in done.stdout.split(), (line, done.stdout)
