"""The ep workload's plugin: a mixture-of-experts layer against one process, bytes vs the
routing's formula (torch-free; the checks are in workloads/ep.py)."""
from __future__ import annotations

from . import _patterns

WORKLOAD = _patterns.plugin(
    "ep", "EP: expert parallel (mixture of experts)",
    "One expert per rank; the counts first (all_to_all_single of n int64s), then the tokens to their "
    "experts and the answers back (all_to_all_single, uneven splits), and the answers' gradients in "
    "backward: 8 (n-1) + (2 s + c) d x 4 bytes, s tokens sent away, c received; the ranks differ.")
