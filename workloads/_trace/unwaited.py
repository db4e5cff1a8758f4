"""A buffer read before its receive was waited on (issue 50): `work = dist.irecv(buf)`, then
`buf.sum()` before `work.wait()` reads whatever was there (zeros, last step's values), and
nothing fails. While such a receive is in flight, a torch function mode watches the
rank's torch calls for the buffer's storage; the first call that reads it is recorded at
the script's line as the call `read_before_wait` (its key: the receive's call, irecv),
once per line. The mode is on only while a receive is in flight, and it changes nothing
it sees: each call runs as it would."""
from __future__ import annotations

import sys
import weakref
from typing import Any

from .calls import mark
from .sites import _where

_in_flight: dict[int, tuple[Any, str, int]] = {}     # storage data_ptr -> (work's weak ref, call, its id)
_said: set[tuple[int, int]] = set()                  # (id(code), lasti) already recorded
_mode: Any = None                                    # the watching mode, while it is on


def _storage(t: Any) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:          # noqa: BLE001 - a tensor without storage (meta, sparse): not watched
        return None


def _reads(args: Any, kwargs: Any, tensor: Any) -> bool:
    for value in (*args, *(kwargs or {}).values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for v in items:
            entry = _in_flight.get(_storage(v)) if isinstance(v, tensor) else None
            if entry is not None and entry[0]() is not None:
                return True
    return False


def _make_mode(torch: Any) -> Any:
    from torch.overrides import TorchFunctionMode

    tensor = torch.Tensor

    class ReadBeforeWait(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if _in_flight and _reads(args, kwargs, tensor):
                code, lasti, _ = _where(sys._getframe(1))
                if code is not None and (id(code), lasti) not in _said:
                    _said.add((id(code), lasti))
                    call = next(iter(_in_flight.values()))[1]
                    mark("read_before_wait", call, code, lasti)
            return func(*args, **(kwargs or {}))

    return ReadBeforeWait()


def watch(buffers: Any, work: Any, call: str) -> None:
    """Watch `buffers` (a tensor or a list of them) until `work` is waited on."""
    global _mode
    import torch
    items = buffers if isinstance(buffers, (list, tuple)) else [buffers]
    for ptr in [p for p, e in _in_flight.items() if e[0]() is None]:
        _in_flight.pop(ptr, None)           # works freed unwaited: nothing of theirs is in flight
    ref = weakref.ref(work)
    for t in items:
        ptr = _storage(t) if isinstance(t, torch.Tensor) else None
        if ptr:
            _in_flight[ptr] = (ref, call, id(work))
    if _in_flight and _mode is None:
        _mode = _make_mode(torch)
        _mode.__enter__()


def waited(work: Any) -> None:
    """`work` completed: its buffers are the script's again; the mode goes off with the last
    (only when it is the innermost mode: one the script entered since stays its own)."""
    global _mode
    if not _in_flight:
        return
    key = id(work)
    for ptr in [p for p, e in _in_flight.items() if e[2] == key or e[0]() is None]:
        _in_flight.pop(ptr, None)
    if not _in_flight and _mode is not None:
        import torch
        size = torch._C._len_torch_function_stack()
        if size and torch._C._get_function_stack_at(size - 1) is _mode:
            _mode.__exit__(None, None, None)
            _mode = None
