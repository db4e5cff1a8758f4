"""Compose renderer: a LaunchPlan in, one compose.yaml out (pure and deterministic).

One service per node. Each service runs exactly `plan.node_command(node)`
(never a rebuilt argv), with the node's hostname so that gloo binds to the
container's own address and c10d finds node 0 by name, on one lab network.
No privileges, and no published ports but one: with `debug_server`, node 0 publishes
torch's debug server frontend on 127.0.0.1 of this machine, on a port the engine
picks (`docker compose port <node 0> <port>` says which; labctl up prints it).

Hardened like the k8s render (docs/compose.md, "Security defaults"): limits
equal to the lab's resources (cpus, memory, pids), no new privileges, every
capability dropped (a node named in a `delay:` fault gets NET_ADMIN back, for
tc netem, and nothing else; a node whose link the lab shapes starts as root with
NET_ADMIN, SETUID, SETGID and SETPCAP for `workloads/_shape.py`, which runs tc and
then execs the node's command as uid 1000 with every capability set empty), a read-only root with tmpfs where the workloads,
torch and user scripts write (/tmp, the work dir /work, the lab user's home).

Compose interpolates `$VAR` in every string value, mount targets included, and
the plan contains literal `$` (torchrun's `[rank${rank}]:` prefix template, the
direct-mode bash loop), as may any user-given name: `render` builds the
document first and then escapes `$` as `$$` in every string value (`_escaped`),
so no field can be forgotten.

A user script is bind-mounted read-only from `spec.script` as given: a
relative path resolves against the compose project directory, which the
compose backend sets to the directory labctl was started from.

With replicas, the replica store is one more service (`<lab>-store`, from
`plan.services`) that every node depends on, so compose starts it first. A
shared directory (init_method file) is one named volume mounted by every
node: tmpfs-backed and owned by the image's uid 1000, so it needs no host
path and no root.
"""
from __future__ import annotations

import json
import re
from typing import Any


from .shaping import node_shaping
from workloads._protocol import Env

from ...plan import LaunchPlan, NodeLaunch, node_command
from ...rendered import RUN_LABEL, SPEC_KEY, dump_yaml, stored_spec
from ...units import quantity

NETWORK = "lab"
SHARED_VOLUME = "shared"
SHARED_VOLUME_SIZE = "64m"      # init files are a few bytes each
IMAGE_UID = 1000                # the lab images' user
STOP_GRACE = "5s"
WORKDIR = "/work"               # the lab images' WORKDIR: the node's work dir (a tmpfs)
HOME = "/home/lab"              # the lab images' user's home (a tmpfs)
WRITABLE = ("/tmp", WORKDIR, HOME)   # tmpfs on the read-only root, each at most half the memory
HELPER_PIDS = 256               # the replica store: one Python process
HELPER_TMP = 64 << 20
RECORDS_MOUNT = "/lab/records"      # where the run folder's records/ is mounted (LAB_TRACE_DIR)
DEBUG_SERVER_MOUNT = "/lab/debug-server"   # where the run folder's debug-server/ is mounted


def project_name(run_id: str) -> str:
    """A valid compose project name for a run: lower-case letters, digits, '-' and '_'."""
    name = re.sub(r"[^a-z0-9_-]", "-", run_id.lower()).lstrip("-_")
    return name or "labctl"


def quantity_bytes(amount: str) -> int:
    """A Kubernetes quantity (1Gi, 512Mi, 2G) as bytes; compose reads '1m' as a megabyte."""
    return int(quantity(amount))


def _cpus(amount: str) -> str:
    """Kubernetes CPUs (2, 0.5, 500m) as compose's decimal string."""
    return f"{quantity(amount):g}"


def _escape(text: str) -> str:
    return text.replace("$", "$$")


def _escaped(value: Any) -> Any:
    """Every string value (not the keys: compose interpolates values only) with `$`
    escaped, at any depth."""
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, dict):
        return {k: _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def _locked_down() -> dict[str, Any]:
    """What every container gets: a read-only root, no privilege to gain, no capability
    (docs/compose.md, "Security defaults"). A fresh dict: each service its own lists."""
    return {"read_only": True, "security_opt": ["no-new-privileges:true"], "cap_drop": ["ALL"]}


def _tmpfs(size: int) -> list[dict[str, Any]]:
    """tmpfs where torch, the workloads and user scripts write, on the read-only root."""
    return [{"type": "tmpfs", "target": path, "tmpfs": {"size": size}} for path in WRITABLE]


def fault_capabilities(plan: LaunchPlan, index: int) -> list[str]:
    """The capabilities node `index` gets back for the lab's faults: NET_ADMIN for a
    `delay:` on it (tc netem, run as root in the container). The other faults act from
    outside (docker kill, pause, network disconnect) or signal the container's own
    processes as their own user (kill-rank, stacks): none needs one."""
    return ["NET_ADMIN"] if any(f.kind == "delay" and f.target == index for f in plan.spec.faults) else []


# A shaped node starts as root with these, runs tc, then drops them all (workloads/_shape.py):
# NET_ADMIN for tc and the ifb device; SETUID/SETGID to become the lab's user; SETPCAP to
# empty the bounding set.
SHAPING_CAPABILITIES = ("NET_ADMIN", "SETGID", "SETPCAP", "SETUID")
SHAPE_MODULE = "workloads._shape"
# Every node of a lab with links (its own network namespace's TCP): a connection that was
# idle (between two collectives) keeps its congestion window instead of starting slowly
# again over round trips that a shaped link's loaded queue lengthens (docs/network.md).
LINK_SYSCTLS = {"net.ipv4.tcp_slow_start_after_idle": 0}


def shaping(plan: LaunchPlan, index: int) -> dict[str, Any] | None:
    """What node `index` shapes on its link before it starts (`links:`), or None."""
    if plan.spec.links is None:
        return None
    hostnames = [node.hostname for node in plan.nodes]
    return node_shaping(plan.spec.links, index, hostnames, resolve_timeout=plan.spec.join_timeout)


def shaped_command(plan: LaunchPlan, shape: dict[str, Any], argv: tuple[str, ...]) -> list[str]:
    """The node's own command, unchanged, after the shaping step (it execs it as uid 1000)."""
    return [*plan.placement.python, "-m", SHAPE_MODULE, "--node",
            json.dumps(shape, sort_keys=True, separators=(",", ":")), "--", *argv]


def _labels(plan: LaunchPlan, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": plan.spec.name,
        "app.kubernetes.io/instance": plan.run_id,
        "app.kubernetes.io/part-of": "labctl",
        "app.kubernetes.io/managed-by": "labctl",
        RUN_LABEL: plan.run_id,
        **extra,
    }


def _service(plan: LaunchPlan, index: int, records_dir: str | None = None,
             debug_dir: str | None = None) -> dict[str, Any]:
    spec, node = plan.spec, plan.nodes[index]
    argv, env = node_command(node)
    if records_dir:
        env = {**env, Env.TRACE_DIR: RECORDS_MOUNT}
    if debug_dir:
        env = {**env, Env.DEBUG_SERVER_DIR: DEBUG_SERVER_MOUNT}
    labels = {"labctl.dev/node": str(node.index)}
    if spec.replicas > 1:
        labels["labctl.dev/replica"] = str(node.replica)
    memory = quantity_bytes(spec.resources.memory)
    shape = shaping(plan, node.index)
    service: dict[str, Any] = {
        "image": spec.resolved_image,
        "hostname": node.hostname,
        # root only for the shaping step: workloads/_shape.py execs the node as uid 1000
        # with every capability set empty (docs/compose.md, "Security defaults")
        **({"user": "0:0"} if shape is not None else {}),
        "command": list(argv) if shape is None else shaped_command(plan, shape, argv),
        "environment": dict(env),
        "working_dir": WORKDIR,
        "networks": [NETWORK],
        **({"ports": [debug_server_port(plan)]} if node.index == 0 and plan.placement.debug_server_port else {}),
        "shm_size": quantity_bytes(spec.resources.shm),
        "restart": "no",
        "stop_grace_period": STOP_GRACE,
        "labels": _labels(plan, **labels),
        **_locked_down(),
    }
    if spec.links is not None:
        service["sysctls"] = dict(LINK_SYSCTLS)
    capabilities = sorted({*fault_capabilities(plan, node.index),
                           *(SHAPING_CAPABILITIES if shape is not None else ())})
    if capabilities:
        service["cap_add"] = capabilities
    if plan.services:
        service["depends_on"] = {svc.hostname: {"condition": "service_started"} for svc in plan.services}
    reservations: dict[str, Any] = {"cpus": _cpus(spec.resources.cpu), "memory": str(memory)}
    limits: dict[str, Any] = {**reservations, "pids": int(spec.resources.pids)}
    if spec.dist_backend == "nccl":
        # One GPU per worker, as on Kubernetes (nvidia.com/gpu = nproc_per_node).
        reservations["devices"] = [{"driver": "nvidia", "count": spec.nproc_per_node,
                                    "capabilities": ["gpu"]}]
    service["deploy"] = {"resources": {"limits": limits, "reservations": reservations}}
    volumes = _tmpfs(memory // 2)
    if spec.script and plan.placement.script_path:
        volumes.append({"type": "bind", "source": spec.script,
                        "target": plan.placement.script_path, "read_only": True})
    if plan.placement.shared_dir:
        volumes.append({"type": "volume", "source": SHARED_VOLUME, "target": plan.placement.shared_dir})
    if records_dir:
        volumes.append({"type": "bind", "source": records_dir, "target": RECORDS_MOUNT})
    if debug_dir:
        volumes.append({"type": "bind", "source": debug_dir, "target": DEBUG_SERVER_MOUNT})
    service["volumes"] = volumes
    return service


def debug_server_port(plan: LaunchPlan) -> dict[str, Any]:
    """Node 0's debug server frontend, published on this machine's loopback only, on a
    port the engine picks (no clash with another lab or anything else listening)."""
    return {"target": plan.placement.debug_server_port, "host_ip": "127.0.0.1", "protocol": "tcp"}


def _helper(plan: LaunchPlan, svc: NodeLaunch) -> dict[str, Any]:
    """A plan service (the replica store): one process, on the lab network, no resources reserved."""
    (proc,) = svc.processes
    return {
        "image": plan.spec.resolved_image,
        "hostname": svc.hostname,
        "command": list(proc.argv),
        "environment": dict(proc.env),
        "working_dir": WORKDIR,
        "networks": [NETWORK],
        "restart": "no",
        "stop_grace_period": STOP_GRACE,
        "labels": _labels(plan, **{"labctl.dev/service": svc.hostname}),
        **_locked_down(),
        "deploy": {"resources": {"limits": {"pids": HELPER_PIDS}}},
        "volumes": _tmpfs(HELPER_TMP),
    }


def render(plan: LaunchPlan, records_dir: str | None = None,
           debug_dir: str | None = None) -> dict[str, Any]:
    """The compose document as plain data (keys in a fixed, readable order). With
    `records_dir` (`labctl up`: the run folder's records/ on this machine), every node
    mounts it and its ranks write their record files there, which outlive any death of a
    rank; without (a rendered file to run by hand), the records travel in the log stream.
    With `debug_dir` (`labctl up` of a lab with `debug_server`: the run folder's
    debug-server/), every node mounts it and rank 0's debug server dumps there; without,
    into the node's own /tmp."""
    services = {svc.hostname: _helper(plan, svc) for svc in plan.services}
    services.update({node.hostname: _service(plan, node.index, records_dir, debug_dir)
                     for node in plan.nodes})
    doc: dict[str, Any] = {
        "name": project_name(plan.run_id),
        "services": services,
        # The lab description rides on the one network of the run: `labctl collect`
        # rebuilds the plan from it (docker compose keeps no copy of the file).
        "networks": {NETWORK: {"labels": _labels(plan, **{SPEC_KEY: stored_spec(plan.spec)})}},
    }
    if plan.placement.shared_dir:
        doc["volumes"] = {SHARED_VOLUME: {
            "labels": _labels(plan),
            "driver_opts": {"type": "tmpfs", "device": "tmpfs",
                            "o": f"uid={IMAGE_UID},gid={IMAGE_UID},size={SHARED_VOLUME_SIZE}"},
        }}
    return _escaped(doc)


def text(plan: LaunchPlan, records_dir: str | None = None, debug_dir: str | None = None) -> str:
    shape = f"{plan.spec.nodes} node(s) x {plan.spec.nproc_per_node}"
    if plan.spec.replicas > 1:
        shape = f"{plan.spec.replicas} replicas of {shape}, and the replica store"
    header = (f"# Rendered by labctl: lab {plan.spec.name!r}, run id {plan.run_id}, "
              f"{shape}.\n"
              "# Run: docker compose -f compose.yaml up -d\n"
              f"# Then: labctl collect --backend compose --run-id {plan.run_id}"
              "  (logs, results, report; --delete removes the lab)\n")
    if plan.placement.debug_server_port:
        header += (f"# Debug server: docker compose -f compose.yaml port {plan.nodes[0].hostname} "
                   f"{plan.placement.debug_server_port}  (where node 0 publishes it on 127.0.0.1)\n")
    return header + dump_yaml(render(plan, records_dir, debug_dir))


def files(plan: LaunchPlan) -> dict[str, str]:
    return {"compose.yaml": text(plan)}
