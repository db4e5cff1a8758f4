"""Pure renderers: a LaunchPlan in, text out (same plan, same text).

Each renderer module (`compose`, `k8s`) provides `files(plan) -> {name: text}`
(what `render -o DIR` writes) and `text(plan) -> str` (what goes to stdout).
The first line of every rendered file names the run id, and the rendered
objects carry the lab description (`SPEC_KEY`: a compose network label, a
k8s Job annotation), so `labctl collect --run-id` can rebuild the plan of a
lab that `docker compose` or `kubectl` started.
"""
from __future__ import annotations

import importlib
import json
from typing import Any

import yaml

from ..errors import LabError
from ..plan import LaunchPlan
from ..spec import LabSpec, from_dict

SPEC_KEY = "labctl.dev/spec"     # label / annotation holding the lab description (one JSON line)

# libyaml's emitter when PyYAML has it: a 1,024-node compose file renders
# several times faster than with the pure-Python one, byte for byte the same.
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):
    """Multi-line strings (shell scripts, a user's script) as literal blocks;
    no &anchors, so every object reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(obj: Any) -> str:
    """The one YAML style of every renderer: keys in the order given, block style."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)


def stored_spec(spec: LabSpec) -> str:
    """The lab description as one JSON line: spec.yaml's content, less `out` (where a
    run folder goes, not what runs) and every field at its default, so that adding a
    field to the spec does not change what earlier labs rendered."""
    defaults = LabSpec().to_dict()
    data = {k: v for k, v in spec.to_dict().items()
            if k != "out" and v not in (None, [], {}) and v != defaults.get(k)}
    return json.dumps(data, separators=(",", ":"))


def spec_from_stored(text: str, where: str) -> LabSpec:
    """The lab description a renderer stored (`stored_spec`), validated as lab.yaml is."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        from ..backends import check_spec

        return check_spec(from_dict(data, source=where), where)
    except ValueError as exc:       # bad JSON, or a description this labctl rejects
        raise LabError(f"{where}: unreadable {SPEC_KEY} ({exc}); render and start the lab "
                       "again with this labctl") from None


def _renderer(target: str, spec: LabSpec):
    """The module that renders this lab for a backend, as the backend names it."""
    from ..backends import backend_class

    module = backend_class(target).renderer_for(spec)
    if module is None:
        raise ValueError(f"the {target} backend has nothing to render")
    return importlib.import_module(module)


def files(target: str, plan: LaunchPlan) -> dict[str, str]:
    if target == "plan":
        return {"plan.json": text(target, plan)}
    return _renderer(target, plan.spec).files(plan)


def text(target: str, plan: LaunchPlan) -> str:
    if target == "plan":
        return plan.to_json()
    return _renderer(target, plan.spec).text(plan)
