"""data/corpus.py: which files a text corpus reads, and what a run records of where they came from."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml

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


def _corpus(tmp_path, sizes: dict[str, int]):
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(name[0].encode() * size)
    return read_corpus([str(tmp_path)], "*.txt", 10**9)


def test_files_split_holds_out_whole_files_chosen_by_path_not_by_order(tmp_path):
    """val_split=files: whole files, ranked by a hash of their path, until they hold val_fraction of
    the bytes; the rest train, every byte exactly once; the same files however the corpus is read."""
    corpus = _corpus(tmp_path, {f"{chr(97 + i)}{i}.txt": 1000 + 10 * i for i in range(20)})
    train, val = corpus.split(0.2, "files")
    assert sorted(train + val) == sorted(corpus.chunks)  # nothing cut, nothing lost or doubled
    held = corpus.val_files(0.2)
    assert 0.2 * corpus.size <= sum(len(corpus.chunks[i]) for i in held) < 0.35 * corpus.size
    assert val == [corpus.chunks[i] for i in sorted(held)]
    reversed_corpus = type(corpus)(corpus.files[::-1], corpus.chunks[::-1])
    assert {corpus.files[i] for i in held} == {reversed_corpus.files[i] for i in reversed_corpus.val_files(0.2)}
    tail_train, tail_val = corpus.split(0.2)
    assert b"".join(tail_val) == b"".join(corpus.chunks)[-int(0.2 * corpus.size) :]  # the tail, as before


def test_files_split_needs_two_files_and_never_holds_out_all(tmp_path):
    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir()
    one = _corpus(tmp_path / "one", {"a.txt": 100})
    with pytest.raises(ConfigError, match="data.val_split=files needs at least 2 files and the corpus has 1"):
        one.split(0.1, "files")
    train, val = _corpus(tmp_path / "two", {"a.txt": 10, "b.txt": 10}).split(0.99, "files")
    assert len(train) == 1 and len(val) == 1


def test_the_tail_split_keeps_the_hashes_and_cache_folders_made_before_the_choice(tmp_path):
    """Runs recorded before val_split existed keep their config hash (the long text ladder's target,
    trained on the tail split, which its sweep preset now names); the files split is another run and
    another token folder (encoded with the same tokenizer, data/tokenizer.shared_tokenizer)."""
    from ablate.cli.common import compose_run
    from ablate.data.tokenizer import cache_key
    from ablate.perf.hardware import resolve
    from ablate.provenance import config_hash

    study = Path(__file__).resolve().parents[2] / "experiments" / "text_ladder_long"
    recorded = json.loads((study / "target" / "result.json").read_text())["config_hash"]
    overrides = yaml.safe_load((study / "study.yaml").read_text())["target"]["overrides"]
    cfg = compose_run([o for o in overrides if not o.startswith("hydra.")] + ["model.vocab_size=2048"])
    assert cfg.data.val_split == "tail" and config_hash(cfg, resolve(cfg.hardware)) == recorded
    files = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, val_split="files"))
    assert config_hash(files, resolve(cfg.hardware)) != recorded
    corpus = _corpus(tmp_path, {"a.txt": 50, "b.txt": 60})
    assert cache_key(corpus, 0.05, 512) == cache_key(corpus, 0.05, 512, "tail") != cache_key(corpus, 0.05, 512, "files")


def test_the_debian_docs_validation_files_come_from_each_of_its_packages():
    """Its preset holds out whole files by hash (val_split=files): 2% of the text from each package,
    where the tail would be the end of perl-doc alone."""
    from support import preset

    cfg = preset("data", "debian_docs")
    assert cfg["val_split"] == "files"
    corpus = read_corpus(cfg["paths"], cfg["glob"], cfg["max_bytes"])
    held = [corpus.files[i] for i in corpus.val_files(cfg["val_fraction"])]
    packages = set(package_versions(held))
    assert {"linux-doc-6.1", "python3.11-doc", "perl-doc"} <= packages


def test_the_sweep_presets_on_one_corpus_validate_on_one_split():
    """A ladder's law and an ablation's multipliers on the same corpus are scored on the same text:
    every sweep preset that trains on a data preset resolves to one validation split."""
    from support import CONF, preset

    splits: dict = {}
    for path in sorted((CONF / "sweep").glob("*.yaml")):
        doc = preset("sweep", path.stem)
        data = next(
            (d["override /data"] for d in doc.get("defaults", []) if isinstance(d, dict) and "override /data" in d),
            None,
        )
        if data is None or preset("data", data).get("kind") != "text":
            continue
        split = (doc.get("data") or {}).get("val_split", preset("data", data).get("val_split"))
        splits.setdefault(data, {})[path.stem] = split
    assert "architecture" in splits["debian_docs"] and "text_ladder" in splits["debian_docs"]
    for data, by_preset in splits.items():
        assert len(set(by_preset.values())) == 1, (data, by_preset)
