"""What an object collective pickled (issue 50): `all_gather_object` and its kin pickle each
rank's object (torch's `_object_to_tensor`); where unpickling then fails on every rank (an
exception class whose `__init__` takes other arguments, a class only one rank defined),
the error names a class but not whose object held it. The recorder reads the classes a
rank's pickle names (its GLOBAL opcodes: nothing is unpickled) and records them as the call
`pickled` at the script's line, so the diagnosis can name the rank that sent the class the
others could not load. CPU objects only (a CUDA one would need a copy), and at most
MAX_BYTES of each."""
from __future__ import annotations

import pickletools
import sys
from typing import Any

from .calls import MAX_KEY, mark
from .sites import _where

MAX_BYTES = 1 << 20                 # of a pickle read for its classes
_STRINGS = ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8", "SHORT_BINSTRING", "BINSTRING", "STRING")


def classes(data: bytes) -> list[str]:
    """The `module.qualname` of every class or function a pickle names, in order, once each."""
    found: list[str] = []
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(data[:MAX_BYTES]):
            if op.name in _STRINGS and isinstance(arg, str):
                strings = (strings + [arg])[-2:]
            elif op.name == "GLOBAL" and isinstance(arg, str):
                found.append(arg.replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) == 2:
                found.append(".".join(strings))
    except Exception:          # noqa: BLE001 - cut at MAX_BYTES, or not a pickle: what was read
        pass
    return list(dict.fromkeys(found))


def install(c10d: Any) -> None:
    original = getattr(c10d, "_object_to_tensor", None)
    if original is None or getattr(original, "_labctl_traced", False):
        return

    def traced(obj: Any, device: Any, group: Any) -> Any:
        out = original(obj, device, group)
        try:
            tensor = out[0]
            if tensor.device.type == "cpu":
                code, lasti, _ = _where(sys._getframe(1))
                if code is not None:
                    # a copy: .numpy() on torch's own tensor would pin its storage (no resize_ after it)
                    names = classes(tensor[:MAX_BYTES].clone().numpy().tobytes())
                    own = [n for n in names if not n.startswith(("builtins.", "copyreg.", "_codecs.", "collections."))]
                    mark("pickled", " ".join(own)[:MAX_KEY] or "-", code, lasti)
        except Exception:          # noqa: BLE001 - recording must never stop the call
            pass
        return out

    traced.__name__, traced.__qualname__, traced.__doc__ = original.__name__, original.__qualname__, original.__doc__
    traced.__wrapped__ = original           # type: ignore[attr-defined]
    traced._labctl_traced = True            # type: ignore[attr-defined]
    c10d._object_to_tensor = traced
