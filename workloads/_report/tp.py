"""The tp workload's plugin: tensor parallelism (by hand, DTensor, sequence parallel) against
one process, bytes vs the formula (torch-free; the checks are in workloads/tp.py)."""
from __future__ import annotations

from . import _patterns

WORKLOAD = _patterns.plugin(
    "tp", "TP: tensor parallel",
    "Column-parallel w1, row-parallel w2: an all_reduce after each block forward and before each block "
    "but the first backward, (2L-1) 2(n-1)/n A; sequence parallel (-sp): all_gather and reduce_scatter "
    "instead, (4L-1) (n-1)/n A (A: all tokens x d x 4 bytes).",
    {"variant": ("manual", "dtensor", "manual-sp", "dtensor-sp")}, world_multiples=("hidden", "tokens"))
