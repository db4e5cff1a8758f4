"""Pure renderers: a LaunchPlan in, text out (same plan, same text).

Each renderer module (`compose`, `k8s`) provides `files(plan) -> {name: text}`
(what `render -o DIR` writes) and `text(plan) -> str` (what goes to stdout).
"""
from __future__ import annotations

import importlib
import json
from typing import Any

import yaml

from ..plan import LaunchPlan

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


def _renderer(target: str):
    """The module that renders for a backend, as the backend registry names it."""
    from ..backends import backend_class

    module = backend_class(target).renderer
    if module is None:
        raise ValueError(f"the {target} backend has nothing to render")
    return importlib.import_module(module)


def files(target: str, plan: LaunchPlan) -> dict[str, str]:
    if target == "plan":
        return {"plan.json": text(target, plan)}
    return _renderer(target).files(plan)


def text(target: str, plan: LaunchPlan) -> str:
    if target == "plan":
        return json.dumps(plan.to_dict(), indent=2) + "\n"
    return _renderer(target).text(plan)
