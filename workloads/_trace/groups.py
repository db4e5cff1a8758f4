"""Process groups and the numbers of their ops: a group's name in the trace (its G record,
once), and per group and kind (collectives, p2p ops) the counter that numbers its ops, as
torch's own count and Flight Recorder do; op ids, one counter per process."""
from __future__ import annotations

import itertools
import time
import weakref
from typing import Any

from .._protocol import ops, records
from .sink import proc, write

op_ids = itertools.count(1)         # every op's id in this process (B, E, R lines)


class _Route:
    """How ops of one kind on one process group are recorded: the group's name in the
    trace, its counter (collectives and p2p ops are numbered apart, per group), its global
    ranks (a group rank -> the global rank). Routes are found by the group's id; `group` is
    a weak reference (a script's destroyed group is freed as untraced), checked on every
    use, so a new group that reuses a freed one's id gets a route of its own."""
    __slots__ = ("rid", "op", "pg", "p2p", "count", "ranks", "group", "via_cpp")

    def __init__(self, rid: int, op: str, pg: str, p2p: bool, count: "_Count", ranks: list[int],
                 group: Any, via_cpp: bool):
        self.rid, self.op, self.pg, self.p2p, self.count = rid, op, pg, p2p, count
        self.ranks, self.group, self.via_cpp = ranks, _ref(group), via_cpp


class _Count:
    """A group's collective (or p2p) numbers: `counter` hands them out (next() is atomic),
    `issued` is the last one handed out, so that an op that raised before it was issued
    gives its number back (the next op gets it, as in torch's own count)."""
    __slots__ = ("counter", "issued")

    def __init__(self) -> None:
        self.counter, self.issued = itertools.count(1), 0

    def next(self) -> int:
        seq = self.issued = next(self.counter)         # (the ProcessGroup wrapper does this inline)
        return seq


def _ref(obj: Any) -> Any:
    """A weak reference, or (an object that takes none) a callable that returns it."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


_route_ids = itertools.count(1)
_routes: dict[tuple[str, int, bool], _Route] = {}
_counters: dict[tuple[str, bool], _Count] = {}   # (pg name, p2p) -> its numbers
_groups: dict[int, tuple[Any, str, list[int]]] = {}  # id(group) -> (its ref, name, global ranks); G line written
_retired: dict[str, int] = {}        # a destroyed subgroup's name -> how many groups had it
_generation = 1                      # process groups made since the last whole destroy_process_group()


def retire(group: Any) -> None:
    """`destroy_process_group(group)` returned. The whole (group None): every group is gone,
    and the groups of a later init_process_group are another generation, named
    `<name>@2` (every rank destroys the whole, so every rank counts alike), numbered from 1.
    One subgroup: its name is retired with its numbers; a later group under the same
    name is `<name>@2`. Either way no new group continues an old group's count."""
    global _generation
    if group is None:
        _generation += 1
        _groups.clear()
        _counters.clear()
        _routes.clear()
        _retired.clear()
        return
    named = _groups.pop(id(group), None)
    if named is None:
        return
    name = named[1]
    _retired[name] = _retired.get(name, 1) + 1
    for p2p in (False, True):
        _counters.pop((name, p2p), None)
    for rkey in [k for k, r in _routes.items() if r.pg == name]:
        _routes.pop(rkey, None)


def route(op: str, group: Any, via_cpp: bool) -> _Route | None:
    """The route of `op` on `group`; None when it cannot be recorded (no process group
    known to torch.distributed yet, a group this rank is not in)."""
    found = _routes.get((op, id(group), via_cpp))
    if found is not None and found.group() is group:
        return found
    named = _groups.get(id(group))
    if named is None or named[0]() is not group:
        try:
            named = _name_group(group)
        except Exception:          # noqa: BLE001 - not a group torch.distributed knows
            return None
    _, name, ranks = named
    p2p = ops.is_p2p(op)
    count = _counters.get((name, p2p))
    if count is None:
        count = _counters[(name, p2p)] = _Count()
    found = _routes[(op, id(group), via_cpp)] = _Route(next(_route_ids), op, name, p2p, count, ranks,
                                                       group, via_cpp)
    return found


def _name_group(group: Any) -> tuple[Any, str, list[int]]:
    """default_pg, the group's description, or pg<its c10d name> (Flight Recorder's
    numbering); a G line the first time."""
    import torch.distributed as dist

    c10d = dist.distributed_c10d
    world = getattr(getattr(c10d, "_world", None), "default_pg", None)
    if group is world:
        name = ops.DEFAULT_PG
    else:
        desc = getattr(group, "group_desc", "") or ""
        name = desc if desc and desc != "undefined" else f"pg{getattr(group, 'group_name', id(group))}"
    if _generation > 1:
        name = f"{name}@{_generation}"
    if name in _retired:
        name = f"{name}@{_retired[name]}"
    ranks = [int(r) for r in dist.get_process_group_ranks(group)]
    named = _groups[id(group)] = (_ref(group), name, ranks)
    write(records.Group(name, ranks, _timeout_ms(group)))
    return named


def _timeout_ms(group: Any) -> int | None:
    """The group's timeout on this rank (its backend's options): one made with a shorter
    timeout on one rank than on the others times out there first."""
    import torch
    for device in ("cpu", "cuda"):
        try:
            timeout = group._get_backend(torch.device(device)).options._timeout
            return int(timeout.total_seconds() * 1000)
        except Exception:          # noqa: BLE001 - no backend for that device, or no options: not known
            continue
    return None


def raised(ident: int, route: _Route, seq: int, exc: BaseException) -> None:
    """Op `ident` raised before it was issued (an invalid root, a closed group): an R line
    with the exception, and its number handed back (torch's own count does not count it:
    the next op of the group gets the same number, as in Flight Recorder)."""
    count = route.count
    if count.issued == seq:             # no other op of the group was numbered since
        count.counter = itertools.count(seq)
        count.issued = seq - 1
    write(records.Raised(ident, time.time_ns() - proc.t0, f"{type(exc).__name__}: {exc}"[:300]))
