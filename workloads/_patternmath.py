"""The parallelism patterns' formulas: the bytes one rank sends per step (pure, no torch).

Shared by the ranks (workloads/_patterns.py, which re-exports them: every pattern checks
the bytes it counted against them) and the patterns' plugins (workloads/_report/, torch-free:
`labctl predict` sets them beside the op lists it scales to another world size), as
workloads/_benchmath.py is for the bench. docs/patterns.md has each one's derivation;
tests/test_patterns.py checks them by hand.
"""
from __future__ import annotations


def ring(op: str, nbytes: float, n: int) -> float:
    """Bytes one rank sends for one collective over n ranks, with the ring algorithm:
    all_reduce of an S-byte buffer 2(n-1)/n S; all_gather (S: the gathered output) and
    reduce_scatter (S: the input) (n-1)/n S; n = 1 sends nothing."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n * nbytes
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n * nbytes
    raise ValueError(f"ring: unknown op {op!r}")


def fsdp2_bytes(param_bytes: float, n: int) -> float:
    """FSDP2 (reshard after forward): all_gather the parameters in forward, again in
    backward, reduce_scatter the gradients: 3 (n-1)/n P."""
    return 3 * ring("all_gather", param_bytes, n)


def zero1_bytes(param_bytes: float, n: int) -> float:
    """ZeRO-1: reduce_scatter the flat gradient, all_gather the updated flat parameters:
    2 (n-1)/n P, what DDP's all_reduce sends (P padded to a multiple of n)."""
    return ring("reduce_scatter", param_bytes, n) + ring("all_gather", param_bytes, n)


def tp_bytes(act_bytes: float, n: int, blocks: int, sequence: bool) -> float:
    """Tensor parallelism over n ranks, `blocks` column->row MLP blocks, A = the activation
    bytes (all tokens x d x itemsize); the first block's input needs no gradient.
    Plain: an all_reduce after each row-parallel linear (forward), one before each column-
    parallel linear but the first (backward): (2L-1) 2(n-1)/n A.
    Sequence parallel: all_gather before and reduce_scatter after each block (forward), and
    their mirror images in backward but the first block's all_gather: (4L-1) (n-1)/n A."""
    if sequence:
        return (4 * blocks - 1) * ring("all_gather", act_bytes, n)
    return (2 * blocks - 1) * ring("all_reduce", act_bytes, n)


def pp_bytes(rank: int, n: int, stages_per_rank: int, microbatches: int, act_bytes: float) -> float:
    """Pipeline parallelism: stage s on rank s % n (s < n * stages_per_rank); every stage but
    the last sends each microbatch's activation forward, every stage but the first sends its
    gradient back: A bytes each (one microbatch's activation)."""
    total = n * stages_per_rank
    mine = [rank + k * n for k in range(stages_per_rank)]
    sends = sum(1 for s in mine if s < total - 1) + sum(1 for s in mine if s > 0)
    return sends * microbatches * act_bytes


def cp_bytes(n: int, block_tokens: int, d: int, itemsize: int = 4, backward: bool = False,
             param_bytes: float = 0) -> float:
    """Ring attention: each rank's K and V blocks travel the ring, n-1 hops: 2 (n-1) B d.
    Training (`backward`): their gradients travel back the same n-1 hops, and the weights'
    gradients are all_reduced (every rank holds all of them): + 2 (n-1) B d + 2(n-1)/n P."""
    ring_pass = 2.0 * (n - 1) * block_tokens * d * itemsize
    return 2 * ring_pass + ring("all_reduce", param_bytes, n) if backward else ring_pass


def ep_bytes(rank: int, counts: list[list[int]], d: int, itemsize: int = 4) -> float:
    """Expert parallelism, counts[i][j] = tokens of rank i routed to rank j's expert: the
    counts (n-1 int64), the tokens sent away (dispatch), the expert's answers sent back
    (combine), and in backward the gradients of this rank's own tokens sent to their
    experts (the input is data: no gradient goes back through the dispatch)."""
    n = len(counts)
    away = sum(counts[rank][j] for j in range(n) if j != rank)
    came = sum(counts[i][rank] for i in range(n) if i != rank)
    return 8.0 * (n - 1) + (2 * away + came) * d * itemsize


def mesh_bytes(act_bytes: float, dp: int, tp: int, blocks: int, shard_param_bytes: float) -> float:
    """2-D mesh: tensor parallel inside the tp group (`tp_bytes`, A = the replica's tokens),
    then an all_reduce of this rank's parameter shard's gradients over the dp group."""
    return tp_bytes(act_bytes, tp, blocks, False) + ring("all_reduce", shard_param_bytes, dp)
