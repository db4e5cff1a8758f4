"""Who the rank is (its M record) and its clock against rank 0's (its C record), written
once its process group is up (`after_init`)."""
from __future__ import annotations

import itertools
import os
import socket
import time
from typing import Any

from .._protocol import CLOCK_ROUNDS, records
from .sink import proc, write

CLOCK_WAIT_S = 60                   # the clock exchange's bound, in all: ranks that never come are gone without
DONE, GO = "done", "go"             # a rank's last message on the ping queue; rank 0's answer on the rank's queue
GO_POLL_S = 0.001                   # rank 0's look for a go still untaken (each is taken at once)
_inits = itertools.count(1)


def after_init() -> None:
    import torch.distributed as dist

    write(records.Who(rank=dist.get_rank(), world=dist.get_world_size(),
                      node=int(os.environ.get("GROUP_RANK") or os.environ.get("NODE_RANK") or 0),
                      local_rank=int(os.environ.get("LOCAL_RANK") or 0), backend=str(dist.get_backend()),
                      host=socket.gethostname(), pid=os.getpid(), t=time.time_ns() - proc.t0))
    try:
        _measure_clock(dist)
    except Exception as exc:        # noqa: BLE001 - the lab goes on without an offset
        failed(exc)


def failed(exc: BaseException) -> None:
    """A C record that says why there is no offset."""
    write(records.Clock(error=str(exc)[:200]))


def _measure_clock(dist: Any) -> None:
    """Offset of this rank's wall clock against rank 0's, over the store (no collective,
    no p2p op: nothing in the trace or Flight Recorder, no NCCL communicator): an NTP
    estimate, best of CLOCK_ROUNDS round trips, rank 0's time minus the midpoint of the
    round trip. Each rank pushes its pings onto one queue in the store and rank 0 answers
    them in the order they arrive, so no rank waits for another's turn; every wait is
    bounded, and a rank that never comes costs rank 0 one bounded wait in all.

    The store is the script's too (`store.num_keys()` counts the whole of it), so the
    exchange leaves no key behind once init_process_group returns on any rank: a rank deletes
    each pong it read, then says done on the queue and waits on a queue of its own for rank
    0's go (the pop removes it); rank 0 returns once every go was taken."""
    from datetime import timedelta

    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        write(records.Clock(0, 0))
        return
    # No restart count in the prefix: an agent that restarts its workers for another node's
    # sake keeps TORCHELASTIC_RESTART_COUNT at 0 (pytorch#135712), so ranks of one attempt
    # would disagree and wait CLOCK_WAIT_S on keys nobody answers. Elastic labs get a fresh
    # store per attempt (TORCH_DISABLE_SHARE_RDZV_TCP_STORE, labctl/plan.py): nothing stale.
    store = dist.PrefixStore(f"labctl-clock/{next(_inits)}/",
                             dist.distributed_c10d._get_default_store())
    patience = timedelta(seconds=CLOCK_WAIT_S)
    if rank == 0:
        _answer_clock(store, world)
        write(records.Clock(0, 0))
        return
    best = None
    for i in range(CLOCK_ROUNDS):
        t0 = time.time_ns()
        store.queue_push("ping", f"{rank}/{i}")
        store.wait([f"{rank}/{i}/pong"], patience)
        t1 = int(store.get(f"{rank}/{i}/pong"))
        t2 = time.time_ns()
        store.delete_key(f"{rank}/{i}/pong")
        sample = (t2 - t0, t1 - (t0 + t2) / 2)
        best = sample if best is None or sample[0] < best[0] else best
    write(records.Clock(int(best[1]), int(best[0])))
    try:
        store.queue_push("ping", f"{rank}/{DONE}")
        go = store.clone()              # a blocking pop with its own bound
        go.set_timeout(patience)
        go.queue_pop(f"{rank}/{GO}", True)
    except Exception:              # noqa: BLE001 - rank 0 gone: the offset stands, keys are left
        pass


def _answer_clock(store: Any, world: int) -> None:
    """Rank 0: stamp every ping as it comes off the queue, until every rank's rounds are
    answered or CLOCK_WAIT_S has passed in all."""
    from datetime import timedelta

    queue = store.clone()               # its own connection: a blocking pop holds it
    deadline = time.monotonic() + CLOCK_WAIT_S
    done: list[str] = []
    for _ in range((world - 1) * (CLOCK_ROUNDS + 1)):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        queue.set_timeout(timedelta(seconds=left))
        try:
            ping = queue.queue_pop("ping", True).decode(errors="replace")
        except Exception:          # noqa: BLE001 - the ranks that never came: go on without them
            break
        now = time.time_ns()
        if ping.endswith(f"/{DONE}"):
            sender = ping.rsplit("/", 1)[0]
            done.append(sender)
            queue.queue_push(f"{sender}/{GO}", GO)
        else:
            queue.set(f"{ping}/pong", str(now))
    for sender in done:                 # each go taken (popped): nothing of the exchange is left
        while queue.check([f"{sender}/{GO}"]) and time.monotonic() < deadline:
            time.sleep(GO_POLL_S)
