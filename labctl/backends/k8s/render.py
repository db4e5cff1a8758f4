"""Kubernetes renderer: a LaunchPlan in, manifests out (pure and deterministic).

One lab = a headless Service, an Indexed Job whose pods are the nodes, a
NetworkPolicy and (for a user script) a ConfigMap. Pod i of a Job named after
the lab gets hostname `<lab>-<i>` and, through the Service (also named after
the lab), the DNS name `<lab>-<i>.<lab>`; node 0's name is MASTER_ADDR.

The pod spec itself (the one template that serves every index, security,
scheduling, the links) is podspec.py; this module makes the objects around it.

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
from pathlib import Path
from typing import Any

from ...errors import LabError
from ...plan import LaunchPlan, NodeLaunch, init_port, node_hostname, replica_name, store_hostname
from ...rendered import RUN_LABEL, SPEC_KEY, dump_yaml, stored_spec
from ...spec import LabSpec, SpecError
from ..containers import SCRIPT_MOUNT
from . import settings as k8s_settings
from .podspec import (COMPLETION_INDEX_FIELD, GPU_RESOURCE, bandwidth_annotations, kube_escape,
                      pod_template, scheduling, security, writable_volumes)
from .settings import QUEUE_LABEL

CONTAINER = "node"
TTL_AFTER_FINISHED_S = 3600                 # kubectl-managed runs: an hour to read the logs
FILE_ORDER = ("configmap.yaml", "service.yaml", "networkpolicy.yaml", "job.yaml")


# Kubernetes' own limits (apimachinery / core validation), checked here so that a render
# kubectl would refuse is one clear line instead (docs/limits.md).
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")   # IsConfigMapKey
MAX_CONFIGMAP_BYTES = 1024 * 1024                  # MaxConfigMapSize: keys + values of data/binaryData
MAX_ANNOTATIONS_BYTES = 256 * 1024                 # TotalAnnotationSizeLimitB: keys + values
MAX_INT64 = 2 ** 63 - 1
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
    pod_sc, container_sc = security(spec)
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
    pod_sc, container_sc = security(spec)
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
