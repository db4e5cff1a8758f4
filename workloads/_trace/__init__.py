"""Per-rank communication recorder (issues 21, 30 and 48): every op that torch issues on a
process group, recorded where torch issues it, as marked lines in the log stream.

Where it records. Every collective and p2p op of every ProcessGroup, on every backend,
runs through one of torch's c10d dispatcher ops (`torch.ops.c10d.allreduce_`, `send`,
...): ProcessGroup's C++ methods call them. They are reached two ways, and each op is
recorded where it enters (docs/trace.md, "How it records", has the measurements):

1. From Python, through ProcessGroup's methods (pyops.py): the methods of the op table
   (workloads/_protocol/ops.py) replaced on the class by a lean recording wrapper.
2. From C++ (kernels.py): DDP's Reducer, functional collectives, DTensor: a Python kernel
   at the c10d ops' Autograd key records the op and redispatches below autograd.

Nothing a script can see is replaced: its functions, hooks and Work objects are torch's
own (a DDP comm hook, `isinstance(work, dist.Work)`, `pickle.dumps(dist.all_reduce)` work
as untraced), and not a bit of what is computed changes. Completion (works.py): when
`wait()` returns, `is_completed()` first says True, or the future from `get_future()`
completes; an op issued from C++ ends when its future completes (DDP's buckets), a
functional collective's when its output is waited on.

Every record is written when it happens, an op's B line before torch is called, into a
channel the recorder owns (sink.py): a memory-mapped record file when labctl reads a
folder the rank writes in (LAB_TRACE_DIR), else the log stream through a descriptor taken
before the script runs. The lines are the codec's (workloads/_protocol/records.py, which
encodes each one; docs/trace.md lists every field):
    {"k":"H","v":2,"t0":<ns>,"pid":..,"rec":"python","cost_ns":..}   header: times below
                                          are ns after t0; the recorder and its cost per op
    {"k":"M",...} who the rank is; {"k":"G",...} a process group; {"k":"C",...} clock offset
    {"k":"S","s":3,"op":"all_reduce","pg":"default_pg","kind":"c",...}   a call site (sites.py)
    B <id> <site> <seq> <t>               op <id> entered at t
    E <id> <t> [<peer>]                   op <id> completed at t
    {"k":"R","i":<id>,"t":<ns>,"error":..}   op <id> raised before torch issued it
    {"k":"T","t":<ns>}                      the rank was alive then (at a dump, at exit)

The parts: sink (where lines go, the process's state), sites (call sites, the user's
frame), groups (process groups, op numbers), pyops and kernels (the two ways in), works
(completion), calls (the calls that are no op of a group: the group's life cycle, the
script's store calls, a collective on a group the rank is not in), unwaited (an irecv's
buffer read before its wait), objects (the classes an object collective pickled), clock
(who the rank is, its clock), fr (Flight Recorder),
cost (the start-up measurement), bound (torch's handles). This module installs them.
"""
from __future__ import annotations

import atexit
import os
from typing import Any

from .._protocol import Env
from . import bound, calls, clock, cost, kernels, objects, pyops, sink, sites, works
from .fr import dump_at_the_end, dump_flight_recorder, ended_badly
from .fr import install_flight_recorder as _install_flight_recorder
from .kernels import c10d_ops, functional_ops
from .sink import proc, tick
from .sink import write as _write           # tests write raw records through it

__all__ = ["enabled", "install", "install_flight_recorder", "open_channel", "init_process_group", "tick",
           "dump_at_the_end", "dump_flight_recorder", "ended_badly", "c10d_ops", "functional_ops", "_write"]


def enabled() -> bool:
    return os.environ.get(Env.TRACE, "") not in ("", "0", "false", "False")


def open_channel() -> None:
    """Make this process's sink now, before the user's code runs (a stream sink's
    descriptor is duplicated from stdout while it is still the log stream), its header
    with the recorder's cost per op measured first when tracing is on."""
    if proc.sink is None:
        if proc.cost_ns is None and enabled():
            proc.cost_ns = cost.per_op_ns()
        sink.open_channel()


def install_flight_recorder() -> bool:
    """The channel open (open_channel), then fr.install_flight_recorder: torch's Flight
    Recorder left on, its newest entries written when labctl asks. True: its dump thread runs."""
    open_channel()
    return _install_flight_recorder()


def install() -> bool:
    """Record every op torch issues on a process group, when LAB_TRACE says so
    (idempotent). True: installed."""
    global _original_init
    if proc.traced or not enabled():
        return proc.traced
    open_channel()
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return False
    bound.bind(torch)
    sites.bind(torch)
    pyops.install(torch)
    works.install(torch._C._distributed_c10d.Work)
    kernels.install(torch)
    calls.install(torch)
    objects.install(torch.distributed.distributed_c10d)

    c10d = dist.distributed_c10d
    _original_init = c10d.init_process_group
    init_process_group.__doc__ = _original_init.__doc__
    init_process_group.__wrapped__ = _original_init
    c10d.init_process_group = dist.init_process_group = init_process_group
    proc.traced = True
    atexit.register(_at_exit)
    return True


_original_init: Any = None


def init_process_group(*args: Any, **kwargs: Any) -> Any:
    """torch's init_process_group, then an M line (who this rank is) and a C line (its
    clock against rank 0's). A module-level function: `pickle` finds it by its name."""
    result = _original_init(*args, **kwargs)
    try:
        clock.after_init()
    except Exception as exc:        # noqa: BLE001 - the lab goes on without the rank's details
        clock.failed(exc)
    return result


def _at_exit() -> None:
    """The last T line, after the ends of works without a future that completed."""
    if proc.sink is None or os.getpid() != proc.owner:
        return                          # a forked child that recorded nothing writes nothing
    works.poll()
    tick()
