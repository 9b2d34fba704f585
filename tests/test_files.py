"""files.py: a command's outputs written as one set, and paths kept inside their root."""

from __future__ import annotations

import pytest

from ablate.config import ConfigError
from ablate.files import WriteError, inside, output_dir, within, write_files


def test_a_set_that_cannot_be_written_leaves_every_file_as_it_was(tmp_path):
    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "blocked").write_text("a file where the folder of b.md would be")
    with pytest.raises(WriteError, match=r"out: cannot write .*b\.md .*nothing of this output was written"):
        write_files({tmp_path / "a.json": b"new a", tmp_path / "blocked" / "b.md": b"new b"})
    assert (tmp_path / "a.json").read_text() == "old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "blocked"]  # no temporary left


def test_a_folder_where_an_output_file_belongs_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "plan.json").mkdir()
    with pytest.raises(WriteError, match="plan.json is a folder where a file belongs"):
        write_files({tmp_path / "plan.md": b"md", tmp_path / "plan.json": b"{}"})
    assert not (tmp_path / "plan.md").exists()


def test_a_set_is_written_whole(tmp_path):
    paths = write_files({tmp_path / "x" / "a": b"1", tmp_path / "b": b"2"})
    assert [p.read_bytes() for p in paths] == [b"1", b"2"]


@pytest.mark.parametrize("name", ["../../x", "..", "/etc/passwd", "a/../../b", ".hidden"])
def test_a_name_becomes_one_folder_inside_its_root(tmp_path, name):
    path = inside(tmp_path / "exports", name)
    assert path.parent == tmp_path / "exports" and path.resolve().is_relative_to(tmp_path / "exports")


def test_a_link_out_of_the_root_is_refused(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "out").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="outside"):
        inside(tmp_path / "root", "out")


@pytest.mark.parametrize("relative", ["../x", "a/../../x", "/tmp/x"])
def test_a_relative_path_from_a_config_that_climbs_out_is_refused(tmp_path, relative):
    with pytest.raises(ConfigError, match=r"analyses\[0\]\.out=.* outside"):
        within(tmp_path, relative, "analyses[0].out")


def test_out_given_is_the_users_folder(tmp_path):
    assert output_dir(str(tmp_path / "mine"), "exports", "x") == tmp_path / "mine"
    assert output_dir(None, "exports", "../x") == inside("exports", "../x")
