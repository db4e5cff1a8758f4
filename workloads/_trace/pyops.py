"""Ops issued from Python: ProcessGroup's methods (`group.allreduce(...)`), which every
torch.distributed function (all_reduce, isend, batch_isend_irecv, all_gather_object,
FSDP2's all_gather_single ...) and a script calling a group's methods itself end in. The
methods of the op table (workloads/_protocol/ops.py, METHODS) are replaced on the class by
a lean recording wrapper (a few µs per op), which enters the op with autograd's dispatch
key excluded for that call only, so that the dispatcher's kernel (kernels.py) does not see
it a second time. A method the table lacks (one a later torch adds) is not wrapped: its
op still reaches that kernel and is recorded there, at that path's cost."""
from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import Any

from .._protocol import ops, records
from .bound import T
from .groups import _Route, op_ids, raised, route as find_route
from .sink import _new_sink, end, proc
from .sites import _names, _op_name, _site, _sites, _tensor_info, _where, enclosing_call, split_sizes
from .calls import drops_result, mark
from .copies import into_a_copy
from .unwaited import watch
from .works import hold, pending, poll, sweep

_red_op_type: Any = ()                # torch.distributed.ReduceOp.RedOpType, once installed
_is_grad_enabled: Any = None          # torch.is_grad_enabled, once installed
_coalescing = 0                       # groups between _start_coalescing and _end_coalescing
_local = threading.local()            # .coalescing: the ids of the ops this thread issued while coalescing


def _where_int(args: tuple, kwargs: dict, where: ops.Where | None) -> int | None:
    """A root (broadcast/reduce/gather/scatter: opts.rootRank or the int argument) or a
    peer (send/recv: the int argument), as a group rank."""
    if where is ops.Where.PEER:
        value = args[1] if len(args) > 1 else kwargs.get("dstRank", kwargs.get("srcRank"))
        return value if type(value) is int else None
    for value in args[1:]:
        root = getattr(value, "rootRank", None)
        if root is not None:
            return int(root)
        if type(value) is int:
            return value
    root = kwargs.get("root")
    if root is None and "opts" in kwargs:
        root = getattr(kwargs["opts"], "rootRank", None)
    return int(root) if root is not None else None


def _reduce_op(args: tuple, kwargs: dict) -> Any:
    """The ReduceOp.RedOpType of a reducing method's call (its options' reduceOp, or a
    ReduceOp given directly); None when it cannot be read. Its reduce op must agree across
    ranks, and gloo does not check it (a rank that takes the MAX where the others SUM
    completes, with other values: the zoo's reduce_op_mismatch)."""
    opts = args[1] if len(args) > 1 else kwargs.get("opts", kwargs.get("op"))
    red = getattr(opts, "reduceOp", opts)
    red = getattr(red, "op", red)
    return red if type(red) is _red_op_type else None


def _input_kwarg(method: ops.Method, kwargs: dict) -> Any:
    if method.input_key is not None:
        return kwargs.get(method.input_key)
    return kwargs.get("tensors", kwargs.get("tensor"))


def _wrap_method(method: ops.Method, original: Any) -> Any:
    """The recording wrapper of one ProcessGroup method. Every step is inline and cheap:
    it runs once per op, right after the last op left the caches cold (docs/trace.md,
    "What it costs")."""
    time_ns = time.time_ns
    getframe = sys._getframe
    waiting, polled, ids, names, sites_get, begin_line = pending.waiting, pending.polled, op_ids, _names, \
        _sites.get, records.BEGIN
    tensor_class, excluded_fn, exclude, autograd = T.tensor, T.excluded, T.exclude, T.autograd
    op, index, where_kind = method.op, method.input_index, method.where
    anysource = method.name == "recv_anysource"
    receives = method.name in ("recv", "recv_anysource")
    returns_work = method.name != "monitored_barrier"
    reducing = method.reduces
    a2a = method.op == "all_to_all_single"  # (output, input, output_split_sizes, input_split_sizes, opts)
    outputs, writes = method.output_list, method.writes_input
    import torch
    strided = torch.strided
    routes: dict[int, _Route] = {}          # id(group) -> route

    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        entered = time_ns()
        route = routes.get(id(self))
        if route is None or route.group() is not self:
            route = find_route(op, self, False)
            if route is None:               # a group torch.distributed does not know: not recorded
                return original(self, *args, **kwargs)
            routes[id(self)] = route
        grad = False
        if index >= 0:
            value = args[index] if len(args) > index else _input_kwarg(method, kwargs)
            first = value[0] if type(value) is list and len(value) == 1 else value
            if isinstance(first, tensor_class):
                dtype, shape, nbytes, grad = first.dtype, first.shape, None, first.requires_grad
            else:
                dtype, shape, nbytes = _tensor_info(value)
                grad = value is not None and _needs_grad(value)
        else:
            value, dtype, shape, nbytes = None, None, None, 0
        where = _where_int(args, kwargs, where_kind) if where_kind else None
        if where is not None and 0 <= where < len(route.ranks):
            where = route.ranks[where]
        reduce = _reduce_op(args, kwargs) if reducing else None
        splits = split_sizes(args[3], args[2]) if a2a and len(args) > 3 else None
        caller = getframe(1)
        name = names.get(id(caller.f_code), False)
        if name is False:
            name = _op_name(caller.f_code)
        code, lasti, api = _where(caller)
        ident = next(ids)
        count = route.count
        seq = count.issued = next(count.counter)
        if polled:
            poll()                          # works without a future that completed meanwhile
        # sites.begin, inline (the op's path: every call counts twice in a ping-pong of p2p ops)
        site = sites_get((route.rid, id(code), lasti, shape, dtype, nbytes, where, name, api, reduce, splits))
        dropped = False
        if site is None:
            outer = enclosing_call(code, caller) if code is not None else None
            site = _site(route, dtype, shape, nbytes, where, code, lasti, name, outer or api, reduce, splits)
            if outer is not None:           # found again by what this path looks up
                _sites[(route.rid, id(code), lasti, shape, dtype, nbytes, where, name, api, reduce, splits)] = site
            dropped = anysource and code is not None and drops_result(code, lasti)
            if index >= 0 and code is not None and isinstance(first, tensor_class) and first.layout is strided \
                    and not first.is_contiguous():
                mark("not_contiguous", api or name or op, code, lasti)
            if outputs and code is not None and _aliased(args[0] if args else kwargs.get("output_tensors")):
                mark("aliased_outputs", api or name or op, code, lasti)
            if writes and code is not None and index >= 0 and (where is None or op != "broadcast"
                                                               or route.ranks[self.rank()] != where) \
                    and into_a_copy(caller, code, lasti, first, api or name or op, tensor_class):
                mark("into_a_copy", api or name or op, code, lasti)
        (proc.sink or _new_sink()).write(begin_line % (ident, site, seq, entered - proc.t0))
        if dropped:                         # the script's line drops who sent it: said once per site
            mark("sender_dropped", name or "recv", code, lasti)
        if grad and _is_grad_enabled():
            _warn_on_backprop(value, f"c10d::{method.name}")
        excluded = excluded_fn(autograd)
        if not excluded:
            exclude(autograd, True)
        try:
            work = original(self, *args, **kwargs)
        except BaseException as exc:
            raised(ident, route, seq, exc)      # raised, not issued: not a collective of the group
            raise
        finally:
            if not excluded:
                exclude(autograd, False)
        if _coalescing and getattr(_local, "coalescing", None) is not None:
            _local.coalescing.append(ident)       # ends with the work _end_coalescing returns
        elif not returns_work or work is None:
            end(ident, time_ns())
        else:
            waiting[id(work)] = (weakref.ref(work), ident, route if anysource else None)
            if receives and name == "irecv" and value is not None:
                watch(value, work, name)    # its buffer read before the wait: said (unwaited.py)
            if len(waiting) > pending.sweep_at:
                sweep()                     # works never waited on, freed since
        return work

    traced.__name__, traced.__qualname__ = original.__name__, getattr(original, "__qualname__", original.__name__)
    traced.__doc__, traced.__wrapped__ = original.__doc__, original
    return traced


def _aliased(outputs: Any) -> bool:
    """One tensor in two slots of a collective's output list (`[torch.zeros_like(t)] * world`):
    every slot ends up holding what the last rank sent. Checked once per call site."""
    try:
        items = outputs[0] if len(outputs) == 1 and isinstance(outputs[0], (list, tuple)) else outputs
        seen = set()
        for t in items:
            if t.numel() == 0:
                continue
            key = (t.data_ptr(), t.dtype)
            if key in seen:
                return True
            seen.add(key)
    except Exception:          # noqa: BLE001 - not a list of tensors: nothing to say
        return False
    return False


def _needs_grad(value: Any) -> bool:
    if type(value) is list:
        for v in value:
            if v.requires_grad if isinstance(v, T.tensor) else _needs_grad(v):
                return True
        return False
    return getattr(value, "requires_grad", False) is True


_warning_nodes: dict[int, tuple[Any, int]] = {}    # id(tensor) -> (a weak ref to it, id of its node that warns)


def _warn_on_backprop(value: Any, op: str) -> None:
    """What torch's autograd fallback does for a c10d op on a tensor that requires grad
    (the op is entered below autograd when traced): warn when backward reaches it. torch's
    hook is C++, out of the script's sight; one on the tensor would be in its
    `_backward_hooks`, one more per op (3,000 broadcasts: 3,000 hooks). So the warning hangs
    on the tensor's autograd node (its grad_fn, a leaf's AccumulateGrad), once per node: the
    tensor's own hooks stay the script's. A leaf's AccumulateGrad lives only while a graph
    holds it: a graph made after the op does not warn (torch's would)."""
    import warnings

    from torch.autograd.graph import get_gradient_edge

    def warn(grads: Any) -> None:
        warnings.warn(f"{op}: an autograd kernel was not registered to the Autograd key(s) but we are "
                      "trying to backprop through it. This may lead to silently incorrect behavior.",
                      UserWarning, stacklevel=2)

    tensors = value if isinstance(value, (list, tuple)) else [value]
    for t in tensors:
        if isinstance(t, (list, tuple)):
            _warn_on_backprop(t, op)
        elif getattr(t, "requires_grad", False):
            try:
                node = get_gradient_edge(t).node
                known = _warning_nodes.get(id(t))
                if known is not None and known[0]() is t and known[1] == id(node):
                    continue                # this node warns already
                node.register_prehook(warn)
                _warning_nodes[id(t)] = (weakref.ref(t, lambda _, key=id(t): _warning_nodes.pop(key, None)),
                                         id(node))
            except Exception:          # noqa: BLE001 - a warning must never stop the op
                continue


def _start_coalescing(original: Any) -> Any:
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _coalescing
        result = original(self, *args, **kwargs)
        _local.coalescing = []
        _coalescing += 1
        return result

    traced.__name__, traced.__doc__, traced.__wrapped__ = original.__name__, original.__doc__, original
    return traced


def _end_coalescing(original: Any) -> Any:
    """The ops issued between _start_coalescing and here end when this work does."""
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _coalescing
        idents = getattr(_local, "coalescing", None) or []
        if getattr(_local, "coalescing", None) is not None:
            _local.coalescing = None
            _coalescing = max(0, _coalescing - 1)
        work = original(self, *args, **kwargs)
        if idents:
            if work is None:
                now = time.time_ns()
                for ident in idents:
                    end(ident, now)
            else:
                hold(work, tuple(idents))
        return work

    traced.__name__, traced.__doc__, traced.__wrapped__ = original.__name__, original.__doc__, original
    return traced


def install(torch: Any) -> None:
    """ProcessGroup's methods of the op table, and its coalescing brackets, replaced on
    the class (after bound.bind: the wrappers take torch's handles from there)."""
    global _red_op_type, _is_grad_enabled
    C = torch._C
    _red_op_type, _is_grad_enabled = C._distributed_c10d.ReduceOp.RedOpType, torch.is_grad_enabled
    group_class = C._distributed_c10d.ProcessGroup
    for method in ops.METHODS.values():
        original = group_class.__dict__.get(method.name)
        if original is not None:
            setattr(group_class, method.name, _wrap_method(method, original))
    for name, wrap in (("_start_coalescing", _start_coalescing), ("_end_coalescing", _end_coalescing)):
        original = group_class.__dict__.get(name)
        if original is not None:
            setattr(group_class, name, wrap(original))
