"""Communication in a plan: the collectives of one optimizer step, their time on the GPUs' links, how
much of it the schedule hides behind compute, and whether communication binds.

Collectives (bytes per GPU for S bytes of weights or gradients, over n GPUs; ring algorithms,
Patarasuk & Yuan 2009, as NCCL runs them):
- DDP (states replicated): one all-reduce of the gradients, 2 (n-1)/n S, bucketed and overlapped
  with backward (PyTorch DDP, Li et al. 2020).
- FSDP full sharding (states sharded, one unit per block, torchtitan's layout): an all-gather of the
  weights in forward and again in backward (they are freed after forward), (n-1)/n S each, and a
  reduce-scatter of the gradients, (n-1)/n S. FSDP2 prefetches the next block's all-gather during
  the current block's compute and reduce-scatters a block's gradients during the next block's backward.

Links (hardware.nvlink_gbs, hardware.network_gbs, GB/s per GPU per direction): within a node a
collective runs over NVLink; across nodes NCCL reduces within each node first, so each GPU's own NIC
carries 1/g of the data over the nodes' ring (g GPUs per node, one NIC per GPU):
  t = (g-1)/g S / (B_nvlink e) + (m-1)/m S / g / (B_network e)      (x2 for an all-reduce)
m nodes, e the fraction of a link's bandwidth that NCCL reaches on large messages (comm_efficiency).

Overlap: of each collective, the first block's share (1/L of it, L blocks) waits for nothing to hide
behind (forward's first all-gather, backward's last reduce-scatter or bucket); the rest runs beside the
compute of the step's other blocks and shows only where it is longer than that compute. Communication
binds when the part it cannot hide is more than the share it adds to the step (exposed > 0 beyond the
unavoidable 1/L), i.e. when the collectives take longer than the compute they run beside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.config import PrecisionConfig

GB = 1e9
BACKWARD_SHARE = 2 / 3  # backward's part of a step's FLOPs (4N of 6N per token; Kaplan et al. 2020)


@dataclass(frozen=True)
class Links:
    """Bandwidth per GPU per direction, in bytes/s, with NCCL's efficiency applied."""

    nvlink: float | None
    network: float | None
    gpus_per_node: int


@dataclass(frozen=True)
class Communication:
    strategy: str  # "none" (one GPU), "ddp" or "fsdp"
    gpus: int
    nodes: int
    all_reduce_s: float  # per optimizer step
    all_gather_s: float
    reduce_scatter_s: float
    compute_s: float  # the step's compute on one GPU (with recomputation when checkpointing)
    exposed_s: float  # what the step waits for communication
    missing: str = ""  # a link figure the hardware lacks ("" when none)

    @property
    def total_s(self) -> float:
        return self.all_reduce_s + self.all_gather_s + self.reduce_scatter_s

    @property
    def slowdown(self) -> float:
        """Step time over compute time."""
        return (self.compute_s + self.exposed_s) / self.compute_s if self.compute_s > 0 else 1.0

    @property
    def binds(self) -> bool:
        """The collectives take longer than the compute they run beside."""
        return self.total_s > self.hidden_room

    @property
    def hidden_room(self) -> float:
        return self.compute_s * (BACKWARD_SHARE if self.strategy == "ddp" else 1.0)


def collective_seconds(nbytes: float, gpus: int, links: Links, all_reduce: bool = False) -> float:
    """Seconds of one all-gather or reduce-scatter (all_reduce: an all-reduce) of `nbytes` per GPU
    over `gpus` GPUs, hierarchical: within each node over NVLink, across nodes over each GPU's NIC."""
    if gpus <= 1 or nbytes <= 0:
        return 0.0
    g = min(gpus, links.gpus_per_node)
    m = math.ceil(gpus / links.gpus_per_node)
    factor = 2.0 if all_reduce else 1.0
    t = 0.0
    if g > 1:
        t += factor * (g - 1) / g * nbytes / _need(links.nvlink)
    if m > 1:
        t += factor * (m - 1) / m * nbytes / g / _need(links.network)
    return t


def _need(bandwidth: float | None) -> float:
    if not bandwidth:
        raise ValueError("no bandwidth for this link")  # plan_communication checks before it calls
    return bandwidth


def wire_bytes(precision: PrecisionConfig) -> tuple[int, int]:
    """(bytes per weight gathered, bytes per gradient reduced): FSDP2's MixedPrecisionPolicy as
    torchtitan sets it, weights gathered in the matmul dtype (bf16 or fp16 under autocast, fp8 runs
    gather bf16), gradients reduced in fp32 unless the weights themselves are bf16 (bf16_pure)."""
    gathered = 4 if precision.matmul_dtype == "fp32" else 2
    reduced = 2 if precision.param_dtype == "bf16" else 4
    return gathered, reduced


def plan_communication(
    params: int,
    layers: int,
    precision: PrecisionConfig,
    gpus: int,
    sharded: bool,
    compute_s: float,
    links: Links,
) -> Communication:
    """The collectives of one optimizer step (one micro-batch per GPU) and what of them the step waits for."""
    nodes = math.ceil(gpus / links.gpus_per_node)
    if gpus <= 1:
        return Communication("none", gpus, nodes, 0.0, 0.0, 0.0, compute_s, 0.0)
    need = "nvlink_gbs" if gpus > 1 and not links.nvlink and links.gpus_per_node > 1 else ""
    need = need or ("network_gbs" if nodes > 1 and not links.network else "")
    if need:
        return Communication("fsdp" if sharded else "ddp", gpus, nodes, 0.0, 0.0, 0.0, compute_s, 0.0, need)
    gathered, reduced = wire_bytes(precision)
    blocks = max(1, layers)
    if sharded:
        gather = 2 * collective_seconds(params * gathered, gpus, links)  # forward and backward
        scatter = collective_seconds(params * reduced, gpus, links)
        total, reduce_all = gather + scatter, 0.0
        room = compute_s
    else:
        gather = scatter = 0.0
        reduce_all = collective_seconds(params * reduced, gpus, links, all_reduce=True)
        total = reduce_all
        room = compute_s * BACKWARD_SHARE  # buckets reduce while backward goes on
    first = total / blocks  # nothing to hide behind
    exposed = first + max(0.0, total - first - room)
    return Communication("fsdp" if sharded else "ddp", gpus, nodes, reduce_all, gather, scatter, compute_s, exposed)


def links_of(nvlink_gbs: float | None, network_gbs: float | None, gpus_per_node: int, efficiency: float) -> Links:
    return Links(
        None if nvlink_gbs is None else nvlink_gbs * GB * efficiency,
        None if network_gbs is None else network_gbs * GB * efficiency,
        max(1, gpus_per_node),
    )
