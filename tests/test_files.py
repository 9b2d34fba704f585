"""files.py: a command's outputs written as one set, and paths kept inside their root."""

from __future__ import annotations

import errno
import os

import pytest

from ablate.config import ConfigError
from ablate.files import (
    WriteError,
    check_file_slots,
    disk_errors,
    disk_refused,
    inside,
    not_a_file,
    output_dir,
    read_regular,
    staged_folder,
    within,
    write_files,
)


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


def test_a_staged_folder_appears_whole(tmp_path):
    with staged_folder(tmp_path / "tok", last="meta.json") as stage:
        (stage / "train.bin").write_bytes(b"12")
        (stage / "meta.json").write_text("{}")
        assert not (tmp_path / "tok" / "train.bin").exists()  # nothing in place until all are complete
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["meta.json", "train.bin"]


@pytest.mark.parametrize("existed", [True, False])
def test_a_staged_folder_that_fails_leaves_the_folder_as_it_was(tmp_path, existed):
    folder = tmp_path / "tok"
    if existed:
        folder.mkdir()
        (folder / "old.bin").write_bytes(b"old")
    with pytest.raises(WriteError, match=r"data.cache_dir: cannot write .*tok \(No space left on device\)"):
        with staged_folder(folder, last="meta.json", key="data.cache_dir") as stage:
            (stage / "train.bin").write_bytes(b"12")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert (sorted(p.name for p in folder.iterdir()) == ["old.bin"]) if existed else not folder.exists()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EDQUOT])
def test_a_disk_that_refuses_a_write_is_one_line(tmp_path, code):
    with pytest.raises(WriteError, match="nothing of this output was written"):
        with disk_errors(tmp_path / "plan.json"):
            raise OSError(code, "refused")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EDQUOT])
def test_a_disk_that_refused_a_write_is_told_apart_from_other_errors(tmp_path, code):
    with pytest.raises(WriteError) as caught:
        with disk_errors(tmp_path / "plan.json"):
            raise OSError(code, "refused")
    assert disk_refused(caught.value) and disk_refused(OSError(code, "refused"))
    assert not disk_refused(OSError(errno.EACCES, "denied"))
    assert not disk_refused(WriteError("plan.json is a folder where a file belongs"))


def test_what_stands_where_a_file_belongs_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    names = ("file", "none", "folder", "fifo", "link")
    kinds = [not_a_file(tmp_path / name) for name in names]
    assert kinds == [None, None, "a folder", "not a regular file", "a link"]


def test_an_error_that_is_not_the_disk_stays_what_it_is(tmp_path):
    with pytest.raises(FileNotFoundError):
        with disk_errors(tmp_path / "plan.json"):
            raise FileNotFoundError(errno.ENOENT, "no such file")


def test_a_folder_where_a_file_will_be_written_is_refused(tmp_path):
    (tmp_path / "train.log").write_text("a log")  # a file from an earlier launch is fine
    check_file_slots(tmp_path, ["train.log", "result.json"], "hydra.run.dir")
    (tmp_path / "result.json").mkdir()
    with pytest.raises(ConfigError, match="result.json is a folder where a file belongs"):
        check_file_slots(tmp_path, ["train.log", "result.json"], "hydra.run.dir")


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


def test_a_fifo_where_a_file_belongs_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fit.json")  # no writer: a plain read would wait for ever
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(tmp_path / "fit.json")
    (tmp_path / "db").write_bytes(b"SQLite format 3\x00rest")
    assert read_regular(tmp_path / "db", 16) == b"SQLite format 3\x00"
