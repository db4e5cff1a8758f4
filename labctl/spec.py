"""The lab description: one backend-free model, loaded and validated up front.

Everything a user can say about a lab lives in `LabSpec`. It is read from
`lab.yaml`, overridden by CLI flags, and validated before anything starts, so
that a typo costs one clear line and exit code 2 instead of a half-started lab.

Its parts, one job each: the lab file read (labctl/labfile.py), the bounds
(labctl/limits.py), the richer values and their readers (labctl/labvalues.py), the
workloads and their options (labctl/workloadspec.py); here the model (`LabSpec`, one
`lab_field` each), the lab from a file and flags (`load`, `from_dict`, the rules over
several fields) and the text made from the declarations (`field_table`, `starter`). What
the CLI checks on this machine besides: labctl/labchecks.py.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from .errors import SpecError, short
from .faults import Fault
from .fields import (CONTAINERS, MAX_SECONDS, Bool, Choice, Folder, Int, LabField, Reading,  # noqa: F401
                     Seconds, doc_value, lab_field)
from .labfile import read_yaml
from .labvalues import (DEBUG_SERVER_EXAMPLE, DebugServer, DebugServerReader, EnvReader, Faults, Image,
                        LinksReader, Name, Opaque, Resources, ResourcesReader, Script, ScriptArgs, SharedVolume,
                        SharedVolumeReader)
from .limits import MAX_DEPTH, MAX_NODES, MAX_NPROC_PER_NODE, MAX_PORT, MAX_TOTAL_NODES, MAX_WORLD
from .links import Links
from .workloadspec import (DEFAULT_WORKLOADS, WorkloadSpec, Workloads, known_workloads, report_hook,
                           workload_parameters)

DIST_BACKENDS = ("gloo", "nccl", "auto")
LAUNCHERS = ("torchrun", "direct")
ON_HANG = ("report", "stop")          # the live watcher, once it names a hang (labctl/live/)
STALL_WINDOW_MAX = 86_400.0           # a stall window past a day is no window
WORKDIRS = ("node", "invoking")
INIT_METHODS = ("env", "tcp", "file")
FAULT_CLOCKS = ("start", "join")     # a fault's T counts from every node started / every rank joined
MAX_REPLICAS = 64
MAX_RESTARTS = 100                   # max_restarts: worker-group restarts per node
DEFAULT_CPU_IMAGE = "labctl-cpu:latest"
DEFAULT_CUDA_IMAGE = "labctl-cuda:latest"


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
        None, read=DebugServerReader("true, false or a mapping of interval, port " + DEBUG_SERVER_EXAMPLE),
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


_FIELDS = {f.name for f in dataclasses.fields(LabSpec)}


def load(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> LabSpec:
    """Read `path` (if any), apply non-None `overrides`, validate, and return the spec."""
    data: dict[str, Any] = {}
    source = "lab spec"
    if path is not None:
        source = str(path)
        data = read_yaml(Path(path))
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v != ()}
    if "script" in overrides and "workloads" not in overrides:
        data.pop("workloads", None)     # --script replaces the file's workloads
    if "workloads" in overrides and "script" not in overrides:
        data.pop("script", None)
    if overrides.get("debug_server") is True and isinstance(data.get("debug_server"), dict):
        overrides.pop("debug_server")   # --debug-server keeps the file's port and interval
    data.update(overrides)
    return from_dict(data, source=source)


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
