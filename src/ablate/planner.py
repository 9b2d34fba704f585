"""Plan a big run: FLOPs, memory per GPU, time, cost, predicted loss, and the corner that binds.

The question: "I have this GPU, this data and this money: what should I train, what will it cost,
what will it reach, and what stops me first?" `make_plan` answers it from typed inputs, without I/O;
the functions in "Inputs" read what it needs (MLflow runs for the MFU, a fit.json, this CPU's peak),
and "Output" writes plan.json and plan.md.

Formulas
- Training FLOPs: C = 6ND (Kaplan et al. 2020; Hoffmann et al. 2022), and with attention
  D (6 N_matmul + 12 L T d) (accounting.flops_per_token): time is computed from the latter, the
  FLOPs the GPUs actually execute, which is also what the MFU of a recorded run is measured against.
- Memory per GPU: memory.py (states exact; activations from this model's saved tensors).
- Time: hours = flops / (gpus x peak FLOP/s x MFU) / 3600; cost = GPU-hours x price per GPU-hour.
- Loss: L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022, approach 3), N = total params.
- Compute-optimal allocation of C: N_opt = G (C/6)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta)),
  D_opt = C / (6 N_opt) (Hoffmann et al. 2022, eq. 4); without a fit, D = 20 N (their Table 3's
  ~20 tokens per parameter), i.e. N_opt = sqrt(C / 120).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import typing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

from ablate import accounting, memory
from ablate.config import ConfigError, HardwareConfig, ModelConfig, PrecisionConfig, _coerce, _positive, build

SCHEMA = "ablate.plan/1"
TOKENS_PER_PARAM_RULE = 20.0  # Hoffmann et al. 2022: compute-optimal models see ~20 tokens per parameter
COMPUTE_BUDGETS = ("flops", "hours", "dollars")
GB = 1e9


# ---------------------------------------------------------------------------------------------
# Config slices
# ---------------------------------------------------------------------------------------------


@dataclass
class BudgetConfig:
    """What the run may spend. tokens fixes D; at most one of flops, hours, dollars caps compute."""

    tokens: Optional[float] = None
    flops: Optional[float] = None
    hours: Optional[float] = None
    dollars: Optional[float] = None

    def validate(self) -> None:
        for key in ("tokens", *COMPUTE_BUDGETS):
            if getattr(self, key) is not None:
                _positive(f"budget.{key}", getattr(self, key))
        given = [k for k in COMPUTE_BUDGETS if getattr(self, k) is not None]
        if len(given) > 1:
            pairs = " and ".join(f"budget.{k}={getattr(self, k):g}" for k in given)
            raise ConfigError(f"{pairs} conflict (valid: at most one of budget.flops, budget.hours, "
                              "budget.dollars, with or without budget.tokens)")
        if self.tokens is None and not given:
            raise ConfigError("no budget given (valid: budget.tokens=N, and/or one of budget.flops, "
                              "budget.hours, budget.dollars)")

    @property
    def compute_key(self) -> Optional[str]:
        return next((k for k in COMPUTE_BUDGETS if getattr(self, k) is not None), None)


@dataclass
class PlanDataConfig:
    # Unique training tokens the user has; None: not a constraint.
    tokens_available: Optional[float] = None

    def validate(self) -> None:
        if self.tokens_available is not None:
            _positive("data.tokens_available", self.tokens_available)


@dataclass
class PlanConfig:
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    data: PlanDataConfig = field(default_factory=PlanDataConfig)
    # GPUs the user has; the plan says when it needs more.
    gpus: int = 1
    # Micro-batch per GPU in sequences (the global batch comes from data parallelism and gradient
    # accumulation, which do not change memory per GPU).
    batch_size: int = 4
    # Training context; None: the model's block_size.
    context: Optional[int] = None
    activation_checkpointing: bool = False
    # MFU to assume; None: the median of the user's own runs on this hardware and precision, else default_mfu.
    mfu: Optional[float] = None
    default_mfu: float = 0.4
    # Fraction of each GPU's memory kept free (CUDA context, allocator fragmentation).
    memory_reserve: float = 0.1
    fit: Optional[str] = None
    tracking_uri: str = ""
    out: str = "plans/plan"

    def validate(self) -> None:
        self.budget.validate()
        self.data.validate()
        for key in ("gpus", "batch_size"):
            _positive(key, getattr(self, key))
        if self.context is not None:
            _positive("context", self.context)
        for key in ("mfu", "default_mfu"):
            v = getattr(self, key)
            if v is not None and not 0.0 < v <= 1.0:
                raise ConfigError(f"{key}={v} is invalid (valid: 0 < {key} <= 1)")
        if not 0.0 <= self.memory_reserve < 1.0:
            raise ConfigError(f"memory_reserve={self.memory_reserve} is invalid (valid: 0 <= memory_reserve < 1)")
        if not self.out:
            raise ConfigError("out is empty (valid: a directory path, e.g. plans/my-run)")


@dataclass(frozen=True)
class PlanInputs:
    model: ModelConfig
    precision: PrecisionConfig
    hardware: HardwareConfig
    plan: PlanConfig


PLAN_KEYS = {"model", "precision", "hardware", "budget", "data"} | {
    f for f in PlanConfig.__dataclass_fields__ if f not in ("budget", "data")}


def parse_plan(tree: dict) -> PlanInputs:
    """Typed, validated slices from the composed conf/plan.yaml tree (a plain dict)."""
    tree = {k: v for k, v in tree.items() if k != "hydra"}
    for key in tree:
        if key not in PLAN_KEYS:
            raise ConfigError(f"unknown key {key} (valid: {', '.join(sorted(PLAN_KEYS))})")
    model = build(ModelConfig, tree.get("model"), "model")
    precision = build(PrecisionConfig, tree.get("precision"), "precision")
    hardware = build(HardwareConfig, tree.get("hardware"), "hardware")
    hints = typing.get_type_hints(PlanConfig)
    top = {k: _coerce(k, v, hints[k]) for k, v in tree.items()
           if k not in ("model", "precision", "hardware", "budget", "data")}
    plan = PlanConfig(budget=build(BudgetConfig, tree.get("budget"), "budget"),
                      data=build(PlanDataConfig, tree.get("data"), "data"), **top)
    if model.vocab_size is None:
        raise ConfigError(f"model.vocab_size is null for model={model.name} (valid: a vocabulary size, "
                          "e.g. model.vocab_size=27 for the synthetic language or 50257 for GPT-2's BPE)")
    if plan.context is not None:
        model = replace(model, block_size=plan.context)
    for part in (model, precision, hardware, plan):
        part.validate()
    return PlanInputs(model, precision, hardware, plan)


# ---------------------------------------------------------------------------------------------
# Inputs: the hardware's figures, the MFU, the fit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanHardware:
    name: str
    device: str
    peak_flops: float  # dense FLOP/s for the precision's matmuls
    peak_key: str
    memory_bytes: float
    price_per_hour: Optional[float]
    gpus_per_node: int
    memory_bandwidth_gbs: Optional[float] = None  # for decode.py's bound on generation speed


def planning_hardware(cfg: HardwareConfig, precision: PrecisionConfig) -> PlanHardware:
    """Catalogue figures for a named accelerator, or this machine's measured figures for hardware=cpu."""
    if cfg.device not in ("cpu", "cuda", "mps") or (cfg.device != "cpu" and not cfg.peak_flops):
        raise ConfigError(f"hardware={cfg.name} has no catalogue figures to plan with (valid: a catalogue entry "
                          "such as a100, h100, h200, rtx4090, m3_ultra, or cpu; or set hardware.peak_flops "
                          "and hardware.memory_gb)")
    peaks = {k: float(v) for k, v in cfg.peak_flops.items() if v is not None}
    if cfg.device == "cpu" and "fp32" not in peaks:
        from ablate.hardware import measured_cpu_peak_flops  # imports torch: only for the CPU

        peaks["fp32"] = measured_cpu_peak_flops()
    _check_supported(cfg, precision, peaks)
    key = peak_key(precision)
    key = key if key in peaks else "fp32"
    if key not in peaks:
        raise ConfigError(f"hardware.peak_flops has no {peak_key(precision)} or fp32 entry for hardware={cfg.name} "
                          f"(valid: e.g. hardware.peak_flops.{peak_key(precision)}=1e15)")
    memory_gb = cfg.memory_gb
    if memory_gb is None and cfg.device == "cpu":
        import psutil

        memory_gb = psutil.virtual_memory().total / GB
    if memory_gb is None:
        raise ConfigError(f"hardware.memory_gb is null for hardware={cfg.name} (valid: the memory of one device in GB)")
    bandwidth = cfg.memory_bandwidth_gbs
    if bandwidth is None and cfg.device == "cpu":  # measured once per machine, like the peak
        from ablate.roofline import measured_cpu_bandwidth

        bandwidth = measured_cpu_bandwidth() / 1e9
    return PlanHardware(cfg.name, cfg.device, peaks[key], key, memory_gb * GB, cfg.price_per_hour, cfg.gpus_per_node,
                        bandwidth)


def peak_key(precision: PrecisionConfig) -> str:
    """The dtype a policy's matmuls run in: the same choice as hardware.Hardware.peak_for (which
    needs torch; the planner does not)."""
    if precision.fp8 == "real":
        return "fp8"
    if precision.autocast:
        return precision.autocast
    return "bf16" if precision.param_dtype == "bf16" else "fp32"


def _check_supported(cfg: HardwareConfig, precision: PrecisionConfig, peaks: dict) -> None:
    if cfg.device not in precision.devices:
        raise ConfigError(f"precision={precision.name} cannot run on hardware={cfg.name} ({cfg.device}) "
                          f"(valid devices: {', '.join(precision.devices)})")
    need = precision.min_cuda_capability
    if cfg.device == "cuda" and need is not None and (cfg.cuda_capability or 0) < need:
        raise ConfigError(f"precision={precision.name} needs CUDA compute capability >= {need}; "
                          f"hardware={cfg.name} has {cfg.cuda_capability} (valid: newer hardware or another precision)")
    if precision.fp8 == "real" and "fp8" not in peaks:
        raise ConfigError(f"precision=fp8 needs fp8 tensor cores; hardware={cfg.name} lists none in peak_flops")


@dataclass(frozen=True)
class MfuChoice:
    value: float
    source: str  # "override", "measured" or "default"
    detail: str
    run_ids: tuple[str, ...] = ()


def choose_mfu(plan: PlanConfig, hardware: str, device: str, precision: str) -> MfuChoice:
    if plan.mfu is not None:
        return MfuChoice(plan.mfu, "override", f"mfu={plan.mfu:g}")
    runs, problem = measured_mfu_runs(plan.tracking_uri, hardware, device, precision)
    if runs:
        value = statistics.median(v for _, v in runs)
        return MfuChoice(value, "measured", f"median of {len(runs)} FINISHED run(s) on hardware={hardware}, "
                         f"precision={precision} in {plan.tracking_uri}", tuple(r for r, _ in runs))
    why = problem or f"no FINISHED runs on hardware={hardware}, precision={precision} in {plan.tracking_uri}"
    return MfuChoice(plan.default_mfu, "default", why)


def measured_mfu_runs(uri: str, hardware: str, device: str, precision: str) -> tuple[list[tuple[str, float]], str]:
    """(run id, MFU) of every FINISHED training run on this hardware and precision, in any experiment.

    A run's MFU is its `final/mfu` metric, else its last `mfu`. Runs launched with hardware=auto
    count for the device they resolved to (param derived.device) when planning for that device.
    A missing sqlite store is not created: it just has no runs.
    """
    if not uri:
        return [], "no tracking_uri"
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        return [], f"no MLflow store at {uri}"
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    filters = [f"params.`hardware.name` = '{hardware}'"]
    if hardware in ("cpu", "cuda", "mps"):
        filters.append(f"params.`hardware.name` = 'auto' and params.`derived.device` = '{hardware}'")
    try:
        client = MlflowClient(tracking_uri=uri)
        experiments = [e.experiment_id for e in client.search_experiments()]
        found = {}
        for f in filters:
            query = f"{f} and params.`precision.name` = '{precision}' and attributes.status = 'FINISHED'"
            for run in _all_runs(client, experiments, query):
                metrics = run.data.metrics
                value = metrics.get("final/mfu", metrics.get("mfu"))
                if value is not None and math.isfinite(value) and value > 0:
                    found[run.info.run_id] = float(value)
    except (MlflowException, OSError) as exc:
        return [], f"could not read {uri}: {str(exc).splitlines()[0]}"
    return sorted(found.items()), ""


def _all_runs(client, experiments: list[str], query: str):
    token = None
    while experiments:
        page = client.search_runs(experiments, filter_string=query, max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


@dataclass(frozen=True)
class FitLaw:
    """Approach 3 of an exported fit (fit_export.py): point estimates, 95% intervals, and bootstrap
    samples (R, 5) in the order E, A, B, alpha, beta when the file has them."""

    path: str
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    ci95: dict  # name -> (lo, hi) or None
    samples: Optional[tuple] = None
    data_range: Optional[dict] = None  # {"N": (min, max), "D": ..., "C": ...}

    NAMES = ("E", "A", "B", "alpha", "beta")

    def law(self):
        from ablate.scaling.chinchilla import ChinchillaLaw

        return ChinchillaLaw(self.E, self.A, self.B, self.alpha, self.beta)


def load_fit(path: str) -> FitLaw:
    """Read `chinchilla_approach3` from a fit.json written by ablate.fit_export."""
    where = f"fit={path}"
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read: {exc.strerror} (valid: a fit.json written by ablate.fit_export)")
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON: {exc} (valid: a fit.json written by ablate.fit_export)")
    a3 = doc.get("chinchilla_approach3") if isinstance(doc, dict) else None
    if not isinstance(a3, dict):
        raise ConfigError(f"{where} has no chinchilla_approach3 (valid: a fit.json written by ablate.fit_export)")
    if a3.get("status") not in (None, "converged") or not a3.get("params"):
        raise ConfigError(f"{where}: chinchilla_approach3 is {a3.get('status')!r} with no parameters "
                          "(valid: a fit whose approach 3 converged)")
    params = a3["params"]
    values, ci = {}, {}
    for name in FitLaw.NAMES:
        entry = params.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), (int, float)):
            raise ConfigError(f"{where}: chinchilla_approach3.params.{name} is missing (valid: "
                              '{"value": v, "ci95": [lo, hi]} for each of E, A, B, alpha, beta)')
        values[name] = float(entry["value"])
        interval = entry.get("ci95")
        ci[name] = tuple(float(v) for v in interval) if isinstance(interval, list) and len(interval) == 2 else None
    samples = (a3.get("bootstrap") or {}).get("samples")
    if samples is not None:
        samples = tuple(tuple(float(v) for v in row) for row in samples if len(row) == len(FitLaw.NAMES))
    data = doc.get("data") or {}
    data_range = {k: (float(data[k]["min"]), float(data[k]["max"])) for k in ("N", "D", "C")
                  if isinstance(data.get(k), dict)} or None
    return FitLaw(path, ci95=ci, samples=samples or None, data_range=data_range, **values)


# ---------------------------------------------------------------------------------------------
# Loss and the compute-optimal alternative
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LossPrediction:
    value: float
    lo: Optional[float]
    hi: Optional[float]
    interval: str  # how lo and hi were obtained
    warning: Optional[str] = None  # extrapolation past the fitted data


def predict_loss(fit: FitLaw, N: float, D: float) -> LossPrediction:
    """L(N, D) with a 95% interval: bootstrap percentiles when the fit exports its resamples;
    otherwise the extremes of L over the box of the parameters' own 95% intervals.

    The box is conservative: L rises with E, A and B and falls with alpha and beta (for N, D > 1),
    so its corners bound L over the box, and the box ignores that A and alpha (B and beta) are
    strongly correlated in the fit, which makes it much wider than the joint interval.
    """
    value = float(fit.law().loss(N, D))
    warning = _extrapolation(fit, N, D)
    if fit.samples:
        import numpy as np

        s = np.asarray(fit.samples)
        losses = s[:, 0] + s[:, 1] / N ** s[:, 3] + s[:, 2] / D ** s[:, 4]
        lo, hi = np.percentile(losses[np.isfinite(losses)], [2.5, 97.5])
        return LossPrediction(value, float(lo), float(hi), f"bootstrap percentile, {len(s)} resamples", warning)
    ci = fit.ci95
    if all(ci.get(k) for k in FitLaw.NAMES):
        lo = ci["E"][0] + ci["A"][0] / N ** ci["alpha"][1] + ci["B"][0] / D ** ci["beta"][1]
        hi = ci["E"][1] + ci["A"][1] / N ** ci["alpha"][0] + ci["B"][1] / D ** ci["beta"][0]
        return LossPrediction(value, lo, hi, "extremes over the box of the parameters' 95% intervals "
                              "(the fit exports no bootstrap samples; conservative)", warning)
    return LossPrediction(value, None, None, "none: the fit has no parameter intervals", warning)


def _extrapolation(fit: FitLaw, N: float, D: float) -> Optional[str]:
    from ablate.scaling.predict import extrapolation_warning

    if not fit.data_range:
        return None
    point = {"N": N, "D": D, "C": 6 * N * D}
    orders = {k: max(0.0, math.log10(point[k] / hi), math.log10(lo / point[k]))
              for k, (lo, hi) in fit.data_range.items()}
    return extrapolation_warning(orders)


@dataclass(frozen=True)
class Alternative:
    """The compute-optimal (N, D) for the same FLOPs C (C = 6ND)."""

    C: float
    N_opt: float
    D_opt: float
    method: str
    loss: Optional[LossPrediction] = None

    @property
    def tokens_per_param(self) -> float:
        return self.D_opt / self.N_opt


def compute_optimal(C: float, fit: Optional[FitLaw]) -> Alternative:
    if fit is None:
        n = math.sqrt(C / (6 * TOKENS_PER_PARAM_RULE))
        return Alternative(C, n, C / (6 * n), f"rule of thumb D = {TOKENS_PER_PARAM_RULE:g} N (Hoffmann et al. 2022); "
                           "give fit= for your own scaling law")
    law = fit.law()
    n, d = float(law.n_opt(C)), float(law.d_opt(C))
    return Alternative(C, n, d, f"approach-3 fit {fit.path}: N_opt = G (C/6)^{law.a:.3f}, G = {law.G:.4g}",
                       predict_loss(fit, n, d))


# ---------------------------------------------------------------------------------------------
# Memory on the GPUs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fallback:
    """Settings that fit when the configured ones fit on no number of GPUs."""

    batch_size: int
    activation_checkpointing: bool
    gpus_needed: int


@dataclass(frozen=True)
class MemoryPlan:
    usable: float  # bytes per GPU the plan may use
    capacity: float
    at_gpus: memory.GpuMemory  # on the GPUs the user has
    needed: Optional[memory.GpuMemory]  # on the fewest GPUs that fit (None when nothing fits)
    gpus_needed_as_configured: Optional[int]  # None: no count fits at the configured batch/checkpointing
    fallback: Optional[Fallback]
    bytes_per_param: float

    @property
    def fits(self) -> bool:
        return self.at_gpus.total <= self.usable

    @property
    def gpus_needed(self) -> Optional[int]:
        """The fewest GPUs that fit, with the fallback's settings when the configured ones never fit."""
        if self.gpus_needed_as_configured is not None:
            return self.gpus_needed_as_configured
        return self.fallback.gpus_needed if self.fallback else None


def memory_on(model: ModelConfig, precision: PrecisionConfig, batch: int, gpus: int, device: str,
              checkpointing: bool, usable: float) -> memory.GpuMemory:
    """Replicated (DDP) when the whole run fits on one GPU, else sharded over `gpus`."""
    single = memory.gpu_memory(model, precision, batch, gpus, False, device, checkpointing)
    if single.total <= usable or gpus == 1:
        return single
    return memory.gpu_memory(model, precision, batch, gpus, True, device, checkpointing)


def smallest_gpu_count(model: ModelConfig, precision: PrecisionConfig, batch: int, device: str,
                       checkpointing: bool, usable: float) -> Optional[int]:
    """Fewest GPUs on which the run fits: 1 unsharded, else states sharded FSDP/ZeRO-3 style.

    Sharding divides the states and the optimizer step's temporaries; activations and FSDP's
    gather buffers stay per GPU, so when they alone exceed the GPU no count fits (None).
    """
    if memory.gpu_memory(model, precision, batch, 1, False, device, checkpointing).total <= usable:
        return 1
    probe = memory.gpu_memory(model, precision, batch, 1, True, device, checkpointing)
    room = usable - probe.activations - probe.fsdp_buffers - probe.buffers
    if room <= 0:
        return None
    g = max(2, math.ceil(probe.states / room))
    while memory.gpu_memory(model, precision, batch, g, True, device, checkpointing).total > usable:
        g += 1
    return g


def plan_memory(model: ModelConfig, precision: PrecisionConfig, plan: PlanConfig, hw: PlanHardware) -> MemoryPlan:
    usable = hw.memory_bytes * (1 - plan.memory_reserve)
    batch, ckpt, device = plan.batch_size, plan.activation_checkpointing, hw.device
    at_gpus = memory_on(model, precision, batch, plan.gpus, device, ckpt, usable)
    needed_n = smallest_gpu_count(model, precision, batch, device, ckpt, usable)
    fallback = None
    if needed_n is None:
        fallback = _fallback(model, precision, batch, ckpt, device, usable)
    needed = None
    if needed_n is not None:
        needed = memory_on(model, precision, batch, needed_n, device, ckpt, usable)
    elif fallback is not None:
        needed = memory_on(model, precision, fallback.batch_size, fallback.gpus_needed, device, True, usable)
    states = memory.state_bytes(model, precision, device)
    return MemoryPlan(usable, hw.memory_bytes, at_gpus, needed, needed_n, fallback, states.bytes_per_param)


def _fallback(model, precision, batch, ckpt, device, usable) -> Optional[Fallback]:
    """Activation checkpointing first, then halving the micro-batch down to one sequence."""
    candidates = [] if ckpt else [(batch, True)]
    b = batch
    while b > 1:
        b //= 2
        candidates.append((b, True))
    for b, c in candidates:
        n = smallest_gpu_count(model, precision, b, device, c, usable)
        if n is not None:
            return Fallback(b, c, n)
    return None


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraint:
    """need / have > 1 means this corner stops the plan."""

    corner: str  # data, compute or hardware
    what: str
    need: float
    have: float
    text: str

    @property
    def ratio(self) -> float:
        return self.need / self.have


@dataclass(frozen=True)
class Plan:
    model: ModelConfig
    precision: PrecisionConfig
    hardware: PlanHardware
    plan: PlanConfig
    params: int
    params_non_embedding: int
    tokens: int
    tokens_from: str
    flops_per_token: int
    flops_6nd: float
    flops: float
    memory: MemoryPlan
    gpus_used: int
    mfu: MfuChoice
    hours: float
    gpu_hours: float
    cost: Optional[float]
    prediction: Optional[LossPrediction]
    alternative: Alternative
    constraints: tuple[Constraint, ...]
    notes: tuple[str, ...] = ()

    @property
    def decode(self) -> list:
        """The memory-bandwidth bound on decode tokens/s (decode.py), 1 and batch_size sequences."""
        from ablate import decode

        return decode.plan_bounds(self.model, self.precision, self.hardware.memory_bandwidth_gbs,
                                  self.model.block_size, self.plan.batch_size)

    @property
    def binding(self) -> Constraint:
        return max(self.constraints, key=lambda c: c.ratio)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def gpus_needed(self) -> Optional[int]:
        return self.memory.gpus_needed


def make_plan(inputs: PlanInputs, hw: PlanHardware, mfu: MfuChoice, fit: Optional[FitLaw] = None) -> Plan:
    model, precision, cfg = inputs.model, inputs.precision, inputs.plan
    budget = cfg.budget
    n = accounting.params(model)
    fpt = accounting.flops_per_token(model)
    mem = plan_memory(model, precision, cfg, hw)
    gpus_used = max(cfg.gpus, mem.gpus_needed or cfg.gpus)
    flops_per_s = gpus_used * hw.peak_flops * mfu.value
    # Recomputing each block's forward in backward executes 8N instead of 6N per token; MFU counts
    # only the model's 6N (Chowdhery et al. 2022, MFU vs HFU), so the run takes 4/3 as long.
    recompute = 4 / 3 if _checkpointing(cfg, mem) else 1.0
    compute_budget = _compute_budget(budget, hw, gpus_used, mfu.value, recompute)
    if budget.tokens is not None:
        tokens, tokens_from = round(budget.tokens), "budget.tokens"
    else:
        tokens = math.floor(compute_budget / fpt)
        tokens_from = f"what budget.{budget.compute_key} buys"
        if tokens < 1:
            raise ConfigError(f"budget.{budget.compute_key}={getattr(budget, budget.compute_key):g} buys no "
                              "training tokens (valid: a larger budget)")
    flops = float(fpt) * tokens
    hours = flops * recompute / flops_per_s / 3600
    gpu_hours = hours * gpus_used
    cost = None if hw.price_per_hour is None else gpu_hours * hw.price_per_hour
    C = compute_budget if compute_budget is not None else accounting.flops_6nd(n, tokens)
    alternative = compute_optimal(C, fit)
    prediction = predict_loss(fit, n, tokens) if fit is not None else None
    constraints = _constraints(cfg, hw, mem, tokens, flops, hours, cost, alternative, gpus_used)
    notes = _notes(inputs, hw, mem, gpus_used, mfu)
    return Plan(model, precision, hw, cfg, n, accounting.params_non_embedding(model), tokens, tokens_from,
                fpt, accounting.flops_6nd(n, tokens), flops, mem, gpus_used, mfu, hours, gpu_hours, cost,
                prediction, alternative, tuple(constraints), tuple(notes))


def _checkpointing(cfg: PlanConfig, mem: MemoryPlan) -> bool:
    """Whether the run as planned (on gpus_needed) recomputes activations."""
    return cfg.activation_checkpointing or (mem.gpus_needed_as_configured is None and mem.fallback is not None)


def _compute_budget(budget: BudgetConfig, hw: PlanHardware, gpus: int, mfu: float, recompute: float) -> Optional[float]:
    """The model FLOPs a compute budget buys at this MFU (fewer when activations are recomputed)."""
    if budget.flops is not None:
        return budget.flops
    if budget.hours is not None:
        return budget.hours * 3600 * gpus * hw.peak_flops * mfu / recompute
    if budget.dollars is not None:
        if not hw.price_per_hour:
            raise ConfigError(f"budget.dollars needs a price, but hardware.price_per_hour is {hw.price_per_hour or 'null'} "
                              f"for hardware={hw.name} (valid: hardware.price_per_hour=<dollars per GPU-hour>)")
        return budget.dollars / hw.price_per_hour * 3600 * hw.peak_flops * mfu / recompute
    return None


def _constraints(cfg: PlanConfig, hw: PlanHardware, mem: MemoryPlan, tokens: float, flops: float, hours: float,
                 cost: Optional[float], alt: Alternative, gpus_used: int) -> list[Constraint]:
    b = cfg.budget
    at = mem.at_gpus
    where = f"{cfg.gpus} {hw.name}" + (" (sharded states)" if at.sharded else "")
    if mem.gpus_needed_as_configured is not None:
        more = f"; fits on {mem.gpus_needed} GPU(s)" + (" with sharded states (FSDP/ZeRO-3)" if mem.gpus_needed > 1 else "")
    elif mem.fallback is not None:
        f = mem.fallback
        more = (f"; no GPU count fits with batch_size={cfg.batch_size}, activation_checkpointing="
                f"{str(cfg.activation_checkpointing).lower()}: with batch_size={f.batch_size}, "
                f"activation_checkpointing=true it fits on {f.gpus_needed} GPU(s)")
    else:
        more = "; activations alone exceed one GPU even with checkpointing and one sequence per GPU"
    out = [Constraint("hardware", "memory", at.total, mem.usable,
                      f"{_gb(at.total)} per GPU on {where} vs {_gb(mem.usable)} usable{more}")]
    if b.hours is not None:
        out.append(Constraint("hardware", "time", hours, b.hours,
                              f"{hours:,.1f} h on {gpus_used} {hw.name} vs budget.hours={b.hours:g}"))
    if b.flops is not None:
        out.append(Constraint("compute", "FLOPs", flops, b.flops, f"{flops:.3g} training FLOPs vs budget.flops={b.flops:.3g}"))
    if b.dollars is not None and cost is not None:
        out.append(Constraint("compute", "dollars", cost, b.dollars, f"${cost:,.0f} vs budget.dollars=${b.dollars:,.0f}"))
    avail = cfg.data.tokens_available
    if avail is not None:
        if alt.D_opt >= tokens:
            text = f"compute-optimal tokens D_opt={alt.D_opt:.3g} vs {avail:.3g} available"
        else:
            text = f"planned tokens {tokens:.3g} vs {avail:.3g} available (more would mean repeating data)"
        out.append(Constraint("data", "tokens", max(tokens, alt.D_opt), avail, text))
    return out


def _notes(inputs: PlanInputs, hw: PlanHardware, mem: MemoryPlan, gpus_used: int, mfu: MfuChoice) -> list[str]:
    notes = []
    cfg = inputs.plan
    if gpus_used > cfg.gpus:
        notes.append(f"Time and cost are for {gpus_used} GPUs, the fewest the run fits on (gpus={cfg.gpus} given).")
    if mem.fallback is not None:
        f = mem.fallback
        notes.append(f"gpus_needed assumes batch_size={f.batch_size} and activation_checkpointing=true; time "
                     "includes recomputing each block's forward (4/3 of the time at the same MFU).")
    elif cfg.activation_checkpointing:
        notes.append("Time includes recomputing each block's forward (4/3 of the time at the same MFU).")
    if inputs.precision.name in ("fp8", "fp8_emulated"):
        notes.append("The fp8 activation model follows precision.py but has not been measured on hardware.")
    if hw.device == "mps":
        notes.append("The memory model was measured on the CPU and derived for CUDA; MPS may differ.")
    if mfu.source == "default":
        notes.append("MFU is a default, not a measurement: run on this hardware (or pass mfu=) to firm up time and cost.")
    return notes


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def plan_dict(p: Plan) -> dict:
    """The content of plan.json (bytes, FLOPs, hours, dollars; loss in nats per token)."""
    mem = p.memory
    binding = p.binding
    return {
        "schema": SCHEMA,
        "model": p.model.name, "precision": p.precision.name, "hardware": p.hardware.name,
        "inputs": {"model": asdict(p.model), "budget": asdict(p.plan.budget), "data": asdict(p.plan.data),
                   "gpus": p.plan.gpus, "batch_size": p.plan.batch_size, "context": p.model.block_size,
                   "activation_checkpointing": p.plan.activation_checkpointing, "fit": p.plan.fit},
        "params": p.params, "params_non_embedding": p.params_non_embedding,
        "tokens": p.tokens, "tokens_from": p.tokens_from, "tokens_per_param": p.tokens / p.params,
        "flops_6nd": p.flops_6nd, "flops": p.flops, "flops_per_token": p.flops_per_token,
        "flops_formula": "flops = tokens x (6 N_matmul + 12 L T d); flops_6nd = 6 x params x tokens",
        "memory": {**mem.at_gpus.parts(), "gpus": mem.at_gpus.gpus, "sharded": mem.at_gpus.sharded,
                   "activations_saved": mem.at_gpus.activations_saved, "usable_per_gpu": mem.usable,
                   "capacity_per_gpu": mem.capacity, "bytes_per_param": mem.bytes_per_param,
                   "total_formula": "weights + gradients + optimizer_states + master_weights + buffers + "
                                    "max(activations + fsdp_buffers, optimizer_step)"},
        "memory_at_gpus_needed": None if mem.needed is None else {**mem.needed.parts(), "gpus": mem.needed.gpus,
                                                                   "sharded": mem.needed.sharded},
        "fits": p.fits, "gpus_needed": p.gpus_needed,
        "gpus_needed_with": _needed_with(p),
        "gpus": p.gpus_used, "nodes": math.ceil(p.gpus_used / p.hardware.gpus_per_node),
        "peak_flops_per_gpu": p.hardware.peak_flops, "peak_dtype": p.hardware.peak_key,
        "mfu": p.mfu.value, "mfu_source": p.mfu.source, "mfu_detail": p.mfu.detail, "mfu_runs": list(p.mfu.run_ids),
        "hours": p.hours, "gpu_hours": p.gpu_hours, "price_per_hour": p.hardware.price_per_hour, "cost": p.cost,
        "predicted_loss": None if p.prediction is None else asdict(p.prediction),
        "compute_optimal": {**asdict(p.alternative), "tokens_per_param": p.alternative.tokens_per_param},
        "binding": binding.corner, "binding_what": binding.what, "binding_ratio": binding.ratio,
        "binds": binding.ratio > 1, "binding_detail": binding.text,
        "constraints": [{**asdict(c), "ratio": c.ratio} for c in p.constraints],
        "decode": _decode_entry(p),
        "notes": list(p.notes),
    }


def _needed_with(p: Plan) -> Optional[dict]:
    """The settings gpus_needed assumes: the configured ones, or the fallback's."""
    mem = p.memory
    if mem.gpus_needed_as_configured is not None:
        return {"batch_size": p.plan.batch_size, "activation_checkpointing": p.plan.activation_checkpointing,
                "changed": False}
    if mem.fallback is not None:
        return {"batch_size": mem.fallback.batch_size, "activation_checkpointing": True, "changed": True}
    return None


def _gb(x: float) -> str:
    return f"{x / GB:,.1f} GB" if x >= 0.1 * GB else f"{x / 1e6:,.2f} MB"


def _count(x: float) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def _loss(pred: Optional[LossPrediction]) -> str:
    if pred is None:
        return "n/a"
    ci = "" if pred.lo is None else f" (95%: {pred.lo:.3f} to {pred.hi:.3f})"
    return f"{pred.value:.3f} nats/token{ci}"


def _duration(hours: float) -> str:
    return f"{hours:,.1f} h" + (f" ({hours / 24:,.1f} days)" if hours >= 48 else "")


def summary_rows(p: Plan) -> list[tuple[str, str]]:
    """(label, value) rows shared by the terminal table and plan.md."""
    m, mem = p.memory.at_gpus, p.memory
    dtype = p.precision.param_dtype
    per = "per GPU" + (f", sharded over {m.gpus}" if m.sharded else "")
    act = (f"micro-batch {p.plan.batch_size} x {p.model.block_size} tokens, "
           f"{'with' if p.plan.activation_checkpointing else 'no'} activation checkpointing")
    rows = [
        ("model", f"{p.model.name}: {_count(p.params)} params ({p.model.n_layer} layers, d={p.model.n_embd}, "
                  f"context {p.model.block_size}, vocab {p.model.vocab_size})"),
        ("tokens", f"{_count(p.tokens)} ({p.tokens_from}; {p.tokens / p.params:.1f} per param)"),
        ("training FLOPs", f"{p.flops_6nd:.3g} by 6ND; {p.flops:.3g} with attention (6N+12LTd per token)"),
        (f"weights ({per})", f"{_gb(m.weights)}  [{dtype}]"),
        ("gradients", _gb(m.gradients)),
        ("optimizer states", f"{_gb(m.optimizer_states)}  [fp32 Adam m, v]"),
        ("master weights", _gb(m.master_weights) if m.master_weights else f"0  [{_no_master(p.precision)}]"),
        ("buffers", f"{_gb(m.buffers)}  [causal masks, L x T^2 bytes]"),
        ("activations", f"{_gb(m.activations)}  [{act}]"),
    ]
    if m.sharded:
        rows.append(("FSDP buffers", f"{_gb(m.fsdp_buffers)}  [two gathered blocks + one block's gradients]"))
    rows += [
        ("optimizer step", f"{_gb(m.optimizer_step)}  [temporaries; not at the same time as activations]"),
        ("total (peak)", f"{_gb(m.total)} of {_gb(mem.usable)} usable ({mem.bytes_per_param:.4g} bytes/param "
                         f"before activations): {'fits' if mem.fits else 'DOES NOT FIT'} on {m.gpus} {p.hardware.name}"),
        ("GPUs needed", _gpus_needed(p)),
        ("time", f"{_duration(p.hours)} on {p.gpus_used} {p.hardware.name} at MFU {p.mfu.value:.2f} "
                 f"({p.mfu.source}: {p.mfu.detail}); peak {p.hardware.peak_flops:.3g} FLOP/s ({p.hardware.peak_key})"),
        ("cost", "n/a (no price: set hardware.price_per_hour=)" if p.cost is None else
         f"${p.cost:,.0f} ({p.gpu_hours:,.0f} GPU-hours at ${p.hardware.price_per_hour:g}/h)"),
        ("predicted loss", _loss(p.prediction) + (f"; {p.prediction.warning}" if p.prediction and p.prediction.warning else "")),
        ("compute-optimal", f"N_opt {_count(p.alternative.N_opt)}, D_opt {_count(p.alternative.D_opt)} "
                            f"({p.alternative.tokens_per_param:.1f} tokens/param) for C={p.alternative.C:.3g}"
                            + (f", loss {_loss(p.alternative.loss)}" if p.alternative.loss else "")),
        ("binding", _binding(p)),
        _decode_row(p),
    ]
    return rows


def _decode_entry(p: Plan):
    from ablate import decode

    return decode.plan_entry(p.decode)


def _decode_row(p: Plan) -> tuple[str, str]:
    from ablate import decode

    return decode.plan_row(p.decode)


def _no_master(precision: PrecisionConfig) -> str:
    if precision.param_dtype == "bf16":
        return "none kept: bf16 weights updated with stochastic rounding"
    if precision.autocast or precision.fp8:
        return "no separate copy: the fp32 weights are the master weights the low-precision math casts from"
    return "none needed: fp32 throughout"


def _gpus_needed(p: Plan) -> str:
    mem = p.memory
    n = mem.gpus_needed
    if n is None:
        return "none: activations alone exceed one GPU, even with checkpointing and one sequence per GPU"
    text = str(n)
    if n > 1:
        text += (f" (states sharded FSDP/ZeRO-3 style: {_gb(mem.needed.total)} per GPU; "
                 f"{math.ceil(n / p.hardware.gpus_per_node)} node(s) of {p.hardware.gpus_per_node})")
    if mem.gpus_needed_as_configured is None:
        text += (f", with batch_size={mem.fallback.batch_size} and activation_checkpointing=true "
                 "(no GPU count fits the configured settings)")
    return text


def _binding(p: Plan) -> str:
    b = p.binding
    state = "binds" if b.ratio > 1 else "tightest, does not bind"
    return f"{b.corner} ({b.what}, {state}: {b.ratio:.2f}x): {b.text}"


def render_table(p: Plan) -> str:
    rows = summary_rows(p)
    width = max(len(label) for label, _ in rows)
    title = f"Plan: {p.model.name} on {p.hardware.name}, precision={p.precision.name}"
    lines = [title, "=" * len(title)]
    lines += [f"{label:<{width}}  {value}" for label, value in rows]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


def render_markdown(p: Plan) -> str:
    lines = [f"# Plan: {p.model.name} on {p.hardware.name} ({p.precision.name})", "",
             "| | |", "|---|---|"]
    lines += [f"| {label} | {value.replace('|', '/')} |" for label, value in summary_rows(p)]
    lines += ["", "## Constraints", "", "| corner | what | need / have | detail |", "|---|---|---|---|"]
    lines += [f"| {c.corner} | {c.what} | {c.ratio:.3g} | {c.text} |" for c in p.constraints]
    lines += ["", "## How these numbers are computed", "",
              "- FLOPs: 6ND (Hoffmann et al. 2022) and tokens x (6 N_matmul + 12 L T d) with attention; "
              "time uses the latter, like the MFU of recorded runs.",
              "- Memory: weights, gradients and fp32 Adam states exactly as this project's optimizer keeps them; "
              "activations from the tensors this model saves for backward, plus the logits and cross-entropy's "
              "gradient buffers at the start of backward (src/ablate/memory.py; checked against saved-tensor "
              "hooks and torch's MemTracker). Every gradient is counted as live during backward, as with "
              "gradient accumulation.",
              "- Sharded plans assume FSDP full sharding / ZeRO-3 with one block per unit.",
              f"- Compute-optimal: {p.alternative.method}."]
    if p.prediction is not None:
        lines.append(f"- Loss interval: {p.prediction.interval}.")
    if p.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in p.notes]
    return "\n".join(lines) + "\n"


def write_plan(p: Plan, out: str | Path, resolved_config: str = "") -> list[Path]:
    """plan.md, config.yaml (the resolved config) and plan.json, each written atomically."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = [(out / "plan.md", render_markdown(p))]
    if resolved_config:
        files.append((out / "config.yaml", resolved_config))
    files.append((out / "plan.json", json.dumps(plan_dict(p), indent=2) + "\n"))
    for path, text in files:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return [path for path, _ in files]
