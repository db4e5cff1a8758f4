"""Kubernetes renderer: a LaunchPlan in, manifests out (pure and deterministic).

One lab = a headless Service, an Indexed Job whose pods are the nodes, a
NetworkPolicy and (for a user script) a ConfigMap. Pod i of a Job named after
the lab gets hostname `<lab>-<i>` and, through the Service (also named after
the lab), the DNS name `<lab>-<i>.<lab>`; node 0's name is MASTER_ADDR.

One pod template serves every index, so whatever differs between the plan's
nodes must be computed from the Job completion index inside the pod. The
template is *derived* by comparing every node's `node_command()`: a value that
differs between nodes is accepted only when the index explains it exactly
(NODE_RANK = i, is_host = [i == 0], RANK = i*nproc + local); anything else
raises, so a future per-node value in the plan fails loudly here instead of
rendering node 0's value into every pod.

With replicas (R > 1), each replica k is the same shape under its own name
`<lab>-r<k>`: an Indexed Job and a headless Service, so pod i of replica k is
`<lab>-r<k>-<i>.<lab>-r<k>` — the DNS names stay valid, and each Job's one
template still serves every index of its replica. The replica store is a Job
of one pod behind a headless Service `<lab>-store`; one NetworkPolicy admits
every pod of the run (every port: gloo, the rendezvous, tcp:// init, the store).

init_method tcp adds the init port (rendezvous port + 1) to the Service and
the container ports; init_method file mounts the spec's ReadWriteMany claim at
the shared directory of every node pod (fsGroup makes it writable for uid 1000).
"""
from __future__ import annotations

import base64
import copy
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


from ...errors import LabError
from ...plan import (LaunchPlan, NodeLaunch, init_port, node_command, node_hostname,
                    replica_name, store_hostname)
from ...rendered import RUN_LABEL, SPEC_KEY, dump_yaml, stored_spec
from ...spec import LabSpec, SpecError
from ..containers import SCRIPT_MOUNT
from . import settings as k8s_settings
from .settings import QUEUE_LABEL

COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
INDEX_ENV = ("NODE_RANK", "GROUP_RANK")      # plan variables that are the node index itself
INDEX_VAR = "NODE_RANK"                     # what the pod's shell computes from
CONTAINER = "node"
POD_USER = 1000                             # the lab images run as uid/gid 1000
TTL_AFTER_FINISHED_S = 3600                 # kubectl-managed runs: an hour to read the logs
FILE_ORDER = ("configmap.yaml", "service.yaml", "networkpolicy.yaml", "job.yaml")
GPU_RESOURCE = "nvidia.com/gpu"     # the NVIDIA device plugin's extended resource
# The taint the NVIDIA GPU operator / device plugin docs put on GPU nodes.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"


# Kubernetes' own limits (apimachinery / core validation), checked here so that a render
# kubectl would refuse is one clear line instead (docs/limits.md).
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")   # IsConfigMapKey
MAX_CONFIGMAP_BYTES = 1024 * 1024                  # MaxConfigMapSize: keys + values of data/binaryData
MAX_ANNOTATIONS_BYTES = 256 * 1024                 # TotalAnnotationSizeLimitB: keys + values
MAX_INT64 = 2 ** 63 - 1
# Where the lab's workloads write in a pod whose root filesystem is read-only: the
# images' WORKDIR (/work: elastic checkpoints without a shared dir, a script's files)
# and /tmp (torchrun's log dir, tempfile). /dev/shm is the dshm volume.
WRITABLE_DIRS = (("tmp", "/tmp"), ("work", "/work"))
# Egress: the run's own pods, and cluster DNS (CoreDNS and kube-dns both carry
# k8s-app=kube-dns in kube-system) on port 53, UDP and TCP.
DNS_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}

REPLICA_LABEL = "labctl.dev/replica"
STORE_CONTAINER = "store"
STORE_RESOURCES = {"cpu": "250m", "memory": "512Mi"}   # one idle TCPStore server (and torch)


# ---- names ------------------------------------------------------------------
def job_name(spec: LabSpec, replica: int = 0) -> str:
    """The Job is named after the lab (or the replica), so pod i's hostname is
    `node_hostname(spec, i, replica)`."""
    return replica_name(spec, replica)


def service_name(spec: LabSpec, replica: int = 0) -> str:
    return replica_name(spec, replica)


def script_configmap_name(spec: LabSpec) -> str:
    return f"{spec.name}-script"


def master_addr(spec: LabSpec, replica: int = 0) -> str:
    """Node 0's DNS name under the headless Service: `<lab>-0.<lab>` (with
    replicas, `<lab>-r<k>-0.<lab>-r<k>`)."""
    return f"{node_hostname(spec, 0, replica)}.{service_name(spec, replica)}"


def replica_master_addrs(spec: LabSpec) -> tuple[str, ...]:
    return tuple(master_addr(spec, k) for k in range(spec.replicas))


def labels(plan: LaunchPlan, component: str, replica: int | None = None) -> dict[str, str]:
    out = {
        "app.kubernetes.io/name": plan.spec.name,
        "app.kubernetes.io/instance": plan.run_id,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "labctl",
        "app.kubernetes.io/managed-by": "labctl",
        RUN_LABEL: plan.run_id,
    }
    if replica is not None and plan.spec.replicas > 1:
        out[REPLICA_LABEL] = str(replica)
    return out


def metadata(plan: LaunchPlan, name: str | None, component: str,
             extra_labels: dict[str, str] | None = None, replica: int | None = None,
             extra_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """labctl's labels, then the lab's `k8s.labels` and `k8s.annotations` (sorted, so
    equal specs render equal text); the user's keys cannot shadow labctl's (spec.py)."""
    settings = k8s_settings.settings(plan.spec)
    meta: dict[str, Any] = {"name": name} if name is not None else {}
    meta["labels"] = {**labels(plan, component, replica), **dict(sorted(settings.labels.items())),
                      **(extra_labels or {})}
    annotations = {**dict(sorted(settings.annotations.items())), **(extra_annotations or {})}
    if annotations:
        size = sum(len(k.encode()) + len(v.encode("utf-8", "surrogateescape"))
                   for k, v in annotations.items())
        if size > MAX_ANNOTATIONS_BYTES:
            raise SpecError(f"k8s render: the {component} object's annotations (k8s.annotations "
                            f"and the lab description labctl stores) take {size:,} bytes; "
                            f"Kubernetes allows {MAX_ANNOTATIONS_BYTES // 1024} KiB in all: "
                            "shorten k8s.annotations, env or script_args (docs/limits.md)")
        meta["annotations"] = annotations
    return meta


def run_selector(run_id: str) -> str:
    """The label selector that finds everything one run created."""
    return f"{RUN_LABEL}={run_id}"


POD_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"   # on a Job's pods since 1.28


def port_forward(plan: LaunchPlan, namespace: str, context: str | None = None,
                 pod: str | None = None) -> str:
    """The command that brings node 0's debug server frontend (`debug_server`) to
    127.0.0.1 of this machine: `kubectl port-forward` to `pod`, or, not known yet, to the
    pod the run's label and completion index 0 select."""
    port = plan.placement.debug_server_port
    where = (f"--context {shlex.quote(context)} " if context else "") + f"-n {shlex.quote(namespace)}"
    target = f"pod/{pod}" if pod else (
        f"$(kubectl get pods {where} -l {run_selector(plan.run_id)},{POD_INDEX_LABEL}=0 -o name)")
    return f"kubectl port-forward {where} {target} {port}:{port}, then http://127.0.0.1:{port}"


# ---- the per-index template ------------------------------------------------
@dataclass(frozen=True)
class IndexValue:
    """An integer computed from the completion index: a*i + b, or 1 on index 0 only."""
    a: int = 1
    b: int = 0
    first_only: bool = False

    def at(self, index: int) -> int:
        return int(index == 0) if self.first_only else self.a * index + self.b

    def shell(self) -> str:
        """POSIX shell arithmetic on $NODE_RANK, double-quoted to stay one word."""
        if self.first_only:
            expr = f"{INDEX_VAR}==0"
        elif (self.a, self.b) == (1, 0):
            expr = INDEX_VAR
        else:
            expr = f"{INDEX_VAR}*{self.a}+{self.b}"
        return f'"$(({expr}))"'


Word = tuple  # of str (literal) and IndexValue segments


def _fit(numbers: Sequence[int]) -> IndexValue | None:
    if list(numbers) == [int(i == 0) for i in range(len(numbers))]:
        return IndexValue(first_only=True)      # the c10d store host role (pytorch#73380)
    a, b = numbers[1] - numbers[0], numbers[0]
    if all(n == a * i + b for i, n in enumerate(numbers)):
        return IndexValue(a, b)
    return None


def derive_word(values: Sequence[str], where: str) -> Word:
    """One template word that yields values[i] on index i, or LabError."""
    if all(v == values[0] for v in values):
        return (values[0],)
    pieces = [re.split(r"(\d+)", v) for v in values]   # odd positions: digit runs
    if any(len(p) != len(pieces[0]) for p in pieces):
        raise _differs(values, where)
    word: list[Any] = []
    for k, column in enumerate(zip(*pieces)):
        if all(c == column[0] for c in column):
            segment: Any = column[0]
        elif k % 2 == 1 and all(str(int(c)) == c for c in column):
            numbers = [int(c) for c in column]
            segment = _fit(numbers)
            if segment is None:
                a, b = numbers[1] - numbers[0], numbers[0]
                first_off = next(i for i, n in enumerate(numbers) if n != a * i + b)
                raise _differs(values, where, first_off)
        else:
            raise _differs(values, where)
        if isinstance(segment, str) and word and isinstance(word[-1], str):
            word[-1] += segment
        else:
            word.append(segment)
    return tuple(word)


def _differs(values: Sequence[str], where: str, i: int | None = None) -> LabError:
    if i is None:
        i = next(i for i, v in enumerate(values) if v != values[0])
    return LabError(f"k8s render: node {i} differs from node 0 in {where} ({values[0]!r} vs "
                    f"{values[i]!r}) in a way the Job completion index does not explain; "
                    "one pod template cannot serve every node (teach labctl/backends/k8s/render.py)")


def expand_word(word: Word, index: int) -> str:
    """What `word` is on pod `index` (the Python twin of `shell_word`)."""
    return "".join(s if isinstance(s, str) else str(s.at(index)) for s in word)


def shell_word(word: Word) -> str:
    return "".join(shlex.quote(s) if isinstance(s, str) else s.shell() for s in word)


@dataclass(frozen=True)
class PodTemplate:
    command: tuple[str, ...]                 # the container's command, before $-escaping
    env: tuple[tuple[str, str | None], ...]  # (name, literal value) or (name, None): the index


def pod_template(plan: LaunchPlan, nodes: Sequence[NodeLaunch] | None = None) -> PodTemplate:
    """The one command and environment that reproduce every node's `node_command()`
    (of `nodes`: one replica's, in completion-index order; default every node)."""
    commands = [node_command(node) for node in (plan.nodes if nodes is None else nodes)]
    argvs = [argv for argv, _ in commands]
    envs = [env for _, env in commands]
    if any(len(a) != len(argvs[0]) for a in argvs):
        raise _differs([repr(a) for a in argvs], "the number of arguments")
    if any(list(e) != list(envs[0]) for e in envs):
        raise _differs([" ".join(e) for e in envs], "the environment's variable names")
    words = [derive_word([a[k] for a in argvs], f"argv[{k}]") for k in range(len(argvs[0]))]

    env: list[tuple[str, str | None]] = []
    for name in envs[0]:
        values = [e[name] for e in envs]
        if name in INDEX_ENV and values == [str(i) for i in range(len(values))]:
            env.append((name, None))
            continue
        word = derive_word(values, f"env {name}")
        if len(word) != 1 or not isinstance(word[0], str):
            raise _differs(values, f"env {name}")
        env.append((name, word[0]))
    indexed = {name for name, value in env if value is None}

    if all(len(w) == 1 and isinstance(w[0], str) for w in words):
        command: tuple[str, ...] = tuple(w[0] for w in words)
    else:
        if INDEX_VAR not in indexed:
            raise LabError(f"k8s render: the command depends on the node index but the plan's "
                           f"environment has no {INDEX_VAR} to compute it from")
        script = ("# One template for every pod: values that differ per node are computed\n"
                  f"# from {INDEX_VAR} (the Job completion index). Index 0 hosts the c10d\n"
                  "# store (--rdzv-conf is_host, pytorch#73380).\n"
                  "exec " + _lines(shell_word(w) for w in words) + "\n")
        command = ("bash", "-c", script)
    template = PodTemplate(command, tuple(env))
    _check(template, words, commands)
    return template


def _lines(words) -> str:
    """One option per line (`--flag value`), continued with backslashes."""
    out = ""
    for word in words:
        out += (" \\\n  " if out and word.startswith("-") else " " if out else "") + word
    return out


def _check(template: PodTemplate, words: list[Word], commands) -> None:
    """Belt and braces: the template must reproduce every node exactly."""
    for index, (argv, env) in enumerate(commands):
        if tuple(expand_word(w, index) for w in words) != tuple(argv):
            raise LabError(f"k8s render: template does not reproduce node {index}'s command")
        got = {k: (str(index) if v is None else v) for k, v in template.env}
        if got != dict(env):
            raise LabError(f"k8s render: template does not reproduce node {index}'s environment")


def kube_escape(text: str) -> str:
    """Kubernetes expands `$(VAR)` and turns `$$` into `$` in command, args and env
    values; every other `$` passes through. Doubling exactly the `$` that precede
    `$` or `(` keeps the text intact and the shell script readable."""
    return re.sub(r"\$(?=[$(])", "$$", text)


# ---- manifests --------------------------------------------------------------
def render(plan: LaunchPlan, script_text: str | None = None) -> list[dict[str, Any]]:
    """Every object of the lab, in creation order. A user script is read from
    `spec.script` unless `script_text` is given (its only side effect)."""
    spec = plan.spec
    if spec.init_method == "file" and spec.shared_volume is None:
        raise LabError("k8s render: init_method file needs shared_volume: {claim: NAME}, a "
                       "ReadWriteMany claim every pod mounts (example: shared_volume: {claim: lab-shared})")
    objects: list[dict[str, Any]] = []
    if spec.script:
        objects.append(_script_configmap(plan, script_text))
    if spec.replicas == 1:
        objects += [_service(plan), _network_policy(plan), _job(plan)]
        return objects
    (store,) = plan.services
    objects.append(_store_service(plan))
    objects += [_service(plan, k) for k in range(spec.replicas)]
    objects.append(_network_policy(plan))
    objects.append(_store_job(plan, store))      # created first: it must be up before any node
    objects += [_job(plan, k) for k in range(spec.replicas)]
    return objects


def _script_key(spec: LabSpec) -> str:
    """The ConfigMap key: the script's file name with every character Kubernetes does not
    allow in a key (`[-._a-zA-Z0-9]+`) as `_`; the volume's items map it back to the
    file name, so the script keeps its name under SCRIPT_MOUNT."""
    name = _script_name(spec)
    return re.sub(r"[^-._a-zA-Z0-9]", "_", name)[-253:]


def _script_name(spec: LabSpec) -> str:
    return spec.script.rsplit("/", 1)[-1] if spec.script else ""


def _script_configmap(plan: LaunchPlan, script_text: str | None) -> dict[str, Any]:
    """The user's script as a ConfigMap: `data` when it is UTF-8 text, else `binaryData`
    (the exact bytes: Python reads a script in whatever encoding its coding line says).
    Over Kubernetes' 1 MiB ConfigMap limit it is a refusal (SpecError, exit 2)."""
    spec = plan.spec
    key = _script_key(spec)
    if script_text is not None:
        raw = script_text.encode("utf-8", "surrogateescape")
    else:
        path = Path(spec.script or "")
        if not path.is_file():
            raise LabError(f"script: no such file: {spec.script} (the k8s render puts it "
                           "into a ConfigMap; give a path relative to this folder)")
        raw = _read_script(path)
    if len(raw) + len(key) > MAX_CONFIGMAP_BYTES:
        raise SpecError(script_too_large(spec.script or "", len(raw)))
    try:
        content: dict[str, Any] = {"data": {key: raw.decode("utf-8")}}
    except UnicodeDecodeError:
        content = {"binaryData": {key: base64.b64encode(raw).decode("ascii")}}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(plan, script_configmap_name(spec), "script"), **content}


def _read_script(path: Path) -> bytes:
    """At most one byte over the limit: a huge file is refused without reading it all."""
    with open(path, "rb") as f:
        return f.read(MAX_CONFIGMAP_BYTES + 1)


def script_too_large(script: str, size: int) -> str:
    shown = f"{size:,} bytes" if size <= MAX_CONFIGMAP_BYTES else f"over {MAX_CONFIGMAP_BYTES:,} bytes"
    return (f"script: {script} is {shown}; the k8s backend carries it in a ConfigMap, and "
            f"Kubernetes caps a ConfigMap at 1 MiB (docs/limits.md): bake larger code into "
            "the image (image: ...) and run a small script")


def _ports(plan: LaunchPlan) -> list[tuple[str, int]]:
    """(name, port) a node pod listens on by plan: the rendezvous, and tcp:// init's own."""
    port = plan.placement.master_port
    out = [("rdzv", port)]
    if plan.spec.init_method == "tcp":
        out.append(("init", init_port(port)))
    return out


def _headless(plan: LaunchPlan, name: str, component: str, selector: dict[str, str],
              ports: list[tuple[str, int]], replica: int | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(plan, name, component, replica=replica),
        "spec": {
            "clusterIP": "None",                    # headless: one DNS record per pod
            "publishNotReadyAddresses": True,       # pods have no readiness; publish them anyway
            "selector": selector,
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in ports],
        },
    }


def _service(plan: LaunchPlan, replica: int = 0) -> dict[str, Any]:
    selector = {RUN_LABEL: plan.run_id, "app.kubernetes.io/component": "node"}
    if plan.spec.replicas > 1:
        selector[REPLICA_LABEL] = str(replica)
    return _headless(plan, service_name(plan.spec, replica), "rendezvous", selector, _ports(plan), replica)


def _store_service(plan: LaunchPlan) -> dict[str, Any]:
    """`<lab>-store` resolves to the store pod: REPLICA_STORE_ADDR."""
    selector = {RUN_LABEL: plan.run_id, "app.kubernetes.io/component": "store"}
    return _headless(plan, store_hostname(plan.spec), "store", selector,
                     [("store", int(plan.placement.store_port or 0))])


def _network_policy(plan: LaunchPlan) -> dict[str, Any]:
    same_run = {"matchLabels": {RUN_LABEL: plan.run_id}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(plan, plan.spec.name, "network-policy"),
        "spec": {
            "podSelector": same_run,
            "policyTypes": ["Ingress", "Egress"],
            # gloo/NCCL open ports of their own choosing: admit every port, only from this run.
            "ingress": [{"from": [{"podSelector": same_run}]}],
            # out: the same pods (every port), and cluster DNS to find them by name
            "egress": [
                {"to": [{"podSelector": same_run}]},
                {"to": [copy.deepcopy(DNS_PEER)],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            ],
        },
    }


def _security(spec: LabSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The restricted Pod Security Standard: (pod securityContext, container securityContext)."""
    pod = {
        "runAsNonRoot": True,
        "runAsUser": POD_USER,
        "runAsGroup": POD_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if spec.init_method == "file" or spec.shared_volume is not None:
        pod["fsGroup"] = POD_USER          # the shared claim writable for the lab's user
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,    # writes go to the emptyDirs (WRITABLE_DIRS, /dev/shm)
        "runAsNonRoot": True,
    }
    return pod, container


def writable_volumes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes): an emptyDir for each of WRITABLE_DIRS."""
    mounts = [{"name": name, "mountPath": path} for name, path in WRITABLE_DIRS]
    volumes = [{"name": name, "emptyDir": {}} for name, _ in WRITABLE_DIRS]
    return mounts, volumes


def _job_spec(plan: LaunchPlan, completions: int, indexed: bool, pod: dict[str, Any],
              component: str, replica: int | None = None,
              pod_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if indexed:
        spec["completionMode"] = "Indexed"
    spec.update({
        "completions": completions,
        "parallelism": completions,
        "backoffLimit": 0,                      # one failed rank fails the lab
        "activeDeadlineSeconds": deadline_seconds(plan.spec),
        "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
    })
    if indexed and k8s_settings.settings(plan.spec).queue:
        # Kueue starts an admitted Job by un-suspending it: created suspended, no pod
        # runs (or holds GPUs) before admission, webhook or not.
        spec["suspend"] = True
    spec["template"] = {"metadata": metadata(plan, None, component, replica=replica,
                                             extra_annotations=pod_annotations), "spec": pod}
    return spec


def deadline_seconds(spec: LabSpec) -> int:
    """activeDeadlineSeconds: an int64 > 0 (spec.py bounds timeouts; this is the backstop)."""
    seconds = max(1, math.ceil(spec.timeout))
    if seconds > MAX_INT64:
        raise SpecError(f"timeout: {spec.timeout:g} s does not fit Kubernetes' "
                        "activeDeadlineSeconds (an int64)")
    return seconds


def _store_job(plan: LaunchPlan, store: NodeLaunch) -> dict[str, Any]:
    """The replica store: one pod, no volumes; it exits by itself after the lab's
    timeout (`--lifetime`), and labctl deletes it with the run."""
    spec = plan.spec
    (proc,) = store.processes
    port = int(plan.placement.store_port or 0)
    pod_sc, container_sc = _security(spec)
    pod_sc.pop("fsGroup", None)
    mounts, volumes = writable_volumes()
    container = {
        "name": STORE_CONTAINER,
        "image": spec.resolved_image,
        "imagePullPolicy": "IfNotPresent",
        "command": [kube_escape(part) for part in proc.argv],
        "env": [{"name": k, "value": kube_escape(v)} for k, v in proc.env.items()],
        "ports": [{"name": "store", "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": dict(STORE_RESOURCES), "limits": dict(STORE_RESOURCES)},
        "securityContext": container_sc,
        "volumeMounts": mounts,
    }
    pod = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_sc,
        "containers": [container],
        "volumes": volumes,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(plan, store.hostname, "store"),
        "spec": _job_spec(plan, 1, False, pod, "store"),
    }


def _job(plan: LaunchPlan, replica: int = 0) -> dict[str, Any]:
    spec = plan.spec
    template = pod_template(plan, plan.replica_nodes(replica))
    env: list[dict[str, Any]] = []
    for name, value in template.env:
        if value is None:
            env.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}})
        else:
            env.append({"name": name, "value": kube_escape(value)})
    resources: dict[str, Any] = {"cpu": spec.resources.cpu, "memory": spec.resources.memory}
    if spec.dist_backend == "nccl":
        resources[GPU_RESOURCE] = str(spec.nproc_per_node)
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shm}}]
    writable_mounts, writable = writable_volumes()
    mounts += writable_mounts
    volumes += writable
    if spec.script:
        mounts.append({"name": "script", "mountPath": SCRIPT_MOUNT, "readOnly": True})
        # key -> file name: the key is sanitized, the file keeps the script's own name
        volumes.append({"name": "script", "configMap": {
            "name": script_configmap_name(spec),
            "items": [{"key": _script_key(spec), "path": _script_name(spec)}]}})
    if spec.shared_volume is not None and plan.placement.shared_dir:
        mounts.append({"name": "shared", "mountPath": plan.placement.shared_dir})
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": spec.shared_volume.claim}})
    pod_sc, container_sc = _security(spec)
    container = {
        "name": CONTAINER,
        "image": spec.resolved_image,
        "imagePullPolicy": "IfNotPresent",
        "command": [kube_escape(part) for part in template.command],
        "env": env,
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in _ports(plan)],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": container_sc,
        "volumeMounts": mounts,
    }
    settings = k8s_settings.settings(spec)
    pod: dict[str, Any] = {
        "subdomain": service_name(spec, replica),   # pod i: <job>-<i>.<service>
        "restartPolicy": "Never",
    }
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    pod["automountServiceAccountToken"] = False     # also with a service account: no API calls
    pod["enableServiceLinks"] = False
    pod.update(scheduling(plan))
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    pod["securityContext"] = pod_sc
    pod["containers"] = [container]
    pod["volumes"] = volumes
    queue = {QUEUE_LABEL: settings.queue} if settings.queue else None
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # The lab description, for `labctl collect` of a kubectl-applied lab (pods do not
        # need it: an annotation on the Job, which lives as long as they do).
        "metadata": metadata(plan, job_name(spec, replica), "node", extra_labels=queue,
                             replica=replica, extra_annotations={SPEC_KEY: stored_spec(spec)}),
        "spec": _job_spec(plan, spec.nodes, True, pod, "node", replica,
                          pod_annotations=bandwidth_annotations(spec)),
    }


# The bandwidth CNI plugin (containernetworking/plugins, meta/bandwidth) reads these pod
# annotations: a token bucket on the pod's egress, and on an ifb device for its ingress.
INGRESS_BANDWIDTH = "kubernetes.io/ingress-bandwidth"
EGRESS_BANDWIDTH = "kubernetes.io/egress-bandwidth"


def links_refusal(spec: LabSpec) -> str | None:
    """What of `links` pod annotations cannot say: one pod template serves every node of a
    Job, and the bandwidth plugin shapes a pod's whole traffic by rate only."""
    links = spec.links
    if links is None:
        return None
    if links.has_latency:
        return ("Kubernetes' bandwidth plugin shapes rate only, not latency; leave the latency "
                "out on k8s (compose applies it with tc netem where the kernel has it)")
    if links.pairs:
        return ("Kubernetes' bandwidth plugin shapes a pod's whole traffic, not the traffic of a "
                "pair of nodes; leave links.pairs out on k8s")
    rates = {links.node(i).rate_bps for i in range(spec.nodes * spec.replicas)}
    if len(rates) > 1:
        return ("every node of a Job shares one pod template, so every node gets the same "
                "bandwidth annotations on k8s: give one rate for every node (links.default or "
                "links: 1gbit), not per node")
    return None


def bandwidth_annotations(spec: LabSpec) -> dict[str, str] | None:
    """The pod template's `kubernetes.io/{ingress,egress}-bandwidth` for the lab's one link
    rate (bits/s as a quantity: 100mbit -> 100M), or None without links."""
    if spec.links is None:
        return None
    why = links_refusal(spec)
    if why:
        raise SpecError(f"k8s render: links: {why}")
    rate = spec.links.node(0).rate_bps
    if rate is None:
        return None
    quantity = kubernetes_quantity(rate)
    return {EGRESS_BANDWIDTH: quantity, INGRESS_BANDWIDTH: quantity}


def kubernetes_quantity(bps: int) -> str:
    """bits/s as a Kubernetes quantity (what the bandwidth plugin reads): 100000000 -> 100M.
    Kubernetes' encoding of a rate, so it lives with the k8s backend."""
    for suffix, size in (("T", 10 ** 12), ("G", 10 ** 9), ("M", 10 ** 6), ("k", 10 ** 3)):
        if bps % size == 0:
            return f"{bps // size}{suffix}"
    return str(bps)


def tolerations(spec: LabSpec) -> list[dict[str, Any]]:
    """GPU nodes are usually tainted nvidia.com/gpu:NoSchedule; an nccl lab that
    asks for GPUs must tolerate that, unless `k8s.gpu_toleration: false`."""
    settings = k8s_settings.settings(spec)
    out = [dict(GPU_TOLERATION)] if spec.dist_backend == "nccl" and settings.gpu_toleration else []
    out += [dict(t) for t in settings.tolerations if dict(t) not in out]
    return out


def scheduling(plan: LaunchPlan) -> dict[str, Any]:
    """The pod spec's placement fields, only those the lab sets (a lab without a
    `k8s:` section renders exactly as before it existed).

    `spread: hostname` is a *required* pod anti-affinity on kubernetes.io/hostname
    against the run's own node pods, not a topology spread constraint: maxSkew 1
    still puts two pods on one host once every host has one, while a lab that
    asks for one node per host means it (e.g. to measure the network, not
    loopback). Too few hosts then leave a pod Pending with the scheduler's reason,
    which labctl shows and fails on after `schedule_timeout`.
    """
    spec, settings = plan.spec, k8s_settings.settings(plan.spec)
    out: dict[str, Any] = {}
    if settings.priority_class:
        out["priorityClassName"] = settings.priority_class
    if settings.node_selector:
        out["nodeSelector"] = dict(sorted(settings.node_selector.items()))
    affinity = copy.deepcopy(dict(settings.affinity))
    if settings.spread == "hostname":
        anti = affinity.setdefault("podAntiAffinity", {})
        anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append({
            "labelSelector": {"matchLabels": {RUN_LABEL: plan.run_id,
                                              "app.kubernetes.io/component": "node"}},
            "topologyKey": HOSTNAME_TOPOLOGY,
        })
    if affinity:
        out["affinity"] = affinity
    tolerate = tolerations(spec)
    if tolerate:
        out["tolerations"] = tolerate
    return out


# ---- text ------------------------------------------------------------------
def _dump(obj: Any) -> str:
    return dump_yaml(obj)


# How to start what was rendered, as compose's header says it (`# Run: docker compose ...`):
# the one stream saved as a file (`labctl render k8s > lab-k8s.yaml`), or the folder of
# files with its kustomization.yaml (`labctl render k8s -o DIR`).
RUN_FILE = "# Run: kubectl apply --namespace NS -f lab-k8s.yaml  (this output, saved as lab-k8s.yaml)\n"
RUN_FOLDER = "# Run: kubectl apply --namespace NS -k DIR  (DIR: the folder of these files)\n"


def _header(plan: LaunchPlan, run: str = RUN_FILE) -> str:
    shape = f"{plan.spec.nodes} node(s) x {plan.spec.nproc_per_node} process(es)"
    if plan.spec.replicas > 1:
        shape = f"{plan.spec.replicas} replicas of {shape}, and the replica store"
    debug = (f"# Debug server: {port_forward(plan, 'NS')}\n"
             if plan.placement.debug_server_port else "")
    return (f"# labctl render k8s: lab {plan.spec.name}, run id {plan.run_id}, {shape}\n" + run +
            f"# Then: labctl collect --backend k8s --run-id {plan.run_id} --namespace NS"
            "  (logs, results, report; --delete removes the lab)\n" + debug)


def text(plan: LaunchPlan, script_text: str | None = None) -> str:
    """All objects as one multi-document YAML stream, for `kubectl apply -f -`."""
    return _header(plan) + "---\n".join(_dump(o) for o in render(plan, script_text))


def files(plan: LaunchPlan, script_text: str | None = None) -> dict[str, str]:
    """One file per object plus a kustomization.yaml, for `kubectl apply -k DIR`."""
    out: dict[str, str] = {}
    objects = render(plan, script_text)
    kinds = [obj["kind"] for obj in objects]
    for obj in objects:
        kind = obj["kind"].lower()
        # One object per kind: `job.yaml`; several (replicas): `job-<name>.yaml`.
        name = f"{kind}.yaml" if kinds.count(obj["kind"]) == 1 else f"{kind}-{obj['metadata']['name']}.yaml"
        out[name] = _header(plan, RUN_FOLDER) + _dump(obj)
    names = [n for n in FILE_ORDER if n in out] if plan.spec.replicas == 1 else list(out)
    out["kustomization.yaml"] = _header(plan, RUN_FOLDER) + _dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": names,
    })
    return out
