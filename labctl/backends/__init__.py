"""Backends: where a lab's nodes run. The registry below is the one list of them.

Every backend is a `Backend` subclass (labctl/backends/base.py) in a module of
its own; the driver (labctl/driver.py) decides *when* to start, poll, stop,
collect and delete, the backend only says *how*. Adding a backend is one
module plus one line here (docs/architecture.md shows the steps). The spec's
`backend` choices, the CLI's backend flags and `labctl render` targets all
come from this table.

Modules are imported only when a backend is used, so `labctl --help` stays fast.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Backend

# name -> "module:class"
REGISTRY: dict[str, str] = {
    "local": "labctl.backends.local:LocalBackend",
    "compose": "labctl.backends.compose:ComposeBackend",
    "k8s": "labctl.backends.k8s:K8sBackend",
}

NAMES: tuple[str, ...] = tuple(REGISTRY)


def backend_class(name: str) -> type["Backend"]:
    try:
        module, cls = REGISTRY[name].split(":")
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(NAMES)}") from None
    return getattr(importlib.import_module(module), cls)


def create(name: str, **options: Any) -> "Backend":
    """A backend instance for one run (or one attach), with its own options."""
    return backend_class(name)(**options)


def all_options() -> dict[str, tuple[str, list[str]]]:
    """{option: (help, [backends that take it])} for the CLI's flags."""
    found: dict[str, tuple[str, list[str]]] = {}
    for name in NAMES:
        for option, help_text in backend_class(name).options.items():
            found.setdefault(option, (help_text, []))[1].append(name)
    return found


def render_targets() -> tuple[str, ...]:
    """`labctl render` targets: the plan, plus every backend that has files to show."""
    return ("plan", *(n for n in NAMES if backend_class(n).renderer is not None))


def collect_targets() -> tuple[str, ...]:
    """`labctl collect --backend` choices: backends that can attach to a run by its id."""
    from .base import Backend

    return tuple(n for n in NAMES if backend_class(n).attach_by_id is not Backend.attach_by_id)
