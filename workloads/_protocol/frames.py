"""Which frame of a Python stack is the user's: the script's or a workload's, not a
library's (torch, the standard library, anything installed) and not the lab's own harness
or recorder. One rule for the recorder, which names an op's call site from live frames
(workloads/_trace/sites.py), and for the host, which reads the same frames from a
traceback or a stack dump in a log (labctl/tracebacks.py, labctl/stackdumps.py)."""
from __future__ import annotations

import os

# a path with one of these is a library's: installed packages, the standard library, frozen
LIBRARY = ("site-packages", "dist-packages", "/lib/python3", "<frozen")
# a compiled extension's source (Cython): its frames name it relative to its package
# ("numpy/random/_mt19937.pyx"), and no script is one
COMPILED = (".pyx", ".pxd", ".pxi")
# the lab's harness around the script (workloads/_trace.py: the recorder of older runs' logs)
HARNESS_FILES = ("workloads/_script.py", "workloads/_stacks.py", "workloads/__main__.py", "workloads/_trace.py",
                 "workloads/_record.py")
HARNESS_PACKAGES = ("/workloads/_trace/",)      # the recorder, a package of its own
STDLIB = os.path.dirname(os.__file__) + os.sep   # this interpreter's standard library, wherever it lies
# torch's own wrappers around a torch.distributed call (decorators): no call's name
TORCH_WRAPPERS = frozenset({"wrapper", "_wrapper", "inner", "decorator", "decorate_context", "_fn"})


def user_frame(path: str) -> bool:
    """A frame at `path` is the user's: not the harness, and a workload or outside every
    library (a script run from anywhere, `python -c`'s `<string>`)."""
    if path.endswith(HARNESS_FILES) or any(p in path for p in HARNESS_PACKAGES) or path.endswith(COMPILED):
        return False
    if "/workloads/" in path:
        return True
    return not path.startswith(STDLIB) and not any(s in path for s in LIBRARY)
