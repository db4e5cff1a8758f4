"""Workload `preflight`: will a multi-node lab work here? Ask before it runs.

What makes a distributed job fail in its first minute, checked per node and
per pair of nodes, each a named result with its value (`labctl preflight`
prints them as one table, workloads/_report/preflight.py):

Before init_process_group (`before_init`; these need no process group, and
when they fail no process group can form, so they must speak first):

    dns     node 0's name (MASTER_ADDR) resolves on this node (its addresses, the time)
    gpus    nccl only: the node sees a GPU per worker (LOCAL_WORLD_SIZE)
    shm     /dev/shm holds at least `min_shm_mib` (containers default to 64 MiB)
    port    MASTER_ADDR:MASTER_PORT takes a TCP connection within `connect_timeout`,
            and what answers is the lab's store. Global rank 0 hosts that store
            itself before anyone joins (so the port can be tried before the group
            exists); on node 0 the check is that the port can be listened on.
    init_port  (`check_init_port`, set by `labctl preflight` for tcp:// init labs)
            the same for MASTER_PORT + 1, where rank 0 hosts the tcp:// store
    join    (rank 0) every rank reached the store within `join_timeout` and
            passed its own checks; otherwise it names the ranks that did not.

After it (`run`, over the process group; one leader per node, local rank 0):

    clock       each node's wall clock against node 0's: offset = t_node0 - the
                midpoint of a send/recv round trip (best of 5), within
                `max_clock_offset_ms`
    all_reduce  every pair of nodes, in a two-rank group: right sum, and the time
    p2p         every pair of nodes: a send and a reply, right payload, and the time
    all_reduce  (all nodes) one tiny all_reduce over the whole world

Run with the `direct` launcher (what `labctl preflight` does): under torchrun
the agents' rendezvous needs node 0's name and port before any worker runs, so
a failure there would never reach these checks. Under torchrun the workload
still works: the agent's store is used instead of one of its own.
"""
from __future__ import annotations

import errno
import itertools
import os
import socket
import time
from typing import Any

from . import _common
from ._protocol import Env, one_line

NAME = "preflight"
CONNECT_TIMEOUT_S = 20.0
JOIN_TIMEOUT_S = 60.0
MIN_SHM_MIB = 256
MAX_CLOCK_OFFSET_MS = 500.0
CLOCK_ROUNDS = 5
KEY = "preflight/"


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _record(name: str, ok: bool, **fields: Any) -> bool:
    return _common.record_before_init(NAME, name, ok, node=_node(), **fields)


def _node() -> int:
    return int(_env("NODE_RANK", _env("GROUP_RANK", "0")))


def _agent_store() -> bool:
    """Under torchrun the workers' MASTER_ADDR:MASTER_PORT is the agent's store."""
    return _env("TORCHELASTIC_USE_AGENT_STORE").lower() == "true"


# ---- before the process group ---------------------------------------------------
def check_dns(addr: str, port: int) -> bool:
    started = time.perf_counter()
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return _record("dns", False, peer=0, host=addr, seconds=round(time.perf_counter() - started, 6),
                       value=f"{addr}: does not resolve",
                       detail=f"MASTER_ADDR {addr} does not resolve on {_common.hostname()}: {exc}")
    ips = sorted({info[4][0] for info in infos})
    took = time.perf_counter() - started
    return _record("dns", True, peer=0, host=addr, addresses=ips, seconds=round(took, 6),
                   value=f"{addr} -> {', '.join(ips[:3])} ({_ms(took):g} ms)")


def check_gpus() -> bool:
    import torch

    want = int(_env("LOCAL_WORLD_SIZE", _env(Env.NPROC_PER_NODE, "1")))
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return _record("gpus", have >= want, gpus=have, needed=want, value=f"{have} GPU(s) for {want} worker(s)",
                   detail="" if have >= want else
                   f"nccl needs a GPU per worker: {want} worker(s) on this node, {have} GPU(s) visible")


def check_shm(min_shm_mib: int) -> bool:
    try:
        st = os.statvfs("/dev/shm")
    except OSError as exc:
        return _record("shm", False, value="no /dev/shm", detail=f"/dev/shm: {exc.strerror}")
    mib = st.f_frsize * st.f_blocks / 2**20
    free = st.f_frsize * st.f_bavail / 2**20
    ok = mib >= min_shm_mib
    return _record("shm", ok, mib=round(mib, 1), free_mib=round(free, 1), min_mib=min_shm_mib,
                   value=f"{mib:.0f} MiB ({free:.0f} free)",
                   detail="" if ok else f"/dev/shm is {mib:.0f} MiB, below {min_shm_mib} MiB (NCCL and "
                   "DataLoader workers use it; containers default to 64 MiB: raise resources.shm)")


def host_store(port: int, timeout: float):
    """Rank 0: the lab's store on MASTER_PORT, up before anyone tries the port."""
    import datetime

    import torch.distributed as dist

    started = time.perf_counter()
    try:
        store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=timeout),
                              wait_for_workers=False)
    except (RuntimeError, OSError) as exc:
        _record("port", False, peer=0, port=port, value=f"cannot listen on {port}",
                detail=f"node 0 cannot listen on port {port} for the rendezvous: {one_line(exc, 300)}")
        return None
    store.set(KEY + "host", _common.hostname())
    _record("port", True, peer=0, port=port, seconds=round(time.perf_counter() - started, 6),
            value=f"listening on {port}")
    return store


def try_port(addr: str, port: int, connect_timeout: float) -> tuple[bool, float, str]:
    """Connect to addr:port until it answers or `connect_timeout` passes (node 0 may
    start later than this node). Returns (ok, seconds, why not)."""
    started = time.monotonic()
    deadline = started + connect_timeout
    last = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False, time.monotonic() - started, last or "no answer"
        try:
            with socket.create_connection((addr, port), timeout=min(2.0, left)):
                return True, time.monotonic() - started, ""
        except socket.gaierror as exc:
            return False, time.monotonic() - started, f"{addr} does not resolve ({exc})"
        except socket.timeout:
            last = "connect timed out (a firewall dropping packets?)"
        except OSError as exc:
            last = {errno.ECONNREFUSED: "connection refused (nothing listens there)",
                    errno.EHOSTUNREACH: "no route to host", errno.ENETUNREACH: "network unreachable",
                    }.get(exc.errno or 0, exc.strerror or str(exc))
        time.sleep(0.05)


def join_store(addr: str, port: int, connect_timeout: float, timeout: float):
    """Every rank but the host: the TCP check, then the store itself."""
    import datetime

    import torch.distributed as dist

    ok, took, why = try_port(addr, port, connect_timeout)
    if not ok:
        _record("port", False, peer=0, port=port, seconds=round(took, 6), value=f"{addr}:{port} unreachable",
                detail=f"{addr}:{port} (node 0's rendezvous port) not reachable from "
                f"{_common.hostname()} within {connect_timeout:g} s: {why}")
        return None
    left = max(1.0, connect_timeout - took)

    def connect():
        store = dist.TCPStore(addr, port, None, False, datetime.timedelta(seconds=left))
        if not _agent_store():
            store.wait([KEY + "host"], datetime.timedelta(seconds=left))
        return store

    # A listener that never answers (a squatter, a proxy) can hold the client's
    # handshake past its own timeout: bound it from outside.
    outcome = _bounded(connect, left + 1.0)
    if not hasattr(outcome, "set"):
        _record("port", False, peer=0, port=port, seconds=round(took, 6), value=f"{addr}:{port} not the store",
                detail=f"{addr}:{port} takes connections but does not answer as the lab's store "
                f"within {left:.0f} s: {outcome}")
        return None
    store = outcome
    _record("port", True, peer=0, port=port, seconds=round(took, 6), value=f"{addr}:{port} ({_ms(took):g} ms)")
    store.set_timeout(datetime.timedelta(seconds=timeout))
    return store


def gate(store, rank: int, world: int, verdict: str, join_timeout: float) -> list[str]:
    """Every rank says how its checks went and waits for all others; returns what the
    others said is wrong ('rank 3 (node 1): dns'), or raises Stop on rank 0's timeout."""
    import datetime

    store.set(f"{KEY}verdict/{rank}", f"{_node()}:{verdict}")
    keys = [f"{KEY}verdict/{r}" for r in range(world)]
    try:
        store.wait(keys, datetime.timedelta(seconds=join_timeout))
    except (RuntimeError, OSError):
        if rank == 0:
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            _record("join", False, peer=0, missing_ranks=missing, value=f"{len(missing)} rank(s) missing",
                    detail=f"rank(s) {', '.join(map(str, missing))} never reached node 0's store "
                    f"within {join_timeout:g} s (their own checks or logs say why)")
        raise _common.Stop() from None
    bad = []
    for r, k in enumerate(keys):
        node, _, said = store.get(k).decode().partition(":")
        if said != "ok":
            bad.append(f"rank {r} (node {node}): {said}")
    return bad


def init_port_check(rank: int, addr: str, port: int, connect_timeout: float):
    """tcp:// init: rank 0 will host that store on MASTER_PORT + 1; a plain listener
    stands in for it now (returned, closed after the gate), the others connect to it."""
    if rank == 0:
        listener = socket.socket()
        try:
            listener.bind(("", port))
            listener.listen(64)
        except OSError as exc:
            listener.close()
            _record("init_port", False, peer=0, port=port, value=f"cannot listen on {port}",
                    detail=f"node 0 cannot listen on port {port} for tcp:// init: {exc.strerror}")
            return None
        _record("init_port", True, peer=0, port=port, value=f"listening on {port}")
        return listener
    ok, took, why = try_port(addr, port, connect_timeout)
    _record("init_port", ok, peer=0, port=port, seconds=round(took, 6),
            value=f"{addr}:{port} ({_ms(took):g} ms)" if ok else f"{addr}:{port} unreachable",
            detail="" if ok else f"{addr}:{port} (node 0's tcp:// init port) not reachable from "
            f"{_common.hostname()} within {connect_timeout:g} s: {why}")
    return ok


def before_init(connect_timeout: float = CONNECT_TIMEOUT_S, join_timeout: float = JOIN_TIMEOUT_S,
                min_shm_mib: int = MIN_SHM_MIB, max_clock_offset_ms: float = MAX_CLOCK_OFFSET_MS,
                check_init_port: bool = False) -> dict[str, Any]:
    """The checks that need no process group; the store they leave is joined through."""
    from torch.distributed import PrefixStore

    rank, world = int(_env("RANK", "0")), int(_env("WORLD_SIZE", "1"))
    leader = int(_env("LOCAL_RANK", "0")) == 0
    addr, port = _env("MASTER_ADDR", "127.0.0.1"), int(_env("MASTER_PORT", "29500"))
    failed: list[str] = []
    if leader:
        if not check_dns(addr, port):
            failed.append("dns")
        if _common.resolve_backend(os.environ.get(Env.DIST_BACKEND)) == "nccl" and not check_gpus():
            failed.append("gpus")
        check_shm(min_shm_mib)                  # a small /dev/shm does not stop the group
    if rank == 0 and not _agent_store():
        store = host_store(port, join_timeout)
    else:
        store = join_store(addr, port, connect_timeout, join_timeout)
    if store is None:
        raise _common.Stop()
    listener = None
    if check_init_port:
        listener = init_port_check(rank, addr, port + 1, connect_timeout)
        if not listener:
            failed.append("init_port")
    try:
        bad = gate(store, rank, world, ",".join(failed) or "ok", join_timeout)
    finally:
        if listener not in (None, True, False):
            listener.close()
    if bad:
        if rank == 0:
            _record("join", False, peer=0, value=f"{len(bad)} rank(s) failed checks",
                    detail="not joining: " + "; ".join(bad))
        _leave(store, rank, world)
        raise _common.Stop()
    if rank == 0:
        _record("join", True, peer=0, value=f"{world} rank(s)")
    run_id = _env(Env.RUN_ID, "run")
    return {"store": PrefixStore(f"{KEY}{run_id}/pg", store), "timeout": join_timeout}


def _leave(store, rank: int, world: int) -> None:
    """Rank 0 hosts the store: it leaves last, or the others lose it mid-read."""
    store.add(KEY + "left", 1)
    if rank == 0:
        end = time.monotonic() + 5.0
        while time.monotonic() < end and store.add(KEY + "left", 0) < world:
            time.sleep(0.02)


def _bounded(fn, seconds: float) -> Any:
    """fn()'s value, or a line saying why not (its exception, or that it took too long).
    A call still stuck at the end is left in a daemon thread: this rank exits anyway."""
    import threading

    box: list[Any] = []

    def call() -> None:
        try:
            box.append(fn())
        except Exception as exc:            # RuntimeError, DistStoreError, OSError ...
            box.append(one_line(exc, 300))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    return box[0] if box else f"no answer after {seconds:.0f} s"


# ---- over the process group -------------------------------------------------------
def run(ctx: _common.Context, connect_timeout: float = CONNECT_TIMEOUT_S,
        join_timeout: float = JOIN_TIMEOUT_S, min_shm_mib: int = MIN_SHM_MIB,
        max_clock_offset_ms: float = MAX_CLOCK_OFFSET_MS, check_init_port: bool = False) -> None:
    import torch.distributed as dist

    me = [ctx.rank, ctx.local_rank, _node(), _common.hostname()]
    everyone = _common.all_gather_json(me)
    leaders = {node: rank for rank, local, node, _ in everyone if local == 0}
    node_of = {rank: node for rank, _, node, _ in everyone}

    started = time.perf_counter()
    total = ctx.tensor([1.0])
    dist.all_reduce(total)
    took = time.perf_counter() - started
    ctx.check("all_reduce", total, [float(ctx.world_size)], node=ctx.node_rank, peer="all",
              seconds=round(took, 6), value=f"{_ms(took):g} ms over {len(leaders)} node(s)")

    if ctx.local_rank != 0:
        dist.barrier()
        return
    clock(ctx, leaders, node_of, max_clock_offset_ms)
    pairs(ctx, leaders)
    dist.barrier()


def clock(ctx: _common.Context, leaders: dict[int, int], node_of: dict[int, int],
          max_offset_ms: float) -> None:
    """NTP's estimate over send/recv: node 0's time minus the midpoint of the round trip."""
    import torch.distributed as dist

    buf = ctx.tensor([0.0], dtype=_float64())
    zero = leaders[min(leaders)]
    if ctx.rank == zero:
        for node, rank in sorted(leaders.items()):
            if rank == zero:
                continue
            for _ in range(CLOCK_ROUNDS):
                dist.recv(buf, src=rank)
                buf.fill_(time.time())
                dist.send(buf, dst=rank)
        ctx.record("clock", True, node=node_of[ctx.rank], peer=node_of[zero], offset_ms=0.0,
                   value="reference")
        return
    best = None
    for _ in range(CLOCK_ROUNDS):
        t0 = time.time()
        buf.fill_(t0)
        dist.send(buf, dst=zero)
        dist.recv(buf, src=zero)
        t1 = float(buf.item())
        t2 = time.time()
        sample = (t2 - t0, t1 - (t0 + t2) / 2)
        best = sample if best is None or sample[0] < best[0] else best
    rtt, offset = best
    ok = abs(offset) * 1000.0 <= max_offset_ms
    ctx.record("clock", ok, node=node_of[ctx.rank], peer=node_of[zero], offset_ms=_ms(offset),
               rtt_ms=_ms(rtt), value=f"{_ms(offset):+g} ms (rtt {_ms(rtt):g} ms)",
               detail="" if ok else f"clock {_ms(offset):+g} ms off node 0's, beyond "
               f"{max_offset_ms:g} ms (is NTP running on every node?)")


def pairs(ctx: _common.Context, leaders: dict[int, int]) -> None:
    """Every pair of nodes, in one global order (no two leaders wait on each other):
    a tiny all_reduce in a two-rank group, then a send and its reply."""
    import torch.distributed as dist

    mine = next(node for node, rank in leaders.items() if rank == ctx.rank)
    for a, b in itertools.combinations(sorted(leaders), 2):
        if mine not in (a, b):
            continue
        ra, rb = leaders[a], leaders[b]
        group = dist.new_group([ra, rb], use_local_synchronization=True)
        started = time.perf_counter()
        value = ctx.tensor([float(ctx.rank + 1)])
        dist.all_reduce(value, group=group)
        took = time.perf_counter() - started
        ctx.check("all_reduce", value, [float(ra + rb + 2)], node=min(a, b), peer=max(a, b),
                  seconds=round(took, 6), value=f"{_ms(took):g} ms")
        payload = ctx.tensor([float(1000 + a * 7 + b)])
        got = ctx.tensor([0.0])
        started = time.perf_counter()
        if mine == a:
            dist.send(payload, dst=rb)
            dist.recv(got, src=rb)
            took = time.perf_counter() - started
            ctx.check("p2p", got, payload, node=a, peer=b, seconds=round(took, 6),
                      value=f"{_ms(took):g} ms round trip")
        else:
            dist.recv(got, src=ra)
            dist.send(got, dst=ra)
            ctx.check("p2p", got, payload, node=a, peer=b)
        dist.destroy_process_group(group)


def _float64():
    import torch

    return torch.float64


if __name__ == "__main__":
    from .__main__ import main_single

    main_single(NAME)
