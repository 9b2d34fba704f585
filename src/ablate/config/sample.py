"""The schema of `ablate sample` (conf/sample.yaml): which run, what to write after which prompt,
how each token is picked, and where the model runs."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.config.schema import build, require_at_most, require_positive
from ablate.errors import ConfigError

SAMPLE_DEVICES = ("auto", "cpu", "cuda")
SAMPLE_DTYPES = ("fp32", "bf16", "fp16")
MAX_SAMPLES = 1024  # sequences decoded side by side
# logits / temperature in fp32: below this a logit of 1e3 (far past a trained model's) reaches 1e9,
# still finite after the softmax subtracts the largest; at 1e-320 every logit is inf and the
# draw's probabilities are NaN.
MIN_TEMPERATURE = 1e-6
# GB/s: past any memory there is (an H200's HBM3e reads 4.8 TB/s).
MAX_BANDWIDTH_GBS = 1e5
MAX_THREADS = 1024  # torch threads on a CPU: past the cores of any one machine


@dataclass
class SampleConfig:
    run: str = ""  # a run's folder: result.json and .hydra/config.yaml (a branch's: its trunk's)
    state_dir: str | None = None  # where its checkpoint is (STATE/<config hash>/); null: the run's own
    prompt: str = " "
    tokens: int | None = None  # new tokens; null: as many as the context holds after the prompt
    temperature: float = 0.8  # 0: the most likely token each step
    top_k: int | None = 200  # draw from the k most likely; null: the whole vocabulary
    seed: int = 0
    samples: int = 1  # sequences decoded at once (one batch)
    device: str = "auto"  # auto: cuda when there is one, else cpu
    threads: int | None = None  # torch threads on a CPU; null: one for a model under 20M weights, else torch's default
    dtype: str | None = None  # the weights' dtype; null: the run's serving dtype (bf16 under bf16 policies)
    bandwidth_gbs: float | None = None  # the device's memory bandwidth; null: the catalogue's or measured
    tokenizer: str | None = None  # a tokenizer.json instead of the run's own
    out: str | None = None  # the record; null: RUN/sample.json

    def validate(self) -> None:
        if not self.run.strip():
            raise ConfigError("run is empty (valid: run=DIR, a run's folder with result.json, e.g. outputs/DATE/TIME)")
        if not self.prompt:
            raise ConfigError("prompt is empty (valid: at least one character, e.g. prompt=' ')")
        if self.tokens is not None and self.tokens < 2:
            raise ConfigError(
                f"tokens={self.tokens} is too few (valid: 2 or more new tokens, or null to fill the context)"
            )
        if self.temperature < 0:
            raise ConfigError(
                f"temperature={self.temperature} is negative (valid: 0 for the most likely token, or > 0)"
            )
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ConfigError(
                f"temperature={self.temperature:g} is too small to divide fp32 logits by (valid: 0 for the most "
                f"likely token, or at least {MIN_TEMPERATURE:g})"
            )
        if self.top_k is not None:
            require_positive("top_k", self.top_k)
        if self.seed < 0:
            raise ConfigError(f"seed={self.seed} is negative (valid: >= 0)")
        if not 1 <= self.samples <= MAX_SAMPLES:
            raise ConfigError(f"samples={self.samples} is out of range (valid: 1..{MAX_SAMPLES})")
        if self.device not in SAMPLE_DEVICES:
            raise ConfigError(f"device={self.device} is unknown (valid: {', '.join(SAMPLE_DEVICES)})")
        if self.dtype is not None and self.dtype not in SAMPLE_DTYPES:
            raise ConfigError(f"dtype={self.dtype} is unknown (valid: {', '.join(SAMPLE_DTYPES)}, or null)")
        if self.threads is not None:
            require_positive("threads", self.threads)
            require_at_most("threads", self.threads, MAX_THREADS, "threads")
        if self.bandwidth_gbs is not None:
            require_positive("bandwidth_gbs", self.bandwidth_gbs)
            require_at_most("bandwidth_gbs", self.bandwidth_gbs, MAX_BANDWIDTH_GBS, "GB/s")


def parse_sample(tree: dict) -> SampleConfig:
    """A validated SampleConfig from the composed conf/sample.yaml tree."""
    tree = {k: v for k, v in (tree or {}).items() if k != "hydra"}
    if isinstance(tree.get("prompt"), (int, float)):  # prompt=42 is the text 42
        tree["prompt"] = str(tree["prompt"])
    cfg = build(SampleConfig, tree, "")
    cfg.validate()
    return cfg
