"""Backends: where a lab's nodes run. The registry below is the one list of them.

Every backend is a `Backend` subclass (labctl/backends/base.py) in a package of
its own (`local/`, `compose/`, `k8s/`: the backend, its renderer, its settings
and whatever else only it knows); the driver (labctl/driver.py) decides *when*
to start, poll, stop, collect and delete, the backend only says *how*. What several
backends share sits beside them: `containers.py` (compose and k8s: their placement,
mounts and ports), `runfolder.py` (local and compose: the run folder's directories
handed to the nodes). Adding a backend is one package plus one line here
(docs/architecture.md shows the steps). The spec's `backend` choices, the CLI's backend flags (from each
backend's typed `Options`), `labctl render` targets and the lab checks of every
backend all come from this table.

This is the plugin point: it names the backends by module path and imports them
only when one is used (`backend_class`); nothing else below a backend imports
one, and no backend imports another.
"""
from __future__ import annotations

import dataclasses
import importlib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from ..plan import LaunchPlan
    from ..spec import LabSpec
    from .base import Backend, BackendOptions

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
    from ..spec import SpecError, short, report_hook, workload_parameters

    if not isinstance(spec.backend, str) or spec.backend not in REGISTRY:
        raise SpecError(f"{source}: backend: expected one of {', '.join(REGISTRY)}, "
                        f"given {short(spec.backend)}")
    for name in REGISTRY:
        spec = backend_class(name).check_spec(spec, source)
    chosen = backend_class(spec.backend)
    for fault in spec.faults:
        kind = fault.kind
        if kind not in chosen.fault_kinds:
            able = [name for name in REGISTRY if kind in backend_class(name).fault_kinds]
            raise SpecError(f"{source}: faults: the {spec.backend} backend cannot do {kind} "
                            f"(backends that can: {', '.join(able) or 'none'}), given {short(str(fault))}")
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
        if rules is not None:
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


def create(name: str, progress: Callable[[str], None] = lambda line: None,
           options: "BackendOptions | None" = None) -> "Backend":
    """A backend instance for one run (or one attach), with its own typed options
    (`options_for`; None: every one at its default)."""
    return backend_class(name)(progress, options)


@dataclass(frozen=True)
class Flag:
    """One backend flag of the CLI, read from the backends' typed options."""
    name: str                       # the options' field; the flag is --<name, '-' for '_'>
    type: type                      # str, int or float (an `X | None` field: X)
    help: str
    backends: tuple[str, ...]       # the backends whose options have it


_FLAG_TYPES = (str, int, float)


def _flags(name: str) -> list[Flag]:
    """Backend `name`'s flags, from the fields of its `Options` dataclass."""
    options = backend_class(name).Options
    hints = typing.get_type_hints(options)
    out = []
    for f in dataclasses.fields(options):
        kinds = [t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None)]
        if len(kinds) != 1 or kinds[0] not in _FLAG_TYPES:
            raise TypeError(f"{options.__name__}.{f.name}: a backend option is str, int or float "
                            f"(or that | None), not {hints[f.name]}")
        out.append(Flag(f.name, kinds[0], f.metadata.get("help", ""), (name,)))
    return out


def all_options() -> dict[str, Flag]:
    """Every backend flag of the CLI by name, with the backends that take it (a name two
    backends declare must have one type in both)."""
    found: dict[str, Flag] = {}
    for name in REGISTRY:
        for flag in _flags(name):
            seen = found.get(flag.name)
            if seen is not None and seen.type is not flag.type:
                raise TypeError(f"--{flag.name}: {seen.type.__name__} for {', '.join(seen.backends)} "
                                f"but {flag.type.__name__} for {name}")
            found[flag.name] = flag if seen is None else dataclasses.replace(
                seen, backends=seen.backends + (name,))
    return found


def options_for(name: str, given: Mapping[str, Any]) -> "BackendOptions":
    """Backend `name`'s typed options from the flags given (None: not given). A flag of
    another backend is one line, exit 2: `--namespace applies to the k8s backend, not compose`."""
    from .base import OptionRefused

    given = {k: v for k, v in given.items() if v is not None}
    options = backend_class(name).Options
    own = {f.name for f in dataclasses.fields(options)}
    wrong = [k for k in given if k not in own]
    if wrong:
        flag = all_options().get(wrong[0])
        owners = f"the {', '.join(flag.backends)} backend" if flag else "no backend"
        raise OptionRefused(f"--{wrong[0].replace('_', '-')} applies to {owners}, not {name}")
    return options(**given)


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
        from ..rundir import PLAN_FILE

        return {PLAN_FILE: plan.to_json()}
    return _renderer(target, plan.spec).files(plan)


def render_text(target: str, plan: "LaunchPlan") -> str:
    """What `labctl render <target>` prints."""
    if target == "plan":
        return plan.to_json()
    return _renderer(target, plan.spec).text(plan)


def collect_targets() -> tuple[str, ...]:
    """`labctl collect --backend` choices: backends that can attach to a run by its id
    (those that can find runs by their ids: `find_runs`)."""
    from .base import Backend

    return tuple(n for n in NAMES if backend_class(n).find_runs is not Backend.find_runs)
