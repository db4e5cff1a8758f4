"""What every renderer shares: the YAML style, and the lab description its objects carry.

A renderer lives in its backend's package (labctl/backends/compose/render.py,
labctl/backends/k8s/render.py and jobset.py): pure, a LaunchPlan in, text out
(same plan, same text), with `files(plan) -> {name: text}` (what `render -o DIR`
writes) and `text(plan) -> str` (what goes to stdout); `labctl render <target>`
finds it through the registry (labctl/backends/__init__.py). The first line of
every rendered file names the run id, and the rendered objects carry the lab
description (`SPEC_KEY`: a compose network label, a k8s Job annotation), so
`labctl collect --run-id` can rebuild the plan of a lab that `docker compose` or
`kubectl` started (`backends.spec_from_stored`, which checks it as lab.yaml is).
"""
from __future__ import annotations

import json
from typing import Any

import yaml

from .spec import LabSpec

SPEC_KEY = "labctl.dev/spec"     # label / annotation holding the lab description (one JSON line)
# On every container, network, volume and Kubernetes object of a run: how `labctl collect`,
# `down` and the end of a run find what belongs to it.
RUN_LABEL = "labctl.dev/run-id"

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
