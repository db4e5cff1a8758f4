"""What the parallelism workloads share (fsdp, tp, pp, cp, ep, mesh; docs/patterns.md).

- The bytes each rank sends (`Traffic`): a dispatch mode that sees every op torch issues
  on a process group, from Python or from torch's own code (FSDP2, DTensor, pipelining:
  the c10d ops and the functional collectives), and counts what this rank sends with the
  bandwidth-optimal (ring) algorithm's share (`sent_bytes`), step by step. The count is
  the pattern's traffic as torch issued it, to set beside the pattern's formula (the
  functions `*_bytes` below); the wire bytes of gloo's own algorithms may differ (its
  reduce_scatter is an all_reduce of the whole buffer: workloads/_protocol/algorithms.py).
- Tiny models (an MLP; residual MLP blocks, the feed-forward half of a transformer block)
  and the data, made from one seed, the same on every rank.
- The pattern's autograd pieces by hand: Megatron's f/g (identity one way, all_reduce the
  other) and sequence parallelism's all_gather / reduce_scatter pair.
- The result lines every pattern prints: the check against ONE process (`matches`) and
  the bytes per step against the formula (`bytes_check`).

The formulas are pure (no process group, no torch: workloads/_patternmath.py, which the
plugins' `labctl predict` reads too): tests/test_patterns.py checks them by hand.
"""
from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from . import _common
# the formulas, bytes one rank sends per step (pure; the plugins read them too): re-exported
from ._patternmath import (  # noqa: F401
    cp_bytes, ep_bytes, fsdp2_bytes, mesh_bytes, pp_bytes, ring, tp_bytes, zero1_bytes)

BYTES_RTOL = 0.01                    # measured bytes per step within 1 % of the formula


# ---- the measurement -----------------------------------------------------------------
def _bytes(t) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    if isinstance(t, (list, tuple)):
        return sum(_bytes(x) for x in t)
    return 0


def _group(group) -> dist.ProcessGroup:
    """A dispatched op's group: a name (functional collectives) or the ProcessGroup boxed
    as a TorchScript object (c10d ops)."""
    if isinstance(group, str):
        return dist.distributed_c10d._resolve_process_group(group)
    return group if isinstance(group, dist.ProcessGroup) else dist.ProcessGroup.unbox(group)


def _size(group) -> int:
    return _group(group).size()


def _rank(group) -> int:
    return _group(group).rank()


def _to_others(inp: torch.Tensor, splits, group) -> int:
    """all_to_all: the bytes of `inp` that go to other ranks (its own rows stay)."""
    n, me = _size(group), _rank(group)
    rows = inp.shape[0] if inp.dim() else 1
    row_bytes = _bytes(inp) // max(rows, 1)
    own = list(splits)[me] if splits else rows // n
    return _bytes(inp) - int(own) * row_bytes


def issued(name: str, args: tuple, kwargs: dict) -> tuple[str, float, int, object, int | None] | None:
    """One dispatched c10d op or functional collective as (op, bytes this rank sends, S, its
    group, peer), None for what sends nothing (recv, barrier, wait_tensor, monitored
    barriers). S is the call's size as nccl-tests counts it (an all_reduce's buffer, an
    all_gather's whole output, a reduce_scatter's whole input, an all_to_all's send buffer,
    a send's tensor); peer: a send's destination, the group's rank (else None)."""
    a = list(args) + list(kwargs.values())

    def gathered(one: int, group, n: int):              # all_gather: S = n x one rank's input
        return "all_gather", (n - 1) * one, n * one, group, None

    if name in ("c10d::allreduce_", "c10d::allreduce_coalesced_"):
        return "all_reduce", ring("all_reduce", _bytes(a[0]), _size(a[1])), _bytes(a[0]), a[1], None
    if name in ("_c10d_functional::all_reduce", "_c10d_functional::all_reduce_",
                "_c10d_functional::all_reduce_coalesced"):
        return "all_reduce", ring("all_reduce", _bytes(a[0]), _size(a[2])), _bytes(a[0]), a[2], None
    if name in ("c10d::_allgather_base_", "c10d::allgather_into_tensor_coalesced_", "c10d::allgather_"):
        return gathered(_bytes(a[1]), a[2], _size(a[2]))
    if name in ("_c10d_functional::all_gather_into_tensor", "_c10d_functional::all_gather_into_tensor_coalesced",
                "_c10d_functional::all_gather_into_tensor_out"):
        return gathered(_bytes(a[0]), a[2], a[1])
    if name in ("c10d::_reduce_scatter_base_", "c10d::reduce_scatter_tensor_coalesced_", "c10d::reduce_scatter_"):
        return "reduce_scatter", ring("reduce_scatter", _bytes(a[1]), _size(a[2])), _bytes(a[1]), a[2], None
    if name in ("_c10d_functional::reduce_scatter_tensor", "_c10d_functional::reduce_scatter_tensor_coalesced"):
        return "reduce_scatter", ring("reduce_scatter", _bytes(a[0]), a[2]), _bytes(a[0]), a[3], None
    if name == "c10d::alltoall_base_":
        return "all_to_all", _to_others(a[1], a[4], a[2]), _bytes(a[1]), a[2], None
    if name == "c10d::alltoall_":
        me = _rank(a[2])
        return "all_to_all", sum(_bytes(t) for i, t in enumerate(a[1]) if i != me), _bytes(a[1]), a[2], None
    if name == "_c10d_functional::all_to_all_single":
        return "all_to_all", _to_others(a[0], a[2], a[3]), _bytes(a[0]), a[3], None
    if name == "c10d::send":
        return "send", _bytes(a[0]), _bytes(a[0]), a[1], int(a[2])
    if name == "_c10d_functional::isend":
        return "send", _bytes(a[0]), _bytes(a[0]), a[3], int(a[1])
    if name == "c10d::broadcast_":
        return "broadcast", _bytes(a[0]) if _rank(a[1]) == a[2] else 0, _bytes(a[0]), a[1], None
    if name == "_c10d_functional::broadcast":
        return "broadcast", _bytes(a[0]) if _rank(a[2]) == a[1] else 0, _bytes(a[0]), a[2], None
    return None


def sent_bytes(name: str, args: tuple, kwargs: dict) -> tuple[str, float] | None:
    """(op, bytes this rank sends) for one dispatched c10d op or functional collective,
    None for what sends nothing (recv, barrier, wait_tensor, monitored barriers)."""
    found = issued(name, args, kwargs)
    return None if found is None else (found[0], found[1])


def trace_name(group: dist.ProcessGroup) -> str:
    """A group's name as the trace gives it (workloads/_trace/groups.py): default_pg, the
    group's description, else pg<name>."""
    world = getattr(getattr(dist.distributed_c10d, "_world", None), "default_pg", None)
    if world is not None and (group is world or getattr(group, "group_name", None) == world.group_name):
        return "default_pg"
    desc = getattr(group, "group_desc", "") or ""
    return desc if desc and desc != "undefined" else f"pg{getattr(group, 'group_name', id(group))}"


def op_row(name: str, args: tuple, kwargs: dict) -> tuple[str, float, list] | None:
    """(op, bytes sent, the op as the pattern's per-step list holds it: [op, group (the
    trace's name), the group's size, S, peer (a send's destination, a global rank; else
    None)])."""
    found = issued(name, args, kwargs)
    if found is None:
        return None
    op, sent, size, group, peer = found
    pg = _group(group)
    if peer is not None:
        peer = dist.get_global_rank(pg, peer) if pg is not None else peer
    return op, sent, [op, trace_name(pg), pg.size(), int(size), peer]


class Traffic(TorchDispatchMode):
    """`with traffic:` counts the bytes this rank sends, op by op; `traffic.step()` starts a
    new step. A functional collective's own c10d op is not seen twice: the mode is off
    while it runs the op it caught."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing here is compiled; torch would otherwise wrap __torch_dispatch__ in
        # torch._disable_dynamo, whose first call imports torch._dynamo (~3 s of CPU a rank).
        return False

    def __init__(self):
        super().__init__()
        self.steps: list[dict[str, float]] = []
        self.ops: list[list[list]] = []        # each step's ops in order (`op_row`)
        self.started: list[float] = []
        self.wall_us: list[int] = []           # each step's begin (and the end) on the wall clock
        self.unknown: set[str] = set()

    def step(self) -> None:
        self.steps.append({})
        self.ops.append([])
        self.started.append(time.perf_counter())
        self.wall_us.append(time.time_ns() // 1000)

    def __exit__(self, *exc):
        self.started.append(time.perf_counter())
        self.wall_us.append(time.time_ns() // 1000)
        return super().__exit__(*exc)

    def last_window(self) -> list[int] | None:
        """The last step's [begin, end] in µs since the epoch, this rank's wall clock: the
        step marker labctl picks that step's ops from trace.json by (labctl/commsteps.py)."""
        return self.wall_us[-2:] if len(self.wall_us) >= 2 else None

    def seconds(self) -> list[float]:
        """How long each step took (the last one until the mode was left)."""
        return [round(b - a, 6) for a, b in zip(self.started, self.started[1:])]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace in ("c10d", "_c10d_functional") and self.steps:
            found = op_row(func._schema.name, args, kwargs)
            if found is not None:
                op, sent, row = found
                self.steps[-1][op] = self.steps[-1].get(op, 0.0) + sent
                self.ops[-1].append(row)
            elif func._schema.name not in ("c10d::recv_", "c10d::barrier", "_c10d_functional::wait_tensor",
                                           "c10d::recv_any_source_", "c10d::monitored_barrier_",
                                           "_c10d_functional::irecv", "_c10d_functional::_wrap_tensor_autograd"):
                self.unknown.add(func._schema.name)
        return func(*args, **kwargs)

    def per_step(self) -> list[float]:
        return [sum(s.values()) for s in self.steps]


# ---- models and data -----------------------------------------------------------------
def data(rows: int, d_in: int, d_out: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same regression data on every rank: y = tanh(x W) + noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d_in, generator=g)
    w = torch.randn(d_in, d_out, generator=g) / d_in ** 0.5
    return x, torch.tanh(x @ w) + 0.1 * torch.randn(rows, d_out, generator=g)


def mlp(dims: list[int], seed: int) -> nn.Sequential:
    """Linear layers with Tanh between them, seeded: the same weights on every rank."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class Block(nn.Module):
    """x + w2(gelu(w1 x)): the feed-forward half of a transformer block (w2 has no bias, so
    that a sequence-parallel block needs no all_reduce of a replicated gradient)."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(d, hidden)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return x + self.w2(F.gelu(self.w1(x)))


def blocks(count: int, d: int, hidden: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(d, hidden) for _ in range(count)])


class SGD:
    """Plain SGD, p -= lr grad: what torch.optim.SGD computes without momentum (the same
    add_), without its first use's cost: torch.optim imports torch._dynamo then, ~3 s of
    CPU a rank on a shared 2-core machine."""

    def __init__(self, params, lr: float):
        self.params, self.lr = list(params), lr

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        with torch.no_grad():
            for p in self.params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-self.lr)


def train_steps(model: nn.Module, opt, batches, traffic: "Traffic | None" = None,
                after_backward=None) -> list[float]:
    """One mean-squared-error step per batch (zero, forward, backward, `after_backward()`
    — a data-parallel average —, step), each step marked for `traffic`; the losses."""
    losses = []
    with traffic if traffic is not None else contextlib.nullcontext():
        for x, y in batches:
            if traffic is not None:
                traffic.step()
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if after_backward is not None:
                after_backward()
            opt.step()
            losses.append(float(loss))
    return losses


def blocks_reference(count: int, d: int, hidden: int, seed: int, batches, lr: float):
    """ONE process, the whole block model, the whole global batch: (parameters, losses)."""
    model = blocks(count, d, hidden, seed)
    losses = train_steps(model, SGD(model.parameters(), lr), batches)
    return [p.detach().clone() for p in model.parameters()], losses


# ---- tensor parallelism by hand (Megatron's f and g; sequence parallelism's pair) -----
class CopyToTP(torch.autograd.Function):
    """f: identity forward; all_reduce of the input's gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTP(torch.autograd.Function):
    """g: all_reduce forward (the row-parallel partial sums); identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _gather(x, group):
    out = x.new_empty((x.shape[0] * dist.get_world_size(group), *x.shape[1:]))
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def _scatter(x, group):
    out = x.new_empty((x.shape[0] // dist.get_world_size(group), *x.shape[1:]))
    dist.reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


class GatherSeq(torch.autograd.Function):
    """Sequence parallel: all_gather the token shards forward; reduce_scatter backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _scatter(grad, ctx.group), None


class ScatterSeq(torch.autograd.Function):
    """Sequence parallel: reduce_scatter the partial sums into token shards forward;
    all_gather backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _scatter(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.group), None


class TPBlock(nn.Module):
    """A `Block` split over a group by hand: w1 column-parallel (its rows and bias
    sharded), w2 row-parallel (its columns), then all_reduce (or, sequence parallel,
    all_gather before and reduce_scatter after, the residual on token shards)."""

    def __init__(self, full: Block, group, sequence: bool = False):
        super().__init__()
        n, me = dist.get_world_size(group), dist.get_rank(group)
        self.group, self.sequence = group, sequence
        self.w1 = nn.Parameter(full.w1.weight.detach().chunk(n, 0)[me].clone())
        self.b1 = nn.Parameter(full.w1.bias.detach().chunk(n, 0)[me].clone())
        self.w2 = nn.Parameter(full.w2.weight.detach().chunk(n, 1)[me].clone())

    def forward(self, x):
        if self.sequence:
            h = F.gelu(F.linear(GatherSeq.apply(x, self.group), self.w1, self.b1))
            return x + ScatterSeq.apply(F.linear(h, self.w2), self.group)
        h = F.gelu(F.linear(CopyToTP.apply(x, self.group), self.w1, self.b1))
        return x + ReduceFromTP.apply(F.linear(h, self.w2), self.group)

    def shards_of(self, full: Block) -> list[torch.Tensor]:
        """The same shards of a full (reference) block, to compare with."""
        n, me = dist.get_world_size(self.group), dist.get_rank(self.group)
        return [full.w1.weight.detach().chunk(n, 0)[me], full.w1.bias.detach().chunk(n, 0)[me],
                full.w2.weight.detach().chunk(n, 1)[me]]


def tp_manual(count: int, d: int, hidden: int, seed: int, group, sequence: bool = False) -> nn.Sequential:
    """`blocks(...)` split over `group` by hand (`TPBlock`)."""
    return nn.Sequential(*[TPBlock(b, group, sequence) for b in blocks(count, d, hidden, seed)])


def tp_dtensor(count: int, d: int, hidden: int, seed: int, mesh, sequence: bool = False) -> nn.Sequential:
    """`blocks(...)` split over a 1-D DeviceMesh by torch.distributed.tensor.parallel: w1
    ColwiseParallel, w2 RowwiseParallel (sequence parallel: their inputs and outputs sharded
    along the tokens, dim 0)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    model = blocks(count, d, hidden, seed)
    plan = ({"w1": ColwiseParallel(input_layouts=Shard(0)), "w2": RowwiseParallel(output_layouts=Shard(0))}
            if sequence else {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    for block in model:
        parallelize_module(block, mesh, plan)
    return model


def tp_shards(full: list[torch.Tensor], group) -> list[torch.Tensor]:
    """This rank's shards of every block's (w1.weight, w1.bias, w2.weight), as a `TPBlock`
    or ColwiseParallel/RowwiseParallel cut them: rows, rows, columns."""
    n, me = dist.get_world_size(group), dist.get_rank(group)
    return [t.chunk(n, 1 if i % 3 == 2 else 0)[me] for i, t in enumerate(full)]


# ---- the reference, and the result lines ----------------------------------------------
def from_rank0(values: list[torch.Tensor] | None, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Rank 0's tensors (the one-process reference) on every rank: one broadcast of them
    flattened (`like`: their shapes, on every rank)."""
    flat = (torch.cat([v.detach().flatten().float() for v in values]) if dist.get_rank() == 0
            else torch.empty(sum(t.numel() for t in like)))
    dist.broadcast(flat, src=0)
    out, at = [], 0
    for t in like:
        out.append(flat[at:at + t.numel()].view(t.shape))
        at += t.numel()
    return out


def max_diff(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max((float((g.detach().float() - w.float()).abs().max()) for g, w in zip(got, want) if g.numel()),
               default=0.0)


def matches(ctx: _common.Context, variant: str, losses: list[float], ref_losses: list[float],
            params: list[torch.Tensor], ref_params: list[torch.Tensor], tolerance: float, **fields) -> bool:
    """`<variant>-matches-single-process`: this rank's loss per step and what it holds of the
    trained parameters against ONE process's; the largest difference, the tolerance, and
    whether it is bitwise equal."""
    loss_diff = max((abs(a - b) for a, b in zip(losses, ref_losses)), default=0.0)
    param_diff = max_diff(params, ref_params)
    worst = max(loss_diff, param_diff)
    return ctx.record(f"{variant}-matches-single-process", worst <= tolerance and len(losses) == len(ref_losses),
                      max_diff=worst, loss_diff=loss_diff, param_diff=param_diff, tolerance=tolerance,
                      bitwise=worst == 0.0, losses=_common.numbers(losses),
                      reference_losses=_common.numbers(ref_losses), **fields)


def bytes_check(ctx: _common.Context, variant: str, traffic: Traffic, formula: float | list[float],
                formula_text: str, warmup: int = 0, **fields) -> bool:
    """`<variant>-bytes-per-step`: what this rank sent in each step against the formula
    (a number, or one per step), within 1 %, the first `warmup` steps left out (pipelining
    learns the shapes then); the bytes per op in the last step (`by_op`) and its ops in the
    order issued (`ops`: [op, group, group size, S, peer] each, `op_row`), which `labctl
    predict` scales to another world size."""
    sent = traffic.per_step()
    want = formula if isinstance(formula, list) else [formula] * len(sent)
    ok = len(sent) > warmup and all(abs(s - f) <= BYTES_RTOL * max(f, 1.0)
                                    for s, f in list(zip(sent, want))[warmup:])
    if warmup:
        fields["warmup_steps"] = warmup
    by_op = {op: round(v, 1) for op, v in (traffic.steps[-1] if traffic.steps else {}).items()}
    return ctx.record(f"{variant}-bytes-per-step", ok, sent=round(sent[-1], 1) if sent else None,
                      formula=round(want[-1], 1) if want else None, formula_text=formula_text,
                      per_step=[round(s, 1) for s in sent], formula_per_step=[round(f, 1) for f in want],
                      sends_per_step=[round(s.get("send", 0.0), 1) for s in traffic.steps],
                      by_op=by_op, ops=traffic.ops[-1] if traffic.ops else [], unknown_ops=sorted(traffic.unknown), step_seconds=traffic.seconds(),
                      step_window_us=traffic.last_window(), groups=groups(), unit="bytes", **fields)


def groups() -> dict[str, list[int]]:
    """The process groups this rank is in, by the name the trace gives each op's group
    (workloads/_trace/groups.py: default_pg, the group's description, else pg<name>): the
    trace carries the name only, so the page learns each group's ranks from here."""
    c10d = dist.distributed_c10d
    world = getattr(getattr(c10d, "_world", None), "default_pg", None)
    out: dict[str, list[int]] = {}
    for group in list(getattr(getattr(c10d, "_world", None), "pg_names", {})):
        try:
            ranks = [int(r) for r in dist.get_process_group_ranks(group)]
        except Exception:        # noqa: BLE001 - a group torch no longer knows
            continue
        if dist.get_rank() not in ranks:
            continue
        desc = getattr(group, "group_desc", "") or ""
        name = "default_pg" if group is world else (
            desc if desc and desc != "undefined" else f"pg{getattr(group, 'group_name', id(group))}")
        out[name] = ranks
    return out


def global_losses(local: list[float], divide: int = 1) -> list[float]:
    """Per-step losses summed over ranks (each rank's share), / divide: the global loss."""
    t = torch.tensor(local, dtype=torch.float64)
    dist.all_reduce(t)
    return [float(v) / divide for v in t]


def variants(value: str, known: tuple[str, ...]) -> list[str]:
    """`all`, one name or a comma list of names."""
    names = list(known) if value == "all" else [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in names if v not in known]
    if bad or not names:
        raise ValueError(f"variant {value!r}: expected all, or one or more of {', '.join(known)}")
    return names
