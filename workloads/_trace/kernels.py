"""Ops issued from C++: DDP's Reducer (a gradient bucket's all-reduce, the unused-parameter
map's), DDP's `_broadcast_coalesced` and `_verify_params_across_processes`, functional
collectives (`torch.distributed._functional_collectives`), DTensor. A Python kernel at the
c10d ops' Autograd key (they have none there: torch's autograd fallback runs) records the
op and redispatches below autograd: the same C++ kernel, on the same tensors. About 20 µs
per op; a few ops per training step take this path. An op ends when its work's future
completes; a functional collective's when its output is waited on."""
from __future__ import annotations

import collections
import os
import sys
import threading
import time
from typing import Any

from .._protocol import ops
from .bound import T
from .groups import _Route, op_ids, raised, route as find_route
from .sink import end
from .sites import _tensor_info, _where, begin, split_sizes
from .works import MAX_POLLED, pending, poll

_libraries: dict[str, Any] = {}      # torch.library.Library per namespace (kept alive: they hold the kernels)
_local = threading.local()           # .issued: the ids of the ops a functional collective's kernel issued
# output tensor (its TensorImpl's address) -> ids of the ops (without a future) it comes from
_outputs: "collections.OrderedDict[int, list]" = collections.OrderedDict()


def c10d_ops() -> dict[str, Any]:
    """Every c10d dispatcher op that takes a ProcessGroup, from torch's own registry
    (name -> OpOverload): the ops every ProcessGroup method, on every backend, ends in."""
    return {name: op for name, op in _ops("c10d", "CPU").items()
            if any("ProcessGroup" in str(a.type) for a in op._schema.arguments)}


def functional_ops() -> dict[str, Any]:
    """Every functional collective op (`torch.ops._c10d_functional`), from torch's registry."""
    return _ops("_c10d_functional", "CompositeExplicitAutograd")


def _ops(namespace: str, key: str) -> dict[str, Any]:
    import torch

    found = {}
    for full in sorted(torch._C._dispatch_get_registrations_for_dispatch_key(key)):
        if not full.startswith(namespace + "::"):
            continue
        name, _, overload = full[len(namespace) + 2:].partition(".")
        try:
            found[full[len(namespace) + 2:]] = getattr(getattr(getattr(torch.ops, namespace), name),
                                                       overload or "default")
        except (AttributeError, RuntimeError):
            continue
    return found


class _Shape:
    """Where an op's group, input and peer/root are among its schema's arguments."""
    __slots__ = ("name", "group", "input", "where", "where_kind", "splits")

    def __init__(self, op: Any, name: str, group_arg: str):
        args = op._schema.arguments
        names = [a.name for a in args]
        self.name = name
        self.group = next(i for i, a in enumerate(args) if group_arg == a.name or group_arg in str(a.type))
        tensors = [i for i, a in enumerate(args) if "Tensor" in str(a.type) and not a.kwarg_only]
        inputs = [i for i in tensors if "input" in names[i]]
        self.input = inputs[0] if inputs else (tensors[0] if tensors else -1)
        if name in ("barrier", "monitored_barrier"):
            self.input = -1                 # a placeholder tensor, not data
        elif name == "scatter":
            self.input = 0                  # what each rank receives: the root alone has inputs
        self.where, self.where_kind = None, None
        for key, kind in (("dst", ops.Where.PEER), ("src", ops.Where.PEER), ("root_rank", ops.Where.ROOT)):
            if key in names:
                self.where, self.where_kind = names.index(key), kind
        self.splits = (names.index("input_split_sizes"), names.index("output_split_sizes")) \
            if "input_split_sizes" in names and "output_split_sizes" in names else None
        known = ops.OPS.get(name)
        if self.where is not None and known is not None and known.where is not None:
            self.where_kind = known.where   # broadcast's `src` is its root


def _c10d_kernel(full_name: str, op: Any) -> Any:
    """The Autograd-key kernel of one c10d op (torch has none there: its autograd fallback
    runs): record the op, run it below autograd, end the record when its work's future
    completes (or at once when it returns no work: it has completed)."""
    import torch

    base = full_name.rstrip("_")
    shape = _Shape(op, ops.traced_name(full_name), "ProcessGroup")
    after = torch._C._after_autograd_keyset
    redispatch = op._handle.redispatch_boxed
    unbox_group = torch._C._distributed_c10d.ProcessGroup.unbox
    work_class = torch._C._distributed_c10d.Work
    get_future = work_class.__dict__["get_future"]
    get_future = getattr(get_future, "__wrapped__", get_future)     # torch's own
    script_object = torch.ScriptObject
    polled = pending.polled

    def kernel(keyset: Any, *args: Any) -> Any:
        try:
            recorded = _record_cpp(shape, args, unbox_group(args[shape.group]), _caller_frame())
        except Exception:          # noqa: BLE001 - recording must never stop the op
            recorded = None
        try:
            out = redispatch(keyset & after, *args)
        except BaseException as exc:
            if recorded is not None:
                raised(*recorded, exc)
            raise
        if recorded is not None:
            ident = recorded[0]
            work = out[-1] if isinstance(out, tuple) and out else out
            issued = getattr(_local, "issued", None)        # a functional collective's (see there)
            if isinstance(work, script_object):
                work = work_class.unbox(work)
                future = None
                if issued is None:
                    try:
                        future = get_future(work)
                    except Exception:          # noqa: BLE001 - gloo's send/recv, reduce_scatter: no future
                        future = None
                if future is None:
                    # ends when its output is waited on (a functional collective: a callback
                    # on its future would run on gloo's thread while the script runs, and take
                    # the GIL from it twice per op: +115 µs of the main thread's CPU per op),
                    # or when a later op or the exit finds it completed
                    polled[ident] = work
                    if len(polled) > MAX_POLLED:
                        polled.popitem(last=False)
                else:
                    future.add_done_callback(lambda _, i=ident: end(i, time.time_ns()))
            else:
                end(ident, time.time_ns())                  # returned nothing: it has completed
            if issued is not None:
                issued.append(ident)
        return out

    kernel.__name__ = f"labctl_trace_{base}"
    return kernel


def _functional_kernel(full_name: str, original: Any) -> Any:
    """The backend-key kernel (CPU, CUDA) of one functional collective, around torch's own
    (`original`). torch reaches it through its autograd fallback, which excludes autograd's
    dispatch keys, so the c10d op torch's kernel issues would pass the c10d kernel by: this
    lets autograd's key back in for that call only, and the c10d op is recorded there, as
    every other (with its work's future for the end). Autograd still sees the functional
    op exactly as before: this runs below it."""
    polled_ops = pending.polled

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        excluded = T.excluded(T.autograd)
        if excluded:
            T.exclude(T.autograd, False)
        _local.issued = issued = []
        try:
            out = original.call_boxed(keyset, *args, **kwargs)
        finally:
            _local.issued = None
            if excluded:
                T.exclude(T.autograd, True)
        polled = [i for i in issued if i in polled_ops]
        if polled:                          # no future: the op ends when its output is waited on
            for t in (out if isinstance(out, (list, tuple)) else [out]):
                cdata = getattr(t, "_cdata", None)
                if cdata is not None:
                    _outputs[cdata] = polled
            while len(_outputs) > MAX_POLLED:
                _outputs.popitem(last=False)
        return out

    kernel.__name__ = f"labctl_trace_{full_name.split('.')[0]}"
    return kernel


def _wait_tensor_kernel(op: Any) -> Any:
    """wait_tensor at BackendSelect (the last key before torch's own kernel; every way of
    waiting reaches it: `wait_tensor`, `.wait()`, and an AsyncCollectiveTensor used in
    arithmetic, whose __torch_dispatch__ runs below ADInplaceOrView), redispatched so that
    torch's blocking wait runs with the GIL released as before: ends the ops its tensor
    came from that have no future to say so."""
    import torch

    after = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    redispatch = op._handle.redispatch_boxed
    polled = pending.polled

    def kernel(keyset: Any, *args: Any) -> Any:
        out = redispatch(keyset & after, *args)
        if _outputs:
            try:
                idents = _outputs.pop(args[0]._cdata, None)
            except Exception:          # noqa: BLE001 - never stop the wait
                idents = None
            for ident in idents or ():
                if polled.pop(ident, None) is not None:
                    end(ident, time.time_ns())
        return out

    return kernel


def _caller_frame() -> Any:
    """The innermost Python frame below the kernel's caller (None: a thread with no
    Python frame, e.g. CUDA's autograd threads)."""
    try:
        return sys._getframe(2)
    except ValueError:
        return None


def _record_cpp(shape: _Shape, args: tuple, group: Any, frame: Any) -> tuple[int, _Route, int] | None:
    entered = time.time_ns()
    value = args[shape.input] if shape.input >= 0 else None
    if value is not None:
        first = value
        while isinstance(first, (list, tuple)) and first:
            first = first[0]
        if getattr(getattr(first, "device", None), "type", None) == "meta" or \
                type(first).__name__ == "FakeTensor":
            return None                   # tracing a program (torch.compile), not running it
    route = find_route(shape.name, group, True)
    if route is None:
        return None
    dtype, shape_, nbytes = _tensor_info(value) if value is not None else (None, None, 0)
    where = args[shape.where] if shape.where is not None else None
    if type(where) is int and 0 <= where < len(route.ranks):
        where = route.ranks[where]
    elif type(where) is not int:
        where = None
    code, lasti, api = _where(frame)
    ident = next(op_ids)
    seq = route.count.next()
    if pending.polled:
        poll()
    splits = split_sizes(args[shape.splits[0]], args[shape.splits[1]]) if shape.splits else None
    begin(ident, route, seq, dtype, shape_, nbytes, where, code, lasti, None, api, entered, splits)
    return ident, route, seq


def install(torch: Any) -> None:
    """A kernel at the Autograd key of every c10d op, and one around torch's own at the
    backend keys of every functional collective."""
    c10d = _libraries["c10d"] = torch.library.Library("c10d", "IMPL")
    for full_name, op in c10d_ops().items():
        c10d.impl(full_name, _c10d_kernel(full_name, op), "Autograd", with_keyset=True)
    functional = _libraries["_c10d_functional"] = torch.library.Library("_c10d_functional", "IMPL")
    computed = torch._C._dispatch_get_computed_kernel_for_dispatch_key
    for full_name, op in functional_ops().items():
        if full_name == "wait_tensor":
            functional.impl(full_name, _wait_tensor_kernel(op), "BackendSelect", with_keyset=True)
        if full_name.split(".")[0] in ("wait_tensor", "_wrap_tensor_autograd"):
            continue                        # they issue nothing
        for key in ("CPU", "CUDA"):
            try:
                original = computed(f"_c10d_functional::{full_name}", key)
            except RuntimeError:
                continue
            functional.impl(full_name, _functional_kernel(full_name, original), key, with_keyset=True)


def _forked() -> None:
    _outputs.clear()


os.register_at_fork(after_in_child=_forked)
