"""`ablate predict` names the runs that would settle a prediction it cannot make, within the corpus."""

from ablate.cli.predict import settling_runs


def test_a_not_determined_prediction_names_the_runs_that_would_determine_it():
    doc = {
        "predicted": None,
        "verdict": "not_determined",
        "runs_to_determine": [
            {"N": 4.4e5, "D": 2.4e7, "C": 6.3e13, "seconds": None},
            {"N": 1e6, "D": 8e6, "C": 4.8e13},
        ],
        "train_split_tokens": 16_600_000,
    }
    assert settling_runs(doc) == (
        "runs that would determine it: N=4.4e+05, D=2.4e+07 (more tokens than the training split holds); "
        "N=1e+06, D=8e+06; the training split holds 16,600,000 tokens"
    )


def test_a_prediction_with_a_number_or_no_runs_to_suggest_adds_nothing():
    assert settling_runs({"predicted": 3.7, "runs_to_determine": [{"N": 1, "D": 2}]}) is None
    assert settling_runs({"predicted": None, "runs_to_determine": []}) is None
