"""The cp workload's plugin: ring attention against full attention in one process, bytes vs
2 (n-1) (T/n) d x 4 (torch-free; the checks are in workloads/cp.py)."""
from __future__ import annotations

from . import _patterns

WORKLOAD = _patterns.plugin(
    "cp", "CP: context parallel (ring attention)",
    "Each rank's K/V block goes around the ring (isend/irecv, n-1 hops) while the ranks attend to the "
    "block they hold, the softmax merged online: 2 (n-1) (T/n) d x 4 bytes per rank per step (forward); "
    "train: the K/V gradients travel back the same way, and the weights' gradients are all_reduced: "
    "2 x 2 (n-1) (T/n) d x 4 + 2(n-1)/n P.",
    {"variant": ("full", "causal", "train")}, world_multiples=("tokens",))
