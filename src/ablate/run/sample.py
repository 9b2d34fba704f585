"""Text from a trained run's checkpoint, and how fast it came: the run's model built again from its
config (run/saved.py), the prompt cut into the run's own tokens (data/codec.py), the new tokens
picked at a temperature from the top k (perf/decode.py's loop, with its KV cache where the model
has one), and the decode tokens/s measured over the generation the user waited for, beside the
memory-bandwidth bound for that model, dtype and device (the bound `ablate plan` prints).

A measured speed above its bound is not a result but a bug (in the bound, the timing or the
bandwidth figure): `Sample` refuses to exist with one.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ablate.config import ConfigError, SampleConfig
from ablate.data import Codec, bpe, codec_for
from ablate.files import write_json
from ablate.perf import available_devices, decode
from ablate.run.saved import SavedRun, find_run, load_model

SCHEMA = "ablate.sample/1"
SAMPLE_FILE = "sample.json"


@dataclass(frozen=True)
class Speed:
    device: str
    dtype: str
    threads: int | None  # torch's threads on a CPU; None on a GPU
    kv_cache: bool
    prefill_s: float
    decode_s: float
    wall_s: float  # the whole generation, prefill and decode steps
    decode_tokens_per_s: float  # every sequence's tokens after the first, over decode_s
    bound_tokens_per_s: float  # decode.loop_bound for the same steps
    bandwidth: float  # bytes/s
    bandwidth_source: str
    bound_counts: str  # what the bound's bytes are

    def __post_init__(self):
        if self.decode_tokens_per_s > self.bound_tokens_per_s and self.bandwidth_source == decode.BANDWIDTH_GIVEN:
            raise ConfigError(
                f"bandwidth_gbs={self.bandwidth / 1e9:g} bounds decode at {self.bound_tokens_per_s:,.3g} tokens/s, "
                f"and it measured {self.decode_tokens_per_s:,.0f} here (valid: the device's real memory "
                "bandwidth, or null to take the catalogue's or this CPU's measured one)"
            )
        if self.decode_tokens_per_s > self.bound_tokens_per_s:
            raise RuntimeError(
                f"decode measured {self.decode_tokens_per_s:,.0f} tokens/s, above its bandwidth bound of "
                f"{self.bound_tokens_per_s:,.0f} ({self.bound_counts} at {self.bandwidth / 1e9:.4g} GB/s, "
                f"{self.bandwidth_source}): the bound, the timing or the bandwidth is wrong"
            )

    @property
    def share_of_bound(self) -> float:
        return self.decode_tokens_per_s / self.bound_tokens_per_s

    def line(self) -> str:
        cache = "with a KV cache" if self.kv_cache else "without a KV cache (the model's attention is a user's class)"
        where = self.device
        if self.threads is not None:
            where += f" ({self.threads} thread{'s' * (self.threads > 1)})"
        return (
            f"decode {self.decode_tokens_per_s:,.0f} tokens/s {cache} on {where} in {self.dtype}, "
            f"{self.share_of_bound:.1%} of the bandwidth bound {self.bound_tokens_per_s:,.0f} tokens/s "
            f"({self.bound_counts} read per step at {self.bandwidth / 1e9:.4g} GB/s, {self.bandwidth_source}); "
            f"whole generation {self.wall_s:.3g} s"
        )


@dataclass(frozen=True)
class Sample:
    run: str
    config_hash: str
    step: int
    model: str
    tokenizer: str
    prompt: str
    prompt_tokens: list[int]
    temperature: float
    top_k: int | None
    seed: int
    new_tokens: int
    texts: list[str]  # each sequence's new text, after the prompt
    tokens: list[list[int]]  # each sequence's new token ids
    speed: Speed

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["speed"]["share_of_bound"] = self.speed.share_of_bound
        return {"schema": SCHEMA, **doc, "made_at": time.time()}


def sample(cfg: SampleConfig) -> Sample:
    """The run's text after cfg.prompt, and its speed against the bound; ConfigError in one line."""
    import torch

    saved = find_run(Path(cfg.run), cfg.state_dir)
    codec = bpe(Path(cfg.tokenizer)) if cfg.tokenizer else codec_for(saved.cfg.data)
    prompt = prompt_ids(codec, cfg.prompt, saved)
    new_tokens = cfg.tokens or saved.cfg.model.block_size - len(prompt) + 1
    try:
        decode.check_room(saved.cfg.model, len(prompt), new_tokens)
    except ValueError:
        raise ConfigError(
            f"tokens={new_tokens} after a {len(prompt)}-token prompt do not fit model.block_size="
            f"{saved.cfg.model.block_size} (valid: tokens from 2 to {saved.cfg.model.block_size - len(prompt) + 1}, "
            "or a shorter prompt)"
        ) from None
    device = pick_device(cfg.device)
    dtype = cfg.dtype or serving_dtype(saved)
    model = load_model(saved, device, getattr(torch, TORCH_DTYPES[dtype]))
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    pick = decode.NextToken(cfg.temperature, cfg.top_k, generator)
    ids = torch.tensor([prompt] * cfg.samples, dtype=torch.long, device=device)
    threads = None if device != "cpu" else cfg.threads or decode.cpu_threads(saved.cfg.model, torch.get_num_threads())
    with torch_threads(threads):  # the bound too: a CPU's copy rate is measured at the threads decoding
        run = decode.generate(model, ids, new_tokens, pick)
        speed = measured_speed(saved, run, device, dtype, threads, cfg.bandwidth_gbs)
    new = run.tokens[:, len(prompt) :].tolist()
    return Sample(
        run=str(cfg.run),
        config_hash=saved.result.config_hash,
        step=saved.step,
        model=saved.cfg.model.name,
        tokenizer=codec.name,
        prompt=cfg.prompt,
        prompt_tokens=prompt,
        temperature=cfg.temperature,
        top_k=cfg.top_k,
        seed=cfg.seed,
        new_tokens=new_tokens,
        texts=[codec.decode(row) for row in new],
        tokens=new,
        speed=speed,
    )


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to `n` (None: as they are) while the generation runs, and put back."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# The dtype names of SampleConfig.dtype and decode.DTYPE_BYTES, as torch names them.
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def prompt_ids(codec: Codec, text: str, saved: SavedRun) -> list[int]:
    ids = codec.encode(text)
    vocab = saved.cfg.model.vocab_size
    if not ids or max(ids) >= vocab:
        raise ConfigError(
            f"prompt={text!r} is {ids[:8]} in {codec.name}, not ids below the model's vocabulary of {vocab} "
            "(valid: the run's own tokenizer, or a prompt it encodes)"
        )
    return ids


def pick_device(name: str) -> str:
    present = available_devices()
    if name == "auto":
        return "cuda" if "cuda" in present else "cpu"
    if name not in present:
        raise ConfigError(f"device={name} is not on this machine (valid here: auto, {', '.join(present)})")
    return name


def serving_dtype(saved: SavedRun) -> str:
    """The run's weights as served (decode.serving_dtype), 16 bits where that is fp8 (no fp8 kernels here)."""
    dtype = decode.serving_dtype(saved.cfg.precision)
    return "bf16" if dtype == "fp8" else dtype


def measured_speed(
    saved: SavedRun, run: decode.DecodeRun, device: str, dtype: str, threads: int | None, given_gbs: float | None
) -> Speed:
    try:
        bandwidth, source = decode.device_bandwidth(device, given_gbs)
    except ValueError as exc:
        raise ConfigError(f"{exc} (valid: bandwidth_gbs=N, the device's memory bandwidth in GB/s)") from None
    model = saved.cfg.model
    bound = decode.loop_bound(model, bandwidth, run.prompt, run.new_tokens, run.batch, dtype, dtype, run.kv_cache)
    counts = "weights + KV cache" if run.kv_cache else "weights only (no KV cache to read)"
    return Speed(
        device=device,
        dtype=dtype,
        threads=threads,
        kv_cache=run.kv_cache,
        prefill_s=run.prefill_s,
        decode_s=run.decode_s,
        wall_s=run.wall_s,
        decode_tokens_per_s=run.tokens_per_s,
        bound_tokens_per_s=bound,
        bandwidth=bandwidth,
        bandwidth_source=source,
        bound_counts=counts,
    )


def write_sample(result: Sample, out: Path) -> Path:
    return write_json(out, result.to_dict())
