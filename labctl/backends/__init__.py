"""Backends: small modules with the same verbs, imported lazily by name.

Each backend module provides:

    placement(spec, **options) -> Placement
        how nodes are named and reach node 0 on this backend
    run(plan, rundir, deadline, progress, **options) -> (outcomes, state, message)
        start every node, wait (with a deadline), write each node's log into
        the run folder *before* tearing anything down, tear everything down
    down(rundir, **options) -> str          (container backends)
        delete whatever a run created; returns what was done
"""
from __future__ import annotations

import importlib
from types import ModuleType


def load(name: str) -> ModuleType:
    return importlib.import_module(f"labctl.backends.{name}")
