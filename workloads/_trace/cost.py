"""What the recorder's own work costs per op, measured at start-up and stated in the
trace's header (`cost_ns`): a short loop of the wrapper's steps that are the recorder's
and not torch's (the clock read, the route and call-site lookups, the frame walk to the
caller, numbering, the B line, holding the work and its E line at wait) writing into a
throwaway sink of the kind this process writes to (a mapping no file keeps, or
/dev/null through write(2)). What torch's side of the wrapper adds (reading the
tensor's dtype and shape, the dispatch-key toggles) is not in it: torch is not imported
yet. docs/trace.md, "What it costs", has the measurements of whole ops."""
from __future__ import annotations

import itertools
import sys
import time
import weakref
from typing import Any

from .._protocol import records
from .sink import proc, scratch
from .sites import _where, forgetting_frames

ROUNDS = 200                        # Begin+End pairs timed (about 1 ms in all)
WARM = 20


class _Work:
    __slots__ = ("__weakref__",)


def per_op_ns(rounds: int = ROUNDS) -> int | None:
    """ns of the recorder's own work per op (a B and an E line), the mean of `rounds`
    ops after WARM untimed ones; None when no throwaway sink could be made."""
    try:
        sink = scratch()
    except (OSError, ValueError):
        return None
    try:
        with forgetting_frames():
            _ops(sink, WARM)
            started = time.perf_counter_ns()
            _ops(sink, rounds)
            took = time.perf_counter_ns() - started
    finally:
        sink.close()
    return took // rounds


def _ops(sink: Any, rounds: int) -> None:
    time_ns, getframe, t0 = time.time_ns, sys._getframe, proc.t0
    begin_line, end_line = records.BEGIN, records.END
    routes: dict[int, Any] = {1: None}
    sites: dict[tuple, int] = {}
    waiting: dict[int, tuple] = {}
    ids, counter = itertools.count(1), itertools.count(1)
    work, shape, dtype = _Work(), (1,), "float32"
    for _ in range(rounds):
        entered = time_ns()
        routes.get(1)
        code, lasti, api = _where(getframe(1))
        ident, seq = next(ids), next(counter)
        key = (1, id(code), lasti, shape, dtype, None, None, None, api, None)
        site = sites.get(key)
        if site is None:
            site = sites[key] = len(sites) + 1
        sink.write(begin_line % (ident, site, seq, entered - t0))
        waiting[id(work)] = (weakref.ref(work), ident, None)
        entry = waiting.pop(id(work))
        if entry[0]() is work:
            sink.write(end_line % (entry[1], time_ns() - t0))
