"""The fsdp workload's plugin: FSDP2 and ZeRO-1 against one process, bytes vs 3 (n-1)/n P
and 2 (n-1)/n P (torch-free; the checks are in workloads/fsdp.py)."""
from __future__ import annotations

from . import _patterns

WORKLOAD = _patterns.plugin(
    "fsdp", "FSDP: sharded data parallel",
    "fsdp2: fully_shard all_gathers each layer's parameters in forward and again in backward, and "
    "reduce_scatters the gradients: 3 (n-1)/n P per rank per step. zero1 (by hand): reduce_scatter the "
    "flat gradient, Adam on 1/n of it, all_gather the parameters: 2 (n-1)/n P.",
    {"variant": ("fsdp2", "zero1")})
