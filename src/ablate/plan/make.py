"""Plan a big run: FLOPs, memory per GPU, time, cost, predicted loss, and the corner that binds.

The question: "I have this GPU, this data and this money: what should I train, what will it cost,
what will it reach, and what stops me first?" `make_plan` answers it from typed inputs, without I/O;
hardware.py, mfu.py and scaling/reports/fitfile.py read what it needs (catalogue figures or this CPU's
peak, MLflow runs for the MFU, a fit.json), and render.py writes plan.json and plan.md.

Formulas
- Training FLOPs: C = 6ND (Kaplan et al. 2020; Hoffmann et al. 2022), and with attention
  D (6 N_matmul + 12 L T d) (accounting.flops_per_token): time is computed from the latter, the
  FLOPs the GPUs actually execute, which is also what the MFU of a recorded run is measured against.
- Memory per GPU: memory.py (states exact; activations from this model's saved tensors).
- Time: hours = flops / (gpus x peak FLOP/s x MFU) / 3600 x (step time / compute time), the last the
  communication the schedule cannot hide (comm.py: DDP all-reduce, FSDP all-gather and
  reduce-scatter on the hardware's NVLink and network); cost = GPU-hours x price per GPU-hour.
- Loss: L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022, approach 3), N = total params
  (or non-embedding params when the fit was made with params=non_embedding), with the fit's calibrated
  interval and verdict (plan/loss.py): a not_determined loss is printed as such, with no number.
- Compute-optimal allocation of C: N_opt = G (C/6)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta)),
  D_opt = C / (6 N_opt) (Hoffmann et al. 2022, eq. 4); without a fit, or where the fit's allocation at
  C is not_determined, D = 20 N (their Table 3's ~20 tokens per parameter), i.e. N_opt = sqrt(C / 120).
- Runs that would determine a not_determined prediction: their time is for one GPU of this hardware
  at the plan's MFU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ablate.config import BudgetConfig, ConfigError, ModelConfig, PlanConfig, PlanInputs, PrecisionConfig
from ablate.model import accounting
from ablate.perf import decode
from ablate.plan.comm import Communication, links_of, plan_communication
from ablate.plan.hardware import PlanHardware
from ablate.plan.loss import Alternative, LossPrediction, Purchase, compute_optimal, predict_loss, what_it_buys
from ablate.plan.memory import MemoryPlan, plan_memory
from ablate.plan.mfu import MfuChoice
from ablate.plan.vocabulary import across_vocabularies
from ablate.scaling import FitLaw

GB = 1e9


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
    cost: float | None
    prediction: LossPrediction | None
    alternative: Alternative
    constraints: tuple[Constraint, ...]
    notes: tuple[str, ...] = ()
    purchase: Purchase | None = None  # what the budget buys against the compute-optimal split; None: no fit
    communication: Communication | None = None  # the collectives of a step on gpus_used (comm.py)

    @property
    def decode(self) -> list:
        """The memory-bandwidth bound on decode tokens/s (decode.py), 1 and batch_size sequences."""
        return decode.plan_bounds(
            self.model, self.precision, self.hardware.memory_bandwidth_gbs, self.model.block_size, self.plan.batch_size
        )

    @property
    def binding(self) -> Constraint:
        return max(self.constraints, key=lambda c: c.ratio)

    @property
    def broken(self) -> list[Constraint]:
        """Every limit the plan breaks, the worst first."""
        return sorted((c for c in self.constraints if c.ratio > 1), key=lambda c: -c.ratio)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def gpus_needed(self) -> int | None:
        return self.memory.gpus_needed


def make_plan(inputs: PlanInputs, hw: PlanHardware, mfu: MfuChoice, fit: FitLaw | None = None) -> Plan:
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
    comm = _communication(inputs, hw, mem, gpus_used, mfu.value, recompute)
    recompute *= comm.slowdown  # the step waits for what communication the schedule cannot hide
    compute_budget = _compute_budget(budget, hw, gpus_used, mfu.value, recompute)
    if budget.tokens is not None:
        tokens, tokens_from = round(budget.tokens), "budget.tokens"
    elif compute_budget is None or budget.compute_key is None:  # a config that skipped BudgetConfig.validate
        raise ConfigError(
            "no budget given (valid: budget.tokens=N, and/or one of budget.flops, budget.hours, budget.dollars)"
        )
    else:
        tokens = math.floor(compute_budget / fpt)
        tokens_from = f"what budget.{budget.compute_key} buys"
        if tokens < 1:
            raise ConfigError(
                f"budget.{budget.compute_key}={getattr(budget, budget.compute_key):g} buys no "
                "training tokens (valid: a larger budget)"
            )
    flops = float(fpt) * tokens
    hours = flops * recompute / flops_per_s / 3600
    gpu_hours = hours * gpus_used
    cost = None if hw.price_per_hour is None else gpu_hours * hw.price_per_hour
    C = compute_budget if compute_budget is not None else accounting.flops_6nd(n, tokens)
    one_gpu = hw.peak_flops * mfu.value
    alternative = _retimed(compute_optimal(C, fit), one_gpu)
    prediction = None
    if fit is not None:
        n_fit = accounting.params_non_embedding(model) if fit.params == "non_embedding" else n
        prediction = _retimed(predict_loss(fit, n_fit, tokens), one_gpu)
    constraints = _constraints(cfg, hw, mem, tokens, flops, hours, cost, alternative, gpus_used)
    if comm.strategy != "none" and not comm.missing:
        constraints.append(
            Constraint(
                "hardware",
                "communication",
                comm.total_s,
                comm.hidden_room,
                f"{comm.total_s * 1e3:,.3g} ms of collectives per step vs {comm.hidden_room * 1e3:,.3g} ms of "
                f"{'backward' if comm.strategy == 'ddp' else 'compute'} to hide them behind",
            )
        )
    notes = _notes(inputs, hw, mem, gpus_used, mfu)
    if fit is not None:
        across = across_vocabularies(fit, model.vocab_size, prediction)
        suggested = [*(prediction.runs_to_determine if prediction else ()), *alternative.runs_to_determine]
        notes += [n for n in (across, _corpus_note(fit, suggested)) if n]
    return Plan(
        model,
        precision,
        hw,
        cfg,
        n,
        accounting.params_non_embedding(model),
        tokens,
        tokens_from,
        fpt,
        accounting.flops_6nd(n, tokens),
        flops,
        mem,
        gpus_used,
        mfu,
        hours,
        gpu_hours,
        cost,
        prediction,
        alternative,
        tuple(constraints),
        tuple(notes),
        None if prediction is None else what_it_buys(fit, prediction, alternative),
        comm,
    )


def _communication(
    inputs: PlanInputs, hw: PlanHardware, mem: MemoryPlan, gpus: int, mfu: float, recompute: float
) -> Communication:
    """One step's collectives on `gpus`: states sharded as the memory plan shards them there, one
    micro-batch of plan.batch_size sequences per GPU."""
    cfg, model = inputs.plan, inputs.model
    at = mem.at_gpus if gpus == cfg.gpus or mem.needed is None else mem.needed
    batch = mem.fallback.batch_size if mem.gpus_needed_as_configured is None and mem.fallback else cfg.batch_size
    compute_s = batch * model.block_size * accounting.flops_per_token(model) * recompute / (hw.peak_flops * mfu)
    links = links_of(hw.nvlink_gbs, hw.network_gbs, hw.gpus_per_node, cfg.comm_efficiency)
    params = accounting.params(model)
    return plan_communication(params, model.n_layer, inputs.precision, gpus, at.sharded, compute_s, links)


def _retimed(x, flops_per_s: float):
    """A prediction or allocation whose suggested runs are timed on one GPU of this hardware."""
    if x is None or not x.runs_to_determine:
        return x
    runs = tuple(replace(r, seconds=r.C / flops_per_s) for r in x.runs_to_determine)
    return replace(x, runs_to_determine=runs)


def _checkpointing(cfg: PlanConfig, mem: MemoryPlan) -> bool:
    """Whether the run as planned (on gpus_needed) recomputes activations."""
    return cfg.activation_checkpointing or (mem.gpus_needed_as_configured is None and mem.fallback is not None)


def _compute_budget(budget: BudgetConfig, hw: PlanHardware, gpus: int, mfu: float, recompute: float) -> float | None:
    """The model FLOPs a compute budget buys at this MFU (fewer when activations are recomputed)."""
    if budget.flops is not None:
        return budget.flops
    if budget.hours is not None:
        return budget.hours * 3600 * gpus * hw.peak_flops * mfu / recompute
    if budget.dollars is not None:
        if not hw.price_per_hour:
            raise ConfigError(
                f"budget.dollars needs a price, but hardware.price_per_hour is {hw.price_per_hour or 'null'} "
                f"for hardware={hw.name} (valid: hardware.price_per_hour=<dollars per GPU-hour>)"
            )
        return budget.dollars / hw.price_per_hour * 3600 * hw.peak_flops * mfu / recompute
    return None


def _constraints(
    cfg: PlanConfig,
    hw: PlanHardware,
    mem: MemoryPlan,
    tokens: float,
    flops: float,
    hours: float,
    cost: float | None,
    alt: Alternative,
    gpus_used: int,
) -> list[Constraint]:
    b = cfg.budget
    at = mem.at_gpus
    where = f"{cfg.gpus} {hw.name}" + (" (sharded states)" if at.sharded else "")
    needed = mem.gpus_needed_as_configured  # what mem.gpus_needed is when set
    if needed is not None:
        more = f"; fits on {needed} GPU(s)" + (" with sharded states (FSDP/ZeRO-3)" if needed > 1 else "")
    elif mem.fallback is not None:
        f = mem.fallback
        more = (
            f"; no GPU count fits with batch_size={cfg.batch_size}, activation_checkpointing="
            f"{str(cfg.activation_checkpointing).lower()}: with batch_size={f.batch_size}, "
            f"activation_checkpointing=true it fits on {f.gpus_needed} GPU(s)"
        )
    else:
        more = "; activations alone exceed one GPU even with checkpointing and one sequence per GPU"
    out = [
        Constraint(
            "hardware",
            "memory",
            at.total,
            mem.usable,
            f"{_gb(at.total)} per GPU on {where} vs {_gb(mem.usable)} usable{more}",
        )
    ]
    if b.hours is not None:
        out.append(
            Constraint(
                "hardware",
                "time",
                hours,
                b.hours,
                f"{hours:,.1f} h on {gpus_used} {hw.name} vs budget.hours={b.hours:g}",
            )
        )
    if b.flops is not None:
        out.append(
            Constraint("compute", "FLOPs", flops, b.flops, f"{flops:.3g} training FLOPs vs budget.flops={b.flops:.3g}")
        )
    if b.dollars is not None and cost is not None:
        out.append(
            Constraint("compute", "dollars", cost, b.dollars, f"${cost:,.0f} vs budget.dollars=${b.dollars:,.0f}")
        )
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
        notes.append(
            f"gpus_needed assumes batch_size={f.batch_size} and activation_checkpointing=true; time "
            "includes recomputing each block's forward (4/3 of the time at the same MFU)."
        )
    elif cfg.activation_checkpointing:
        notes.append("Time includes recomputing each block's forward (4/3 of the time at the same MFU).")
    if inputs.precision.fp8:
        notes.append("The fp8 activation model follows precision.py but has not been measured on hardware.")
    if hw.device == "mps":
        notes.append("The memory model was measured on the CPU and derived for CUDA; MPS may differ.")
    if gpus_used > 1 and mem.needed is not None:
        comm = _communication(inputs, hw, mem, gpus_used, mfu.value, 1.0)
        if comm.missing:
            notes.append(
                f"Communication is left out: hardware.{comm.missing} is not set for hardware={hw.name} "
                f"(set it, in GB/s per GPU per direction, to time the collectives)."
            )
    if mfu.source == "default":
        notes.append(
            "MFU is a default, not a measurement: run on this hardware (or pass mfu=) to firm up time and cost."
        )
    return notes


def _corpus_note(fit: FitLaw, runs: list) -> str | None:
    """A warning where the runs suggested to determine the law need more tokens than the training
    split its runs had (fit.json's data.tokenizer.train_tokens): each would repeat data, which the
    law's D, fresh tokens, does not describe (Muennighoff et al. 2023)."""
    split = (fit.tokenizer or {}).get("train_tokens")
    if not isinstance(split, int) or isinstance(split, bool) or split <= 0:
        return None
    over = [r for r in runs if r.D > split]
    if not over:
        return None
    data = (fit.tokenizer or {}).get("data")
    return (
        f"{len(over)} of the {len(runs)} runs suggested to determine the law need up to {max(r.D for r in over):.3g} "
        f"tokens, more than the {split:,} of its runs' training split"
        + (f" ({data})" if isinstance(data, str) else "")
        + ": they would repeat data, which the law's D does not describe (more data, or smaller token counts)."
    )


def _gb(x: float) -> str:
    return f"{x / GB:,.1f} GB" if x >= 0.1 * GB else f"{x / 1e6:,.2f} MB"
