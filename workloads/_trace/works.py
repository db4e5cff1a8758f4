"""When an op ends: the tables of ops issued and not yet ended, and Work's methods
(`wait()` returns, `is_completed()` first says True, the future from `get_future()`
completes), replaced on the class: they end the op's record and call torch's own."""
from __future__ import annotations

import collections
import os
import time
import weakref
from typing import Any

from .._protocol import records
from .sink import _new_sink, end, end_from, proc
from .unwaited import _in_flight, waited


class _Pending:
    """The ops issued whose end is not written yet.

    waiting: id(work) -> (weak reference to it, op id or ids, route of a recv from any
      source). Weak: a work nobody waits on is freed as untraced (its tensors with it);
      entries whose work is gone are swept when the table has grown past `sweep_at`
      (twice what was left at the last sweep).
    polled: op id -> its Work, for works that have no future (gloo's send/recv,
      reduce_scatter_tensor): asked `is_completed()` when the rank's next op enters, and
      at exit."""
    __slots__ = ("waiting", "sweep_at", "polled", "is_completed")

    def __init__(self) -> None:
        self.waiting: dict[int, tuple[Any, Any, Any]] = {}
        self.sweep_at = SWEEP_AT
        self.polled: "collections.OrderedDict[int, Any]" = collections.OrderedDict()
        self.is_completed: Any = None   # torch's own Work.is_completed, once installed


SWEEP_AT = 4096
MAX_POLLED = 10_000
pending = _Pending()


def sweep() -> None:
    waiting = pending.waiting
    for key, entry in list(waiting.items()):
        if entry[0]() is None:
            waiting.pop(key, None)
    pending.sweep_at = max(SWEEP_AT, 2 * len(waiting))


def poll() -> None:
    """End the ops without a future whose works completed meanwhile."""
    polled = pending.polled
    for ident, work in list(polled.items()):
        try:
            done = pending.is_completed(work)
        except Exception:          # noqa: BLE001 - a failed work: it never completed
            done = None
        if done is None or done:
            polled.pop(ident, None)
            if done:
                end(ident, time.time_ns())


def _ended(work: Any) -> None:
    entry = pending.waiting.pop(id(work), None)
    if entry is None:
        return
    ref, idents, anysource = entry
    if ref() is not work:               # a freed work's id, reused
        return
    now = time.time_ns()
    if type(idents) is int:
        if anysource is None:
            end(idents, now)
        else:
            try:
                source = work._source_rank()
                peer = anysource.ranks[source] if 0 <= source < len(anysource.ranks) else source
            except Exception:          # noqa: BLE001 - the end matters more than the sender
                peer = None
            end_from(idents, now, peer)
    else:
        for ident in idents:
            end(ident, now)


def _wrap_wait(original: Any) -> Any:
    waiting, end_line, time_ns = pending.waiting, records.END, time.time_ns

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if _in_flight:
            waited(self)
        if waiting:
            entry = waiting.get(id(self))
            if entry is not None and type(entry[1]) is int and entry[2] is None and entry[0]() is self:
                del waiting[id(self)]               # the common case, inline: one op, its end now
                (proc.sink or _new_sink()).write(end_line % (entry[1], time_ns() - proc.t0))
            elif entry is not None:
                _ended(self)
        return result

    wait.__name__, wait.__doc__, wait.__wrapped__ = original.__name__, original.__doc__, original
    return wait


def _wrap_is_completed(original: Any) -> Any:
    waiting = pending.waiting

    def is_completed(self: Any) -> Any:
        done = original(self)
        if done and _in_flight:
            waited(self)
        if done and waiting:
            _ended(self)
        return done

    is_completed.__name__, is_completed.__doc__ = original.__name__, original.__doc__
    is_completed.__wrapped__ = original
    return is_completed


def _wrap_get_future(original: Any) -> Any:
    """The work's own future; the op ends when it completes (a DDP comm hook returns it
    and never waits; the callback runs on the backend's thread)."""
    waiting = pending.waiting

    def get_future(self: Any) -> Any:
        future = original(self)
        entry = waiting.pop(id(self), None) if waiting else None
        if entry is not None and entry[0]() is self:
            idents = entry[1] if type(entry[1]) is tuple else (entry[1],)

            def done(_: Any) -> None:          # the work itself may be gone by then
                now = time.time_ns()
                for ident in idents:
                    end(ident, now)
            try:
                future.add_done_callback(done)
            except Exception:          # noqa: BLE001 - the future is the script's; tracing must not break it
                waiting[id(self)] = entry
        return future

    get_future.__name__, get_future.__doc__, get_future.__wrapped__ = original.__name__, original.__doc__, original
    return get_future


def hold(work: Any, idents: Any, anysource: Any = None) -> None:
    """Op(s) `idents` end when `work` says so (Work's methods above)."""
    pending.waiting[id(work)] = (weakref.ref(work), idents, anysource)


def install(work_class: Any) -> None:
    """Work's wait, is_completed and get_future, replaced on the class."""
    pending.is_completed = work_class.__dict__["is_completed"]
    for method, wrap in (("wait", _wrap_wait), ("is_completed", _wrap_is_completed),
                         ("get_future", _wrap_get_future)):
        original = work_class.__dict__.get(method)
        if original is not None:
            setattr(work_class, method, wrap(original))


def _forked() -> None:
    """A forked child waits on no work of its parent's."""
    pending.waiting.clear()
    pending.polled.clear()


os.register_at_fork(after_in_child=_forked)
