"""Workload `env`: where does every rank run, and does the launcher's story add up?

Each rank reports the environment its launcher gave it (torchrun sets RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT; labctl
adds NODE_RANK and LAB_LAUNCHER) in one result named "env", then checks that
the process group agrees with it:

- `dist.get_rank()` is RANK and `dist.get_world_size()` is WORLD_SIZE;
- LOCAL_RANK < LOCAL_WORLD_SIZE;
- an all_gather of (rank, group_rank, local_rank) shows every rank exactly
  once, and every node's local ranks are exactly 0..LOCAL_WORLD_SIZE-1;
- RANK == GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK, which torchrun
  guarantees when every node runs the same number of processes.

Note: with c10d rendezvous, GROUP_RANK is handed out by the rendezvous, so it
need not equal the NODE_RANK (the node index) that labctl set; both are shown.
"""
from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from . import _common
from ._protocol import Env

# Environment variables reported as integers (None when the launcher did not set them).
INT_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")
STR_VARS = ("MASTER_ADDR", "MASTER_PORT")


def _int_or_none(name: str) -> int | None:
    value = os.environ.get(name, "")
    try:
        return int(value)
    except ValueError:
        return None


def run(ctx: _common.Context) -> None:
    env_ints = {name: _int_or_none(name) for name in INT_VARS}
    env_strs = {name: os.environ.get(name) for name in STR_VARS}
    rank_env, lws = env_ints["RANK"], env_ints["LOCAL_WORLD_SIZE"]
    group_rank, local_rank = env_ints["GROUP_RANK"], env_ints["LOCAL_RANK"]

    missing = [n for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
               if os.environ.get(n) in (None, "")]
    ctx.record("env", not missing,
               hostname=_common.hostname(),
               node=env_ints["NODE_RANK"] if env_ints["NODE_RANK"] is not None else ctx.node_rank,
               **env_ints, **env_strs,
               address=_address(env_strs["MASTER_ADDR"], env_strs["MASTER_PORT"]),
               backend=ctx.backend, device=str(ctx.device), pid=os.getpid(),
               torch=torch.__version__, launcher=os.environ.get(Env.LAUNCHER),
               detail=f"launcher did not set {', '.join(missing)}" if missing else "")

    # 1. The process group agrees with the environment (-1 stands for "not set").
    ctx.check("rank-matches-env", dist.get_rank(), _or(rank_env))
    ctx.check("world-size-matches-env", dist.get_world_size(), _or(env_ints["WORLD_SIZE"]))
    # labctl sets the node's WORLD_SIZE (kept as LAB_WORLD_SIZE: torchrun rewrites WORLD_SIZE)
    lab_world = _env_int_or_none(Env.WORLD_SIZE)
    if lab_world is None:
        ctx.skip("world-size-matches-node-env", "LAB_WORLD_SIZE is not set (not started by labctl)")
    else:
        ctx.check("world-size-matches-node-env", dist.get_world_size(), lab_world)
    if lws is None:
        ctx.skip("local-rank-below-local-world-size", "LOCAL_WORLD_SIZE is not set")
    else:
        ctx.record("local-rank-below-local-world-size", 0 <= _or(local_rank) < lws,
                   LOCAL_RANK=local_rank, LOCAL_WORLD_SIZE=lws)

    # 2. Every RANK shows up exactly once. All ranks take part in this all_gather,
    #    whatever their own checks said, so nobody is left waiting.
    mine = ctx.tensor([_or(rank_env), _or(group_rank), _or(local_rank)], dtype=torch.int64)
    everyone = [torch.zeros_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(everyone, mine)
    table = [tuple(t.tolist()) for t in everyone]       # row i: what rank i was told
    ranks = sorted(row[0] for row in table)
    ctx.check("every-rank-once", ranks, list(range(ctx.world_size)), ranks=ranks)

    if group_rank is None or lws is None:
        ctx.skip("local-ranks-per-node", "GROUP_RANK or LOCAL_WORLD_SIZE is not set")
        ctx.skip("rank-formula", "GROUP_RANK or LOCAL_WORLD_SIZE is not set")
        return
    # Every node (GROUP_RANK) runs local ranks 0..LOCAL_WORLD_SIZE-1, each exactly once.
    nodes: dict[int, list[int]] = {}
    for _, g, lr in table:
        nodes.setdefault(g, []).append(lr)
    bad = {g: sorted(lrs) for g, lrs in nodes.items() if sorted(lrs) != list(range(lws))}
    ctx.record("local-ranks-per-node", not bad, nodes=len(nodes),
               detail=f"local ranks per GROUP_RANK: {bad}, expected 0..{lws - 1}" if bad else "")

    # 3. torchrun numbers ranks node by node: RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK.
    ctx.check("rank-formula", _or(rank_env), group_rank * lws + _or(local_rank),
              formula=f"{group_rank} * {lws} + {local_rank}")


def _address(master: str | None, port: str | None) -> str | None:
    """The local address this rank reaches MASTER_ADDR from (a UDP socket's connect sends
    nothing; the kernel only picks the route): the node's address as its peers see it."""
    if not master:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, int(port or 1)))
            return s.getsockname()[0]
    except (OSError, ValueError):
        return None


def _env_int_or_none(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value and value.isdigit() else None


def _or(value: int | None) -> int:
    """-1 for a variable the launcher did not set, so it can still travel in a tensor."""
    return -1 if value is None else value


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("env")
