"""Compose renderer: a LaunchPlan in, one compose.yaml out (pure and deterministic).

One service per node. Each service runs exactly `plan.node_command(node)`
(never a rebuilt argv), with the node's hostname so that gloo binds to the
container's own address and c10d finds node 0 by name, on one lab network.
No published ports and no privileges: nodes talk only to each other.

Compose interpolates `$VAR` in every string, and the plan contains literal
`$` (torchrun's `[rank${rank}]:` prefix template, the direct-mode bash loop),
so every string we emit escapes `$` as `$$`.

A user script is bind-mounted read-only from `spec.script` as given: a
relative path resolves against the compose project directory, which the
compose backend sets to the directory labctl was started from.
"""
from __future__ import annotations

import re
from typing import Any


from ..plan import LaunchPlan, node_command
from . import dump_yaml

RUN_LABEL = "labctl.dev/run-id"
NETWORK = "lab"
STOP_GRACE = "5s"
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 10**-3}


def project_name(run_id: str) -> str:
    """A valid compose project name for a run: lower-case letters, digits, '-' and '_'."""
    name = re.sub(r"[^a-z0-9_-]", "-", run_id.lower()).lstrip("-_")
    return name or "labctl"


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes quantity (1Gi, 512Mi, 2G) as bytes; compose reads '1m' as a megabyte."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?", quantity)
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r} (examples: 1Gi, 512Mi)")
    number, unit = float(m.group(1)), m.group(2) or ""
    return int(number * (_BINARY.get(unit) or _DECIMAL[unit]))


def _cpus(quantity: str) -> str:
    """Kubernetes CPUs (2, 0.5, 500m) as compose's decimal string."""
    return f"{float(quantity[:-1]) / 1000:g}" if quantity.endswith("m") else f"{float(quantity):g}"


def _escape(text: str) -> str:
    return text.replace("$", "$$")


def _labels(plan: LaunchPlan, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": plan.spec.name,
        "app.kubernetes.io/instance": plan.run_id,
        "app.kubernetes.io/part-of": "labctl",
        "app.kubernetes.io/managed-by": "labctl",
        RUN_LABEL: plan.run_id,
        **extra,
    }


def _service(plan: LaunchPlan, index: int) -> dict[str, Any]:
    spec, node = plan.spec, plan.nodes[index]
    argv, env = node_command(node)
    service: dict[str, Any] = {
        "image": spec.resolved_image,
        "hostname": node.hostname,
        "command": [_escape(a) for a in argv],
        "environment": {k: _escape(v) for k, v in env.items()},
        "networks": [NETWORK],
        "shm_size": quantity_bytes(spec.resources.shm),
        "restart": "no",
        "stop_grace_period": STOP_GRACE,
        "labels": _labels(plan, **{"labctl.dev/node": str(node.index)}),
    }
    reservations: dict[str, Any] = {"cpus": _cpus(spec.resources.cpu),
                                    "memory": str(quantity_bytes(spec.resources.memory))}
    if spec.dist_backend == "nccl":
        # One GPU per worker, as on Kubernetes (nvidia.com/gpu = nproc_per_node).
        reservations["devices"] = [{"driver": "nvidia", "count": spec.nproc_per_node,
                                    "capabilities": ["gpu"]}]
    service["deploy"] = {"resources": {"reservations": reservations}}
    if spec.script and plan.placement.script_path:
        service["volumes"] = [{"type": "bind", "source": _escape(spec.script),
                               "target": plan.placement.script_path, "read_only": True}]
    return service


def render(plan: LaunchPlan) -> dict[str, Any]:
    """The compose document as plain data (keys in a fixed, readable order)."""
    return {
        "name": project_name(plan.run_id),
        "services": {node.hostname: _service(plan, node.index) for node in plan.nodes},
        "networks": {NETWORK: {"labels": _labels(plan)}},
    }


def text(plan: LaunchPlan) -> str:
    header = (f"# Rendered by labctl: lab {plan.spec.name!r}, run id {plan.run_id}, "
              f"{plan.spec.nodes} node(s) x {plan.spec.nproc_per_node}.\n"
              "# Run: docker compose -f compose.yaml up; clean up: docker compose -f compose.yaml down -v\n")
    return header + dump_yaml(render(plan))


def files(plan: LaunchPlan) -> dict[str, str]:
    return {"compose.yaml": text(plan)}
