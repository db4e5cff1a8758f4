"""The workloads' plugins, found by name: `workloads/_report/<name>.py`'s `WORKLOAD`.

The one place labctl loads a workload's report module, at run time and by name (the
import graph, tests/import_graph.py, reads the f-string below as an import of every
`workloads._report` module). Those modules are torch-free and never import labctl (they
describe: typed views and data; labctl/reports/ draws, writes and predicts), so there is
no circle at run time either (tests/test_layers.py).
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from workloads._protocol.plugin import Workload


def module(name: str) -> ModuleType | None:
    """The workload's report module (its `WORKLOAD` and helpers of its own), or None when
    it has none. `name` is a record's: anything."""
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


def part(name: str) -> ModuleType:
    """A report module labctl's own code names (labctl/reports/: the bench's rows, the
    patterns' cost model, `_patterncost`): a name labctl spells, never a record's."""
    return importlib.import_module(f"workloads._report.{name}")
