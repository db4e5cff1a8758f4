"""The lab description: one backend-free model, loaded and validated up front.

Everything a user can say about a lab lives in `LabSpec`. It is read from
`lab.yaml`, overridden by CLI flags, and validated before anything starts, so
that a typo costs one clear line and exit code 2 instead of a half-started lab.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib.util
import json
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from .faults import Fault  # noqa: E402
from .fields import (CONTAINERS, MAX_PATH, MAX_SECONDS, Bool, Choice, Folder, Int,  # noqa: F401
                     LabField, Reader, Reading, Seconds, Text, doc_value, lab_field, read_int, seconds_of)
from workloads._protocol import Env, records
from .links import LinkError, Links
DIST_BACKENDS = ("gloo", "nccl", "auto")
LAUNCHERS = ("torchrun", "direct")
ON_HANG = ("report", "stop")          # the live watcher, once it names a hang (labctl/live/)
STALL_WINDOW_MAX = 86_400.0           # a stall window past a day is no window
WORKDIRS = ("node", "invoking")
INIT_METHODS = ("env", "tcp", "file")
FAULT_CLOCKS = ("start", "join")     # a fault's T counts from every node started / every rank joined
MAX_REPLICAS = 64
MAX_RESTARTS = 100                   # max_restarts: worker-group restarts per node
MAX_PORT = 65535
# Bounds on what a lab may ask for (docs/limits.md): each keeps validation, the plan and
# every render within a second and well under 100 MB (benchmarks/validate.py measures it).
MAX_FILE_BYTES = 1024 * 1024         # a lab file; read no further than this
MAX_DEPTH = 64                       # nested mappings/sequences in a lab file
MAX_NODES = 4096                     # nodes of one replica
MAX_NPROC_PER_NODE = 1024
MAX_WORLD = records.MAX_WORLD          # ranks in the whole run: nodes * nproc_per_node * replicas (the codec says it)
MAX_TOTAL_NODES = 4096               # nodes in the whole run: nodes * replicas
# The kernel refuses an exec whose one argument or environment string is over
# MAX_ARG_STRLEN (128 KiB) or whose argv + environ pass ARG_MAX (2 MiB by default;
# `getconf ARG_MAX`): a lab keeps well below both, leaving room for the caller's own
# environment and the plan's variables. Sizes are UTF-8 bytes of NAME=VALUE / each arg.
MAX_ENV_VALUE_BYTES = 32 * 1024      # one env variable, NAME=VALUE
MAX_ENV_BYTES = 64 * 1024            # all of the lab's env together
MAX_ARG_BYTES = 32 * 1024            # one script argument
MAX_ARGS_BYTES = 64 * 1024           # all script arguments together
MAX_ITEMS = 256                      # workloads, faults, tolerations, image_pull_secrets: each list
DEFAULT_WORKLOADS = ("env", "p2p", "collectives", "ddp")
DEFAULT_DEBUG_SERVER_PORT = 25999   # torch's own default: rank 0's frontend in a container
DEFAULT_DEBUG_SERVER_INTERVAL = 10.0  # seconds between its dumps (torch's default: 60)
DEFAULT_CPU_IMAGE = "labctl-cpu:latest"
DEFAULT_CUDA_IMAGE = "labctl-cuda:latest"
# A DNS-1123 label: what a lab's name must be on every backend, because it names the
# nodes' hostnames, compose services and Kubernetes objects (`<lab>-<i>`).
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MIN_PIDS, MAX_PIDS = 64, 4194304    # resources.pids: a torchrun node needs dozens; Linux pid_max
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Docker's reference grammar (distribution/reference): [domain/]path[:tag][@digest]; the
# first part is a domain only with a '.', a port, or as localhost (else it is path, lower case)
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_REFERENCE = re.compile(
    rf"(?:(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})+(?::[0-9]+)?|{_HOST_LABEL}:[0-9]+|localhost"
    r"|\[[0-9A-Fa-f:.]+\](?::[0-9]+)?)/)?"
    rf"{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?")
# Names the launch plan sets itself (labctl/plan.py), each with what to use instead: an
# `env:` entry of the same name would silently override labctl's own setting (or be
# overwritten per worker), so it is refused with this hint. Allowed on purpose: the debug
# variables (TORCH_DISTRIBUTED_DEBUG, TORCH_CPP_LOG_LEVEL, NCCL_DEBUG: `debug: true` sets
# them and env: wins), GLOO_SOCKET_IFNAME (the network is the user's to choose on
# container backends; locally labctl's `lo` is what works) and PYTHONUNBUFFERED (any
# value keeps output unbuffered).
_LAUNCHER_SETS_IT = "the launcher sets it for each worker (torchrun, or labctl in direct mode)"
_WORLD = "use nodes and nproc_per_node (--nodes, --nproc-per-node) instead"
_REPLICAS = "use replicas (--replicas) instead"
RESERVED_ENV: Mapping[str, str] = {
    "RANK": _LAUNCHER_SETS_IT, "LOCAL_RANK": _LAUNCHER_SETS_IT, "GROUP_RANK": _LAUNCHER_SETS_IT,
    "NODE_RANK": "labctl sets it for each node",
    "LOCAL_WORLD_SIZE": "use nproc_per_node (--nproc-per-node) instead",
    "WORLD_SIZE": _WORLD, Env.WORLD_SIZE: _WORLD,
    "MASTER_ADDR": "the backend sets it to node 0's address",
    "MASTER_PORT": "use rdzv_port (--rdzv-port) instead",
    Env.NAME: "use name (--name) instead",
    Env.RUN_ID: "labctl names each run (labctl render --run-id chooses one)",
    Env.DIST_BACKEND: "use dist_backend (--dist-backend) instead",
    Env.NODES: "use nodes (--nodes) instead",
    Env.NPROC_PER_NODE: "use nproc_per_node (--nproc-per-node) instead",
    Env.LAUNCHER: "use launcher (--launcher) instead",
    Env.INIT_METHOD: "use init_method (--init-method) instead",
    Env.PG_TIMEOUT: "use pg_timeout (--pg-timeout) instead",
    Env.TRACE: "use trace (--trace / --no-trace) instead",
    Env.TRACE_DIR: "labctl sets it to the run folder's records/ (local, compose)",
    Env.FAULT_CLOCK: "use fault_clock (--fault-clock) instead",
    Env.LINKS: "use links (--link) instead",
    Env.DEBUG_SERVER: "use debug_server (--debug-server) instead",
    Env.DEBUG_SERVER_INTERVAL: "use debug_server: {interval: S} instead",
    Env.DEBUG_SERVER_DIR: "labctl sets it to the run folder's debug-server/ (local, compose)",
    Env.SHARED_DIR: "use shared_volume instead (container backends; locally it is the run folder's shared/)",
    "REPLICA_ID": _REPLICAS, "REPLICA_NUM": _REPLICAS,
    "REPLICA_STORE_ADDR": _REPLICAS, "REPLICA_STORE_PORT": _REPLICAS,
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "it is labctl's rank prefix, which its log split reads",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "elastic labs (max_restarts, min_nodes) set it "
                                          "(docs/failures.md, Elastic restarts)",
}


class SpecError(ValueError):
    """A lab description that cannot run; the message is one line for the user."""


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Resources:
    """Per-node requests and limits for container backends (Kubernetes quantities).
    `pids` (processes + threads) is a compose limit: on Kubernetes the kubelet sets it."""
    cpu: str = "1"
    memory: str = "2Gi"
    shm: str = "1Gi"
    pids: str = "4096"       # torch: ~10-70 threads per worker (OMP, gloo, the agent)



@dataclass(frozen=True)
class SharedVolume:
    """A directory every node sees, for `init_method: file` on Kubernetes: an
    existing ReadWriteMany PersistentVolumeClaim (pods of one run may land on
    different machines, so a node-local volume would not do)."""
    claim: str


class Image(Text):
    def read(self, value: Any, key: str, lab: Reading) -> str:
        value = super().read(value, key, lab)
        if not _IMAGE_REFERENCE.fullmatch(value):
            raise lab.bad(key, value, "an image reference: [registry/]name[:tag][@digest], the name "
                          "in lower case (example: image: registry.example.com/team/labctl-cpu:1.0)")
        return value


class Name(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> str:
        if not isinstance(value, str) or len(value) > 40 or not DNS_LABEL.match(value):
            raise lab.bad(key, value, "a DNS-1123 label of at most 40 characters: lower-case "
                          "letters, digits and '-', starting and ending with a letter or digit "
                          "(example: name: ring-lab)")
        return value


class Script(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> str:
        if not isinstance(value, str) or not value.endswith(".py") or len(value) > MAX_PATH:
            raise lab.bad(key, value, "a path to a Python file (example: script: train.py)")
        return value


class ScriptArgs(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> tuple[str, ...]:
        return _script_args(value, lab.bad)

    def dump(self, value: Any) -> Any:
        return list(value)


class Workloads(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> tuple[WorkloadSpec, ...]:
        return _workloads(value, lab.bad, lab.source)

    def dump(self, value: Any) -> Any:
        return [{"name": w.name, "options": dict(w.options)} if w.options else w.name for w in value]

    def from_flags(self, values: Any) -> Any:
        return [w for item in values for w in item.split(",") if w]


class EnvReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> dict[str, str]:
        return _env(value, lab.bad, lab.source)

    def dump(self, value: Any) -> Any:
        return dict(value)

    def from_flags(self, values: Any) -> Any:
        env = {}
        for item in values:
            name, sep, text = item.partition("=")
            if not sep:
                raise SpecError(f"--env: expected KEY=VALUE, given {item!r}")
            env[name] = text
        return env


class ResourcesReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> Resources:
        return _resources(value, lab.bad)


class Opaque(Reader):
    """A section another module reads and checks (`k8s:`: backends/k8s/settings.py)."""

    def dump(self, value: Any) -> Any:
        return dict(value)


class SharedVolumeReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> SharedVolume:
        return _shared_volume(value, lab.bad)


class LinksReader(Reader):
    def read(self, value: Any, key: str, lab: Reading) -> Links | None:
        try:
            return _links_of(value, lab.value("nodes") * lab.value("replicas"))
        except LinkError as exc:
            raise lab.bad(exc.where, exc.value, exc.expected) from None

    def dump(self, value: Any) -> Any:
        return value.to_data() if value is not None else None

    def from_flags(self, values: Any) -> Any:
        from .links import from_flags

        return from_flags(values, SpecError)


class Faults(Reader):
    late = True

    def read(self, value: Any, key: str, lab: Reading) -> tuple[Fault, ...]:
        return _faults(value, lab.kw["spec"], lab.bad, lab.source) if value else ()

    def dump(self, value: Any) -> Any:
        return [f.text for f in value]     # as written


@dataclass(frozen=True)
class DebugServer:
    """torch's debug server on every rank (`torch.distributed.debug.start_debug_server`,
    docs/diagnosis.md): rank 0's HTTP frontend on `port` (None: a free port locally,
    25999 in containers), its dumps every `interval` seconds into the run folder."""
    port: int | None = None
    interval: float = DEFAULT_DEBUG_SERVER_INTERVAL


_DEBUG_SERVER_EXAMPLE = "(example: debug_server: true, or debug_server: {port: 25999, interval: 10})"


@dataclass(frozen=True)
class DebugServerReader(Bool):
    """`debug_server: true` (or false), or a mapping of its port and dump interval; its
    flag is a switch (`--debug-server`), which keeps a lab file's port and interval."""

    def read(self, value: Any, key: str, lab: Reading) -> DebugServer | None:
        if value is True:
            return DebugServer()
        if value is False:
            return None
        known = {f.name for f in dataclasses.fields(DebugServer)}
        if not isinstance(value, dict) or not set(value) <= known:
            raise lab.bad(key, value, f"true, false or a mapping of {', '.join(sorted(known))} "
                          + _DEBUG_SERVER_EXAMPLE)
        kw: dict[str, Any] = {}
        if value.get("port") is not None:
            kw["port"] = read_int(value["port"], f"{key}.port", 1, MAX_PORT, lab.bad,
                                  expected=f"a port number between 1 and {MAX_PORT} {_DEBUG_SERVER_EXAMPLE}")
        if value.get("interval") is not None:
            kw["interval"] = seconds_of(value["interval"], f"{key}.interval", lab.bad)
        return DebugServer(**kw)

    def dump(self, value: Any) -> Any:
        return dataclasses.asdict(value) if value is not None else None

    def values(self) -> str:
        return "`true`, `false`, `{port, interval}`"


@dataclass(frozen=True)
class LabSpec:
    name: str = lab_field(
        "lab", read=Name(), flag="--name", null_ok=False, help="Lab name (DNS-1123 label).",
        starter="name: {name}                # a DNS-1123 label: names runs, containers, Kubernetes objects",
        doc="DNS-1123 label (≤ 40 chars): names runs, containers, Kubernetes objects")
    nodes: int = lab_field(
        2, read=Int(1, MAX_NODES), flag="--nodes", null_ok=False, help="Number of nodes.",
        starter="nodes: 2                 # simulated machines; each runs one torchrun agent",
        doc="simulated machines")
    nproc_per_node: int = lab_field(
        2, read=Int(1, MAX_NPROC_PER_NODE), flag="--nproc-per-node", null_ok=False,
        help="Worker processes per node.",
        starter="nproc_per_node: 2        # worker processes per node (WORLD_SIZE = nodes * nproc_per_node)",
        doc="worker processes per node; `WORLD_SIZE = nodes × nproc_per_node`")
    workloads: tuple[WorkloadSpec, ...] = lab_field(
        tuple(WorkloadSpec(w) for w in DEFAULT_WORKLOADS), read=Workloads(), flag="--workload",
        many=True, null_ok=False, help="Workload to run (repeatable; comma lists work too).",
        starter="""\
workloads:               # run in this order inside one process group
  - env
  - p2p
  - collectives
  - ddp
  # - name: bench
  #   options: {{ops: [all_reduce], min_bytes: 1024, max_bytes: 1048576, factor: 4}}""",
        doc_flag="`--workload` (repeatable; comma lists too)",
        doc_default="`[env, p2p, collectives, ddp]`",
        doc="names, or `{name: bench, options: {...}}` entries; run in order in one process "
            "group ([workloads.md](workloads.md))")
    script: str | None = lab_field(
        None, read=Script(), flag="--script",
        help="Your own script, run on every node: --script train.py -- ARGS",
        starter="# script: train.py       # run your own script on every node instead of the workloads",
        doc_flag="`--script PATH`", doc="your own script instead of the workloads")
    script_args: tuple[str, ...] = lab_field(
        (), read=ScriptArgs(), starter='# script_args: [--epochs, "2"]',
        doc_flag="the words after `--`", doc="the script's arguments")
    backend: str = lab_field(
        "local", read=Choice(None), flag="--backend", null_ok=False, help="Where it runs.",
        starter="backend: local           # where it runs: local | compose | k8s",
        doc="`local`, `compose` or `k8s` (the backend registry's)")
    dist_backend: str = lab_field(
        "gloo", read=Choice(DIST_BACKENDS), flag="--dist-backend", null_ok=False,
        help="torch.distributed backend (auto: nccl with GPUs, else gloo).",
        starter="dist_backend: gloo       # torch.distributed backend: gloo | nccl | auto (nccl if CUDA)",
        doc="torch.distributed backend (`auto`: nccl when the worker sees a GPU)")
    launcher: str = lab_field(
        "torchrun", read=Choice(LAUNCHERS), flag="--launcher", null_ok=False,
        help="torchrun: c10d rendezvous; direct: env:// per worker.",
        starter="launcher: torchrun       # torchrun (c10d rendezvous) | direct (RANK/WORLD_SIZE set per worker)",
        doc="`torchrun` (c10d rendezvous) or `direct` ([launch.md](launch.md))")
    rdzv_port: int | None = lab_field(      # None: a free port locally, 29500 in containers
        None, read=Int(1, MAX_PORT, what="a port number",
                       expected=f"a port number between 1 and {MAX_PORT} (example: 29500)"),
        flag="--rdzv-port",
        help="Rendezvous / MASTER_PORT (default: free port locally, 29500 in containers).",
        starter="# rdzv_port: 29500       # default: a free port locally, 29500 in containers",
        doc_default="free port locally, 29500 in containers", doc="rendezvous / `MASTER_PORT`")
    timeout: float = lab_field(             # whole-lab deadline, seconds
        600.0, read=Seconds(), flag="--timeout", null_ok=False,
        help="Seconds before the whole lab is stopped.",
        starter="timeout: 600             # seconds before the whole lab is stopped",
        doc="seconds before the whole lab is stopped (its deadline)")
    join_timeout: float = lab_field(        # c10d rendezvous join timeout, seconds
        120.0, read=Seconds(whole="whole seconds (torchrun's rendezvous takes an integer; example: "
                                  "join_timeout: 120)"),
        flag="--join-timeout", null_ok=False,
        help="Whole seconds the rendezvous waits for all nodes (torchrun).",
        starter="join_timeout: 120        # whole seconds the c10d rendezvous waits for every node (torchrun)",
        doc="whole seconds the c10d rendezvous waits for every node (torchrun's `join_timeout` is "
            "an integer: `0.5` is refused, it used to become `0`)")
    image: str | None = lab_field(          # None: the CPU or CUDA lab image by dist_backend
        None, read=Image(), flag="--image", backends=CONTAINERS, help="Container image (compose, k8s).",
        starter="# image: labctl-cpu:latest   # container backends; default by dist_backend",
        doc_default=f"`{DEFAULT_CPU_IMAGE}` (gloo) / `{DEFAULT_CUDA_IMAGE}` (nccl)",
        doc="the nodes' image: `[registry/]name[:tag][@digest]`")
    env: Mapping[str, str] = lab_field(
        factory=dict, read=EnvReader(), flag="--env", many=True,
        help="Extra environment KEY=VALUE for every node (repeatable).",
        starter="env: {{}}                  # extra environment for every node, e.g. {{NCCL_DEBUG: INFO}}",
        doc_flag="`--env KEY=VALUE` (repeatable)",
        doc="extra environment for every node: values are text, numbers or booleans (`true` is "
            "`1`); the variables labctl sets itself are refused, each naming the field or flag to "
            "use instead ([below](#env-what-labctl-sets-itself))")
    resources: Resources = lab_field(
        factory=Resources, read=ResourcesReader(), backends=CONTAINERS,
        starter='resources: {{cpu: "1", memory: 2Gi, shm: 1Gi}}   # per node, container backends',
        doc_default='`{cpu: "1", memory: 2Gi, shm: 1Gi, pids: "4096"}`',
        doc="per node (`/dev/shm` size too; `pids`: compose only)")
    # The `k8s:` section, opaque here: the k8s backend reads and checks it
    # (labctl/backends/k8s/settings.py, called through `backends.check_spec`).
    k8s: Mapping[str, Any] = lab_field(
        factory=dict, read=Opaque(), backends=("k8s",), section=True,
        starter="""\
# k8s:                     # Kubernetes only: where the pods may run (docs/kubernetes.md, Real clusters)
#   queue: team-a          # Kueue LocalQueue: queue-name label, Job created suspended until admitted
#   node_selector: {{nvidia.com/gpu.present: "true"}}
#   tolerations: [{{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}}]
#   gpu_toleration: true   # nccl labs tolerate the nvidia.com/gpu NoSchedule taint; false: don't
#   spread: hostname       # at most one lab node per Kubernetes node (default: none)
#   affinity: {{}}           # the pod's spec.affinity, passed through as written
#   priority_class: high-priority
#   service_account: lab-runner
#   image_pull_secrets: [registry-creds]
#   labels: {{team: vision}}             # on every object (not app.kubernetes.io/*, labctl.dev/*)
#   annotations: {{example.com/owner: ada}}
#   schedule_timeout: 300  # seconds pods may stay unschedulable or unadmitted before the lab fails
#   kind: job              # job: Indexed Job + headless Service; jobset: one JobSet (JobSet CRD)""",
        doc_default="none",
        doc="where the pods may run: `node_selector`, `tolerations`, `affinity`, `spread: hostname`, "
            "`priority_class`, `service_account`, `image_pull_secrets`, `labels`, `annotations`, "
            "`queue` (Kueue), `gpu_toleration` (nccl: on), `schedule_timeout` (300 s), `kind` "
            "([docs/kubernetes.md](kubernetes.md#real-clusters))")
    out: str | None = lab_field(
        None, read=Folder(), flag="--out", help="Run folder (default runs/<lab>-<stamp>).",
        doc_flag="`--out DIR`", doc_default="`runs/<run id>`, the run id being `<lab>-<UTC stamp>-<4 hex>`",
        doc="run folder ([run-folder.md](run-folder.md))")
    workdir: str = lab_field(               # local nodes run in work/node-<i>/ of the run folder
        "node", read=Choice(WORKDIRS), flag="--workdir", null_ok=False, backends=("local",),
        help="Local nodes' working directory: node (work/node-<i>/ in the run folder) or invoking.",
        starter="""\
# workdir: node          # local nodes run in <run>/work/node-<i>/ (own files, as a real node);
                         # 'invoking' runs them in the directory labctl was started from""",
        doc="local nodes' working directory: `node` (`work/node-<i>/` in the run folder) or `invoking`")
    init_method: str = lab_field(           # how workers join: env:// | tcp://<node 0>:<port> | file://<shared>
        "env", read=Choice(INIT_METHODS, " (example: init_method: tcp)"), flag="--init-method",
        null_ok=False, help="How workers join: env, tcp (node 0, own port), file (shared dir).",
        starter="init_method: env         # how workers join: env (MASTER_ADDR/PORT) | tcp (node 0, own port) | file (shared dir)",
        doc="how workers join ([init-methods.md](init-methods.md))")
    replicas: int = lab_field(              # independent torchrun jobs sharing one replica store
        1, read=Int(1, MAX_REPLICAS), flag="--replicas", null_ok=False,
        help="Independent torchrun jobs sharing one replica store (default 1).",
        starter="replicas: 1              # independent torchrun jobs of nodes x nproc_per_node, sharing one replica store",
        doc="independent torchrun jobs of `nodes × nproc_per_node`, sharing one replica store "
            "([init-methods.md](init-methods.md#replicas))")
    shared_volume: SharedVolume | None = lab_field(
        None, read=SharedVolumeReader(), backends=CONTAINERS,
        starter="# shared_volume: {{claim: lab-shared}}   # k8s + init_method file: a ReadWriteMany claim",
        doc="`{claim: NAME}`: a ReadWriteMany claim, required for `init_method: file` on k8s; on "
            "compose, a volume labctl makes; every node sees it at `/lab/shared` (`LAB_SHARED_DIR`)")
    # Elastic torchrun (docs/failures.md, "Elastic restarts"): worker-group restarts per
    # node, and the fewest nodes the lab goes on with (torchrun --nnodes MIN:nodes).
    max_restarts: int = lab_field(
        0, read=Int(0, MAX_RESTARTS, expected=f"an integer between 0 and {MAX_RESTARTS}: worker-group "
                    "restarts per node (example: max_restarts: 1)"),
        flag="--max-restarts",
        help="Elastic: times torchrun restarts a node's workers after a failure (default 0).",
        starter="# max_restarts: 0        # torchrun restarts a node's workers this often (elastic workload)",
        doc="torchrun restarts a node's workers this often after a failure "
            "([docs/failures.md](failures.md#elastic-restarts))")
    min_nodes: int | None = lab_field(      # None: = nodes (a node that dies fails the lab)
        None, read=Int(1, MAX_NODES, upto="nodes",
                       expected="an integer between 1 and nodes ({upto}): the fewest nodes the lab "
                                "goes on with (example: min_nodes: 1)"),
        flag="--min-nodes",
        help="Elastic: the fewest nodes the lab goes on with (torchrun --nnodes MIN:nodes; "
             "default: nodes; at most --nodes).",
        starter="# min_nodes: 2           # the fewest nodes the lab goes on with: torchrun --nnodes MIN:nodes",
        doc_default="`nodes`",
        doc="the fewest nodes the lab goes on with: torchrun `--nnodes MIN:nodes`; a lost node "
            "(not node 0) is then no failure")
    # Seconds a rendezvous round waits for more nodes once min_nodes have joined (torch's
    # last_call_timeout; with min_nodes < nodes every restart waits this long).
    last_call_timeout: int = lab_field(
        30, read=Int(1, 86_400, expected="whole seconds between 1 and 86400 that a rendezvous waits "
                     "for more nodes once min_nodes joined (example: last_call_timeout: 10)"),
        flag="--last-call-timeout",
        help="Elastic: seconds a rendezvous round waits for more nodes once --min-nodes "
             "joined (default 30).",
        starter="# last_call_timeout: 30  # with min_nodes: seconds a rendezvous waits for more nodes once MIN joined",
        doc="with `min_nodes < nodes`: whole seconds a rendezvous round waits for more nodes once "
            "`min_nodes` joined (torch's `last_call_timeout` in `--rdzv-conf`); every restart "
            "waits this long")
    pg_timeout: float | None = lab_field(   # init_process_group(timeout=...), seconds; LAB_PG_TIMEOUT
        None, read=Seconds(), flag="--pg-timeout",
        help="Seconds a collective waits for its peers (init_process_group timeout, a script's "
             "too when it gives none; LAB_PG_TIMEOUT).",
        starter="""\
# pg_timeout: 30         # seconds a collective waits for its peers (init_process_group timeout, a
                         # script's too when it gives none; LAB_PG_TIMEOUT); torch's default: 30 min (gloo)""",
        doc_default="torch's (30 min for gloo)",
        doc="seconds a collective waits for its peers: `init_process_group(timeout=...)` of the "
            "workloads, and of a script that gives none (labctl's script wrapper passes it; a "
            "script that gives its own keeps it, and rank 0 says so once); workers see it as "
            "`LAB_PG_TIMEOUT` ([docs/failures.md](failures.md#the-process-group-timeout-pg_timeout))")
    on_hang: str = lab_field(               # what the live watcher does once it names a hang (labctl/live/)
        "report", read=Choice(ON_HANG, " (example: on_hang: stop)"), flag="--on-hang", null_ok=False,
        help="When the lab stops making progress: report (say who, what, where at once and keep the "
             "processes for a debugger until the deadline) or stop (say it, then end the lab as a hang).",
        starter="# on_hang: stop          # default report: name a hang at once, keep the ranks; stop: end the lab",
        doc="what happens once the live watcher names a hang (no progress for the stall window): "
            "`report` says who, what and where at once and keeps the processes until the deadline "
            "(a debugger can attach; `labctl stacks` still works), `stop` says it, then ends the lab as "
            "a hang ([docs/diagnosis.md](diagnosis.md#live-diagnosis))")
    stall_window: float = lab_field(        # the live watcher's floor, seconds (labctl/live/window.py)
        10.0, read=Seconds(lo=1.0, hi=STALL_WINDOW_MAX), flag="--stall-window", null_ok=False,
        help="Seconds an op may wait for a peer before the lab is called stalled (a floor: a large op "
             "over a slow link gets a multiple of its expected time).",
        starter="# stall_window: 10       # seconds an op may wait for its peers before the lab is called stalled",
        doc="the live watcher's stall window's floor, seconds: an op in flight longer than the larger of "
            "this and a multiple of its expected time (its size over the lab's links) is a stall "
            "([docs/diagnosis.md](diagnosis.md#live-diagnosis))")
    debug: bool = lab_field(                # TORCH_DISTRIBUTED_DEBUG=DETAIL and friends on every node
        False, read=Bool("true or false (true: TORCH_DISTRIBUTED_DEBUG=DETAIL, TORCH_CPP_LOG_LEVEL=INFO, "
                         "NCCL_DEBUG=INFO for nccl)"),
        flag="--debug",
        help="TORCH_DISTRIBUTED_DEBUG=DETAIL, TORCH_CPP_LOG_LEVEL=INFO (and NCCL_DEBUG=INFO for nccl).",
        starter="# debug: true            # TORCH_DISTRIBUTED_DEBUG=DETAIL, TORCH_CPP_LOG_LEVEL=INFO (+ NCCL_DEBUG=INFO)",
        doc="`TORCH_DISTRIBUTED_DEBUG=DETAIL`, `TORCH_CPP_LOG_LEVEL=INFO` (and `NCCL_DEBUG=INFO` for "
            "nccl) on every node")
    trace: bool = lab_field(                # record every op torch issues (LAB_TRACE=1; docs/trace.md)
        True, read=Bool("true or false (true, the default: record every collective and p2p op into "
                        "the run's trace.json; docs/trace.md)"),
        flag="--trace/--no-trace",
        help="Record every collective and p2p op of every rank into trace.json (on by default; "
             "docs/trace.md).",
        starter="""\
# trace: false           # default true: every collective/p2p op of every rank into trace.json
                         # (docs/trace.md; costs about 1-3 %, "What it costs")""",
        doc_flag="`--trace` / `--no-trace`",
        doc="record every collective and p2p op of every rank into the run's `trace.json` "
            "(`LAB_TRACE=1`; [docs/trace.md](trace.md))")
    debug_server: DebugServer | None = lab_field(   # torch's debug server on every rank (LAB_DEBUG_SERVER)
        None, read=DebugServerReader("true, false or a mapping of interval, port " + _DEBUG_SERVER_EXAMPLE),
        flag="--debug-server",
        help="torch's debug server on every rank: live stacks of every rank in a browser, dumps in the "
             "run folder's debug-server/ (docs/diagnosis.md).",
        starter="""\
# debug_server: true     # torch's debug server on every rank: live stacks in a browser, dumps in
                         # <run>/debug-server/ ({{port: 25999, interval: 10}}; docs/diagnosis.md)""",
        doc_default="off",
        doc="torch's debug server on every rank (`start_debug_server`): rank 0's page of every rank's "
            "stacks, Flight Recorder and TCPStore keys, its dumps in the run folder's `debug-server/`; "
            "`{port, interval}` (port: a free one locally, 25999 in containers; interval: 10 s) "
            "([docs/diagnosis.md](diagnosis.md#torchs-debug-server))")
    faults: tuple[Fault, ...] = lab_field(  # injected faults, parsed at load (labctl/faults.py)
        (), read=Faults(), flag="--fault", many=True,
        help="Inject a fault (repeatable): kill-rank:R@T, kill-node:N@T, stop-node:N@T+D, "
             "partition:N@T+D, delay:N=MS (seconds after every node started).",
        starter="""\
# faults:                # docs/failures.md; T, D: seconds after every node started
#                        # (fault_clock: join: after every rank's init_process_group returned)
#   - kill-rank:1@5      # SIGKILL worker rank 1
#   - kill-node:1@5      # kill node 1 (agent and workers; its container)
#   - stop-node:1@5+30   # freeze node 1 for 30 s (SIGSTOP / docker pause)
#   - partition:1@5+30   # cut node 1 off the network for 30 s (compose)
#   - delay:1=50         # 50 ms more latency on node 1 (compose, tc netem)""",
        doc_flag="`--fault` (repeatable)",
        doc="injected faults: `kill-rank:R@T`, `kill-node:N@T`, `stop-node:N@T+D`, `partition:N@T+D`, "
            "`delay:N=MS` ([docs/failures.md](failures.md)); which kinds a backend can do is its own")
    # Where the faults' T counts from: every node started ("start"), or every rank's
    # init_process_group returned ("join": ranks say so, LAB_FAULT_CLOCK=join).
    fault_clock: str = lab_field(
        "start", read=Choice(FAULT_CLOCKS), flag="--fault-clock", null_ok=False,
        help="Where the faults' T counts from: start (every node started; default) or "
             "join (every rank's init_process_group returned; local, compose).",
        starter="# fault_clock: start     # start | join (local, compose): where the faults' T counts from",
        doc="where the faults' T counts from: `start` (every node started) or `join` (every rank's "
            "`init_process_group` returned; local and compose) ([docs/failures.md](failures.md#faults))")
    # Each node's (or pair's) link rate and latency (labctl/links.py, docs/network.md):
    # compose shapes the containers' interfaces, k8s annotates the pods, local refuses.
    links: Links | None = lab_field(
        None, read=LinksReader(), flag="--link", many=True, backends=CONTAINERS,
        help="A node's link (repeatable; compose, k8s): RATE[,LATENCY] for every node, "
             "NODE=... for one, A-B=... for a pair (e.g. --link 1gbit --link 2=100mbit; "
             "docs/network.md).",
        starter="""\
# links: {{default: 1gbit, nodes: {{1: 100mbit}}}}   # each node's link (compose: tc; k8s: pod
#                        # bandwidth annotations; docs/network.md); pairs: {{"0-1": 50mbit}}""",
        doc_flag="`--link` (repeatable: `RATE[,LATENCY]` for every node, `N=...` for node N, "
                 "`A-B=...` for a pair)",
        doc_default="none (unshaped)",
        doc="each node's link: `100mbit`, or `{default: 1gbit, nodes: {2: 100mbit}, pairs: {\"0-1\": "
            "{rate: 50mbit, latency: 5ms}}}`; rates in `bit`/`kbit`/`mbit`/`gbit`/`tbit` "
            "(1kbit–1tbit), latency in `us`/`ms`/`s`. A node's rate caps what it sends and what it "
            "receives; compose shapes each container with tc, k8s annotates the pods for the "
            "bandwidth CNI plugin (one rate for every node), local refuses ([network.md](network.md))")

    @property
    def fewest_nodes(self) -> int:
        """The fewest nodes of a replica the lab goes on with (torchrun's MIN in MIN:MAX)."""
        return self.min_nodes if self.min_nodes is not None else self.nodes

    @property
    def elastic(self) -> bool:
        """Whether torchrun may restart workers or go on with fewer nodes."""
        return self.max_restarts > 0 or self.fewest_nodes < self.nodes

    @property
    def world_size(self) -> int:
        """Workers of one replica (what WORLD_SIZE says); `replicas` times this run in all."""
        return self.nodes * self.nproc_per_node

    @property
    def resolved_image(self) -> str:
        if self.image:
            return self.image
        return DEFAULT_CUDA_IMAGE if self.dist_backend == "nccl" else DEFAULT_CPU_IMAGE

    def to_dict(self) -> dict[str, Any]:
        """Plain data, in the same shape `load` accepts (round-trips)."""
        return {name: decl.read.dump(getattr(self, name)) for name, decl in lab_fields()}


def lab_fields() -> tuple[tuple[str, LabField], ...]:
    """Every lab field and its declaration, in LabSpec's order."""
    return _LAB_FIELDS


_LAB_FIELDS = tuple((f.name, f.metadata["lab"]) for f in dataclasses.fields(LabSpec))


def default_of(name: str) -> Any:
    """A lab field's default value."""
    f = next(f for f in dataclasses.fields(LabSpec) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def field_table() -> str:
    """docs/lab-description.md's table of the lab fields, made from their declarations
    (tests/test_spec.py checks the doc holds this one)."""
    rows = ["| field | flag | default | values | backends | meaning |", "|---|---|---|---|---|---|"]
    for name, decl in lab_fields():
        flag = decl.doc_flag or (" / ".join(f"`{f}`" for f in decl.flag.split("/")) if decl.flag else "—")
        default = decl.doc_default or doc_value(default_of(name))
        used = "all" if decl.backends is None else ", ".join(decl.backends)
        rows.append(f"| `{name}` | {flag} | {default} | {decl.read.values() or '—'} | {used} "
                    f"| {decl.doc or decl.help} |")
    return "\n".join(rows) + "\n"



def from_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The lab flags given (None or (): not given), as the lab file's values, by field
    (`--workload a,b` a list, `--env K=V` a mapping, `--link` the links mapping)."""
    declared = dict(lab_fields())
    return {key: declared[key].read.from_flags(value) if key in declared else value
            for key, value in flags.items() if value not in (None, ())}


def known_workloads() -> list[str]:
    """Workload modules shipped in the `workloads` package, found without importing torch."""
    found = importlib.util.find_spec("workloads")
    if found is None or not found.submodule_search_locations:
        return list(DEFAULT_WORKLOADS)
    return sorted(m.name for m in pkgutil.iter_modules(found.submodule_search_locations)
                  if not m.name.startswith("_"))


@functools.lru_cache(maxsize=None)
def workload_parameters(name: str) -> dict[str, Any]:
    """A workload's options and their defaults, read from its `run` signature.

    Parsed from the source, not imported: importing a workload imports torch,
    and validation must stay instant. Defaults that are not constants map to None.
    """
    found = importlib.util.find_spec(f"workloads.{name}")
    if found is None or not found.origin or not found.origin.endswith(".py"):
        return {}
    tree = ast.parse(Path(found.origin).read_text())
    run = next((node for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name == "run"), None)
    if run is None:
        return {}
    args = run.args.args[1:] + run.args.kwonlyargs          # skip ctx
    defaults = [None] * (len(run.args.args) - 1 - len(run.args.defaults)) + list(run.args.defaults)
    defaults += list(run.args.kw_defaults)
    params = {}
    for arg, default in zip(args, defaults):
        try:
            params[arg.arg] = eval(compile(ast.Expression(default), "<default>", "eval"),
                                   {"__builtins__": {}}) if default is not None else None
        except Exception:
            params[arg.arg] = None
    return params


def _check_options(name: str, options: Mapping[str, Any], bad, source: str) -> None:
    """Unknown option names and wrong types fail at load, not inside a running lab."""
    params = workload_parameters(name)
    where = f"workloads.{name}.options"
    for key, value in options.items():
        if key not in params:
            raise bad(where, key, f"one of {name}'s options: {', '.join(params)}" if params
                      else f"no options ({name} takes none)")
        if not _json_plain(value):     # they travel as JSON (--options): b'..' or a date would not
            raise bad(f"{where}.{key}", value, "text, numbers, booleans, null, and lists or "
                      "mappings of them")
        default = params[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            kind = {bool: "true or false", int: "an integer", float: "a number",
                    str: "a string"}[type(default)]
            raise bad(f"{where}.{key}", value, f"{kind} (default: {default!r})")
    rules = report_hook(name)
    if rules is not None:
        try:
            rules.check_options(dict(options), dict(params))
        except ValueError as exc:
            raise SpecError(f"{source}: {where}.{exc}") from None


def report_hook(name: str):
    """A workload's plugin (labctl/plugins.py: workloads/_report/<name>.py's `WORKLOAD`), if
    it has one: its option rules and lab checks (`check_options`, `check_lab`,
    `check_placement`; each a no-op when the workload has none)."""
    from .plugins import plugin

    return plugin(name)


_FIELDS = {f.name for f in dataclasses.fields(LabSpec)}


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> LabSpec:
    """Read `path` (if any), apply non-None `overrides`, validate, and return the spec."""
    data: dict[str, Any] = {}
    source = "lab spec"
    if path is not None:
        source = str(path)
        data = _read_yaml(Path(path))
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v != ()}
    if "script" in overrides and "workloads" not in overrides:
        data.pop("workloads", None)     # --script replaces the file's workloads
    if "workloads" in overrides and "script" not in overrides:
        data.pop("script", None)
    if overrides.get("debug_server") is True and isinstance(data.get("debug_server"), dict):
        overrides.pop("debug_server")   # --debug-server keeps the file's port and interval
    data.update(overrides)
    return from_dict(data, source=source)


def _read_yaml(path: Path) -> dict[str, Any]:
    """The lab file, bounded before anything is built from it (docs/limits.md): at most
    MAX_FILE_BYTES read, UTF-8 text, one document, no anchors or aliases (a ten-line
    file of aliases stands for billions of nodes), nesting at most MAX_DEPTH, no
    duplicate keys. Every refusal is one line naming the file."""
    if not path.exists():
        raise SpecError(f"{path}: no such file (create one with: labctl init {path})")
    if path.is_dir():
        raise SpecError(f"{path}: a folder, not a lab file (example: labctl validate -f lab.yaml)")
    try:                                            # a pipe (-f <(...)) or device reads too
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)        # never more, whatever the file's size
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB, the most a lab file "
                        "may be (docs/limits.md); a lab description is a few lines")
    text = _decode(path, raw)
    try:
        _check_events(path, text)
        data = yaml.load(text, Loader=_LabLoader)
    except SpecError as exc:                      # a duplicate key, found while building
        raise SpecError(f"{path}: {exc}") from None
    except ValueError as exc:       # int() over 4,300 digits, a date like 2024-02-30
        what = ("a number of more than 4,300 digits; no lab field takes one" if "digits" in str(exc)
                else f"a value YAML cannot read ({short(str(exc).splitlines()[0])})")
        raise SpecError(f"{path}: {what}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0] or "invalid YAML"
        raise SpecError(f"{path}: malformed YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of lab fields (e.g. 'nodes: 2'), "
                        f"got {type(data).__name__}")
    return data


def short(value: Any, limit: int = 80) -> str:
    """repr(value) cut to one readable line: an error message never echoes a 50 MB value."""
    if isinstance(value, (dict, list, tuple, set)) and len(value) > 20:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    if len(text) > limit:
        size = len(value.encode("utf-8", "replace")) if isinstance(value, str) else None
        text = text[:limit] + (f"... ({size} bytes)" if size is not None else "...")
    return text


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text or one line saying where it is not (a binary file, a stray \\xff)."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise SpecError(f"{path}: not a text file (a NUL byte at offset {nul}); a lab file "
                        "is UTF-8 YAML")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{path}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
                        f"{exc.start} (line {line}); save the lab file as UTF-8") from None


_YAML_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when PyYAML has it


def _check_events(path: Path, text: str) -> None:
    """Walk the parser's events (no objects built) and refuse what would blow up later:
    aliases and anchors, nesting deeper than MAX_DEPTH, more than one document."""
    depth = documents = 0
    for event in yaml.parse(text, Loader=_YAML_Loader):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise SpecError(f"line {line}: YAML anchors and aliases (&name, *name) are "
                            "not accepted in a lab file (one alias can stand for billions of "
                            "values); write each value out")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise SpecError(f"line {line}: nested deeper than {MAX_DEPTH} levels, "
                                "the most a lab file may be (docs/limits.md)")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise SpecError(f"line {line}: a second YAML document ('---'); a lab "
                                "file holds one")


class _LabLoader(_YAML_Loader):  # type: ignore[misc, valid-type]
    """Safe loading, and a key given twice is an error (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key that is not a plain value", key_node.start_mark) from None
            if key in seen:
                raise SpecError(f"line {key_node.start_mark.line + 1}: the key {short(key)} is given "
                                f"twice (first at line {seen[key]}); a lab file says each once")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def from_dict(data: Mapping[str, Any], source: str = "lab spec") -> LabSpec:
    def bad(fieldname: str, value: Any, expected: str) -> SpecError:
        return SpecError(f"{source}: {fieldname}: expected {expected}, given {short(value)}")

    unknown = sorted(set(data) - _FIELDS, key=str)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), sorted(_FIELDS), n=1, cutoff=0.75)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise SpecError(f"{source}: unknown field {short(unknown[0])}; {hint}"
                        f"known fields: {', '.join(sorted(_FIELDS))}")
    nul = _nul_in(data, "")
    if nul:
        raise SpecError(f"{source}: {nul[0]}: a NUL character (\\0) cannot be passed to a process "
                        f"or a file name; given {short(nul[1])}")
    lab = Reading(data, source, bad, default_of)
    late = []
    for key, decl in lab_fields():         # each field by its declaration, in LabSpec's order
        if key not in data or (data[key] is None and decl.null_ok):
            continue
        if decl.read.late:
            late.append((key, decl))
            continue
        lab.kw[key] = decl.read.read(data[key], key, lab)
    _across(lab.kw, bad)

    spec = LabSpec(**lab.kw)
    _rdzv_ports_fit(spec, bad)
    _debug_server_fits(spec, bad)
    for key, decl in late:                 # fields that need the rest of the lab (faults)
        lab.kw["spec"] = spec
        spec = dataclasses.replace(spec, **{key: decl.read.read(data[key], key, lab)})
    if not spec.workloads and not spec.script:
        raise SpecError(f"{source}: workloads: expected at least one workload or a script, "
                        f"given none (known workloads: {', '.join(known_workloads())})")
    for w in spec.workloads:              # a workload's rules that need the whole lab
        rules = report_hook(w.name)
        if rules is not None:
            try:
                rules.check_lab(spec, dict(w.options), workload_parameters(w.name))
            except ValueError as exc:
                raise SpecError(f"{source}: {exc}") from None
    return spec


def _debug_server_fits(spec: LabSpec, bad) -> None:
    """What torch's debug server cannot do in this lab: one frontend per lab (a replica is a
    job of its own), and it meets in a TCPStore, which direct file:// init has none of."""
    if spec.debug_server is None:
        return
    if spec.replicas > 1:
        raise bad("debug_server", True, f"a lab of one replica (this one has {spec.replicas}: each "
                  "would start a frontend of its own); leave debug_server out or use replicas: 1")
    if spec.init_method == "file" and spec.launcher == "direct":
        raise bad("debug_server", True, "a lab with a TCPStore: torch's debug server meets in one, "
                  "and init_method file with launcher direct has none (use init_method env or tcp, "
                  "or launcher torchrun)")


def _across(kw: dict[str, Any], bad) -> None:
    """The rules over more than one field, once each has been read: the run's size, an
    elastic lab's launcher, a script or workloads."""
    _bound_size(kw, bad)
    nodes = kw.get("nodes", LabSpec.nodes)
    elastic = kw.get("max_restarts", 0) > 0 or kw.get("min_nodes", nodes) < nodes
    if elastic and kw.get("launcher", LabSpec.launcher) != "torchrun":
        given = ", ".join(f"{k}: {kw[k]}" for k in ("max_restarts", "min_nodes") if k in kw)
        raise bad("launcher", kw["launcher"], f"torchrun for an elastic lab ({given}): torchrun's "
                  "agent restarts the workers, and direct mode has none")
    if kw.get("script"):
        if kw.get("workloads"):
            raise bad("script", kw["script"], "either workloads or a script, not both")
        kw["workloads"] = ()


def _script_args(args: Any, bad) -> tuple[str, ...]:
    if isinstance(args, str) or not isinstance(args, (list, tuple)):
        raise bad("script_args", args, "a list of strings (example: [--epochs, '2'])")
    if len(args) > MAX_ARGS_BYTES:
        raise bad("script_args", args, "a list of strings (example: [--epochs, '2'])")
    for i, a in enumerate(args):
        if not _plain_scalar(a):
            raise bad(f"script_args[{i}]", a, "a string, number or boolean (example: "
                      "[--epochs, '2'])")
    out = tuple(_env_str(a) for a in args)
    _bound_bytes("script_args", out, MAX_ARG_BYTES, MAX_ARGS_BYTES, "script argument", bad)
    return out


def _env(env: Any, bad, source: str) -> dict[str, str]:
    if not isinstance(env, dict):
        raise bad("env", env, "a mapping of variable names to values (example: "
                  "env: {NCCL_DEBUG: INFO})")
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise bad("env", k, "environment variable names like NCCL_DEBUG")
        if k in RESERVED_ENV:
            raise SpecError(f"{source}: env: {k} is one labctl sets itself; {RESERVED_ENV[k]}")
        if not _plain_scalar(v):
            raise bad(f"env.{k}", v, "a string, number or boolean (quote anything else: "
                      f"{k}: '...')")
    out = {k: _env_str(v) for k, v in env.items()}
    _bound_bytes("env", [f"{k}={v}" for k, v in out.items()], MAX_ENV_VALUE_BYTES,
                 MAX_ENV_BYTES, "variable (NAME=VALUE)", bad, names=list(out))
    return out


def _resources(res: Any, bad) -> Resources:
    if not isinstance(res, dict):
        raise bad("resources", res, "a mapping like {cpu: '2', memory: 4Gi, shm: 1Gi}")
    known = {f.name for f in dataclasses.fields(Resources)}
    for k, v in res.items():
        if k not in known:
            raise bad("resources", k, "one of " + ", ".join(sorted(known)))
        if k == "pids":
            if not re.fullmatch(r"[0-9]{1,7}", str(v)) or not MIN_PIDS <= int(v) <= MAX_PIDS:
                raise bad("resources.pids", v, f"a whole number of processes and threads per "
                          f"node, {MIN_PIDS} to {MAX_PIDS} (default {Resources.pids})")
        elif not _quantity_ok(v):
            raise bad(f"resources.{k}", v, "a Kubernetes quantity of at most 2^53 in its base "
                      "unit (examples: 2, 500m, 4Gi)")
        elif k in _LEAST and quantity(v) < _LEAST[k][0]:
            raise bad(f"resources.{k}", v, _LEAST[k][1])
    return Resources(**{k: str(v) for k, v in res.items()})


def idle_settings(spec: LabSpec) -> list[str]:
    """What this lab sets that cannot act where and how it runs, one line each: the CLI
    says so (`note: ...`) instead of doing nothing. Notes, not refusals: one lab file
    serves several backends and launchers (`--backend`, `--launcher` override it), and
    a setting for another one is no mistake. What would fail at run time is refused
    (`from_dict`, `check_files`)."""
    notes = []
    containers = spec.backend in CONTAINERS
    if spec.image is not None and not containers:
        notes.append(f"image: the {spec.backend} backend starts no containers (image is for "
                     "compose and k8s)")
    if spec.resources != Resources() and not containers:
        notes.append(f"resources: the {spec.backend} backend sets no limits (resources are for "
                     "compose and k8s)")
    elif spec.backend == "k8s" and spec.resources.pids != Resources.pids:
        notes.append("resources.pids: a compose limit; on Kubernetes the kubelet sets it")
    if spec.k8s and spec.backend != "k8s":
        notes.append(f"k8s: read by the k8s backend only, not {spec.backend}")
    if spec.workdir != LabSpec.workdir and spec.backend != "local":
        notes.append(f"workdir: for local nodes only; on {spec.backend} a node runs in its "
                     "image's working directory")
    if spec.shared_volume is not None and spec.backend == "local":
        notes.append("shared_volume: local nodes share the run folder's shared/ (LAB_SHARED_DIR) "
                     "instead")
    if spec.join_timeout != LabSpec.join_timeout and spec.launcher != "torchrun":
        notes.append(f"join_timeout: the {spec.launcher} launcher has no rendezvous to wait for "
                     "(it is torchrun's)")
    if spec.last_call_timeout != LabSpec.last_call_timeout and spec.fewest_nodes == spec.nodes:
        notes.append("last_call_timeout: only an elastic lab's rendezvous waits for late nodes "
                     f"(min_nodes < nodes); this one needs all {spec.nodes}")
    if spec.pg_timeout is not None and spec.pg_timeout >= spec.timeout:
        notes.append(f"pg_timeout: the lab's deadline (timeout {spec.timeout:g} s) comes first, so a "
                     f"hang never reaches torch's own timeout ({spec.pg_timeout:g} s); set it lower")
    if spec.fault_clock != LabSpec.fault_clock and not spec.faults:
        notes.append("fault_clock: this lab has no faults to time")
    if spec.script_args and not spec.script:
        notes.append(f"script_args: for a script only; this lab runs workloads "
                     f"({', '.join(w.name for w in spec.workloads)})")
    return notes


def out_refusal(path: Path) -> str | None:
    """Why `path` cannot become a new run folder, from what is there now (None: it can,
    as far as the filesystem shows): the end of "run folder 'x' ...". Disk space and
    permissions are the run folder's own checks when it is made (rundir.RunDir.create)."""
    try:
        if path.exists():
            if not path.is_dir():
                return "exists and is not a folder"
            if any(path.iterdir()):
                return "exists and is not empty"
            return None
        for parent in path.parents:
            if parent.exists():
                return None if parent.is_dir() else f"cannot be made: {parent} is not a folder"
    except OSError as exc:
        return f"cannot be looked at: {exc.strerror or exc}"
    return None


MAX_SCRIPT_BYTES = 16 << 20         # a script larger than this is not compiled before the start


def _compiles(code: bytes, name: str, source: str) -> None:
    """A script that does not compile fails every rank the same way, after their start-up
    and with the blame on runpy: said here, before any rank starts, at its own line."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise SpecError(f"{source}: script: {name} does not compile ({where}: {exc.msg}); "
                        "no rank was started") from None
    except ValueError as exc:           # source code with null bytes
        raise SpecError(f"{source}: script: {name} does not compile ({exc}); no rank was started") from None


def check_files(spec: LabSpec, source: str = "lab spec", out: bool = True) -> None:
    """What the lab names on this machine, checked before anything starts (validate, up,
    render): the script is a readable file, and `out` (with `out`) can become a new run
    folder. SpecError, one line, otherwise: a lab that cannot start is exit 2, before and
    not after a run folder is made. Not in `from_dict`: a run folder's spec.yaml is read
    back where the script need not be."""
    if spec.script:
        script = Path(spec.script)
        where = f" (a path from the folder labctl runs in, {Path.cwd()})" if not script.is_absolute() else ""
        try:
            if not script.exists():
                raise SpecError(f"{source}: script: no such file: {spec.script}{where}")
            if not script.is_file():
                raise SpecError(f"{source}: script: {spec.script} is not a file (example: "
                                "script: train.py)")
            with open(script, "rb") as f:
                code = f.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise SpecError(f"{source}: script: cannot read {spec.script}: {exc.strerror or exc}") from None
        if len(code) <= MAX_SCRIPT_BYTES:
            _compiles(code, spec.script, source)
    if out and spec.out:
        why = out_refusal(Path(spec.out))
        if why:
            raise SpecError(f"{source}: out: run folder '{spec.out}' {why}; choose another --out")


def _links_of(raw: Any, total_nodes: int) -> Links | None:
    """`links:` parsed (labctl/links.py); a description that shapes nothing is None."""
    from . import links as linkmod

    parsed = linkmod.parse(raw, total_nodes)
    return None if not parsed.shaped_nodes(total_nodes) else parsed


def _faults(raw: Any, spec: LabSpec, bad, source: str) -> tuple[Fault, ...]:
    """Each fault parsed and aimed inside the lab (whether the chosen backend can do
    it is the backend's to say: `backends.check_spec`)."""
    from . import faults as faultmod

    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise bad("faults", raw, f"a list of faults, each {faultmod.USAGE}")
    bound_items("faults", raw, bad)
    out = []
    for item in raw:
        try:
            fault = faultmod.parse(item)
        except faultmod.FaultSyntaxError as exc:
            raise SpecError(f"{source}: faults: {exc}; given {short(item)}") from None
        if fault.kind == "kill-rank":
            if spec.replicas > 1:
                raise bad("faults", item, "no kill-rank with replicas (ranks repeat in every "
                          "replica); use kill-node:N@T with N counted across replicas")
            if fault.target >= spec.world_size:
                raise bad("faults", item, f"a rank of this lab: 0 to {spec.world_size - 1} "
                          f"(world size {spec.world_size})")
        elif fault.target >= spec.nodes * spec.replicas:
            raise bad("faults", item, f"a node of this lab: 0 to {spec.nodes * spec.replicas - 1}")
        if fault.duration is not None and fault.duration <= 0:
            raise bad("faults", item, "a duration D > 0 seconds")
        if fault.at + (fault.duration or 0) >= spec.timeout:
            raise bad("faults", item, f"a fault that ends before the lab's deadline "
                      f"({spec.timeout:g}s after start)")
        out.append(fault)
    delays = [f.target for f in out if f.kind == "delay"]
    if len(set(delays)) != len(delays):
        raise bad("faults", raw, "at most one delay per node")
    shaped = set(spec.links.shaped_nodes(spec.nodes * spec.replicas)) if spec.links else set()
    for fault in out:
        if fault.kind == "delay" and fault.target in shaped:
            raise bad("faults", fault.text, f"no delay fault on node {fault.target}, whose link the "
                      "lab shapes (both set its interface's root qdisc); give the delay as the "
                      f"link's latency instead (links: {{nodes: {{{fault.target}: {{latency: "
                      f"{fault.ms}ms}}}}}})")
    return tuple(out)



def ports_taken(spec: LabSpec) -> int:
    """Consecutive ports a lab takes on one host from its rendezvous port: tcp:// init
    listens on the next one (plan.init_port); local replicas share one host, so each takes
    two (rendezvous, tcp:// init) and the replica store the one after them (the local
    backend's placement counts them this way). Container replicas each have a host."""
    if spec.replicas > 1 and spec.backend == "local":
        return 2 * spec.replicas + 1
    return 2 if spec.init_method == "tcp" else 1


def _rdzv_ports_fit(spec: LabSpec, bad) -> None:
    """rdzv_port and the ports counted up from it (`ports_taken`) stay ports:
    `rdzv_port: 65535` with `init_method: tcp` would fail at start."""
    if spec.rdzv_port is None:
        return
    many = spec.replicas > 1 and spec.backend == "local"
    needed = ports_taken(spec)
    if spec.rdzv_port + needed - 1 > MAX_PORT:
        why = (f"{spec.replicas} local replicas take {needed} ports from it" if many
               else "init_method tcp listens on the port after it")
        raise bad("rdzv_port", spec.rdzv_port, f"a port at most {MAX_PORT - needed + 1} ({why})")


def _bound_size(kw: dict[str, Any], bad) -> None:
    """The whole run at most MAX_WORLD ranks and MAX_TOTAL_NODES nodes: the plan, its
    JSON and every render grow with these (docs/limits.md)."""
    nodes = kw.get("nodes", LabSpec.nodes)
    nproc = kw.get("nproc_per_node", LabSpec.nproc_per_node)
    replicas = kw.get("replicas", LabSpec.replicas)
    if nodes * nproc * replicas > MAX_WORLD:
        what = f"nodes {nodes} x nproc_per_node {nproc}" + (f" x replicas {replicas}" if replicas > 1 else "")
        raise bad("world size", nodes * nproc * replicas, f"at most {MAX_WORLD:,} ranks in a lab "
                  f"({what}; docs/limits.md)")
    if nodes * replicas > MAX_TOTAL_NODES:
        raise bad("nodes", nodes * replicas, f"at most {MAX_TOTAL_NODES:,} nodes in a lab "
                  f"(nodes {nodes} x replicas {replicas}; docs/limits.md)")


def _bound_bytes(key: str, items: list[str] | tuple[str, ...], each: int, total: int, what: str,
                 bad, names: list[str] | None = None) -> None:
    """Every string at most `each` UTF-8 bytes, all together at most `total`: below the
    kernel's MAX_ARG_STRLEN and ARG_MAX, so no node fails at exec ('Argument list too long')."""
    size = 0
    for i, item in enumerate(items):
        n = len(item.encode("utf-8", "surrogatepass"))
        if n > each:
            where = f"{key}.{names[i]}" if names else f"{key}[{i}]"
            raise bad(where, item, f"at most {each // 1024} KiB per {what} (this one: {n:,} bytes; "
                      "the kernel refuses longer exec strings; docs/limits.md)")
        size += n + 1
    if size > total:
        raise bad(key, f"{len(items)} items, {size:,} bytes", f"at most {total // 1024} KiB in all "
                  "(with the caller's environment it must stay below the kernel's ARG_MAX; "
                  "docs/limits.md)")
def _shared_volume(raw: Any, bad) -> SharedVolume:
    expected = "a mapping with the name of a ReadWriteMany claim (example: shared_volume: {claim: lab-shared})"
    if not isinstance(raw, dict) or set(raw) != {"claim"}:
        raise bad("shared_volume", raw, expected)
    claim = raw["claim"]
    if not isinstance(claim, str) or not claim:
        # a claim's name syntax is Kubernetes' (the k8s backend checks it, for every lab)
        raise bad("shared_volume.claim", claim, "the name of a ReadWriteMany claim "
                  "(example: shared_volume: {claim: lab-shared})")
    return SharedVolume(claim)


_SUFFIX = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}


# The least a container runtime accepts (Docker: "Range of CPUs is from 0.01", "Minimum
# memory limit allowed is 6MB"); below them compose fails at start, so they are refused.
_LEAST = {"cpu": (0.01, "at least 10m (0.01 CPU, the least a container may get; example: 500m)"),
          "memory": (6 * 2 ** 20, "at least 6Mi, the least memory limit Docker allows (torch "
                                  "itself needs hundreds of Mi; example: 2Gi)")}


def quantity(value: Any) -> float:
    """A Kubernetes quantity (2, 500m, 4Gi, 1.5G) in its base unit (cores, bytes, a count);
    ValueError for anything else. The one reading of one: the lab's resources here, the
    compose render's limits, the GPUs a Kubernetes node advertises (the k8s preflight)."""
    text = str(value)
    valid = not isinstance(value, bool) and isinstance(value, (str, int, float)) and len(text) <= 32
    match = _QUANTITY.match(text) if valid else None
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {short(value)} (examples: 2, 500m, 4Gi)")
    number, unit = float(match.group(1)), match.group(2) or ""
    return number / 1000 if unit == "m" else number * _SUFFIX[unit]    # 500m: 0.5 exactly


def _quantity_ok(value: Any) -> bool:
    """A quantity Kubernetes parses and compose turns into an int (bytes, cores) safely."""
    try:
        return quantity(value) <= 2 ** 53
    except ValueError:
        return False


def _json_plain(value: Any, depth: int = 0) -> bool:
    """A value JSON writes as it is (a workload option travels as JSON)."""
    if value is None or isinstance(value, (str, int, float)):
        return True
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, (list, tuple)):
        return all(_json_plain(v, depth + 1) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _json_plain(v, depth + 1) for k, v in value.items())
    return False


def _plain_scalar(value: Any) -> bool:
    """Text, a number or a boolean: what an environment variable or an argument can say
    as written. Not bytes (`!!binary` would become "b'hello'"), dates, null, lists, maps."""
    return isinstance(value, (str, int, float))        # bool is an int


def _nul_in(value: Any, where: str, depth: int = 0) -> tuple[str, Any] | None:
    """The first string (key or value) holding a NUL character, and where: no process
    argument, environment value or file name can hold one."""
    if isinstance(value, str):
        return (where, value) if "\0" in value else None
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _nul_in(k, where, depth + 1) or _nul_in(v, f"{where}.{k}" if where else str(k), depth + 1)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _nul_in(v, f"{where}[{i}]", depth + 1)
            if found:
                return found
    return None


def _env_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)



def _workloads(raw: Any, bad, source: str) -> tuple[WorkloadSpec, ...]:
    known = known_workloads()
    expected = ("a list of workload names or {name: ..., options: {...}} entries "
                "(example: workloads: [env, p2p])")
    if isinstance(raw, str):
        raw = [w for w in re.split(r"[,\s]+", raw) if w]
    if not isinstance(raw, (list, tuple)):
        raise bad("workloads", raw, expected)
    bound_items("workloads", raw, bad)
    out = []
    for item in raw:
        options: Any = {}
        if isinstance(item, str):
            name = item
        elif isinstance(item, dict) and "name" in item:
            name, options = item["name"], item.get("options") or {}
            extra = set(item) - {"name", "options"}
            if extra:
                raise bad("workloads", item, "only 'name' and 'options' in a workload entry")
        elif isinstance(item, dict) and len(item) == 1:
            (name, options), = item.items()
            options = options or {}
        else:
            raise bad("workloads", item, expected)
        if name not in known:
            raise bad("workloads", name, "one of the known workloads: " + ", ".join(known))
        if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
            raise bad(f"workloads.{name}.options", options, "a mapping of option names to values")
        _check_options(name, options, bad, source)
        out.append(WorkloadSpec(name, dict(options)))
    options_json = json.dumps({w.name: dict(w.options) for w in out}, default=str)
    if len(options_json) > MAX_ARG_BYTES:         # one argument of every worker (--options)
        raise bad("workloads", f"options of {len(options_json):,} bytes as JSON", f"at most "
                  f"{MAX_ARG_BYTES // 1024} KiB of workload options in all (they travel as one "
                  "command-line argument; docs/limits.md)")
    return tuple(out)


def bound_items(key: str, raw: Any, bad) -> None:
    if len(raw) > MAX_ITEMS:
        raise bad(key, raw, f"at most {MAX_ITEMS} entries (docs/limits.md)")


_SIZE = re.compile(r"^\s*([0-9]+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1 << 20, "mib": 1 << 20,
               "mb": 10 ** 6, "g": 1 << 30, "gib": 1 << 30, "gb": 10 ** 9}


def message_size(value: Any) -> int:
    """A message size (`labctl predict --size`): bytes, or with a unit (64KiB, 4MiB, 1MB;
    K/M/G are binary), 1 B to 1 TiB; ValueError saying what is expected otherwise."""
    m = _SIZE.match(str(value))
    size = int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()] if m else 0
    if not 1 <= size <= 1 << 40:
        raise ValueError(f"expected a size in bytes from 1 to 1TiB, with or without a unit "
                         f"(examples: 65536, 64KiB, 4MiB), given {value!r}")
    return size


def dump(spec: LabSpec) -> str:
    return yaml.safe_dump(spec.to_dict(), sort_keys=False)


STARTER_HEAD = """\
# labctl lab description. Every field is optional and every top-level field
# but resources and k8s has a CLI flag of the same name that overrides it
# (labctl up --help).
"""


def starter() -> str:
    """`labctl init`'s file (str.format it with name=...): the head, then each field's
    starter lines in LabSpec's order, a section of its own (a mapping: `k8s:`) last."""
    ordered = sorted((decl for _, decl in lab_fields() if decl.starter), key=lambda d: d.section)
    return STARTER_HEAD + "".join(decl.starter + "\n" for decl in ordered)


STARTER = starter()
