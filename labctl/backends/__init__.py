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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from ..plan import LaunchPlan
    from ..spec import LabSpec
    from .base import Backend

# name -> "module:class"
REGISTRY: dict[str, str] = {
    "local": "labctl.backends.local.backend:LocalBackend",
    "compose": "labctl.backends.compose.backend:ComposeBackend",
    "k8s": "labctl.backends.k8s.backend:K8sBackend",
}

NAMES: tuple[str, ...] = tuple(REGISTRY)


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> "LabSpec":
    """`spec.load`, then every backend's rules (`check_spec`): what validate, up, render use."""
    from .. import spec as specmod

    return check_spec(specmod.load(path, overrides), str(path) if path is not None else "lab spec")


def from_dict(data: Mapping[str, Any], source: str = "lab spec") -> "LabSpec":
    """`spec.from_dict`, then every backend's rules (`check_spec`)."""
    from .. import spec as specmod

    return check_spec(specmod.from_dict(data, source=source), source)


def spec_from_stored(text: str, where: str) -> "LabSpec":
    """The lab description a renderer stored in its objects (`rendered.stored_spec`: a
    compose network label, a k8s Job or JobSet annotation), checked as lab.yaml is:
    what `labctl collect` rebuilds the plan of a run it did not start from."""
    import json

    from ..errors import LabError
    from ..rendered import SPEC_KEY

    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return from_dict(data, source=where)
    except ValueError as exc:       # bad JSON, or a description this labctl rejects
        raise LabError(f"{where}: unreadable {SPEC_KEY} ({exc}); render and start the lab "
                       "again with this labctl") from None


def check_spec(spec: "LabSpec", source: str = "lab spec") -> "LabSpec":
    """The lab as the backends see it: its backend is one of the registry's, each
    backend's own rules and sections hold (`Backend.check_spec`: every lab, as
    `labctl render` may render any for any backend), its faults are ones its backend can
    do, and workloads' rules on where the nodes run (`check_placement`) hold.
    SpecError, one line naming `source`, otherwise; returns the lab, sections normalised."""
    from ..spec import SpecError, _short, report_hook, workload_parameters

    if not isinstance(spec.backend, str) or spec.backend not in REGISTRY:
        raise SpecError(f"{source}: backend: expected one of {', '.join(REGISTRY)}, "
                        f"given {_short(spec.backend)}")
    for name in REGISTRY:
        spec = backend_class(name).check_spec(spec, source)
    chosen = backend_class(spec.backend)
    for fault in spec.faults:
        kind = fault.kind
        if kind not in chosen.fault_kinds:
            able = [name for name in REGISTRY if kind in backend_class(name).fault_kinds]
            raise SpecError(f"{source}: faults: the {spec.backend} backend cannot do {kind} "
                            f"(backends that can: {', '.join(able) or 'none'}), given {_short(str(fault))}")
    if spec.faults and spec.fault_clock == "join" and not chosen.hears_joins:
        able = [name for name in REGISTRY if backend_class(name).hears_joins]
        raise SpecError(f"{source}: fault_clock: the {spec.backend} backend cannot hear the ranks "
                        f"join (backends that can: {', '.join(able)}); use fault_clock: start")
    if spec.links is not None:
        why = chosen.links_refusal(spec)
        if why:
            raise SpecError(f"{source}: links: {why}")
    shared_dir = chosen.shared_dir(spec)
    for w in spec.workloads:
        rules = report_hook(w.name)
        if rules is not None and hasattr(rules, "check_placement"):
            try:
                rules.check_placement(spec, shared_dir, dict(w.options), workload_parameters(w.name))
            except ValueError as exc:
                raise SpecError(f"{source}: {exc}") from None
    return spec


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


def _renderer(target: str, spec: "LabSpec"):
    """The module that renders this lab for a backend, as the backend names it."""
    module = backend_class(target).renderer_for(spec)
    if module is None:
        raise ValueError(f"the {target} backend has nothing to render")
    return importlib.import_module(module)


def render_files(target: str, plan: "LaunchPlan") -> dict[str, str]:
    """What `labctl render <target> -o DIR` writes: {file name: text}."""
    if target == "plan":
        return {"plan.json": plan.to_json()}
    return _renderer(target, plan.spec).files(plan)


def render_text(target: str, plan: "LaunchPlan") -> str:
    """What `labctl render <target>` prints."""
    if target == "plan":
        return plan.to_json()
    return _renderer(target, plan.spec).text(plan)


def collect_targets() -> tuple[str, ...]:
    """`labctl collect --backend` choices: backends that can attach to a run by its id."""
    from .base import Backend

    return tuple(n for n in NAMES if backend_class(n).attach_by_id is not Backend.attach_by_id)
