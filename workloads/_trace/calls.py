"""Calls that are no op of a group but decide whether the ops can run (issue 50): the
group's life cycle (new_group, destroy_process_group) and the store reads a script makes
itself (Store.get, Store.wait). Each is recorded as an op of its own kind (the op table's
Kind.CALL: a B line before torch is called, E when it returns, R when it raises), so that
a rank held in one says so, and the diagnosis can compare new_group's member lists across
ranks and find the destroy that came before a "not initialized". A store read is recorded
only when the script's own line made it: torch's and the lab's own store traffic (the
rendezvous, the store-based barrier, the clock exchange) is not the script's."""
from __future__ import annotations

import os
import sys
import time
from typing import Any

from .._protocol import ops, records
from .groups import _name_group, _groups, op_ids, retire
from .sink import _new_sink, end, proc, write
from .sites import _USER, _classify, _frames, _line_of, _site_ids, _where

MAX_KEY = 200                       # characters of a store key kept
_call_sites: dict[tuple, int] = {}


def _group_name(group: Any) -> str:
    """The trace's name of the group a call acts on (None: the default group)."""
    if group is None:
        return ops.DEFAULT_PG
    named = _groups.get(id(group))
    if named is not None and named[0]() is group:
        return named[1]
    try:
        return _name_group(group)[1]
    except Exception:               # noqa: BLE001 - not a group torch.distributed knows
        return "?"


def _members(value: Any) -> list[int] | None:
    try:
        return [int(r) for r in value][:1 << 16] if value is not None else None
    except (TypeError, ValueError):
        return None


def _site(name: str, pg: str, code: Any, lasti: int, members: list[int] | None, key: str | None,
          api: str | None = None) -> int:
    skey = (name, pg, id(code), lasti, tuple(members) if members is not None else None, key, api)
    site = _call_sites.get(skey)
    if site is None:
        site = _call_sites[skey] = next(_site_ids)
        write(records.Site(ident=site, op=name, pg=pg, p2p=False, nbytes=0, dtype=None, shape=None, peer=None,
                           root=None, caller=f"{code.co_filename}:{_line_of(code, lasti)}",
                           api=api if api != name else None, via=None,
                           call=True, members=members, key=key))
    return site


def _record(name: str, pg: str, members: list[int] | None, key: str | None, call: Any, frame: Any) -> Any:
    """`call()` between its B line and its E (or R) line; the public torch.distributed
    function the script called on the way, where it is another (new_subgroups makes its
    groups with new_group), is the site's api."""
    code, lasti, api = _where(frame)
    if code is None:
        return call()
    ident = next(op_ids)
    site = _site(name, pg, code, lasti, members, key, api)
    (proc.sink or _new_sink()).write(records.BEGIN % (ident, site, 0, time.time_ns() - proc.t0))
    try:
        result = call()
    except BaseException as exc:
        write(records.Raised(ident, time.time_ns() - proc.t0, f"{type(exc).__name__}: {exc}"[:300]))
        raise
    end(ident, time.time_ns())
    return result


def _lifecycle(name: str, original: Any) -> Any:
    def traced(*args: Any, **kwargs: Any) -> Any:
        key = None
        if name == "new_group":
            members, pg = _members(args[0] if args else kwargs.get("ranks")), ops.DEFAULT_PG
            if (args[4] if len(args) > 4 else kwargs.get("use_local_synchronization")) is True:
                key = ops.LOCAL_SYNC         # made by its members alone, named after the groups each has
        else:
            members, pg = None, _group_name(args[0] if args else kwargs.get("group"))
        result = _record(name, pg, members, key, lambda: original(*args, **kwargs), sys._getframe(1))
        if name == "destroy_process_group":
            retire(args[0] if args else kwargs.get("group"))
        return result

    traced.__name__, traced.__qualname__ = original.__name__, getattr(original, "__qualname__", name)
    traced.__doc__, traced.__wrapped__, traced.__module__ = original.__doc__, original, original.__module__
    traced._labctl_traced = True            # type: ignore[attr-defined]
    return traced


def _script_made(frame: Any) -> bool:
    """The direct caller is the script's (or a workload's) own line."""
    code = frame.f_code
    role = _frames.get(id(code))
    if role is None:
        role = _classify(code)
    return role is _USER


def _store_call(name: str, original: Any) -> Any:
    traced_name = f"store.{name}"

    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        if not _script_made(frame):
            return original(self, *args, **kwargs)
        keys = args[0] if args else kwargs.get("keys", kwargs.get("key"))
        key = ", ".join(map(str, keys)) if isinstance(keys, (list, tuple)) else str(keys)
        return _record(traced_name, "store", None, key[:MAX_KEY], lambda: original(self, *args, **kwargs), frame)

    traced.__name__, traced.__qualname__ = original.__name__, getattr(original, "__qualname__", name)
    traced.__doc__, traced.__wrapped__ = original.__doc__, original
    return traced


def mark(name: str, key: str | None, code: Any, lasti: int) -> None:
    """A call of no duration at the script's `code`/`lasti` (what the recorder saw the line
    do, besides the op it made)."""
    ident = next(op_ids)
    site = _site(name, "?", code, lasti, None, key)
    now = time.time_ns() - proc.t0
    (proc.sink or _new_sink()).write(records.BEGIN % (ident, site, 0, now))
    end(ident, time.time_ns())


def drops_result(code: Any, lasti: int) -> bool:
    """The call at `lasti` is a statement of its own: its result is popped unused
    (`dist.recv(t)` rather than `src = dist.recv(t)`)."""
    import dis
    try:                                # lasti: the call's instruction, or its last inline cache (3.11)
        after = next((ins for ins in dis.get_instructions(code) if ins.offset > lasti), None)
    except Exception:          # noqa: BLE001 - a code object dis cannot read: say nothing
        return False
    return after is not None and after.opname == "POP_TOP"


def _not_a_member(original: Any) -> Any:
    """torch's `_warn_not_in_group(op_name)`: a collective called on a group the rank is not
    a member of returns at once, doing nothing. Recorded as a call at the script's line, the
    collective's name its key: torch's warning names neither the line nor the group."""
    def traced(op_name: Any, *args: Any, **kwargs: Any) -> Any:
        return _record("not_a_member", "?", None, str(op_name)[:MAX_KEY],
                       lambda: original(op_name, *args, **kwargs), sys._getframe(1))

    traced.__name__, traced.__doc__, traced.__wrapped__ = original.__name__, original.__doc__, original
    traced._labctl_traced = True            # type: ignore[attr-defined]
    return traced


def install(torch: Any) -> None:
    """torch.distributed's life-cycle functions and the Store's reads, replaced by
    recording wrappers (after sites.bind)."""
    dist = torch.distributed
    c10d = dist.distributed_c10d
    for name in ops.LIFECYCLE_CALLS:
        original = getattr(c10d, name, None)
        if original is not None and not getattr(original, "_labctl_traced", False):
            traced = _lifecycle(name, original)
            setattr(c10d, name, traced)
            if getattr(dist, name, None) is original:
                setattr(dist, name, traced)
    warn = getattr(c10d, "_warn_not_in_group", None)
    if warn is not None and not getattr(warn, "_labctl_traced", False):
        c10d._warn_not_in_group = _not_a_member(warn)
    store = getattr(torch._C._distributed_c10d, "Store", None)
    for name in ops.STORE_CALLS:
        original = store.__dict__.get(name) if store is not None else None
        if original is not None:
            try:
                setattr(store, name, _store_call(name, original))
            except (TypeError, AttributeError):
                pass                # a torch whose Store takes no attribute: store reads are not recorded


def _forked() -> None:
    """A forked child's file describes its own call sites."""
    _call_sites.clear()


os.register_at_fork(after_in_child=_forked)
