"""The workloads' plugins, found by name: `workloads/_report/<name>.py`'s `WORKLOAD`.

The one place labctl loads a workload's report module, at run time and by name (the
import graph, tests/import_graph.py, reads the f-string below as an import of every
`workloads._report` module). Those modules are torch-free and stand on labctl's
values only (tables, links, record, errors, atomicfile), never on a module that loads
a plugin, so there is no circle at run time either (tests/test_layers.py).
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from workloads._protocol.plugin import Workload


def module(name: str) -> ModuleType | None:
    """The workload's report module (its `WORKLOAD` and helpers of its own, such as
    preflight's `run_table`), or None when it has none."""
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        return None
    try:
        if importlib.util.find_spec(f"workloads._report.{name}") is None:
            return None
    except ModuleNotFoundError:
        return None
    return importlib.import_module(f"workloads._report.{name}")


def plugin(name: str) -> Workload | None:
    """The workload's plugin, or None when it declares none (a user's workload without a
    report module: its checks are still counted and listed)."""
    found = module(name)
    declared = getattr(found, "WORKLOAD", None) if found is not None else None
    if found is not None and not isinstance(declared, Workload):
        raise TypeError(f"{found.__file__}: WORKLOAD should be a workloads._protocol.plugin.Workload, "
                        f"found {type(declared).__name__}")
    return declared
