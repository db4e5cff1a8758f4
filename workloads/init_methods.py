"""Workload `init_methods`: the three ways into a process group, side by side.

`init_process_group` needs a store that every rank can reach; the init method
says where it is:

- `env://` reads MASTER_ADDR/MASTER_PORT (and RANK/WORLD_SIZE) from the
  environment; under torchrun every rank is a client of the agent's store;
- `tcp://HOST:PORT` names the store explicitly: global rank 0 hosts it, so
  HOST must be rank 0's host and PORT free there and reachable;
- `file:///path` meets in a file that every rank can open: a directory that
  every node shares (one machine's /tmp, a shared volume, NFS).

For each method this backend supports, every rank tears the default group
down, joins again through that method, and checks an all_reduce; the join
time (the slowest rank's is what a job waits for) is recorded. The lab's own
init method goes last, so later workloads run on the group they started with.

Where the meeting points come from: tcp:// uses LAB_INIT_METHOD when the lab
joined through tcp (the planned port on node 0), else a port rank 0's OS
picks, on MASTER_ADDR (rank 0's host under either launcher). file:// uses the
directory of LAB_INIT_METHOD's file, else LAB_SHARED_DIR (the lab's shared
directory: local, the run folder's shared/), else the system temp folder — after
checking that every rank really sees it (containers each have their own /tmp:
then file:// is skipped, with the reason).

torch is imported inside functions only: the report's hook (workloads/_report/init_methods.py)
imports METHODS and NEEDS from here and must not import torch.
"""
from __future__ import annotations

import os
import secrets
import tempfile
import time

from . import _common
from ._protocol import Env
from ._protocol.ports import free_port

METHODS = ("env", "tcp", "file")
NEEDS = {
    "env": "MASTER_ADDR, MASTER_PORT (+ RANK, WORLD_SIZE) in every worker's environment",
    "tcp": "rank 0's host and a free port there that every rank can reach",
    "file": "one directory that every rank sees (shared filesystem)",
}


def run(ctx: _common.Context) -> None:
    import torch.distributed as dist

    joined_through(ctx)
    own = _common.init_method().split("://", 1)[0]
    order = [m for m in METHODS if m != own] + [own]      # end on the lab's own method
    for method in order:
        url, why_not = meeting_point(ctx, method)
        if url is None:
            ctx.skip(f"join-{method}", why_not)
            continue
        stale = forget_agent_store_groups(ctx) if method == "env" else None
        dist.barrier()
        dist.destroy_process_group()
        started = time.perf_counter()
        try:
            _common.join(ctx.backend, ctx.device, url)
        except Exception as exc:
            ctx.record(f"join-{method}", False, method=method, url=url, needs=NEEDS[method],
                       detail=f"{type(exc).__name__}: {exc}")
            raise                       # no group left to go on with
        seconds = time.perf_counter() - started
        ok = check_all_reduce(ctx)
        extra = {"stale_keys_removed": stale} if stale is not None else {}
        ctx.record(f"join-{method}", ok, method=method, url=url, needs=NEEDS[method],
                   seconds=round(seconds, 6), unit="s", **extra,
                   detail="" if ok else "all_reduce after the join gave a wrong sum")


def forget_agent_store_groups(ctx: _common.Context) -> int | None:
    """Under torchrun, env:// always meets in the agent's store, which outlives
    every group: the keys of the lab's first default group (`default_pg/...`,
    gloo's addresses among them) are still there. A second env:// join under
    the same group name reads them before the peers overwrite them and dials
    ports nobody listens on any more ("Connection refused"). torchrun itself
    never rejoins in one store: each restart attempt gets a new one. Here rank 0
    deletes those keys first. Returns how many (None: no agent store)."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    removed = 0
    dist.barrier()                      # nobody still reads them
    if ctx.rank == 0:
        agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
        for key in agent.list_keys():
            name = key.decode() if isinstance(key, bytes) else key
            if name.startswith("default_pg/"):
                removed += int(agent.delete_key(name))
    return _from_rank0(ctx, removed)


def joined_through(ctx: _common.Context) -> None:
    """The lab's default group really met where LAB_INIT_METHOD said: a FileStore
    for file://, a TCPStore on the URL's port for tcp://, on MASTER_PORT for env://
    (under torchrun: the agent's store, whose port torchrun put in MASTER_PORT)."""
    from torch.distributed import FileStore, PrefixStore, TCPStore, distributed_c10d

    url = _common.init_method()
    store = distributed_c10d._get_default_store()
    while isinstance(store, PrefixStore):
        store = store.underlying_store
    if url.startswith("file://"):
        ok, want = isinstance(store, FileStore), "a FileStore"
    else:
        port = int(url.rsplit(":", 1)[1]) if url.startswith("tcp://") else int(os.environ["MASTER_PORT"])
        ok, want = isinstance(store, TCPStore) and store.port == port, f"a TCPStore on port {port}"
    got = type(store).__name__ + (f" on port {store.port}" if isinstance(store, TCPStore) else "")
    ctx.record("lab-joined-through", ok, url=url, store=got,
               detail="" if ok else f"default group's store is {got}, expected {want}")


def check_all_reduce(ctx: _common.Context) -> bool:
    import torch
    import torch.distributed as dist

    n = ctx.world_size
    t = torch.full((4,), ctx.rank + 1.0, device=ctx.device)
    dist.all_reduce(t)
    return bool((t.cpu() == n * (n + 1) / 2).all())


def meeting_point(ctx: _common.Context, method: str) -> tuple[str | None, str]:
    """(URL every rank agrees on, "") or (None, why this backend cannot do it).
    Called on every rank in the same order: it uses the default group."""
    own = _common.init_method()
    if method == "env":
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
        return (None, f"{', '.join(missing)} not set") if missing else ("env://", "")
    if method == "tcp":
        if own.startswith("tcp://"):
            return own, ""
        port = free_port(host="") if ctx.rank == 0 else 0
        port = _from_rank0(ctx, port)
        return f"tcp://{_rank0_host()}:{port}", ""
    directory = (os.path.dirname(own[len("file://"):]) if own.startswith("file://")
                 else os.environ.get(Env.SHARED_DIR) or tempfile.gettempdir())
    if not _shared_by_everyone(ctx, directory):
        return None, (f"{directory} is not one directory for every rank (each container has its "
                      "own); init_method: file gives the lab a shared one")
    replica = f"-r{ctx.replica_id}" if ctx.replica_num > 1 else ""
    name = f"{os.environ.get(Env.RUN_ID, 'lab')}{replica}-init_methods.init"
    return f"file://{os.path.join(directory, name)}", ""


def _rank0_host() -> str:
    return os.environ.get("MASTER_ADDR") or _common.hostname()


def _from_rank0(ctx: _common.Context, value: int) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.broadcast(t, src=0)
    return int(t.item())


def _shared_by_everyone(ctx: _common.Context, directory: str) -> bool:
    """Rank 0 leaves a token file; every rank must see it."""
    import torch
    import torch.distributed as dist

    token = _from_rank0(ctx, secrets.randbits(62) if ctx.rank == 0 else 0)
    path = os.path.join(directory, f".labctl-shared-{token:x}")
    if ctx.rank == 0:
        try:
            with open(path, "w") as f:
                f.write("labctl\n")
        except OSError:
            pass
    dist.barrier()
    seen = torch.tensor([1 if os.path.exists(path) else 0], device=ctx.device)
    dist.all_reduce(seen, op=dist.ReduceOp.MIN)
    dist.barrier()
    if ctx.rank == 0 and os.path.exists(path):
        os.unlink(path)
    return bool(seen.item())


if __name__ == "__main__":
    from .__main__ import main_single

    main_single("init_methods")
