"""Workload `p2p`: point-to-point messages between two ranks, and around a ring.

Three patterns, each checked on every rank that takes part:

1. ping-pong with blocking `send`/`recv` between ranks 0 and 1: a tensor
   starts at 0; rank 0 adds 1 and sends it, rank 1 adds 1 and sends it back,
   so rank 0 ends with 2. Blocking calls are fine here because the two ranks
   take turns: one sends while the other is already waiting in `recv`.
2. pairwise exchange with non-blocking `isend`/`irecv` + `wait()`: ranks
   0<->1, 2<->3, ... swap values at the same time (with an odd world size the
   last rank has no partner). The lower rank of each pair posts its send
   first and the higher rank its receive first, so even a backend whose
   sends only finish once the peer receives cannot deadlock.
3. ring shift: every rank sends its rank to (rank+1) % n and receives from
   (rank-1) % n. With blocking `send` everybody would send first and wait for
   a receiver that is itself stuck sending; posting both operations
   non-blocking and then waiting avoids that. On gloo each operation is its
   own `isend`/`irecv`; on NCCL the two go through `batch_isend_irecv`, which
   launches them as one NCCL group (ncclGroupStart/End): separate NCCL send
   and recv kernels to different peers may wait on each other.

Every op also leaves a data record (`Context.show`): the op, the peer and the tensor
sent or received, so the run's page can draw each message as an arrow with its value.
"""
from __future__ import annotations

import time

import torch.distributed as dist

from . import _common


def run(ctx: _common.Context) -> None:
    if ctx.world_size < 2:
        reason = "needs at least 2 ranks (world size is 1)"
        ctx.skip("ping-pong", reason)
        ctx.skip("pair-exchange", reason)
        ctx.skip("ring-shift", "a ring of one rank would only send to itself")
        return
    ping_pong(ctx)
    pair_exchange(ctx)
    ring_shift(ctx)


def ping_pong(ctx: _common.Context) -> None:
    """Ranks 0 and 1 pass one tensor back and forth with blocking send/recv."""
    if ctx.rank > 1:
        return                       # ranks 2.. take no part; nobody waits for them
    t = ctx.tensor([0.0])
    started = time.perf_counter()
    if ctx.rank == 0:
        t += 1
        dist.send(t, dst=1)          # returns once the data is handed over
        sent = _common.held(t)
        dist.recv(t, src=1)          # blocks until rank 1's reply arrives
        ctx.check("ping-pong", t, [2.0], stage="rank 0 got the reply",
                  round_trip_s=round(time.perf_counter() - started, 6))
        ctx.show("ping-pong", op="send", peer=1, hop=1, tensor=sent)
        ctx.show("ping-pong", op="recv", peer=1, hop=2, tensor=_common.held(t))
    else:
        dist.recv(t, src=0)
        ctx.check("ping-pong", t, [1.0], stage="rank 1 received")
        ctx.show("ping-pong", op="recv", peer=0, hop=1, tensor=_common.held(t))
        t += 1
        dist.send(t, dst=0)
        ctx.show("ping-pong", op="send", peer=0, hop=2, tensor=_common.held(t))


def pair_exchange(ctx: _common.Context) -> None:
    """Partners (0,1), (2,3), ... swap `rank + 1` with isend/irecv, then wait()."""
    partner = ctx.rank ^ 1           # flips the lowest bit: 0<->1, 2<->3, ...
    if partner >= ctx.world_size:
        ctx.skip("pair-exchange", f"rank {ctx.rank} has no partner (odd world size {ctx.world_size})")
        return
    send = ctx.tensor([ctx.rank + 1.0])
    recv = ctx.tensor([-1.0])
    if ctx.rank < partner:
        requests = [dist.isend(send, dst=partner), dist.irecv(recv, src=partner)]
    else:
        requests = [dist.irecv(recv, src=partner), dist.isend(send, dst=partner)]
    for request in requests:
        request.wait()               # only now may we read `recv` (or reuse `send`)
    ctx.check("pair-exchange", recv, [partner + 1.0], partner=partner)
    ctx.show("pair-exchange", op="isend", peer=partner, tensor=_common.held(send))
    ctx.show("pair-exchange", op="irecv", peer=partner, tensor=_common.held(recv))


def ring_shift(ctx: _common.Context) -> None:
    """Every rank passes its rank to the right neighbour and hears from the left one."""
    right = (ctx.rank + 1) % ctx.world_size
    left = (ctx.rank - 1) % ctx.world_size
    send = ctx.tensor([float(ctx.rank)])
    recv = ctx.tensor([-1.0])
    if ctx.backend == "nccl":
        requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, right),
                                           dist.P2POp(dist.irecv, recv, left)])
        how = "batch_isend_irecv"
    else:
        requests = [dist.irecv(recv, src=left), dist.isend(send, dst=right)]
        how = "isend/irecv"
    for request in requests:
        request.wait()
    ctx.check("ring-shift", recv, [float(left)], send_to=right, recv_from=left, how=how)
    ctx.show("ring-shift", op="isend", peer=right, tensor=_common.held(send))
    ctx.show("ring-shift", op="irecv", peer=left, tensor=_common.held(recv))


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("p2p")
