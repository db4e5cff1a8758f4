"""The launch contract, defined once: what every node runs and with which environment.

`plan(spec, placement, run_id)` is a pure function. Every backend (local
processes, compose services, Kubernetes pods) starts exactly the processes
listed here; backends differ only in their `Placement` — how nodes are named
and how they reach node 0 — never in how the command line is built. Each
backend makes its own (labctl/backends/local/placement.py; compose and k8s
share labctl/backends/containers.py); this module knows none of them.

With `replicas: R > 1` the plan holds R independent torchrun jobs (each with
its own rendezvous id and node 0) in `nodes`, replica-major, plus one
replica store process in `services`: a TCPStore server that backends start
before the nodes and stop after them, and that never counts for the outcome.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import json
import math
import secrets
import shlex
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from workloads._protocol import EXIT_LINE_PREFIX, RANK_PREFIX_TEMPLATE, Env

from .spec import LabSpec

STORE_MODULE = "workloads._replica_store"


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
    # replicas > 1: (node 0's address, rendezvous port) of every replica; () means one
    # replica at master_addr:master_port.
    replica_masters: tuple[tuple[str, int], ...] = ()
    store_addr: str | None = None        # the replica store as workers reach it (replicas > 1)
    store_port: int | None = None
    shared_dir: str | None = None        # a directory every node sees (file:// init), if any
    # where each torchrun agent's --log-dir goes (node-<i> under it), when labctl can read
    # it after the run (its workers' error files): local only, containers lose theirs
    torchrun_log_dir: str | None = None
    debug_server_port: int | None = None   # rank 0's debug server frontend (debug_server), as node 0 binds it

    def rendezvous(self, replica: int) -> tuple[str, int]:
        """Node 0's address and the rendezvous port of `replica`."""
        return self.replica_masters[replica] if self.replica_masters else (self.master_addr, self.master_port)


def init_port(rdzv_port: int) -> int:
    """tcp:// init gets a port of its own on node 0, next to the rendezvous port
    (the rendezvous store already listens on that one)."""
    return rdzv_port + 1


def node_hostname(spec: LabSpec, index: int, replica: int = 0) -> str:
    """`<lab>-<i>`: also the pod hostname of an Indexed Job named after the lab.
    With replicas, `<lab>-r<k>-<i>`: replica k's Job is named `<lab>-r<k>`."""
    return f"{replica_name(spec, replica)}-{index}"


def replica_name(spec: LabSpec, replica: int) -> str:
    """What names one replica's objects: the lab itself when there is only one."""
    return spec.name if spec.replicas == 1 else f"{spec.name}-r{replica}"


def store_hostname(spec: LabSpec) -> str:
    return f"{spec.name}-store"


def init_url(spec: LabSpec, placement: Placement, run_id: str, replica: int = 0) -> str:
    """The init_method as the URL a worker passes to init_process_group.

    tcp: node 0 of the worker's replica, on a port of its own; global rank 0
    hosts the store there. file: one file per replica in the shared directory;
    torch's FileStore deletes it when the last rank lets go.
    """
    if spec.init_method == "tcp":
        addr, port = placement.rendezvous(replica)
        return f"tcp://{addr}:{init_port(port)}"
    if spec.init_method == "file":
        if not placement.shared_dir:
            raise ValueError(f"init_method file needs a shared directory; the {placement.backend} "
                             "placement has none")
        suffix = f"-r{replica}" if spec.replicas > 1 else ""
        return f"file://{placement.shared_dir}/{run_id}{suffix}.init"
    return "env://"


class WorkerEnv(Mapping[str, str]):
    """A direct-mode worker's whole environment: the node's shared variables, then its
    own RANK and LOCAL_RANK, kept as two ints (no copy of the shared ones, no dict per
    worker): a plan of 65,536 workers holds about 150 bytes each, not the 1.3 KB it held."""
    __slots__ = ("shared", "rank", "local_rank")

    def __init__(self, shared: Mapping[str, str], rank: int, local_rank: int):
        self.shared, self.rank, self.local_rank = shared, rank, local_rank

    @property
    def own(self) -> dict[str, str]:
        return {"RANK": str(self.rank), "LOCAL_RANK": str(self.local_rank)}

    def __getitem__(self, key: str) -> str:
        if key == "RANK":
            return str(self.rank)
        if key == "LOCAL_RANK":
            return str(self.local_rank)
        return self.shared[key]

    def __iter__(self) -> Iterator[str]:
        yield from self.shared
        yield from (k for k in self.own if k not in self.shared)

    def __len__(self) -> int:
        return len(self.shared) + sum(1 for k in self.own if k not in self.shared)

    def __repr__(self) -> str:
        return f"WorkerEnv({self.own!r} over {len(self.shared)} shared)"


@dataclass(frozen=True, slots=True)
class Process:
    """One OS process a node starts: a torchrun agent, or a worker in direct mode."""
    argv: tuple[str, ...]
    env: Mapping[str, str]             # all of it (a WorkerEnv over the node's for workers)
    rank: int | None = None            # global rank when the process is a worker

    def own_env(self, shared: Mapping[str, str]) -> dict[str, str]:
        """What this process adds to (or changes in) the node's shared environment."""
        if isinstance(self.env, WorkerEnv) and self.env.shared is shared:
            return self.env.own
        if self.env is shared:
            return {}
        return {k: v for k, v in self.env.items() if shared.get(k) != v}

    @property
    def shell(self) -> str:
        """The same process as a copy-pasteable shell line."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}".strip()


@dataclass(frozen=True)
class NodeLaunch:
    index: int                         # across replicas: replica * nodes + node
    hostname: str
    processes: tuple[Process, ...]
    replica: int = 0
    env: Mapping[str, str] = field(default_factory=dict)   # what every process here shares


@dataclass(frozen=True)
class LaunchPlan:
    spec: LabSpec
    run_id: str
    placement: Placement
    nodes: tuple[NodeLaunch, ...]
    # Helpers the nodes need (the replica store): started before every node,
    # stopped after the last one, never counted for the outcome.
    services: tuple[NodeLaunch, ...] = ()

    def replica_nodes(self, replica: int) -> tuple[NodeLaunch, ...]:
        return tuple(n for n in self.nodes if n.replica == replica)

    def to_dict(self, processes: bool = True) -> dict[str, Any]:
        """Plain data (plan.json): each node's shared `env` once, and per process only
        its `rank` and what its env adds (`argv` too when the node's processes differ)."""
        data = {
            "run_id": self.run_id,
            "backend": self.placement.backend,
            "launcher": self.spec.launcher,
            "world_size": self.spec.world_size,
            "master_addr": self.placement.master_addr,
            "master_port": self.placement.master_port,
            "nodes": [_node_dict(n, self.spec.replicas > 1, processes) for n in self.nodes],
        }
        if self.spec.replicas > 1:
            data["replicas"] = self.spec.replicas
            data["services"] = [_node_dict(n, False, processes) for n in self.services]
        return data


    def to_json(self) -> str:
        """plan.json and `labctl render plan`: `to_dict` indented, one process per line.
        The process lines are written straight from the plan (no dict per process): a
        plan of 65,536 ranks takes a few MB and well under a second (docs/limits.md)."""
        with _no_gc():
            data = self.to_dict(processes=False)
            groups = {"nodes": self.nodes, "services": self.services}
            for key in groups:
                if key in data:
                    data[key] = _PROCESSES            # written below, node by node
            head = json.dumps(data, indent=2)
            out: list[str] = []
            for key, launches in groups.items():
                if key not in data:
                    continue
                before, _, head = head.partition(json.dumps(_PROCESSES))
                out.append(before)
                out.append("[\n" + ",\n".join(_node_json(n, self.spec.replicas > 1 and key == "nodes")
                                              for n in launches) + "\n  ]" if launches else "[]")
            out.append(head)
            return "".join(out) + "\n"


_PROCESSES = "\0processes\0"      # a placeholder no JSON string of the plan contains as is


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Building tens of thousands of small acyclic objects: the cyclic collector would
    rescan them all again and again (five times the build time at 65,536 workers)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _shares_argv(n: NodeLaunch) -> bool:
    argv = n.processes[0].argv if n.processes else ()
    return all(p.argv is argv or p.argv == argv for p in n.processes)


def _process_dict(p: Process, n: NodeLaunch, same_argv: bool) -> dict[str, Any]:
    return {"rank": p.rank, **({} if same_argv else {"argv": list(p.argv)}), "env": p.own_env(n.env)}


def _json_str(text: str) -> str:
    """json.dumps(text), without its per-call cost for the plain strings a plan is made of."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return json.dumps(text)


def _process_line(p: Process, n: NodeLaunch, same_argv: bool) -> str:
    """json.dumps(_process_dict(...)), byte for byte, at a fraction of the cost."""
    env = p.env
    if same_argv and isinstance(env, WorkerEnv) and env.shared is n.env:     # direct workers
        return (f'        {{"rank": {int(p.rank or 0)}, "env": {{"RANK": "{int(env.rank)}", '
                f'"LOCAL_RANK": "{int(env.local_rank)}"}}}}')
    data = _process_dict(p, n, same_argv)
    parts = [f'"rank": {"null" if p.rank is None else int(p.rank)}']
    if "argv" in data:
        parts.append('"argv": [' + ", ".join(map(_json_str, data["argv"])) + "]")
    parts.append('"env": {' + ", ".join(f"{_json_str(k)}: {_json_str(v)}"
                                        for k, v in data["env"].items()) + "}")
    return "        {" + ", ".join(parts) + "}"


def _node_json(n: NodeLaunch, replica: bool) -> str:
    """One node of plan.json at indent 4, as json.dumps(indent=2) would lay it out
    (strings, lists of strings and string maps only), its processes one a line."""
    out = []
    for key, value in _node_dict(n, replica, processes=False).items():
        if isinstance(value, dict):
            inner = ",\n".join(f"        {_json_str(k)}: {_json_str(v)}" for k, v in value.items())
            text = f"{{\n{inner}\n      }}" if value else "{}"
        elif isinstance(value, list):
            inner = ",\n".join(f"        {_json_str(v)}" for v in value)
            text = f"[\n{inner}\n      ]" if value else "[]"
        else:
            text = _json_str(value) if isinstance(value, str) else json.dumps(value)
        out.append(f"      {_json_str(key)}: {text}")
    out.append(f'      "processes": {_process_lines(n)}')
    return "    {\n" + ",\n".join(out) + "\n    }"


def _process_lines(n: NodeLaunch) -> str:
    if not n.processes:
        return "[]"
    same = _shares_argv(n)
    lines = ",\n".join(_process_line(p, n, same) for p in n.processes)
    return f"[\n{lines}\n      ]"


def _node_dict(n: NodeLaunch, replica: bool, processes: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"index": n.index, "hostname": n.hostname}
    if replica:
        out["replica"] = n.replica
    same_argv = _shares_argv(n)
    out["env"] = dict(n.env)
    if same_argv and n.processes:
        out["argv"] = list(n.processes[0].argv)
    if n.processes:
        out["shell"] = n.processes[0].shell         # the first process, copy-pasteable
    if processes:
        out["processes"] = [_process_dict(p, n, same_argv) for p in n.processes]
    return out


def process_dicts(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A plan.json node's processes, each with its whole `argv` and `env` (the node's
    shared env under the process's own): what a reader of plan.json starts."""
    shared, argv = node.get("env", {}), node.get("argv")
    return [{**p, "argv": p.get("argv", argv), "env": {**shared, **p.get("env", {})}}
            for p in node["processes"]]


def new_run_id(spec: LabSpec, now: _dt.datetime | None = None) -> str:
    """`<lab>-<UTC stamp>-<4 hex>`: names the run folder and the rendezvous."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{spec.name}-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def workload_argv(spec: LabSpec, placement: Placement) -> tuple[str, ...]:
    """What a worker executes after the interpreter/launcher: a module or the user's script."""
    if spec.script:
        # through a thin runpy wrapper that installs the stack dump (workloads/_script.py)
        return ("-m", "workloads._script", placement.script_path or spec.script, *spec.script_args)
    argv = ["-m", "workloads", "--workloads", ",".join(w.name for w in spec.workloads)]
    options = {w.name: dict(w.options) for w in spec.workloads if w.options}
    if options:
        argv += ["--options", json.dumps(options, sort_keys=True, separators=(",", ":"))]
    return tuple(argv)


def _common_env(spec: LabSpec, placement: Placement, run_id: str, node: int,
                replica: int = 0) -> dict[str, str]:
    addr, port = placement.rendezvous(replica)
    env = {
        Env.NAME: spec.name,
        Env.RUN_ID: run_id,
        Env.LAUNCHER: spec.launcher,
        Env.DIST_BACKEND: spec.dist_backend,
        Env.NODES: str(spec.nodes),
        Env.NPROC_PER_NODE: str(spec.nproc_per_node),
        "NODE_RANK": str(node),
        # Set for the node by labctl; torchrun overwrites WORLD_SIZE per worker with the
        # same number, and LAB_WORLD_SIZE keeps labctl's value for the env workload to compare.
        "WORLD_SIZE": str(spec.world_size),
        Env.WORLD_SIZE: str(spec.world_size),
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
    }
    # Every worker, env:// included: a user script joins with
    # init_process_group(init_method=os.environ["LAB_INIT_METHOD"], ...) whatever the lab's.
    env[Env.INIT_METHOD] = init_url(spec, placement, run_id, replica)
    if spec.pg_timeout is not None:
        env[Env.PG_TIMEOUT] = f"{spec.pg_timeout:g}"
    if spec.debug:
        env.update(debug_env(spec))
    if spec.trace:                      # workloads/_trace/ records every op (docs/trace.md)
        env[Env.TRACE] = "1"
    if spec.fault_clock == "join" and spec.faults:   # ranks say when they joined (_common.say_joined)
        env[Env.FAULT_CLOCK] = "join"
    if spec.debug_server is not None and placement.debug_server_port is not None:
        env[Env.DEBUG_SERVER] = str(placement.debug_server_port)     # workloads/_debugserver.py
        env[Env.DEBUG_SERVER_INTERVAL] = f"{spec.debug_server.interval:g}"
    if spec.links is not None:          # the configured links, for the workloads' reports
        env[Env.LINKS] = spec.links.to_json()
    if spec.replicas > 1:
        env.update({
            "REPLICA_ID": str(replica),
            "REPLICA_NUM": str(spec.replicas),
            "REPLICA_STORE_ADDR": str(placement.store_addr),
            "REPLICA_STORE_PORT": str(placement.store_port),
        })
    env.update(placement.env)
    env.update(spec.env)
    return env


def debug_env(spec: LabSpec) -> dict[str, str]:
    """What PyTorch documents for debugging distributed runs: DETAIL wraps every process
    group in a checker that names mismatched collectives (op, shapes) instead of hanging
    or aborting; NCCL_DEBUG only means something to NCCL. The user's env: still wins."""
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "TORCH_CPP_LOG_LEVEL": "INFO"}
    if spec.dist_backend in ("nccl", "auto"):
        env["NCCL_DEBUG"] = "INFO"
    return env


def rdzv_id(spec: LabSpec, run_id: str, replica: int = 0) -> str:
    """Each replica is a rendezvous of its own."""
    return run_id if spec.replicas == 1 else f"{run_id}-r{replica}"


_RDZV_ENDPOINT = "--rdzv-endpoint="
_RDZV_CONF = "--rdzv-conf="
_STORE_HOST = "is_host=1"


def torchrun_argv(spec: LabSpec, placement: Placement, run_id: str, node: int,
                  replica: int = 0) -> tuple[str, ...]:
    """The torchrun agent for node `node`. No --node-rank: c10d ignores it and
    assigns group ranks itself; the only per-node flag is the store host role."""
    rdzv_conf = f"is_host={1 if node == 0 else 0},join_timeout={int(spec.join_timeout)}"
    if spec.fewest_nodes < spec.nodes:         # a round may close before every node is there
        rdzv_conf += f",last_call_timeout={spec.last_call_timeout}"
    addr, port = placement.rendezvous(replica)
    # MIN:MAX only when elastic: a fixed-size lab keeps the plain count (and its renders)
    nnodes = str(spec.nodes) if spec.fewest_nodes == spec.nodes else f"{spec.fewest_nodes}:{spec.nodes}"
    # --tee needs files anyway (torch tails them); without a log dir they go to a temp dir
    log_dir = () if placement.torchrun_log_dir is None else (
        f"--log-dir={placement.torchrun_log_dir}/node-{replica * spec.nodes + node}",)
    return (
        *placement.torchrun,
        f"--nnodes={nnodes}",
        f"--nproc-per-node={spec.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"{_RDZV_ENDPOINT}{addr}:{port}",
        f"--rdzv-id={rdzv_id(spec, run_id, replica)}",
        # c10d guesses which node hosts the store by comparing hostnames, and
        # guesses wrong on Kubernetes (pytorch#73380): say it explicitly.
        f"{_RDZV_CONF}{rdzv_conf}",
        f"--max-restarts={spec.max_restarts}",
        "--tee=3",
        *log_dir,
        *workload_argv(spec, placement),
    )


def rendezvous_of(argv: Iterable[Any]) -> tuple[str | None, bool | None]:
    """What torchrun_argv said of the rendezvous, read back from a node's argv (plan.json):
    where its agent meets the others (`--rdzv-endpoint`) and whether it hosts that store
    (`is_host=1` in `--rdzv-conf`); (None, None) for a node launched without torchrun."""
    endpoint, host = None, None
    for arg in argv:
        if isinstance(arg, str) and arg.startswith(_RDZV_ENDPOINT):
            endpoint = arg[len(_RDZV_ENDPOINT):]
        elif isinstance(arg, str) and arg.startswith(_RDZV_CONF):
            host = _STORE_HOST in arg
    return endpoint, host


def plan(spec: LabSpec, placement: Placement, run_id: str) -> LaunchPlan:
    total = spec.nodes * spec.replicas
    if len(placement.hostnames) != total:
        raise ValueError(f"placement has {len(placement.hostnames)} hostnames for {total} nodes")
    if spec.replicas > 1 and (len(placement.replica_masters) != spec.replicas
                              or placement.store_port is None):
        raise ValueError(f"placement lacks a node 0 per replica or the replica store "
                         f"for {spec.replicas} replicas")
    argv = (*placement.python, *workload_argv(spec, placement))     # one tuple for every worker
    with _no_gc():
        nodes = [_node(spec, placement, run_id, k, i, argv) for k in range(spec.replicas)
                 for i in range(spec.nodes)]
    services = (_store(spec, placement, run_id),) if spec.replicas > 1 else ()
    return LaunchPlan(spec, run_id, placement, tuple(nodes), services)


def _store(spec: LabSpec, placement: Placement, run_id: str) -> NodeLaunch:
    """The replica store: one TCPStore server for every replica's cross-replica groups.
    It exits by itself after the lab's timeout, should nobody stop it."""
    argv = (*placement.python, "-m", STORE_MODULE, "--port", str(placement.store_port),
            "--lifetime", str(math.ceil(spec.timeout)))
    env = {Env.NAME: spec.name, Env.RUN_ID: run_id, "PYTHONUNBUFFERED": "1"}
    return NodeLaunch(0, store_hostname(spec), (Process(argv, env),), env=env)


def _node(spec: LabSpec, placement: Placement, run_id: str, replica: int, i: int,
          worker_argv: tuple[str, ...] = ()) -> NodeLaunch:
    """Node `i` of replica `replica`: one torchrun agent, or its workers in direct mode
    (they share the node's env and one argv tuple; each adds RANK and LOCAL_RANK)."""
    env = _common_env(spec, placement, run_id, i, replica)
    if spec.launcher == "torchrun":
        # torchrun tees every worker's output with this prefix, so one node log can be
        # split per global rank by every backend (labctl/logs.py)
        env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = RANK_PREFIX_TEMPLATE
        if spec.elastic:
            # torch 2.13 keeps the agent's worker store across restarts and nothing
            # scopes the workers' keys per attempt: a restarted group reads the last
            # attempt's gloo/NCCL addresses ("Connection refused", pytorch#135712).
            # Without sharing, every attempt's rank 0 hosts a fresh store.
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        procs = (Process(torchrun_argv(spec, placement, run_id, i, replica), env),)
    else:
        env.update({"WORLD_SIZE": str(spec.world_size),
                    "LOCAL_WORLD_SIZE": str(spec.nproc_per_node), "GROUP_RANK": str(i)})
        argv = worker_argv or (*placement.python, *workload_argv(spec, placement))
        first = i * spec.nproc_per_node
        procs = tuple(
            Process(argv, WorkerEnv(env, first + local, local), rank=first + local)
            for local in range(spec.nproc_per_node)
        )
    index = replica * spec.nodes + i
    return NodeLaunch(index, placement.hostnames[index], procs, replica, env=env)


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
    first = node.processes[0]
    built = isinstance(first.env, WorkerEnv)        # as plan() builds them: shared by identity
    shared = ({k: v for k, v in first.env.shared.items() if k not in per_worker} if built else
              {k: v for k, v in first.env.items() if k not in per_worker})
    node_rank, count = int(shared["NODE_RANK"]), len(node.processes)
    for proc in node.processes:
        env = proc.env
        if built and isinstance(env, WorkerEnv) and env.shared is first.env.shared \
                and proc.argv is first.argv:
            rank, local = env.rank, env.local_rank
        elif ({k: v for k, v in env.items() if k not in per_worker} != shared
              or proc.argv != first.argv):
            raise ValueError("direct-mode workers of one node must differ only in RANK and LOCAL_RANK")
        else:
            rank, local = int(env["RANK"]), int(env["LOCAL_RANK"])
        if rank != node_rank * count + local:
            raise ValueError(f"worker rank {rank} does not follow the node-major layout")
    script = "\n".join([
        "pids=()",
        "for local_rank in $(seq 0 $((LOCAL_WORLD_SIZE - 1))); do",
        "  rank=$((NODE_RANK * LOCAL_WORLD_SIZE + local_rank))",
        f"  {{ RANK=$rank LOCAL_RANK=$local_rank {shlex.join(node.processes[0].argv)} 2>&1 \\",
        "      | sed -u \"s/^/[rank$rank]:/\"",
        "    code=${PIPESTATUS[0]}",
        f"    echo \"{EXIT_LINE_PREFIX}$rank exited with code $code at $(date +%s.%N | cut -c1-14)\"",
        "    exit $code; } &",
        "  pids+=($!)",
        "done",
        "rc=0",
        "for pid in \"${pids[@]}\"; do wait \"$pid\" || rc=1; done",
        "exit $rc",
    ])
    return ("bash", "-c", script), shared
