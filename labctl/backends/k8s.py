"""Kubernetes backend: apply the rendered lab, watch it, bring the logs home, delete it.

Everything the run creates carries the label `labctl.dev/run-id=<run>`, which
is how `run` cleans up and how `down` finds leftovers. Logs and events are
collected *before* anything is deleted — in a `finally`, so a failure, the
deadline and Ctrl-C all leave them in the run folder.

The `kubernetes` package is imported only inside `connect()`, so that
`labctl --help` and `labctl render k8s` never pay for it. Tests inject a
`Cluster` made of small fakes in place of the real API objects.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import LabError
from ..plan import LaunchPlan, Placement, container_placement
from ..render import k8s as k8s_render
from ..rundir import NodeOutcome, RunDir
from ..spec import LabSpec

POLL_S = 2.0
REQUEST_TIMEOUT_S = 15
# Container waiting reasons that never resolve by themselves: fail now, not at the deadline.
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                           "CreateContainerConfigError", "CreateContainerError"})
SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def placement(spec: LabSpec, **_options: Any) -> Placement:
    """Pods reach node 0 as `<lab>-0.<lab>` (Indexed Job pod under the headless Service)."""
    if spec.script and not Path(spec.script).is_file():
        raise FileNotFoundError(f"script: no such file: {spec.script}")
    return container_placement(spec, "k8s", master_addr=k8s_render.master_addr(spec),
                               replica_master_addrs=k8s_render.replica_master_addrs(spec))  # [init-methods]


@dataclass
class Cluster:
    """The API groups the backend speaks to, and where."""
    core: Any            # CoreV1Api
    batch: Any           # BatchV1Api
    networking: Any      # NetworkingV1Api
    namespace: str
    context: str | None = None


def connect(context: str | None = None, namespace: str | None = None) -> Cluster:
    """Find the cluster the way kubectl does: KUBECONFIG, ~/.kube/config (with
    --context), else in-cluster config when running inside a pod."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise LabError("the k8s backend needs the kubernetes Python client; install it with: "
                       "pip install 'labctl[k8s]'") from None
    hint = "set KUBECONFIG or --context"
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    has_kubeconfig = any(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p)
    try:
        if not has_kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            context = "in-cluster"
            if namespace is None and Path(SA_NAMESPACE_FILE).is_file():
                namespace = Path(SA_NAMESPACE_FILE).read_text().strip()
        elif not has_kubeconfig:
            raise LabError(f"no Kubernetes cluster reachable: no kubeconfig at {kubeconfig} and "
                           f"not running in a pod; {hint}")
        else:
            # KUBECONFIG is read now, not when `kubernetes` was imported; ':'-lists merge.
            config.load_kube_config(config_file=kubeconfig, context=context)
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            if context is None:
                context = active.get("name")
            if namespace is None:
                chosen = next((c for c in contexts if c.get("name") == context), active)
                namespace = (chosen.get("context") or {}).get("namespace")
    except LabError:
        raise
    except Exception as exc:       # ConfigException, bad YAML, missing cert files ...
        raise LabError(f"no Kubernetes cluster reachable: {_one_line(exc)}; {hint}") from None
    api = client.ApiClient()
    try:
        client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:       # connection refused, TLS, 401 ...
        host = api.configuration.host
        raise LabError(f"no Kubernetes cluster reachable at {host} (context {context}): "
                       f"{_one_line(exc)}; {hint}") from None
    return Cluster(client.CoreV1Api(api), client.BatchV1Api(api), client.NetworkingV1Api(api),
                   namespace or "default", context)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None) if type(exc).__name__ == "ApiException" else None


# ---- creating -------------------------------------------------------------
def _create(cluster: Cluster, obj: dict[str, Any]) -> None:
    ns, kind = cluster.namespace, obj["kind"]
    create = {
        "ConfigMap": cluster.core.create_namespaced_config_map,
        "Service": cluster.core.create_namespaced_service,
        "NetworkPolicy": cluster.networking.create_namespaced_network_policy,
        "Job": cluster.batch.create_namespaced_job,
    }[kind]
    try:
        create(ns, obj)
    except Exception as exc:
        name, lab = obj["metadata"]["name"], obj["metadata"]["labels"]["app.kubernetes.io/name"]
        if _status(exc) == 409:
            raise LabError(
                f"{kind.lower()} {name} already exists in namespace {ns} (another run of lab "
                f"{lab}?); delete it with: labctl down <its run folder>, or kubectl delete -n {ns} "
                "job,pod,service,networkpolicy,configmap -l "
                f"app.kubernetes.io/name={lab},app.kubernetes.io/managed-by=labctl") from None
        if _status(exc) is not None:
            raise LabError(f"creating {kind.lower()} {name} in namespace {ns} failed: "
                           f"{_status(exc)} {_one_line(getattr(exc, 'reason', exc))}") from None
        raise


# ---- watching ---------------------------------------------------------------
def _index(pod: Any) -> int | None:
    annotations = pod.metadata.annotations or {}
    value = annotations.get("batch.kubernetes.io/job-completion-index")
    return int(value) if value is not None and value.isdigit() else None


def _pods_by_index(cluster: Cluster, run_id: str) -> dict[int, Any]:
    """The newest pod of every completion index."""
    pods = cluster.core.list_namespaced_pod(
        cluster.namespace, label_selector=k8s_render.run_selector(run_id)).items
    found: dict[int, Any] = {}
    for pod in sorted(pods, key=lambda p: str(p.metadata.creation_timestamp or "")):
        index = _index(pod)
        if index is not None:
            found[index] = pod
    return found


def _container_state(pod: Any) -> Any:
    statuses = (pod.status.container_statuses or []) if pod.status else []
    return statuses[0].state if statuses else None


def _pod_phase(pod: Any | None) -> str:
    if pod is None:
        return "pending"
    phase = (pod.status.phase if pod.status else None) or "Pending"
    return {"Pending": "pending", "Running": "running", "Succeeded": "succeeded",
            "Failed": "failed"}.get(phase, phase.lower())


def _stuck(pods: dict[int, Any]) -> str | None:
    for index, pod in sorted(pods.items()):
        state = _container_state(pod)
        waiting = getattr(state, "waiting", None) if state else None
        if waiting is not None and waiting.reason in STUCK_REASONS:
            return f"pod {pod.metadata.name} (node {index}): {waiting.reason}: {waiting.message or ''}".strip()
    return None


def _job_condition(job: Any) -> tuple[str, str] | None:
    """('Complete'|'Failed', reason) once the Job controller has decided."""
    for cond in (job.status.conditions or []) if job.status else []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return cond.type, cond.reason or ""
    return None


def _watch(plan: LaunchPlan, cluster: Cluster, deadline: float,
           progress: Callable[[str], None], t0: float) -> tuple[str, str]:
    name = k8s_render.job_name(plan.spec)
    last = ""
    while True:
        job = cluster.batch.read_namespaced_job(name, cluster.namespace)
        pods = _pods_by_index(cluster, plan.run_id)
        states = "  ".join(f"node-{i}: {_pod_phase(pods.get(i))}" for i in range(plan.spec.nodes))
        line = f"{states}  (deadline in {max(0, deadline - time.monotonic()):.0f}s)"
        if states != last:
            progress(f"[{time.monotonic() - t0:6.1f}s] {line}")
            last = states
        decided = _job_condition(job)
        if decided is not None:
            kind, reason = decided
            if kind == "Complete":
                return "passed", ""
            if reason == "DeadlineExceeded":
                return "timeout", f"job {name} passed its activeDeadlineSeconds ({plan.spec.timeout:g}s)"
            return "failed", f"job {name} failed ({reason or 'no reason given'})"
        stuck = _stuck(pods)
        if stuck:
            progress(f"stuck: {stuck}; stopping the lab")
            return "failed", stuck
        if time.monotonic() > deadline:
            progress(f"timeout: deadline of {plan.spec.timeout:g}s passed; stopping the lab")
            return "timeout", f"deadline of {plan.spec.timeout:g}s passed"
        time.sleep(POLL_S)


# ---- collecting -------------------------------------------------------------
def _outcomes(plan: LaunchPlan, pods: dict[int, Any], job_start: Any) -> list[NodeOutcome]:
    out = []
    for node in plan.nodes:
        pod = pods.get(node.index)
        state = _container_state(pod) if pod is not None else None
        done = getattr(state, "terminated", None) if state else None
        if done is None:
            out.append(NodeOutcome(node.index, node.hostname, None, "pending"))
            continue
        code = done.exit_code
        exited = None
        if job_start is not None and done.finished_at is not None:
            exited = round((done.finished_at - job_start).total_seconds(), 3)
        if code == 0:
            out.append(NodeOutcome(node.index, node.hostname, 0, "succeeded", exited))
        elif code > 128:       # SIGTERM/SIGKILL from the Job controller or the kubelet
            out.append(NodeOutcome(node.index, node.hostname, 128 - code, "killed", exited))
        else:
            out.append(NodeOutcome(node.index, node.hostname, code, "failed", exited))
    return out


def _events_text(cluster: Cluster, kind: str, name: str) -> str:
    events = cluster.core.list_namespaced_event(
        cluster.namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")
    lines = []
    for ev in sorted(events.items, key=lambda e: str(e.last_timestamp or e.event_time or "")):
        when = ev.last_timestamp or ev.event_time or ""
        count = f" (x{ev.count})" if (ev.count or 1) > 1 else ""
        lines.append(f"{when} {ev.type} {ev.reason} {kind.lower()}/{name}: {ev.message}{count}")
    return "\n".join(lines) + ("\n" if lines else "")


def _collect(plan: LaunchPlan, rundir: RunDir, cluster: Cluster,
             progress: Callable[[str], None]) -> list[NodeOutcome]:
    """Every pod's log and the Job's and pods' events into the run folder; best effort
    per item, so one unreadable pod does not cost the others' logs."""
    name = k8s_render.job_name(plan.spec)
    events = rundir.path / "events"
    events.mkdir(exist_ok=True)
    try:
        pods = _pods_by_index(cluster, plan.run_id)
    except Exception as exc:
        progress(f"could not list pods: {_one_line(exc)}")
        pods = {}
    for index, pod in sorted(pods.items()):
        try:
            text = cluster.core.read_namespaced_pod_log(
                pod.metadata.name, cluster.namespace, container=k8s_render.CONTAINER)
            rundir.write_node_log(index, text or "")
        except Exception as exc:
            progress(f"could not read the log of pod {pod.metadata.name}: {_one_line(exc)}")
    for kind, obj in [("Job", name)] + [("Pod", p.metadata.name) for _, p in sorted(pods.items())]:
        try:
            (events / f"{kind.lower()}-{obj}.log").write_text(_events_text(cluster, kind, obj))
        except Exception as exc:
            progress(f"could not read the events of {kind.lower()}/{obj}: {_one_line(exc)}")
    job_start = None
    try:
        job = cluster.batch.read_namespaced_job(name, cluster.namespace)
        job_start = job.status.start_time if job.status else None
    except Exception:
        pass
    return _outcomes(plan, pods, job_start)


# ---- deleting ---------------------------------------------------------------
def delete_run(cluster: Cluster, run_id: str) -> list[str]:
    """Delete every object labelled with this run; returns `kind/name` of each."""
    ns, selector = cluster.namespace, k8s_render.run_selector(run_id)
    background = {"propagation_policy": "Background"}
    kinds = [
        ("job", cluster.batch.list_namespaced_job, cluster.batch.delete_namespaced_job, background),
        ("pod", cluster.core.list_namespaced_pod, cluster.core.delete_namespaced_pod, {}),
        ("service", cluster.core.list_namespaced_service, cluster.core.delete_namespaced_service, {}),
        ("networkpolicy", cluster.networking.list_namespaced_network_policy,
         cluster.networking.delete_namespaced_network_policy, {}),
        ("configmap", cluster.core.list_namespaced_config_map,
         cluster.core.delete_namespaced_config_map, {}),
    ]
    deleted = []
    for kind, list_fn, delete_fn, extra in kinds:
        for obj in list_fn(ns, label_selector=selector).items:
            try:
                delete_fn(obj.metadata.name, ns, **extra)
                deleted.append(f"{kind}/{obj.metadata.name}")
            except Exception as exc:
                if _status(exc) != 404:      # gone already (the Job took its pods along)
                    raise
    return deleted


# ---- the verbs --------------------------------------------------------------
def run(plan: LaunchPlan, rundir: RunDir, deadline: float,
        progress: Callable[[str], None] = lambda line: None,
        context: str | None = None, namespace: str | None = None,
        cluster: Cluster | None = None) -> tuple[list[NodeOutcome], str, str]:
    """Create the lab's objects, watch the Job to its end or the deadline, collect
    logs and events, delete everything. Returns (outcomes, state, message)."""
    manifests = k8s_render.render(plan)
    rundir.write_rendered("k8s.yaml", k8s_render.text(plan))
    cluster = cluster or connect(context, namespace)
    rundir.meta["k8s"] = {"namespace": cluster.namespace, "context": cluster.context,
                          "selector": k8s_render.run_selector(plan.run_id)}
    rundir.write_status()
    t0 = time.monotonic()
    state, message = "error", ""
    outcomes: list[NodeOutcome] = [NodeOutcome(n.index, n.hostname, None, "pending")
                                   for n in plan.nodes]
    created: list[str] = []       # kinds this run created; nothing else is touched
    try:
        for obj in manifests:
            _create(cluster, obj)
            created.append(obj["kind"])
            progress(f"created {obj['kind'].lower()}/{obj['metadata']['name']} "
                     f"in namespace {cluster.namespace}")
        state, message = _watch(plan, cluster, deadline, progress, t0)
    except KeyboardInterrupt:
        state, message = "interrupted", "interrupted (Ctrl-C)"
        progress("interrupted: collecting logs, then deleting the lab")
    finally:
        if "Job" in created:
            outcomes = _collect(plan, rundir, cluster, progress)
        if created:
            try:
                deleted = delete_run(cluster, plan.run_id)
                progress(f"deleted {len(deleted)} object(s) labelled "
                         f"{k8s_render.run_selector(plan.run_id)}")
            except Exception as exc:
                progress(f"cleanup failed: {_one_line(exc)}; run: labctl down {rundir.path}")
    if state == "passed" and any(o.state != "succeeded" for o in outcomes):
        state = "failed"
    return outcomes, state, message


def down(rundir: RunDir, cluster: Cluster | None = None) -> str:
    """Delete exactly what one run created (by its run label), where it ran."""
    where = rundir.meta.get("k8s") or {}
    cluster = cluster or connect(where.get("context") if where.get("context") != "in-cluster"
                                 else None, where.get("namespace"))
    run_id = rundir.meta["run_id"]
    deleted = delete_run(cluster, run_id)
    if not deleted:
        return (f"nothing to delete: no objects labelled {k8s_render.run_selector(run_id)} "
                f"in namespace {cluster.namespace}")
    return f"deleted {len(deleted)} object(s) in namespace {cluster.namespace}: {', '.join(deleted)}"
