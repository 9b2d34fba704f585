"""data/corpus.py: which files a text corpus reads, and what a run records of where they came from."""

from __future__ import annotations

import shutil

import pytest

from ablate.config import ConfigError
from ablate.data.corpus import package_versions, read_corpus


def test_a_missing_packaged_corpus_says_how_to_install_it_and_a_missing_own_path_does_not():
    with pytest.raises(ConfigError, match="`make corpus` installs data=debian_docs's packages"):
        read_corpus(["/usr/share/doc/no-such-package/_sources"], "**/*", 1000)
    with pytest.raises(ConfigError, match=r"which does not exist \(valid: existing files or folders, or stdlib\)$"):
        read_corpus(["/nonexistent/corpus"], "**/*", 1000)


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="dpkg is Debian's")
def test_files_that_dpkg_installed_name_their_package_and_version_and_others_none(tmp_path):
    own = tmp_path / "notes.txt"
    own.write_text("text")
    assert package_versions([own]) == {}
    owned = package_versions(["/usr/share/doc/dpkg/copyright"])
    assert list(owned) == ["dpkg"] and owned["dpkg"][0].isdigit()


def test_the_debian_docs_preset_reads_its_three_packages_and_records_their_versions():
    """`make corpus` (run by `make test`) installs them; the preset's paths are where dpkg put them."""
    from support import preset

    cfg = preset("data", "debian_docs")
    corpus = read_corpus(cfg["paths"], cfg["glob"], cfg["max_bytes"])
    assert corpus.size > 40_000_000 and len(corpus.files) > 3000
    assert {"linux-doc-6.1", "python3.11-doc", "perl-doc"} <= set(package_versions(corpus.files))
