import pytest

from ablate.config import ConfigError


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"model.n_embd": 100, "model.n_head": 3}, ["model.n_embd=100", "model.n_head=3", "multiple of 3"]),
        ({"optim.lr": -1.0}, ["optim.lr=-1.0", "> 0"]),
        ({"model.attention": "flash"}, ["model.attention='flash'", "manual, sdpa"]),
        ({"train.steps": 0}, ["train.steps=0", "> 0"]),
        ({"train.tokens": 1000}, ["exactly one training budget", "train.steps=20", "train.tokens=1000"]),
        ({"train.batch_size": "big"}, ["train.batch_size='big'", "not an integer"]),
        ({"data.kind": "images"}, ["data.kind='images'", "synthetic, text, tokens"]),
        ({"hardware.peak_flops": {"fp4": 1.0}}, ["fp4", "fp32, tf32, bf16, fp16, fp8"]),
        ({"tracking.backend": "wandb"}, ["tracking.backend='wandb'", "mlflow, none"]),
        ({"optim.beta2": 1.5}, ["optim.beta2=1.5", "0 <= value < 1"]),
        (
            {"tracking.required_tags": ["purpose", "owner"], "tracking.tags": {"owner": "me"}},
            ["tracking.required_tags names purpose", "+tracking.tags.purpose=VALUE"],
        ),
        ({"tracking.tags": {"ablate.kind": "x"}}, ["tracking.tags.ablate.kind is not a tag of yours", "mlflow."]),
        ({"tracking.tags": {"purpose": ""}}, ["tracking.tags.purpose is empty"]),
    ],
)
def test_bad_values_fail_with_one_line_naming_key_and_valid(run_config, tmp_path, overrides, words):
    with pytest.raises(ConfigError) as err:
        run_config(tmp_path, **overrides)
    message = str(err.value)
    assert "\n" not in message
    for w in words:
        assert w in message


def test_unknown_key_names_valid_keys(run_config, tmp_path):
    cfg = run_config(tmp_path)
    from ablate.config import ModelConfig, build

    with pytest.raises(ConfigError, match=r"unknown key model.widht \(valid: .*n_embd"):
        build(ModelConfig, {"widht": 3}, "model")
    assert cfg.model.name == "nano"


def test_integral_floats_are_accepted_as_ints(run_config, tmp_path):
    cfg = run_config(tmp_path, **{"train.steps": None, "train.tokens": 1e6})
    assert cfg.train.tokens == 1_000_000 and isinstance(cfg.train.tokens, int)
