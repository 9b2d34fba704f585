"""sweep/prediction.py: what a recorded prediction says of its outcome."""

from __future__ import annotations

import math

import pytest

from ablate.sweep import prediction
from ablate.sweep.prediction import outcome


def test_the_outcome_says_inside_or_outside_and_the_error():
    doc = {"predicted": 4.0, "interval95": [3.8, 4.2], "actual": 4.1}
    got = outcome(doc)
    assert got["inside"] is True
    assert got["error"] == pytest.approx(4.1 / 4.0 - 1) and got["half_width"] == pytest.approx(0.05)
    assert outcome({**doc, "actual": 4.3})["inside"] is False


def test_nothing_is_judged_before_the_run_or_without_a_number():
    assert outcome({"predicted": 4.0, "interval95": [3.8, 4.2], "actual": None})["inside"] is None
    nothing = outcome({"predicted": None, "interval95": None, "actual": 4.1})
    assert nothing == {"inside": None, "error": None, "half_width": None}


@pytest.mark.parametrize(
    ("made", "start", "end", "when"),
    [
        ("2026-01-01T10:00:00+00:00", "2026-01-01T11:00:00+00:00", "2026-01-01T12:00:00+00:00", "before"),
        ("2026-01-01T11:30:00+00:00", "2026-01-01T11:00:00+00:00", "2026-01-01T12:00:00+00:00", "during"),
        ("2026-01-01T12:30:00+00:00", "2026-01-01T11:00:00+00:00", "2026-01-01T12:00:00+00:00", "after"),
        ("2026-01-01T10:00:00+00:00", None, None, None),
    ],
)
def test_the_record_says_whether_the_prediction_came_before_during_or_after_the_run(made, start, end, when):
    """The run's own window (from its result.json) against the prediction's time: a prediction made
    after the run ended is said to predict nothing, in the table's last line and the study's heading."""
    doc = {"made_at": made, "trained_from": start, "trained_at": end}
    assert prediction.when_made(doc) == when
    if when == "after":
        assert "AFTER the target was trained: it predicts nothing" in prediction.TIMING[when]


# A prediction for a run of another vocabulary than its law's (plan/vocabulary.py for_target)

LAW_TOKENS = {"vocab_size": 2048, "data": "debian_docs", "tokenizer": "bpe", "bytes_per_token": 2.33}


@pytest.fixture(scope="module")
def law_fit(tmp_path_factory):
    """fit.json of a known law over 2e4..2e5 parameters x 5e3..1e5 tokens, as `ablate fit` writes
    it, whose runs trained on a 2,048-token BPE of debian_docs at 2.33 bytes per token."""
    import dataclasses
    import json

    from ablate.scaling.analysis import fit_all
    from ablate.scaling.points import Points
    from ablate.scaling.predict import FitOptions
    from ablate.scaling.reports.export import fit_dict
    from support import law_points_csv

    folder = tmp_path_factory.mktemp("law")
    (folder / "points.csv").write_text(law_points_csv(seed=0))
    points = Points.from_csv(folder / "points.csv")
    report = fit_all(points, options=FitOptions(n_boot=20), single=(), approach2=False)

    def write(name, tokens):
        doc = fit_dict(dataclasses.replace(report, points=dataclasses.replace(points, tokenizer=tokens)))
        (folder / name).write_text(json.dumps(doc))
        return folder / name

    return {
        "bpe": write("fit.json", LAW_TOKENS),
        "no_bytes": write("no_bytes.json", {**LAW_TOKENS, "bytes_per_token": None}),
    }


def target(vocab: int, bytes_per_token: float | None, data: str = "data=debian_docs"):
    """A run as prepare leaves it, without its data loaded: nano on `data` with a BPE of `vocab`."""
    from types import SimpleNamespace

    from ablate.cli.common import compose_run

    cfg = compose_run(["model=nano", data, f"model.vocab_size={vocab}", "train.steps=6", "tracking=none"])
    data = SimpleNamespace(
        bytes_per_token=bytes_per_token, train=range(1_000_000), provenance=lambda: {"name": cfg.data.kind}
    )
    return SimpleNamespace(cfg=cfg, data=data, total_steps=6, config_hash="0" * 64)


def law_at(fit_path, prepared, scale=1.0):
    from ablate.model import accounting
    from ablate.scaling import load_fit, predict

    cfg = prepared.cfg
    tokens = 6 * cfg.train.sequences_per_step * cfg.model.block_size
    flops = accounting.training_flops(cfg.model, tokens)
    return predict.predict(
        load_fit(str(fit_path)).predictor, N=accounting.params(cfg.model), D=tokens * scale, C=flops * scale
    )


def test_the_laws_own_vocabulary_and_the_same_tokenizer_padded_are_predicted_as_they_are(law_fit, tmp_path):
    for vocab, said in ((2048, None), (2112, "model.vocab_size=2,112 and the law's 2,048 are one tokenizer padded")):
        run = target(vocab, 2.33)
        doc = prediction.make_prediction(run, law_fit["bpe"], [], tmp_path / "p.json")
        law = law_at(law_fit["bpe"], run).loss
        assert law is not None and doc["predicted"] == pytest.approx(law.value)
        assert doc["law_units"] is None and (doc["vocabulary"] or "").startswith(said or "")
        assert (doc["vocabulary"] is None) == (said is None)


def test_another_tokenizer_gets_the_law_through_bits_per_byte_in_its_own_tokens(law_fit, tmp_path):
    """A 1,024-token BPE of the same text at 1.95 bytes per token: the law's loss L per 2.33 bytes is
    L x 1.95 / 2.33 per token of the run's, and its 6,144 tokens are 6,144 x 1.95 / 2.33 of the law's."""
    run = target(1024, 1.95)
    doc = prediction.make_prediction(run, law_fit["bpe"], [], tmp_path / "p.json")
    scale = 1.95 / 2.33
    law = law_at(law_fit["bpe"], run, scale).loss
    assert law is not None and doc["predicted"] == pytest.approx(law.value * scale)
    assert doc["interval95"] == pytest.approx([v * scale for v in law.ci95])
    assert doc["predicted_bpb"] == pytest.approx(law.value / math.log(2) / 2.33)  # the law's bits per byte
    assert doc["law_units"]["tokens"] == pytest.approx(doc["target"]["tokens"] * scale)
    assert doc["vocabulary"].startswith("The law was fitted on a 2,048-token vocabulary (debian_docs, bpe), this model")
    assert "read in bits per byte of text (L / ln 2 / 2.33 bytes per token)" in doc["vocabulary"]
    # the same vocabulary size with other bytes per token is another tokenizer padded to it, not the law's
    other = prediction.make_prediction(target(2112, 1.95), law_fit["bpe"], [], tmp_path / "p.json")
    assert other["law_units"] is not None and other["vocabulary"].startswith("The law was fitted on")


def test_another_vocabulary_without_bytes_per_token_on_either_side_is_refused_in_one_line(law_fit, tmp_path):
    from ablate.config import ConfigError

    with pytest.raises(ConfigError, match=r"records no bytes per token.*valid: model.vocab_size=2048"):
        prediction.make_prediction(target(1024, 1.95), law_fit["no_bytes"], [], tmp_path / "p.json")
    with pytest.raises(ConfigError, match=r"this run's data \(synthetic\) records no bytes per token.*valid:"):
        prediction.make_prediction(target(1024, None, "data=synthetic"), law_fit["bpe"], [], tmp_path / "p.json")
