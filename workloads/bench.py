"""Workload `bench`: time collectives and p2p the way nccl-tests does.

Options (nccl-tests' flags in brackets; sizes in bytes):

    ops            list of: all_reduce all_gather reduce_scatter broadcast reduce
                   all_to_all pingpong ring          (default: all of them)
    min_bytes      [-b] smallest size                (default 1024)
    max_bytes      [-e] largest size                 (default 1 MiB)
    factor         [-f] multiply the size by this    (default 4)
    warmup_iters   [-w] untimed calls per size       (default 3)
    iters          [-n] timed calls per size         (default 10)
    dtype          float32 float16 bfloat16 float64 int32 int64 int8 uint8
                   (nccl-tests names float, half, double, int too; default float32)
    link           measure raw TCP throughput between nodes first (default true)
    link_bytes     at most this many bytes per link test (default 256 MiB)
    link_seconds   at most this long per link test   (default 1.0)

Every timed iteration: barrier, time one call (CUDA synchronize for NCCL),
then the slowest rank's time counts (every rank's times gathered once after the
loop; each iteration's and each rank's are recorded too, `times_us` and
`rank_times_us`, for the nccl-tests JSON). Time = median (and p99) of those,
algbw = size / time, busbw = algbw x nccl-tests' factor (workloads/_benchmath).
Before timing, every size runs once on known data and counts wrong elements
over all ranks (nccl-tests' #wrong); a size with #wrong > 0 is a failed check.
Rank 0 records one result per (op, size), so nothing is counted twice.
"""
from __future__ import annotations

import functools
import os
import platform
import socket
import time
from typing import Callable

import torch
import torch.distributed as dist

from . import _benchmath as bm
from . import _common, _link, _trace
from ._protocol import Env

DTYPES = {
    "float32": torch.float32, "float": torch.float32, "float16": torch.float16,
    "half": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "double": torch.float64, "int32": torch.int32, "int": torch.int32, "int64": torch.int64,
    "int8": torch.int8, "uint8": torch.uint8,
}
# Known data uses values 0..MODULUS-1, fewer when a sum over n ranks would leave the
# range a dtype holds exactly (int8 127, bfloat16 256, float16 2048): answers stay exact.
MODULUS = 11
MAX_RANK_TIMES = 4096      # per-rank times per (op, size) are recorded up to this many values
EXACT_MAX = {"torch.int8": 127, "torch.uint8": 255, "torch.bfloat16": 256, "torch.float16": 2048}


def modulus_for(dtype, n: int) -> int:
    return max(2, min(MODULUS, EXACT_MAX.get(str(dtype), 1 << 24) // n + 1))


def unsupported(backend: str, op: str) -> str | None:
    """Why `backend` cannot run `op`, decided by rule so that no rank starts it alone.

    Measured with torch 2.13 on gloo (CPU): every op here works, including
    reduce_scatter_tensor and all_to_all_single. Older gloo lacks the former.
    """
    from torch.torch_version import TorchVersion

    if backend == "gloo" and op == "reduce_scatter" and TorchVersion(torch.__version__) < (2, 6):
        return f"ProcessGroupGloo has no reduce_scatter_tensor before torch 2.6; this is {torch.__version__}"
    return None


def _single(new: str, old: str):
    """The single-tensor form of a collective (torch 2.13 renamed `*_tensor` to `*_single`)."""
    return getattr(dist, new, None) or getattr(dist, old)


def pattern(rank: int, numel: int, dtype, device, offset: int = 0, modulus: int = MODULUS) -> torch.Tensor:
    """Rank-specific known data: (i + offset + 3 * rank) % modulus, exact in every dtype."""
    idx = torch.arange(offset, offset + numel, device=device, dtype=torch.int64)
    return ((idx + 3 * rank) % modulus).to(dtype)


class Case:
    """One op at one size: buffers, the timed call, and the correctness pass."""

    def __init__(self, ctx: _common.Context, op: str, count: int, dtype):
        self.ctx, self.op, self.count, self.dtype = ctx, op, count, dtype
        n, me, dev = ctx.world_size, ctx.rank, ctx.device
        self.n, self.me, self.block = n, me, count // n if op in bm.BLOCKED else count
        self.peer = n - 1                              # pingpong partner of rank 0: the last node
        empty = lambda k: torch.zeros(k, dtype=dtype, device=dev)    # noqa: E731
        if op == "all_gather":
            self.send, self.recv = empty(self.block), empty(count)
        elif op == "reduce_scatter":
            self.send, self.recv = empty(count), empty(self.block)
        elif op == "all_to_all":
            self.send, self.recv = empty(count), empty(count)
        else:
            self.send, self.recv = empty(count), empty(count)
        self.call: Callable[[], None] = getattr(self, f"_{op}")

    # ---- the timed calls ---------------------------------------------------
    def _all_reduce(self):
        dist.all_reduce(self.send, op=dist.ReduceOp.SUM)

    def _all_gather(self):
        _single("all_gather_single", "all_gather_into_tensor")(self.recv, self.send)

    def _reduce_scatter(self):
        _single("reduce_scatter_single", "reduce_scatter_tensor")(self.recv, self.send, op=dist.ReduceOp.SUM)

    def _broadcast(self):
        dist.broadcast(self.send, src=0)

    def _reduce(self):
        dist.reduce(self.send, dst=0, op=dist.ReduceOp.SUM)

    def _all_to_all(self):
        dist.all_to_all_single(self.recv, self.send)

    def _pingpong(self):
        if self.me == 0:
            dist.send(self.send, dst=self.peer)
            dist.recv(self.recv, src=self.peer)
        elif self.me == self.peer:
            dist.recv(self.recv, src=0)
            dist.send(self.send, dst=0)

    def _ring(self):
        ops = [dist.P2POp(dist.isend, self.send, (self.me + 1) % self.n),
               dist.P2POp(dist.irecv, self.recv, (self.me - 1) % self.n)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    # ---- correctness -------------------------------------------------------
    def wrong_elements(self) -> int:
        """Run once on known data; count elements that differ from the answer on this rank."""
        n, me, op, dev, dt = self.n, self.me, self.op, self.ctx.device, self.dtype
        c, b = self.count, self.block
        mod = modulus_for(dt, n)
        known = functools.partial(pattern, modulus=mod)         # this case's known data
        expect: torch.Tensor | None
        if op == "all_reduce":
            self.send.copy_(known(me, c, dt, dev))
            self.call()
            got, expect = self.send, _sum_patterns(n, c, dt, dev)
        elif op == "all_gather":
            self.send.copy_(known(me, b, dt, dev))
            self.recv.fill_(mod)
            self.call()
            got, expect = self.recv, torch.cat([known(q, b, dt, dev) for q in range(n)])
        elif op == "reduce_scatter":
            self.send.copy_(known(me, c, dt, dev))
            self.recv.fill_(mod)
            self.call()
            got, expect = self.recv, _sum_patterns(n, b, dt, dev, offset=me * b)
        elif op == "broadcast":
            self.send.copy_(known(0, c, dt, dev) if me == 0 else torch.full_like(self.send, mod))
            self.call()
            got, expect = self.send, known(0, c, dt, dev)
        elif op == "reduce":
            self.send.copy_(known(me, c, dt, dev))
            self.call()
            got, expect = self.send, (_sum_patterns(n, c, dt, dev) if me == 0 else None)
        elif op == "all_to_all":
            self.send.copy_(known(me, c, dt, dev))
            self.recv.fill_(mod)
            self.call()
            # rank q's block `me` lands in our block q
            got = self.recv
            expect = torch.cat([known(q, b, dt, dev, offset=me * b) for q in range(n)])
        elif op == "pingpong":
            self.send.copy_(known(me, c, dt, dev))
            self.recv.fill_(mod)
            self.call()
            got = self.recv
            expect = {0: known(self.peer, c, dt, dev), self.peer: known(0, c, dt, dev)}.get(me)
        else:  # ring
            self.send.copy_(known(me, c, dt, dev))
            self.recv.fill_(mod)
            self.call()
            got, expect = self.recv, known((me - 1) % n, c, dt, dev)
        if expect is None:
            return 0
        return int((got != expect).sum())


def _sum_patterns(n: int, numel: int, dtype, device, offset: int = 0) -> torch.Tensor:
    acc = torch.zeros(numel, dtype=torch.int64, device=device)
    for q in range(n):
        acc += pattern(q, numel, torch.int64, device, offset, modulus_for(dtype, n))
    return acc.to(dtype)


def _sync(ctx: _common.Context) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)


def measure(ctx: _common.Context, case: Case, warmup_iters: int, iters: int,
            per_rank: list | None = None) -> tuple[list[float], int]:
    """The slowest rank's seconds per timed iteration, and #wrong summed over ranks;
    `per_rank`, when given, gets every rank's own seconds per iteration (rank order)."""
    wrong = torch.tensor([case.wrong_elements()], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
    for _ in range(warmup_iters):
        case.call()
    _sync(ctx)
    times = []
    for _ in range(iters):
        dist.barrier()
        _sync(ctx)
        started = time.perf_counter()
        case.call()
        _sync(ctx)
        times.append(time.perf_counter() - started)
    mine = torch.tensor(times, dtype=torch.float64, device=ctx.device)
    every = [torch.empty_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(every, mine)                       # each rank's times: the slowest, and per rank
    rows = torch.stack(every)
    if per_rank is not None:
        per_rank.extend(rows.cpu().tolist())
    return rows.max(dim=0).values.cpu().tolist(), int(wrong.item())


def environment(ctx: _common.Context, dtype_name: str, options: dict) -> dict:
    """What the numbers depend on: versions, world layout, threads, where rank 0 runs."""
    cuda = ctx.device.type == "cuda"
    env = {
        "torch": torch.__version__,
        "dist_backend": ctx.backend,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "gloo": f"bundled with torch {torch.__version__}" if ctx.backend == "gloo" else None,
        "world_size": ctx.world_size,
        "nodes": int(os.environ.get(Env.NODES, "0") or 0) or None,
        "nproc_per_node": ctx.local_world_size,
        "launcher": os.environ.get(Env.LAUNCHER),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME"),
        "hostname": socket.gethostname(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(ctx.device) if cuda else "cpu",
        "dtype": dtype_name,
        "links": os.environ.get(Env.LINKS),    # the lab's configured links (docs/network.md)
        "traced": _trace.enabled(),            # the recorder is in every timed call (docs/bench.md)
        **options,
    }
    return env


def link_test(ctx: _common.Context, max_bytes: int, max_seconds: float) -> None:
    """TCP throughput from rank 0 to the first rank of every other node (or rank 1 on one node)."""
    nodes = len({nr for nr in _all(ctx, ctx.node_rank)})
    is_server = (ctx.local_rank == 0 and ctx.node_rank != 0) if nodes > 1 else ctx.rank == 1
    sock, error = None, None
    address = None
    if is_server:
        try:
            address = _link.gloo_address()
            sock = _link.listen(address)
        except (OSError, ValueError) as exc:
            error = str(exc)
    endpoint = (ctx.rank, ctx.node_rank, address, sock.getsockname()[1] if sock else None, error)
    everyone = _all(ctx, endpoint)
    servers = [e for e in everyone if e[2] is not None or e[4] is not None]
    if sock is not None:
        try:
            sock_bytes = _link.serve_once(sock)
        except OSError:
            sock_bytes = 0
        finally:
            sock.close()
    if ctx.rank == 0:
        for rank, node, addr, port, err in servers:
            fields = {"src_rank": 0, "dst_rank": rank, "src_node": 0, "dst_node": node, "address": addr}
            if err is not None:
                ctx.skip(f"link-node-{node}", f"rank {rank} could not listen: {err}")
                continue
            try:
                got, seconds = _link.send_for(addr, port, max_bytes, max_seconds)
            except OSError as exc:
                ctx.record("link", False, detail=f"TCP to {addr}:{port} failed: {exc}", **fields)
                continue
            ctx.record("link", got > 0, bytes=got, seconds=round(seconds, 6),
                       GBps=round(bm.algbw_GBps(got, seconds), 6), **fields)
    dist.barrier()


def _all(ctx, value) -> list:
    return _common.all_gather_json(value)


def run(ctx: _common.Context, ops=None, min_bytes: int = 1024, max_bytes: int = 1 << 20,
        factor: int = 4, warmup_iters: int = 3, iters: int = 10, dtype: str = "float32",
        link: bool = True, link_bytes: int = 256 << 20, link_seconds: float = 1.0) -> None:
    ops = list(bm.OPS) if ops is None else ([ops] if isinstance(ops, str) else list(ops))
    unknown = [op for op in ops if op not in bm.OPS]
    if unknown:
        raise ValueError(f"bench: ops: unknown {unknown[0]!r}; known: {', '.join(bm.OPS)}")
    if dtype not in DTYPES:
        raise ValueError(f"bench: dtype: expected one of {', '.join(DTYPES)}, given {dtype!r}")
    bm.validate_sweep(min_bytes, max_bytes, factor, iters, warmup_iters)
    torch_dtype = DTYPES[dtype]
    esize = torch.tensor([], dtype=torch_dtype).element_size()
    n = ctx.world_size
    ranks = _all(ctx, {"rank": ctx.rank, "hostname": socket.gethostname(), "pid": os.getpid(),
                       "device": ctx.device.index if ctx.device.type == "cuda" else -1}) if n > 1 else []
    if ctx.rank == 0:
        ctx.record("bench_env", True, **environment(ctx, dtype, {
            "ops": ops, "min_bytes": min_bytes, "max_bytes": max_bytes, "factor": factor,
            "warmup_iters": warmup_iters, "iters": iters, "ranks": ranks,
            "start_time": time.strftime("%Y-%m-%d %H:%M:%S")}))
    if n < 2:
        ctx.skip("bench", "needs at least 2 ranks to communicate (world size is 1)")
        return
    if link:
        link_test(ctx, int(link_bytes), float(link_seconds))
    for op in ops:
        why = unsupported(ctx.backend, op)
        if why:
            ctx.skip(op, why)
            continue
        for size in bm.sizes(min_bytes, max_bytes, factor):
            count = bm.element_count(op, size, esize, n)
            if count == 0:
                if ctx.rank == 0:
                    ctx.skip(f"{op}-{size}B", f"{size} B holds fewer than one {dtype} per rank "
                             f"({n} ranks x {esize} B)")
                continue
            case = Case(ctx, op, count, torch_dtype)
            per_rank: list = []
            times, wrong = measure(ctx, case, warmup_iters, iters, per_rank)
            if ctx.rank == 0:
                stats = bm.summarize(op, count, esize, n, times)
                extra = {"peer": case.peer, "rtt_us_median": round(bm.percentile(times, 50) * 1e6, 3)} \
                    if op == "pingpong" else {}
                # every iteration, as nccl-tests' -I 1 reports it (pingpong: round trips halved)
                half = 2 if op == "pingpong" else 1
                extra["times_us"] = [round(t * 1e6 / half, 3) for t in times]
                if n * iters <= MAX_RANK_TIMES:
                    extra["rank_times_us"] = [[round(t * 1e6 / half, 3) for t in row] for row in per_rank]
                ctx.record(op, wrong == 0, count=count, dtype=dtype, wrong=wrong, world_size=n,
                           iters=iters, **stats, **extra,
                           **({"detail": f"{wrong} wrong elements over all ranks"} if wrong else {}))
            del case


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("bench")
