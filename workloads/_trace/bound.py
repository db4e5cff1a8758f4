"""torch's handles that more than one part of the recorder calls, bound once at install
(`bind`); inert before. One object, so that every part reads the same values."""
from __future__ import annotations

from typing import Any


class _Torch:
    __slots__ = ("tensor", "excluded", "exclude", "autograd")

    def __init__(self) -> None:
        self.tensor: Any = ()           # torch.Tensor (an empty tuple: isinstance is False for all)
        self.excluded: Any = None       # torch._C._dispatch_tls_is_dispatch_key_excluded
        self.exclude: Any = None        # torch._C._dispatch_tls_set_dispatch_key_excluded
        self.autograd: Any = None       # DispatchKey.AutogradFunctionality


T = _Torch()


def bind(torch: Any) -> None:
    C = torch._C
    T.tensor = torch.Tensor
    T.excluded, T.exclude = C._dispatch_tls_is_dispatch_key_excluded, C._dispatch_tls_set_dispatch_key_excluded
    T.autograd = C.DispatchKey.AutogradFunctionality
