"""The one helper every workload shares: process-group init and result lines.

Results travel in the log stream — one JSON object per line behind
`RESULT_MARKER` — because a log stream is the one thing every backend can
collect (a local file, `docker compose logs`, `kubectl logs`).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

from ._protocol import (DATA, DATA_ELEMENTS, DATA_TENSORS, JOINED_MARKER, RESULT_MARKER,  # noqa: F401
                        WORKLOAD_DONE, Env, results)


def emit(record: dict[str, Any]) -> None:
    """Write one marked result line (flushed, so a crash right after loses nothing)."""
    line = results.result_line(record, default=_jsonable)
    # One write per line: with PYTHONUNBUFFERED, print() writes text and newline
    # separately, and torchrun's tee can then glue another rank's line in between.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def say_joined() -> None:
    """With the join fault clock (LAB_FAULT_CLOCK=join, set by labctl for such a lab):
    one marked line once this rank's init_process_group has returned. labctl starts
    the faults' clock when every rank's line has come, so that `kill-node:1@2` means
    two seconds into the collectives, however long torch took to import."""
    if os.environ.get(Env.FAULT_CLOCK) == "join":
        sys.stdout.write(results.joined_line(_env_int("RANK"), os.getpid()) + "\n")
        sys.stdout.flush()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _env_int(name: str, default: int | None = None) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def resolve_backend(requested: str | None) -> str:
    """`auto` means NCCL when this process can see a GPU, gloo otherwise."""
    import torch

    requested = (requested or "auto").lower()
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return requested


@dataclass
class Context:
    """What a workload needs to know about its place in the world, plus result helpers."""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    backend: str
    device: Any                     # torch.device
    workload: str = ""
    failures: int = 0
    checks: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    replica_id: int = 0             # REPLICA_ID: which of REPLICA_NUM independent jobs this is
    replica_num: int = 1

    def _tags(self) -> dict[str, Any]:
        """With replicas, ranks repeat in every replica: say which one."""
        return {"replica": self.replica_id} if self.replica_num > 1 else {}

    def record(self, name: str, ok: bool, **fields: Any) -> bool:
        """Emit one result for this rank; `ok=False` counts as a failed check."""
        ok = bool(ok)
        self.checks += 1
        if not ok:
            self.failures += 1
        emit({"workload": self.workload, "name": name, "rank": self.rank, "ok": ok,
              **self._tags(), **fields})
        return ok

    def check(self, name: str, got: Any, expected: Any, rtol: float = 0.0, atol: float = 0.0,
              **fields: Any) -> bool:
        """Compare `got` with `expected` (tensors, lists or numbers) and record the outcome."""
        ok, detail = _compare(got, expected, rtol, atol)
        if not ok:
            fields.setdefault("detail", detail)
        return self.record(name, ok, **fields)

    def skip(self, name: str, reason: str) -> None:
        """Record a check that this backend cannot run, with the reason (not a failure)."""
        emit({"workload": self.workload, "name": name, "rank": self.rank, "ok": True,
              **self._tags(), "skipped": True, "reason": reason})

    def show(self, call: str, **fields: Any) -> None:
        """Record what this rank moved in `call` (the check's name): tensors as `held(...)`.
        A data record, not a check: it counts neither as passed nor as failed."""
        emit({"workload": self.workload, "name": DATA, "rank": self.rank, "ok": True,
              **self._tags(), "call": call, **fields})

    def tensor(self, data: Any, dtype: Any = None):
        import torch

        return torch.tensor(data, dtype=dtype or torch.float32, device=self.device)


def held(value: Any) -> Any:
    """What a rank holds, small enough for a result line: a tensor as its shape, dtype and
    first DATA_ELEMENTS values (`numel` says how many there are); a list of tensors as
    the first DATA_TENSORS of those (`len`); None as None. Numbers as Python floats/ints."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return {"len": len(value), "list": [held(v) for v in value[:DATA_TENSORS]]}
    flat = numbers(value.detach().flatten()[:DATA_ELEMENTS].cpu().tolist())
    return {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
            "numel": int(value.numel()), "values": flat}


def numbers(values: Any) -> list:
    """Floats cut to float32's digits (7 significant): a loss curve in a result line."""
    return [float(format(x, ".7g")) if isinstance(x, float) else x for x in values]


def _compare(got: Any, expected: Any, rtol: float, atol: float) -> tuple[bool, str]:
    import torch

    g = got.detach().cpu().double() if isinstance(got, torch.Tensor) else torch.tensor(got, dtype=torch.float64)
    e = expected.detach().cpu().double() if isinstance(expected, torch.Tensor) else torch.tensor(expected, dtype=torch.float64)
    if g.shape != e.shape:
        return False, f"shape {tuple(g.shape)} != expected {tuple(e.shape)}"
    close = torch.isclose(g, e, rtol=rtol, atol=atol)
    if bool(close.all()):
        return True, ""
    wrong = int((~close).sum())
    return False, f"{wrong} of {g.numel()} elements differ; got {_short(g)}, expected {_short(e)}"


def _short(t) -> str:
    flat = t.flatten().tolist()
    text = ", ".join(f"{x:g}" for x in flat[:8])
    return f"[{text}{', ...' if len(flat) > 8 else ''}]"


def init_method() -> str:
    """The URL this worker joins through: LAB_INIT_METHOD, or env:// when it is not set."""
    return os.environ.get(Env.INIT_METHOD) or "env://"


@contextlib.contextmanager
def _own_store_for_tcp(url: str) -> Iterator[None]:
    """Under torchrun, TORCHELASTIC_USE_AGENT_STORE=True makes torch treat every
    store it creates from a URL as a client of the agent's store — also for
    tcp://, where nobody would then host it and every rank waits until its
    timeout. For tcp:// global rank 0 must host: say so while joining."""
    flag = "TORCHELASTIC_USE_AGENT_STORE"
    saved = os.environ.get(flag)
    if url.startswith("tcp://") and saved is not None:
        os.environ[flag] = "False"
    try:
        yield
    finally:
        if saved is not None:
            os.environ[flag] = saved


def pg_timeout():
    """LAB_PG_TIMEOUT (seconds, the spec's pg_timeout) as the timedelta init_process_group
    takes: how long a collective waits for its peers before it raises. None: torch's default."""
    import datetime

    value = os.environ.get(Env.PG_TIMEOUT)
    return datetime.timedelta(seconds=float(value)) if value else None


_before_init = {"checks": 0, "failures": 0}


def record_before_init(workload: str, name: str, ok: bool, **fields: Any) -> bool:
    """`Context.record` for checks made before init_process_group (no Context yet):
    the rank comes from RANK, and the tally carries into the Context `init` makes."""
    ok = bool(ok)
    _before_init["checks"] += 1
    _before_init["failures"] += 0 if ok else 1
    rank = _env_int("RANK", 0)
    tags = {"replica": _env_int("REPLICA_ID", 0)} if _env_int("REPLICA_NUM", 1) > 1 else {}
    emit({"workload": workload, "name": name, "rank": rank, "ok": ok, **tags, **fields})
    return ok


class Stop(Exception):
    """Raised by a workload's `before_init` whose checks make joining pointless:
    the results are already emitted, the rank exits 1 without init_process_group."""


def join(backend: str, device: Any, url: str | None = None, store: Any = None,
         timeout: float | None = None) -> None:
    """init_process_group through `url` (default: this worker's init method), or
    through `store` when a workload's `before_init` made one.

    env:// reads MASTER_ADDR/MASTER_PORT and RANK/WORLD_SIZE itself; tcp:// and
    file:// carry only the meeting point, so rank and world size are passed.
    `timeout` (seconds) bounds the join and every collective after it.
    """
    import datetime

    import torch.distributed as dist

    kwargs: dict[str, Any] = {"backend": backend}
    limit = datetime.timedelta(seconds=timeout) if timeout is not None else pg_timeout()
    if limit is not None:             # a workload's own bound, else the lab's pg_timeout
        kwargs["timeout"] = limit
    if backend == "nccl":
        kwargs["device_id"] = device
    if store is not None:
        dist.init_process_group(store=store, rank=_env_int("RANK"),
                                world_size=_env_int("WORLD_SIZE"), **kwargs)
        say_joined()
        return
    url = url or init_method()
    kwargs["init_method"] = url
    if not url.startswith("env://"):
        kwargs.update(rank=_env_int("RANK"), world_size=_env_int("WORLD_SIZE"))
    with _own_store_for_tcp(url):
        dist.init_process_group(**kwargs)
    say_joined()


def init(backend: str | None = None, store: Any = None, timeout: float | None = None) -> Context:
    """Join the process group through LAB_INIT_METHOD (env:// when unset), the way
    torchrun workers do, and say where this rank is. `store` and `timeout` come
    from a workload's `before_init` (see workloads/__main__.py)."""
    import torch
    import torch.distributed as dist

    backend = resolve_backend(backend or os.environ.get(Env.DIST_BACKEND))
    local_rank = _env_int("LOCAL_RANK", 0)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        join(backend, device, store=store, timeout=timeout)
    return Context(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        local_world_size=_env_int("LOCAL_WORLD_SIZE", 1),
        node_rank=_env_int("GROUP_RANK", _env_int("NODE_RANK", 0)),
        backend=backend,
        device=device,
        replica_id=_env_int("REPLICA_ID", 0),
        replica_num=_env_int("REPLICA_NUM", 1),
        checks=_before_init["checks"],
        failures=_before_init["failures"],
    )


def all_gather_json(value: Any) -> list[Any]:
    """Every rank's JSON-able `value`, in rank order.

    `dist.all_gather_object` pickles through numpy, which the CPU torch wheel
    does not depend on ("RuntimeError: Numpy is not available"); JSON bytes in
    a uint8 tensor need nothing but torch.
    """
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    data = torch.tensor(list(json.dumps(value).encode()), dtype=torch.uint8, device=device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=device))
    longest = int(max(int(s.item()) for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[:data.numel()] = data
    gathered = [torch.zeros(longest, dtype=torch.uint8, device=device) for _ in sizes]
    dist.all_gather(gathered, padded)
    return [json.loads(bytes(g[:int(n.item())].cpu().tolist()).decode())
            for g, n in zip(gathered, sizes)]


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def hostname() -> str:
    return socket.gethostname()


def finite(x: float) -> bool:
    return math.isfinite(x)
