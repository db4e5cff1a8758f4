"""The launch contract, defined once: what every node runs and with which environment.

`plan(spec, placement, run_id)` is a pure function. Every backend (local
processes, compose services, Kubernetes pods) starts exactly the processes
listed here; backends differ only in their `Placement` — how nodes are named
and how they reach node 0 — never in how the command line is built.
"""
from __future__ import annotations

import datetime as _dt
import json
import secrets
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from .spec import LabSpec

DEFAULT_CONTAINER_PORT = 29500
SCRIPT_MOUNT = "/lab/script"        # where container backends mount a user's script
# torchrun tees every worker's output with this prefix, so one node log can be
# split per global rank by every backend (see labctl.logs).
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"


@dataclass(frozen=True)
class Placement:
    """How one backend lays nodes out: names, node 0's address, interpreters."""
    backend: str
    hostnames: tuple[str, ...]
    master_addr: str
    master_port: int
    torchrun: tuple[str, ...] = ("torchrun",)
    python: tuple[str, ...] = ("python3",)
    env: Mapping[str, str] = field(default_factory=dict)
    script_path: str | None = None       # the user's script as seen inside a node


def local_placement(spec: LabSpec, port: int, script_path: str | None = None) -> Placement:
    """All nodes are processes on this machine; they meet on loopback."""
    return Placement(
        backend="local",
        hostnames=tuple(node_hostname(spec, i) for i in range(spec.nodes)),
        master_addr="127.0.0.1",
        master_port=port,
        torchrun=(sys.executable, "-m", "torch.distributed.run"),
        python=(sys.executable,),
        # gloo binds to what the hostname resolves to; nodes that share one host
        # must use loopback instead.
        env={"GLOO_SOCKET_IFNAME": "lo"},
        script_path=script_path if script_path is not None else spec.script,
    )


def container_placement(spec: LabSpec, backend: str, master_addr: str | None = None) -> Placement:
    """One container per node, each with its own hostname and address.

    Compose reaches node 0 by its service hostname; Kubernetes by the pod's
    `<job>-0.<service>` DNS name under the headless Service.
    """
    hostnames = tuple(node_hostname(spec, i) for i in range(spec.nodes))
    return Placement(
        backend=backend,
        hostnames=hostnames,
        master_addr=master_addr or hostnames[0],
        master_port=spec.rdzv_port or DEFAULT_CONTAINER_PORT,
        script_path=f"{SCRIPT_MOUNT}/{spec.script.rsplit('/', 1)[-1]}" if spec.script else None,
    )


def node_hostname(spec: LabSpec, index: int) -> str:
    """`<lab>-<i>`: also the pod hostname of an Indexed Job named after the lab."""
    return f"{spec.name}-{index}"


@dataclass(frozen=True)
class Process:
    """One OS process a node starts: a torchrun agent, or a worker in direct mode."""
    argv: tuple[str, ...]
    env: Mapping[str, str]
    rank: int | None = None            # global rank when the process is a worker

    @property
    def shell(self) -> str:
        """The same process as a copy-pasteable shell line."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}".strip()


@dataclass(frozen=True)
class NodeLaunch:
    index: int
    hostname: str
    processes: tuple[Process, ...]


@dataclass(frozen=True)
class LaunchPlan:
    spec: LabSpec
    run_id: str
    placement: Placement
    nodes: tuple[NodeLaunch, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "backend": self.placement.backend,
            "launcher": self.spec.launcher,
            "world_size": self.spec.world_size,
            "master_addr": self.placement.master_addr,
            "master_port": self.placement.master_port,
            "nodes": [
                {
                    "index": n.index,
                    "hostname": n.hostname,
                    "processes": [
                        {"rank": p.rank, "argv": list(p.argv), "env": dict(p.env), "shell": p.shell}
                        for p in n.processes
                    ],
                }
                for n in self.nodes
            ],
        }


def new_run_id(spec: LabSpec, now: _dt.datetime | None = None) -> str:
    """`<lab>-<UTC stamp>-<4 hex>`: names the run folder and the rendezvous."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{spec.name}-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def workload_argv(spec: LabSpec, placement: Placement) -> tuple[str, ...]:
    """What a worker executes after the interpreter/launcher: a module or the user's script."""
    if spec.script:
        # through a thin runpy wrapper that installs the SIGUSR1 stack dump (workloads/_script.py)
        return ("-m", "workloads._script", placement.script_path or spec.script, *spec.script_args)
    argv = ["-m", "workloads", "--workloads", ",".join(w.name for w in spec.workloads)]
    options = {w.name: dict(w.options) for w in spec.workloads if w.options}
    if options:
        argv += ["--options", json.dumps(options, sort_keys=True, separators=(",", ":"))]
    return tuple(argv)


def _common_env(spec: LabSpec, placement: Placement, run_id: str, node: int) -> dict[str, str]:
    env = {
        "LAB_NAME": spec.name,
        "LAB_RUN_ID": run_id,
        "LAB_LAUNCHER": spec.launcher,
        "LAB_DIST_BACKEND": spec.dist_backend,
        "LAB_NODES": str(spec.nodes),
        "LAB_NPROC_PER_NODE": str(spec.nproc_per_node),
        "NODE_RANK": str(node),
        # Set for the node by labctl; torchrun overwrites WORLD_SIZE per worker with the
        # same number, and LAB_WORLD_SIZE keeps labctl's value for the env workload to compare.
        "WORLD_SIZE": str(spec.world_size),
        "LAB_WORLD_SIZE": str(spec.world_size),
        "MASTER_ADDR": placement.master_addr,
        "MASTER_PORT": str(placement.master_port),
        "PYTHONUNBUFFERED": "1",
    }
    env.update(placement.env)
    env.update(spec.env)
    return env


def torchrun_argv(spec: LabSpec, placement: Placement, run_id: str, node: int) -> tuple[str, ...]:
    """The torchrun agent for node `node`. No --node-rank: c10d ignores it and
    assigns group ranks itself; the only per-node flag is the store host role."""
    rdzv_conf = f"is_host={1 if node == 0 else 0},join_timeout={int(spec.join_timeout)}"
    return (
        *placement.torchrun,
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={spec.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={placement.master_addr}:{placement.master_port}",
        f"--rdzv-id={run_id}",
        # c10d guesses which node hosts the store by comparing hostnames, and
        # guesses wrong on Kubernetes (pytorch#73380): say it explicitly.
        f"--rdzv-conf={rdzv_conf}",
        "--max-restarts=0",
        "--tee=3",
        *workload_argv(spec, placement),
    )


def plan(spec: LabSpec, placement: Placement, run_id: str) -> LaunchPlan:
    if len(placement.hostnames) != spec.nodes:
        raise ValueError(f"placement has {len(placement.hostnames)} hostnames for {spec.nodes} nodes")
    nodes = []
    for i in range(spec.nodes):
        env = _common_env(spec, placement, run_id, i)
        if spec.launcher == "torchrun":
            env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = RANK_PREFIX_TEMPLATE
            procs = (Process(torchrun_argv(spec, placement, run_id, i), env),)
        else:
            procs = tuple(
                Process(
                    (*placement.python, *workload_argv(spec, placement)),
                    {
                        **env,
                        "RANK": str(i * spec.nproc_per_node + local),
                        "LOCAL_RANK": str(local),
                        "WORLD_SIZE": str(spec.world_size),
                        "LOCAL_WORLD_SIZE": str(spec.nproc_per_node),
                        "GROUP_RANK": str(i),
                    },
                    rank=i * spec.nproc_per_node + local,
                )
                for local in range(spec.nproc_per_node)
            )
        nodes.append(NodeLaunch(i, placement.hostnames[i], procs))
    return LaunchPlan(spec, run_id, placement, tuple(nodes))


def node_command(node: NodeLaunch) -> tuple[tuple[str, ...], dict[str, str]]:
    """One command and one environment for a node that is a single container or pod.

    A torchrun node is already one process. A direct-mode node becomes a bash
    loop that starts each worker with RANK = NODE_RANK * LOCAL_WORLD_SIZE +
    LOCAL_RANK (the values the plan gives each worker), prefixes its output
    with `[rank<N>]:` as torchrun's tee does, logs each worker's exit as it
    ends (so the log names the first failure), and exits non-zero if any did. The script reads
    only NODE_RANK from the node, so one pod template serves every index.
    """
    if len(node.processes) == 1 and node.processes[0].rank is None:
        return node.processes[0].argv, dict(node.processes[0].env)
    per_worker = {"RANK", "LOCAL_RANK"}
    shared = {k: v for k, v in node.processes[0].env.items() if k not in per_worker}
    for proc in node.processes:
        env = dict(proc.env)
        if {k: v for k, v in env.items() if k not in per_worker} != shared or proc.argv != node.processes[0].argv:
            raise ValueError("direct-mode workers of one node must differ only in RANK and LOCAL_RANK")
        if int(env["RANK"]) != node.index * len(node.processes) + int(env["LOCAL_RANK"]):
            raise ValueError(f"worker rank {env['RANK']} does not follow the node-major layout")
    script = "\n".join([
        "pids=()",
        "for local_rank in $(seq 0 $((LOCAL_WORLD_SIZE - 1))); do",
        "  rank=$((NODE_RANK * LOCAL_WORLD_SIZE + local_rank))",
        f"  {{ RANK=$rank LOCAL_RANK=$local_rank {shlex.join(node.processes[0].argv)} 2>&1 \\",
        "      | sed -u \"s/^/[rank$rank]:/\"",
        "    code=${PIPESTATUS[0]}",
        "    echo \"labctl: rank $rank exited with code $code at $(date +%s.%N | cut -c1-14)\"",
        "    exit $code; } &",
        "  pids+=($!)",
        "done",
        "rc=0",
        "for pid in \"${pids[@]}\"; do wait \"$pid\" || rc=1; done",
        "exit $rc",
    ])
    return ("bash", "-c", script), shared
