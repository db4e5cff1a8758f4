"""Workload `barrier`: join the process group, pass one barrier, leave.

The smallest lab that still proves every rank met every other rank; the
bring-up benchmark (benchmarks/bringup.py) times `labctl up` with it, so the
measured time is launch and rendezvous, not work.
"""
from __future__ import annotations

import time

import torch.distributed as dist

from . import _common


def run(ctx: _common.Context) -> None:
    started = time.perf_counter()
    dist.barrier()
    ctx.record("barrier", True, seconds=round(time.perf_counter() - started, 6), unit="s")


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("barrier")
