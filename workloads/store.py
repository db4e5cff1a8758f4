"""Workload `store`: the key-value store underneath every process group.

`init_process_group` is a store first: rank 0 (or torchrun's agent) hosts a
`TCPStore`, every rank is a client, and the ranks find each other by writing
their addresses into it. This workload uses that store directly, on every
rank, through a `PrefixStore` of its own (so its keys stay apart from the
default group's):

- set/get: every rank sets one key, every rank reads every key;
- add: one counter that every rank increments must reach the world size, and
  the values `add` returned are 1..n, each exactly once (it is atomic);
- wait: each rank waits for a key that its neighbour sets a little later, and
  waiting for a key nobody sets raises within the timeout (measured);
- compare_set: every rank tries to claim one key; exactly one wins, and a
  swap with the wrong expected value changes nothing;
- check / delete_key / num_keys: a key is there, then gone; the store's key
  count goes up by n and back down;
- two `PrefixStore`s over one store keep the same key apart (`a/k`, `b/k`);
- a process group built *from a store* (`dist.ProcessGroupGloo(PrefixStore(
  TCPStore))`), outside `init_process_group`: rank 0 hosts a fresh TCPStore on
  a port the OS picks (port 0) and publishes it through the default store; the
  new group's all_reduce runs at the same time as one on the default group,
  then a broadcast. The NCCL twin needs GPUs, and is skipped without them;
- the facts of torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE, restart
  count, where the default group's keys live), as rows of the report;
- latency of set/get/add/check over `ops` calls (median, p99).

Its report section is workloads/_report/store.py.
"""
from __future__ import annotations

import datetime
import math
import os
import statistics
import threading
import time
from typing import Any

from . import _common
from ._protocol import Env

LATE_DELAY_S = 0.2          # how much later a neighbour sets the key this rank waits for
PREFIX = "labctl/store"     # this workload's keys, under the default group's store
LATENCY_OPS = ("set", "get", "add", "check")
AGENT_VARS = ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
              "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID")


def run(ctx: _common.Context, ops: int = 300, wait_timeout: float = 0.5,
        group_timeout: float = 60.0) -> None:
    import torch.distributed as dist

    base = default_store()
    store = dist.PrefixStore(PREFIX, base)
    set_get(ctx, store)
    add_counter(ctx, store)
    wait_for_late_key(ctx, store)
    wait_for_missing_key(ctx, store, wait_timeout)
    compare_set(ctx, store)
    keys_come_and_go(ctx, store)
    prefixes_keep_keys_apart(ctx, store)
    group_from_a_store(ctx, store, group_timeout)
    agent_store_facts(ctx, base)
    latency(ctx, store, ops)
    dist.barrier()


def default_store():
    """The store the default group was built on (with its `default_pg` prefix)."""
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def set_get(ctx: _common.Context, store) -> None:
    import torch.distributed as dist

    store.set(f"kv/{ctx.rank}", f"value-{ctx.rank}")
    dist.barrier()
    got = [_text(store.get(f"kv/{i}")) for i in range(ctx.world_size)]
    want = [f"value-{i}" for i in range(ctx.world_size)]
    ctx.record("set-get", got == want, keys=ctx.world_size,
               detail="" if got == want else f"got {got}, expected {want}")


def add_counter(ctx: _common.Context, store) -> None:
    import torch
    import torch.distributed as dist

    mine = store.add("counter", 1)
    dist.barrier()
    total = int(_text(store.get("counter")))
    seen = [torch.zeros(1, dtype=torch.int64) for _ in range(ctx.world_size)]
    dist.all_gather(seen, torch.tensor([mine], dtype=torch.int64))
    returned = sorted(int(t) for t in seen)
    ok = total == ctx.world_size and returned == list(range(1, ctx.world_size + 1))
    ctx.record("add-counter", ok, counter=total, returned=returned,
               detail="" if ok else f"counter {total}, add returned {returned}; expected "
                                    f"{ctx.world_size} and 1..{ctx.world_size} once each")


def wait_for_late_key(ctx: _common.Context, store) -> None:
    """Wait for the key the next rank sets LATE_DELAY_S after the barrier.

    The setter runs on a clone of the store (a connection of its own): a
    client blocked in wait() must not be the one that sets the key.
    """
    import torch.distributed as dist

    setter = store.clone()
    neighbour = (ctx.rank + 1) % ctx.world_size
    dist.barrier()
    timer = threading.Timer(LATE_DELAY_S, setter.set, args=(f"late/{ctx.rank}", f"from-{ctx.rank}"))
    started = time.perf_counter()
    timer.start()
    error = ""
    try:
        store.wait([f"late/{neighbour}"], datetime.timedelta(seconds=60))
        value = _text(store.get(f"late/{neighbour}"))
    except Exception as exc:           # DistStoreError: recorded, not raised (the others go on)
        value, error = "", f"{type(exc).__name__}: {exc}"
    waited = time.perf_counter() - started
    timer.join()
    ok = not error and value == f"from-{neighbour}"
    ctx.record("wait-for-late-key", ok, waited_for=neighbour, seconds=round(waited, 6), unit="s",
               detail=error or ("" if ok else f"got {value!r}, expected 'from-{neighbour}'"))


def wait_for_missing_key(ctx: _common.Context, store, timeout_s: float) -> None:
    """A key nobody sets: wait() must raise, and not long after its timeout."""
    started = time.perf_counter()
    raised = ""
    try:
        store.wait([f"missing/{ctx.rank}"], datetime.timedelta(seconds=timeout_s))
    except Exception as exc:
        raised = type(exc).__name__
    waited = time.perf_counter() - started
    ok = bool(raised) and timeout_s * 0.9 <= waited <= timeout_s + 5.0
    ctx.record("wait-missing-key-raises", ok, raised=raised or None, timeout_s=timeout_s,
               seconds=round(waited, 6), unit="s",
               detail="" if ok else (f"raised {raised or 'nothing'} after {waited:.3f}s; expected "
                                     f"an error after about {timeout_s:g}s"))


def compare_set(ctx: _common.Context, store) -> None:
    import torch
    import torch.distributed as dist

    mine = f"rank-{ctx.rank}"
    answer = _text(store.compare_set("leader", "", mine))   # "" expected: only if the key is new
    dist.barrier()
    leader = _text(store.get("leader"))
    won = torch.tensor([1 if answer == mine else 0])
    dist.all_reduce(won)
    ok = int(won) == 1 and answer == leader
    ctx.record("compare_set-one-winner", ok, leader=leader, winners=int(won),
               detail="" if ok else f"{int(won)} winners; this rank was told {answer!r}, "
                                    f"the key holds {leader!r}")
    kept = _text(store.compare_set("leader", "not-the-value", "usurper"))
    now = _text(store.get("leader"))
    ok = kept == leader and now == leader
    ctx.record("compare_set-mismatch-keeps-value", ok,
               detail="" if ok else f"returned {kept!r}, key now {now!r}, expected {leader!r}")
    dist.barrier()


def keys_come_and_go(ctx: _common.Context, store) -> None:
    """num_keys counts the whole store, so every rank reads it only between two
    barriers, while nobody writes."""
    import torch.distributed as dist

    def quiet_count() -> int:
        dist.barrier()
        count = store.num_keys()
        dist.barrier()
        return count

    key = f"tmp/{ctx.rank}"
    before = quiet_count()
    store.set(key, "x")
    during = quiet_count()
    there = store.check([key])
    deleted = store.delete_key(key)
    after = quiet_count()
    gone = not store.check([key])
    again = store.delete_key(key)
    ok = there and deleted and gone and not again
    ctx.record("check-delete_key", ok, detail="" if ok else
               f"check {there}, delete {deleted}, gone {gone}, second delete {again}")
    ok = during - before == ctx.world_size and after == before
    ctx.record("num_keys", ok, before=before, during=during, after=after,
               detail="" if ok else f"expected +{ctx.world_size} then back to {before}")


def prefixes_keep_keys_apart(ctx: _common.Context, store) -> None:
    import torch.distributed as dist

    a, b = dist.PrefixStore("a", store), dist.PrefixStore("b", store)
    key = f"k{ctx.rank}"
    a.set(key, f"A{ctx.rank}")
    b.set(key, f"B{ctx.rank}")
    got = (_text(a.get(key)), _text(b.get(key)), _text(store.get(f"a/{key}")))
    want = (f"A{ctx.rank}", f"B{ctx.rank}", f"A{ctx.rank}")
    ctx.record("prefix-stores-apart", got == want, layout=f"a/{key}",
               detail="" if got == want else f"got {got}, expected {want}")


def group_from_a_store(ctx: _common.Context, store, timeout_s: float) -> None:
    """A second process group, built from a fresh TCPStore, next to the default one."""
    import torch
    import torch.distributed as dist

    n, me = ctx.world_size, ctx.rank
    timeout = datetime.timedelta(seconds=timeout_s)
    if me == 0:
        # Port 0: the OS picks a free one; the others learn it from the default store.
        fresh = dist.TCPStore(_host(), 0, is_master=True, wait_for_workers=False, timeout=timeout)
        store.set("fresh-store", f"{_host()}:{fresh.port}")
    host, _, port = _text(store.get("fresh-store")).rpartition(":")
    if me != 0:
        fresh = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    started = time.perf_counter()
    pg = dist.ProcessGroupGloo(dist.PrefixStore("labctl-fresh", fresh), me, n, timeout)
    joined = time.perf_counter() - started

    x = torch.full((3,), me + 1.0)                       # on the new group
    y = torch.full((3,), 10.0 * (me + 1), device=ctx.device)   # on the default group, meanwhile
    work_new = pg.allreduce([x])
    work_default = dist.all_reduce(y, async_op=True)
    work_new.wait()
    work_default.wait()
    ctx.check("store-group-all_reduce", x, torch.full((3,), n * (n + 1) / 2.0),
              store=f"{host}:{port}", join_seconds=round(joined, 6))
    ctx.check("default-group-all_reduce-meanwhile", y, torch.full((3,), 10.0 * n * (n + 1) / 2))
    root = n - 1
    z = torch.full((2,), 7.0 + me) if me == root else torch.full((2,), -1.0)
    pg.broadcast(z, root).wait()
    ctx.check("store-group-broadcast", z, torch.full((2,), 7.0 + root), root=root)

    if not torch.cuda.is_available():
        ctx.skip("store-group-nccl-all_reduce",
                 "no GPU on this rank: ProcessGroupNCCL needs CUDA (runs with --dist-backend nccl on GPUs)")
    else:
        nccl = dist.ProcessGroupNCCL(dist.PrefixStore("labctl-fresh-nccl", fresh), me, n, timeout)
        g = torch.full((3,), me + 1.0, device=torch.device("cuda", ctx.local_rank))
        nccl.allreduce([g]).wait()
        ctx.check("store-group-nccl-all_reduce", g, torch.full((3,), n * (n + 1) / 2.0))
    # Rank 0 hosts the fresh store: nobody may leave while others still use it.
    dist.barrier()
    del pg


def _host() -> str:
    """How the others reach this rank's host: MASTER_ADDR is rank 0's host under
    both launchers (torchrun sets it to the rendezvous' rank 0)."""
    return os.environ.get("MASTER_ADDR") or _common.hostname()


def agent_store_facts(ctx: _common.Context, base) -> None:
    """Where the default group's keys really live, and what torchrun said about it."""
    import torch.distributed as dist

    probe = f"labctl-probe/{ctx.rank}"
    base.set(probe, "1")
    inner, depth = base, 0
    while isinstance(inner, dist.PrefixStore):
        inner, depth = inner.underlying_store, depth + 1
    full = next((k for k in _list_keys(inner) if k.endswith(probe)), None)
    layout = full[: -len(probe)] + "<key>" if full else None
    env = {name: os.environ.get(name) for name in AGENT_VARS}
    restart = env["TORCHELASTIC_RESTART_COUNT"]
    attempt = f"/worker/attempt_{restart}" if restart is not None else None
    ctx.record("agent-store", True, **env, launcher=os.environ.get(Env.LAUNCHER),
               init_method=_common.init_method(), store_type=type(inner).__name__,
               prefix_depth=depth, key_layout=layout,
               attempt_prefix=attempt if (attempt and layout and attempt in layout) else None)
    launcher = os.environ.get(Env.LAUNCHER)
    if launcher == "torchrun":
        ok = env["TORCHELASTIC_USE_AGENT_STORE"] == "True" and restart is not None
        ctx.record("agent-store-under-torchrun", ok, detail="" if ok else
                   f"torchrun set TORCHELASTIC_USE_AGENT_STORE={env['TORCHELASTIC_USE_AGENT_STORE']}, "
                   f"TORCHELASTIC_RESTART_COUNT={restart}")
    elif launcher == "direct":
        ok = env["TORCHELASTIC_USE_AGENT_STORE"] is None
        ctx.record("no-agent-store-when-direct", ok, detail="" if ok else
                   "TORCHELASTIC_USE_AGENT_STORE is set without torchrun")


def _list_keys(store) -> list[str]:
    try:
        return [_text(k) for k in store.list_keys()]
    except Exception:                  # a store without list_keys (FileStore in older torch)
        return []


def latency(ctx: _common.Context, store, ops: int) -> None:
    """Round trips of this rank's own keys, while every other rank does the same."""
    import torch.distributed as dist

    key = f"lat/{ctx.rank}"
    store.set(key, "x")
    calls = {
        "set": lambda: store.set(key, "x" * 8),
        "get": lambda: store.get(key),
        "add": lambda: store.add(f"lat-add/{ctx.rank}", 1),
        "check": lambda: store.check([key]),
    }
    for op in LATENCY_OPS:
        dist.barrier()
        times = []
        for _ in range(ops):
            started = time.perf_counter()
            calls[op]()
            times.append((time.perf_counter() - started) * 1e6)
        if not times:
            ctx.skip(f"latency-{op}", "ops=0: nothing was measured")
            continue
        ctx.record(f"latency-{op}", True, count=len(times), time_us_median=round(statistics.median(times), 2),
                   time_us_p99=round(percentile(times, 99), 2), unit="us")


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile (the value below which pct% of the calls fall)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(len(ordered) * pct / 100) - 1))]


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("store")
