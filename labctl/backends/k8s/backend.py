"""Kubernetes backend: apply the rendered lab, watch it, bring the logs home, delete it.

Everything the run creates carries the label `labctl.dev/run-id=<run>`, which
is how `delete` cleans up and how `attach` (collect, down) finds a run. The
driver collects logs and events *before* anything is deleted, so a failure,
the deadline and Ctrl-C all leave them in the run folder. Every API call goes
through `Cluster.call` (api.py): retried on 429/5xx, dropped
connections and timeouts within the lab's deadline, one line when the API keeps
failing. Pod logs and events are read as bytes and streamed into the run folder.

With `k8s.kind: jobset` the lab is one JobSet (jobset.py), created,
read and deleted through the custom objects API; its pods are found by the same
run label. A cluster without the JobSet CRD is refused (exit 2) before anything
is created.

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

from ...collect import Tally
from ...errors import LabError
from ...faults import Fault, NotYet
from ...outcome import NodeOutcome, NodeState, from_exit_code
from ...plan import LaunchPlan, Placement, plan as make_plan
from ...rendered import SPEC_KEY
from ...rundir import RunDir
from ...spec import LabSpec
from ...units import quantity
from .. import spec_from_stored
from ..base import (Action, Backend, BackendFailure, BackendOptions, BackendState, Bound, BoundRun,
                    PreflightError, RunView, UnknownRun, dispatch, option)
from ..containers import container_placement, container_shared_dir
from . import jobset as jobset_render
from . import render as k8s_render
from . import scheduling as k8s_scheduling
from . import settings as k8s_settings
from .api import (CONNECT_RETRY_S, ApiUnavailable, Cluster, api_client, api_status,
                  failure_text, retry_call)
from workloads._protocol import one_line

POLL_S = 2.0
# Container waiting reasons that never resolve by themselves: fail now, not at the deadline.
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                           "CreateContainerConfigError", "CreateContainerError"})
SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Why a node's pod can be missing once its Job exists: said where the log is missed.
POD_GONE = ("pod gone before its log was read (deleted, evicted, or removed with its Job "
            f"ttlSecondsAfterFinished={k8s_render.TTL_AFTER_FINISHED_S}s after the Job finished): "
            "its log is lost")


def connect(context: str | None = None, namespace: str | None = None) -> Cluster:
    """Find the cluster the way kubectl does: KUBECONFIG, ~/.kube/config (with
    --context), else in-cluster config when running inside a pod."""
    try:
        import tenacity  # noqa: F401  (api.py retries every call with it)
        from kubernetes import client, config
    except ImportError as exc:
        raise LabError(f"the k8s backend needs the kubernetes Python client and tenacity ({exc}); "
                       "install them with: pip install 'labctl[k8s]'") from None
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
        raise LabError(f"no Kubernetes cluster reachable: {one_line(exc, 300)}; {hint}") from None
    api = api_client()
    version = client.VersionApi(api)
    try:                           # a busy or rolling server is waited for; a refusal is not
        retry_call("GET /version", lambda timeout: version.get_code(_request_timeout=timeout),
                   time.monotonic() + CONNECT_RETRY_S, connection_errors=False)
    except Exception as exc:       # connection refused, TLS, 401 ...
        host = api.configuration.host
        what = str(exc) if isinstance(exc, LabError) else failure_text(exc)
        raise LabError(f"no Kubernetes cluster reachable at {host} (context {context}): "
                       f"{one_line(what, 300)}; {hint}") from None
    return Cluster(client.CoreV1Api(api), client.BatchV1Api(api), client.NetworkingV1Api(api),
                   namespace or "default", context, custom=client.CustomObjectsApi(api))


def _count(value: Any) -> int:
    """An extended resource's count ("8"); anything unreadable counts as none."""
    try:
        return int(quantity(value))
    except ValueError:
        return 0


def _status(exc: BaseException) -> int | None:
    """The API server's answer to a failed call (404, 409 ...), None when it gave none."""
    return api_status(exc)


# ---- creating -------------------------------------------------------------
def _create(cluster: Cluster, obj: dict[str, Any]) -> None:
    ns, kind = cluster.namespace, obj["kind"]
    try:
        if kind == jobset_render.KIND:
            cluster.call(cluster.custom.create_namespaced_custom_object, jobset_render.GROUP,
                         jobset_render.VERSION, ns, jobset_render.PLURAL, obj)
        else:
            create = {
                "ConfigMap": cluster.core.create_namespaced_config_map,
                "Service": cluster.core.create_namespaced_service,
                "NetworkPolicy": cluster.networking.create_namespaced_network_policy,
                "Job": cluster.batch.create_namespaced_job,
            }[kind]
            cluster.call(create, ns, obj)
    except ApiUnavailable:
        raise
    except Exception as exc:
        name, lab = obj["metadata"]["name"], obj["metadata"]["labels"]["app.kubernetes.io/name"]
        if _status(exc) == 409 and _made_by_this_run(cluster, obj):
            return                  # an earlier try created it; its answer was lost on the way
        if _status(exc) == 409:
            raise LabError(
                f"{kind.lower()} {name} already exists in namespace {ns} (another run of lab "
                f"{lab}?); delete it with: labctl down <its run folder>, or kubectl delete -n {ns} "
                f"{'jobset,' if kind == jobset_render.KIND else ''}job,pod,service,networkpolicy,configmap -l "
                f"app.kubernetes.io/name={lab},app.kubernetes.io/managed-by=labctl") from None
        if _status(exc) is not None:
            raise LabError(f"creating {kind.lower()} {name} in namespace {ns} failed: "
                           f"{failure_text(exc)}") from None
        raise


def _made_by_this_run(cluster: Cluster, obj: dict[str, Any]) -> bool:
    """Whether the object of `obj`'s kind and name that exists carries `obj`'s run label:
    a create retried after a dropped answer finds its own object (409), not another run's."""
    run_id = obj["metadata"]["labels"].get(k8s_render.RUN_LABEL)
    selector, name = k8s_render.run_selector(run_id), obj["metadata"]["name"]
    if obj["kind"] == jobset_render.KIND:
        return any(j["metadata"]["name"] == name for j in _jobsets(cluster, selector))
    list_fn = {"ConfigMap": cluster.core.list_namespaced_config_map,
               "Service": cluster.core.list_namespaced_service,
               "NetworkPolicy": cluster.networking.list_namespaced_network_policy,
               "Job": cluster.batch.list_namespaced_job}[obj["kind"]]
    found = cluster.call(list_fn, cluster.namespace, label_selector=selector).items
    return any(o.metadata.name == name for o in found)


def require_jobset_crd(cluster: Cluster) -> None:
    """`k8s.kind: jobset` on a cluster that does not serve JobSets: one line, exit 2,
    before anything is created. Listing jobsets (limit 1) needs only the namespace
    rights the run needs anyway, not the cluster-wide right to read CRDs; an API
    server answers 404 for a resource it does not serve."""
    where = f"namespace {cluster.namespace}" + (f" (context {cluster.context})" if cluster.context else "")
    if cluster.custom is None:
        raise PreflightError(f"k8s.kind jobset: no custom objects API to create JobSets in {where}")
    try:
        cluster.call(cluster.custom.list_namespaced_custom_object,
                     jobset_render.GROUP, jobset_render.VERSION, cluster.namespace,
                     jobset_render.PLURAL, limit=1)
    except Exception as exc:
        status = _status(exc)
        if status == 404:
            raise PreflightError(
                f"k8s.kind jobset needs the JobSet CRD ({jobset_render.PLURAL}.{jobset_render.GROUP}, "
                f"{jobset_render.API_VERSION}), and the cluster does not serve it in {where}; install "
                "JobSet (https://jobset.sigs.k8s.io/docs/installation/) or use k8s.kind: job") from None
        if status == 403:
            raise PreflightError(
                f"k8s.kind jobset: not allowed to list {jobset_render.PLURAL}.{jobset_render.GROUP} in "
                f"{where} (403); ask for get/list/create/delete on jobsets, or use k8s.kind: job") from None
        if status is not None:
            raise LabError(f"checking for the JobSet CRD in {where} failed: "
                           f"{failure_text(exc)}") from None
        raise


def _jobsets(cluster: Cluster, selector: str, required: bool = False) -> list[dict[str, Any]]:
    """The JobSets matching `selector`; none where the cluster has no JobSet CRD, and none
    where listing them is forbidden (403) unless `required` (a JobSet lab's own cleanup):
    a `job` lab must not fail on a right it never needed."""
    if cluster.custom is None:
        return []
    try:
        found = cluster.call(cluster.custom.list_namespaced_custom_object,
                             jobset_render.GROUP, jobset_render.VERSION, cluster.namespace,
                             jobset_render.PLURAL, label_selector=selector)
    except Exception as exc:
        if _status(exc) == 404 or (_status(exc) == 403 and not required):
            return []                    # no JobSet CRD (or no right to see JobSets): none
        if _status(exc) == 403:
            raise LabError(f"not allowed to list {jobset_render.PLURAL}.{jobset_render.GROUP} in "
                           f"namespace {cluster.namespace} (403), so this JobSet lab cannot be found "
                           "or deleted; ask for get/list/delete on jobsets") from None
        raise
    return list(found.get("items") or [])


# ---- watching ---------------------------------------------------------------
@dataclass
class Watched:
    """What a run's pods belong to, read once per poll: the lab's Job (kind job: the
    first replica's) or its JobSet. `verdict` is ('Complete'|'Failed', reason) once decided."""
    kind: str                              # "Job" | "JobSet"
    name: str
    start: Any = None                      # the (node) Job's start time: exit times count from it
    verdict: tuple[str, str] | None = None
    suspended: bool = False                # waiting for Kueue (or someone) to un-suspend it


def _read_watched(cluster: Cluster, kind: str, name: str) -> Watched | None:
    """The Job or JobSet as it is now; None once it is gone (404)."""
    try:
        if kind == "Job":
            job = cluster.call(cluster.batch.read_namespaced_job, name, cluster.namespace)
            return Watched(kind, name, job.status.start_time if job.status else None,
                           _job_condition(job), bool(job.spec is not None and job.spec.suspend))
        found = cluster.call(cluster.custom.get_namespaced_custom_object, jobset_render.GROUP,
                             jobset_render.VERSION, cluster.namespace, jobset_render.PLURAL, name)
    except Exception as exc:
        if _status(exc) != 404:
            raise
        return None
    return Watched(kind, name, _jobset_start(cluster, found), _jobset_condition(found),
                   bool((found.get("spec") or {}).get("suspend")))


def _jobset_condition(jobset: dict[str, Any]) -> tuple[str, str] | None:
    """The JobSet controller's verdict: its `Completed` or `Failed` condition, as the Job's words."""
    for cond in (jobset.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Completed", "Failed"):
            return ("Complete" if cond["type"] == "Completed" else "Failed"), cond.get("reason") or ""
    return None


def _jobset_start(cluster: Cluster, jobset: dict[str, Any]) -> Any:
    """When the first node Job of the JobSet started (a JobSet has no start time of its own)."""
    selector = f"{jobset_render.JOBSET_NAME_LABEL}={jobset['metadata']['name']}"
    jobs = cluster.call(cluster.batch.list_namespaced_job, cluster.namespace,
                        label_selector=selector).items
    starts = [j.status.start_time for j in jobs if j.status is not None and j.status.start_time
              and (j.metadata.labels or {}).get("app.kubernetes.io/component") == "node"]
    return min(starts) if starts else None


def _index(pod: Any) -> int | None:
    annotations = pod.metadata.annotations or {}
    value = annotations.get("batch.kubernetes.io/job-completion-index")
    return int(value) if value is not None and value.isdigit() else None


def _pods_by_index(cluster: Cluster, run_id: str, nodes_per_replica: int = 0) -> dict[int, Any]:
    """The newest pod of every node: its completion index, plus replica x nodes when the
    lab has replicas (each replica is an Indexed Job of its own; the store pod has no index)."""
    pods = cluster.call(cluster.core.list_namespaced_pod, cluster.namespace,
                        label_selector=k8s_render.run_selector(run_id)).items
    found: dict[int, Any] = {}
    for pod in sorted(pods, key=lambda p: str(p.metadata.creation_timestamp or "")):
        index = _index(pod)
        if (pod.metadata.labels or {}).get("app.kubernetes.io/component") == "store":
            continue                # a JobSet's store Job is Indexed too: it is no node
        if index is not None:
            replica = (pod.metadata.labels or {}).get(k8s_render.REPLICA_LABEL)
            if replica is not None and str(replica).isdigit():
                index += int(replica) * nodes_per_replica
            found[index] = pod
    return found


def _container_state(pod: Any) -> Any:
    statuses = (pod.status.container_statuses or []) if pod.status else []
    return statuses[0].state if statuses else None


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


# ---- collecting -------------------------------------------------------------
def _outcome(index: int, hostname: str, pod: Any | None, job_start: Any = None) -> NodeOutcome:
    """A pod's outcome: its container's exit code (128 + N: killed by signal N)."""
    if pod is None:
        return NodeOutcome(index, hostname)
    state = _container_state(pod)
    done = getattr(state, "terminated", None) if state else None
    if done is None:
        phase = (pod.status.phase if pod.status else None) or "Pending"
        waiting = getattr(state, "waiting", None) if state else None
        return NodeOutcome(index, hostname, state=NodeState.RUNNING if phase == "Running"
                           else NodeState.PENDING, reason=getattr(waiting, "reason", None))
    exited = None
    if job_start is not None and done.finished_at is not None:
        exited = round((done.finished_at - job_start).total_seconds(), 3)
    node_state, sig = from_exit_code(done.exit_code, shell_convention=True)
    return NodeOutcome(index, hostname, done.exit_code, node_state, exited, signal=sig)


def _never_started(pod: Any) -> bool:
    """A pod whose container has not run yet (unschedulable, pulling its image) has no
    log to read: the API answers 400 ("waiting to start"), and waiting cannot change that."""
    if pod.status is None or (pod.status.phase or "Pending") != "Pending":
        return False
    statuses = pod.status.container_statuses or []
    if not statuses:
        return True
    status = statuses[0]
    ran = status.state is not None and (status.state.running or status.state.terminated)
    before = status.last_state is not None and status.last_state.terminated
    return not (ran or before or status.restart_count)


def _collect(hostnames: dict[int, str], job: str, run_id: str, rundir: RunDir,
             cluster: Cluster, progress: Callable[[str], None],
             strict: bool = False, nodes_per_replica: int = 0, kind: str = "Job") -> list[NodeOutcome]:
    """Every pod's log and the Job's (or JobSet's: `kind`) and pods' events into the run folder.

    Every item is tried (one unreadable pod does not cost the others' logs); then,
    if a log could not be saved whole, or events could not be read because the API
    kept failing, this raises (LabError), so that the driver and `down` delete
    nothing: a later `labctl down` can still save them. A pod that is gone (404)
    or never started has no log to wait for. `strict`: any failure raises.
    """
    events = rundir.path / "events"
    events.mkdir(exist_ok=True)
    tally = Tally(progress)              # what could not be saved is said; kept ones raise

    # No pod list, nothing saved: the error (one line) goes up, and the lab is kept.
    pods = _pods_by_index(cluster, run_id, nodes_per_replica)
    for index, pod in sorted(pods.items()):
        name = pod.metadata.name
        if _never_started(pod):
            progress(f"pod {name} (node {index}) never started: it has no log")
            continue
        tally.attempt(f"could not read the log of pod {name}",
                      lambda: cluster.save_pod_log(name, k8s_render.CONTAINER, rundir.node_log(index)),
                      counts=lambda exc: strict or _status(exc) not in (400, 404))
    for what, obj in [(kind, job)] + [("Pod", p.metadata.name) for _, p in sorted(pods.items())]:
        tally.attempt(f"could not read the events of {what.lower()}/{obj}",
                      lambda: cluster.save_events(what, obj, events / f"{what.lower()}-{obj}.log"),
                      counts=lambda exc: strict or isinstance(exc, ApiUnavailable))
    tally.check()
    job_start, verdict = None, None
    try:
        found = _read_watched(cluster, kind, job)
        if found is not None:
            job_start, verdict = found.start, found.verdict
    except Exception:
        pass
    missing = sorted(set(hostnames) - set(pods))
    out = [_outcome(i, h, pods.get(i), job_start) for i, h in sorted(hostnames.items())]
    for o in out:
        if o.index in missing:
            o.state, o.reason = NodeState.LOST, POD_GONE + (
                f"; the {kind} says {verdict[0]}" + (f" ({verdict[1]})" if verdict[1] else "")
                if verdict else "")
    return out


# ---- deleting ---------------------------------------------------------------
def delete_run(cluster: Cluster, run_id: str, jobset: bool = False) -> list[str]:
    """Delete every object labelled with this run; returns `kind/name` of each.
    `jobset`: the run is a JobSet lab, so not being allowed to list JobSets is an error."""
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
    # The JobSet first: its controller would recreate Jobs deleted under it. Its Jobs and
    # pods go with it (Background), as a Job's pods go with the Job.
    for obj in _jobsets(cluster, selector, required=jobset):
        name = obj["metadata"]["name"]
        try:
            cluster.call(cluster.custom.delete_namespaced_custom_object, jobset_render.GROUP,
                         jobset_render.VERSION, ns, jobset_render.PLURAL, name, **background)
            deleted.append(f"jobset/{name}")
        except Exception as exc:
            if _status(exc) != 404:
                raise
    for kind, list_fn, delete_fn, extra in kinds:
        for obj in cluster.call(list_fn, ns, label_selector=selector).items:
            try:
                cluster.call(delete_fn, obj.metadata.name, ns, **extra)
                deleted.append(f"{kind}/{obj.metadata.name}")
            except Exception as exc:
                if _status(exc) != 404:      # gone already (the Job took its pods along)
                    raise
    return deleted


# ---- the backend ------------------------------------------------------------------
def _is_jobset(spec: LabSpec) -> bool:
    return k8s_settings.settings(spec).kind == "jobset"


def _placement(spec: LabSpec) -> Placement:
    if _is_jobset(spec):
        return jobset_render.placement(spec)
    return container_placement(spec, "k8s", master_addr=k8s_render.master_addr(spec),
                               replica_master_addrs=k8s_render.replica_master_addrs(spec))


def _watched(spec: LabSpec) -> tuple[str, str]:
    """(kind, name) of what the run's pods belong to and the backend watches."""
    if _is_jobset(spec):
        return jobset_render.KIND, jobset_render.jobset_name(spec)
    return "Job", k8s_render.job_name(spec)


@dataclass(frozen=True)
class K8sOptions(BackendOptions):
    """Which cluster, and where in it (default: kubeconfig's current context, its namespace)."""
    context: str | None = option("Kubernetes context")
    namespace: str | None = option("Kubernetes namespace")


class K8sBackend(Backend):
    name = "k8s"
    renderer = "labctl.backends.k8s.render"
    Options = K8sOptions
    options: K8sOptions
    # A pod can be deleted through the API alone; killing one process inside it would need
    # `pods/exec`, which restricted namespaces rarely grant, and a partition a NetworkPolicy
    # change that CNI plugins apply at their own pace.
    fault_kinds = ("kill-node",)

    @classmethod
    def check_spec(cls, spec: LabSpec, source: str) -> LabSpec:
        return k8s_settings.check(spec, source)

    @classmethod
    def links_refusal(cls, spec: LabSpec) -> str | None:
        return k8s_render.links_refusal(spec)

    @classmethod
    def shared_dir(cls, spec: LabSpec) -> str | None:
        return container_shared_dir(spec)

    def __init__(self, *args, cluster: Cluster | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.cluster = cluster              # tests inject fakes here; else connected at bind time
        self.created: list[str] = []
        self.schedule_clock: k8s_scheduling.ScheduleClock | None = None
        self.killed: dict[int, str] = {}     # node -> why its pod is gone (kill-node faults)

    def _bind(self, run: BoundRun) -> None:
        """The bound run and what every call derives from it: the watched object's
        kind and name (the Job or the JobSet), nodes per replica, the Kueue queue."""
        run = self.bind(run)
        self.hostnames, self.run_id = run.hostnames, run.run_id
        self.kind, self.job = _watched(run.spec)
        self.nodes_per_replica = run.spec.nodes
        self.queue = k8s_settings.settings(run.spec).queue

    @property
    def api(self) -> Cluster:
        """The cluster of the bound run (connected when it was bound)."""
        if self.cluster is None:
            raise LabError("the k8s backend is not connected to a cluster")
        return self.cluster

    @property
    def poll_interval(self) -> float:       # read at call time: tests shorten POLL_S
        return POLL_S

    @classmethod
    def renderer_for(cls, spec: LabSpec) -> str | None:
        return "labctl.backends.k8s.jobset" if _is_jobset(spec) else cls.renderer

    def placement(self, spec: LabSpec, run_folder: Path | None = None) -> Placement:
        """Pods reach node 0 as `<lab>-0.<lab>` (Indexed Job pod under the headless Service),
        or with `k8s.kind: jobset` as `<lab>-node-0-0.<lab>` (JobSet's DNS form)."""
        if spec.script and not Path(spec.script).is_file():
            raise FileNotFoundError(f"script: no such file: {spec.script}")
        return _placement(spec)

    def preflight(self, plan: LaunchPlan) -> None:
        """nccl on a cluster whose API says no node has enough `nvidia.com/gpu` for one pod.

        Only when the API answers: no cluster, or no right to list nodes (RBAC on a
        shared cluster), leaves the question to the scheduler, as before; an API that
        keeps failing (ApiUnavailable) is said at once, before anything is created. No
        cluster at all is said here too: before the run folder is made (one line, nothing
        created, as docs/kubernetes.md promises)."""
        spec = plan.spec
        cluster = self._connect(self.options.context, self.options.namespace)
        if _is_jobset(spec):
            require_jobset_crd(cluster)
        if spec.dist_backend != "nccl":
            return
        try:
            cluster = self._connect(self.options.context, self.options.namespace)
            nodes = cluster.call(cluster.core.list_node).items
        except ApiUnavailable:        # the API keeps failing: starting would fail as well
            raise
        except Exception:             # LabError (no cluster), ApiRefused (403: RBAC)
            return
        gpus = {n.metadata.name: _count(((n.status and n.status.allocatable) or {})
                                        .get(k8s_render.GPU_RESOURCE, "0")) for n in nodes}
        where = f"context {cluster.context}" if cluster.context else "this cluster"
        if not any(gpus.values()):
            raise PreflightError(
                f"dist_backend nccl needs GPUs, and no node of {where} advertises "
                f"{k8s_render.GPU_RESOURCE} ({len(gpus)} node(s); see: kubectl get nodes -o "
                "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu); "
                "use --dist-backend gloo, or a cluster with the NVIDIA device plugin")
        if max(gpus.values()) < spec.nproc_per_node:
            best = max(gpus, key=gpus.get)
            raise PreflightError(
                f"each pod asks for {spec.nproc_per_node} {k8s_render.GPU_RESOURCE} (one per "
                f"worker, nproc_per_node), and the most any node of {where} has is "
                f"{gpus[best]} ({best}); use --nproc-per-node {gpus[best]} or fewer")

    def _connect(self, context: str | None, namespace: str | None) -> Cluster:
        if self.cluster is None:
            self.cluster = connect(context, namespace)
        return self.cluster

    def submit(self, plan: LaunchPlan, rundir: RunDir) -> BackendState:
        self._bind(BoundRun.of_plan(plan, Bound.STARTED, rundir))
        self.schedule_clock = k8s_scheduling.ScheduleClock(
            k8s_settings.settings(plan.spec).schedule_timeout)
        renderer = jobset_render if _is_jobset(plan.spec) else k8s_render
        manifests = renderer.render(plan)
        rundir.write_rendered("k8s.yaml", renderer.text(plan))
        cluster = self._connect(self.options.context, self.options.namespace)
        if _is_jobset(plan.spec):
            require_jobset_crd(cluster)     # again: `up` with an injected backend skips preflight
        cluster.deadline = time.monotonic() + plan.spec.timeout
        # where it runs, in the record before anything is created (`labctl down` finds the
        # run there, even after a labctl killed while creating)
        self.tell(BackendState(_where(cluster, plan.run_id)))
        for obj in manifests:
            _create(cluster, obj)
            self.created.append(obj["kind"])
            self.progress(f"created {obj['kind'].lower()}/{obj['metadata']['name']} "
                          f"in namespace {cluster.namespace}")
        return self.for_record

    def debug_server_at(self, plan: LaunchPlan) -> str | None:
        """`kubectl port-forward` to node 0's pod (by name once it exists, else by its labels)."""
        if plan.placement.debug_server_port is None or self.cluster is None:
            return None
        try:
            pod = _pods_by_index(self.api, self.run_id, self.nodes_per_replica).get(0)
        except Exception:            # noqa: BLE001 - the command by labels says as much
            pod = None
        name = pod.metadata.name if pod is not None else None
        return k8s_render.port_forward(plan, self.cluster.namespace, self.cluster.context, name)

    def describe(self, within: float = 0.0, joins: bool = False) -> RunView:
        time.sleep(within)
        return RunView(self._outcomes, self._alive)

    def _outcomes(self) -> list[NodeOutcome]:
        """Pods (and why they wait); of a run recorded in a folder (`labctl down`), each
        node's pod as it is now, no more."""
        if self.run.how is Bound.ATTACHED:
            pods = _pods_by_index(self.api, self.run_id, self.nodes_per_replica)
            return [_outcome(i, h, pods.get(i)) for i, h in sorted(self.hostnames.items())]
        # None: deleted (by hand, or its TTL) while watched
        job = _read_watched(self.api, self.kind, self.job)
        pods = _pods_by_index(self.api, self.run_id, self.nodes_per_replica)
        stuck = _stuck(pods)
        if stuck:
            raise BackendFailure(f"stuck: {stuck}")
        job_start = job.start if job is not None else None
        outcomes = [_outcome(i, h, pods.get(i), job_start) for i, h in sorted(self.hostnames.items())]
        if job is None or job.verdict:
            for o in outcomes:              # the Job is done or gone: a missing pod never comes
                if o.index not in pods:
                    o.state, o.reason = NodeState.LOST, POD_GONE
        outcomes = self._blame(outcomes)    # a pod a fault deleted is killed, not lost
        if job is None:
            return outcomes
        why = self._waiting(job, pods)
        if why is not None:
            for o in outcomes:
                if o.state is NodeState.PENDING:
                    o.reason = why
        if self.schedule_clock is not None:
            failure = self.schedule_clock.update(why, time.monotonic())
            if failure:
                raise BackendFailure(failure)
        return outcomes

    def _waiting(self, job: Watched, pods: dict[int, Any]) -> str | None:
        """Why the lab waits on the cluster (Kueue admission, an unschedulable pod), if it does.
        Events are read only while some pod is still unplaced: one more call, not one per pod."""
        if job.suspended:
            return k8s_scheduling.admission_wait(job.kind, job.name, self.queue)
        if not any((p.status.phase if p.status else "Pending") == "Pending" for p in pods.values()):
            return None
        try:
            events = self.api.call(
                self.api.core.list_namespaced_event, self.api.namespace,
                field_selector="involvedObject.kind=Pod,reason=FailedScheduling").items
        except ApiUnavailable:              # as any call of the poll: the lab ends, in one line
            raise
        except Exception:                   # no right to list events (403): the conditions say it
            events = []
        return k8s_scheduling.unschedulable(pods, events)

    def signal(self, action: Action) -> list[str]:
        """Stop: nothing; pods keep running until `delete`: their logs are read first (a
        deleted pod has none). BeginFault: kill-node. Stacks and ending a fault: refused."""
        return dispatch(self.name, action, stop=lambda indices: None, begin=self._inject)

    def stream(self, rundir: RunDir, strict: bool = False) -> list[NodeOutcome]:
        """Pod logs and events into the folder; raises when one could not be saved and a
        later try may (`strict`: when any could not). Past the lab's deadline: collecting
        is cleanup, and its calls get their full retries."""
        if not self.bound or (self.run.how is Bound.STARTED and self.kind not in self.created):
            return [NodeOutcome(i, h) for i, h in sorted(self.hostnames.items())] if self.bound else []
        self.api.deadline = None
        return self._blame(_collect(self.hostnames, self.job, self.run_id, rundir, self.api,
                                    self.progress, strict=strict,
                                    nodes_per_replica=self.nodes_per_replica, kind=self.kind))

    # ---- the failure lab ----------------------------------------------------------------
    def _inject(self, fault: Fault) -> str:
        """kill-node: delete the node's pod at once (grace period 0: its container gets SIGKILL)."""
        if fault.kind != "kill-node":
            raise LabError(f"the k8s backend cannot do {fault.kind}")
        pod = _pods_by_index(self.api, self.run_id, self.nodes_per_replica).get(fault.target)
        if pod is None:
            raise NotYet(f"node {fault.target} has no pod yet")
        name = pod.metadata.name
        self.api.call(self.api.core.delete_namespaced_pod, name, self.api.namespace,
                      grace_period_seconds=0)
        self.killed[fault.target] = f"pod {name} deleted by fault {fault.text}"
        return f"deleted pod {name} (grace period 0: SIGKILL; its log goes with it)"

    def _blame(self, outcomes: list[NodeOutcome]) -> list[NodeOutcome]:
        """A pod deleted by a fault is gone, not pending or lost: killed, and by what."""
        for o in outcomes:
            if o.index in self.killed and o.state in (NodeState.PENDING, NodeState.LOST, NodeState.KILLED):
                o.state, o.signal, o.reason = NodeState.KILLED, "SIGKILL", self.killed[o.index]
        return outcomes

    def delete(self) -> str:
        """Delete the run's objects by its label: those start created, or whatever is
        left of a run started elsewhere (saying what, or that nothing was there)."""
        if not self.bound:
            return ""
        if self.run.how is not Bound.STARTED:
            return self._delete_leftovers()
        if not self.created:
            return ""
        self.api.deadline = None            # cleanup gets its full retries
        deleted = delete_run(self.api, self.run_id, jobset=self.kind == jobset_render.KIND)
        return f"deleted {len(deleted)} object(s) labelled {k8s_render.run_selector(self.run_id)}"

    # ---- runs started by kubectl, or by a labctl that died -------------------------
    def find_runs(self) -> list[str]:
        cluster = self._connect(self.options.context, self.options.namespace)
        found: set[str] = set()
        for list_fn in (cluster.batch.list_namespaced_job, cluster.core.list_namespaced_pod,
                        cluster.core.list_namespaced_service):
            for obj in cluster.call(list_fn, cluster.namespace,
                                    label_selector=k8s_render.RUN_LABEL).items:
                found.add((obj.metadata.labels or {}).get(k8s_render.RUN_LABEL, ""))
        for jobset in _jobsets(cluster, k8s_render.RUN_LABEL):
            found.add((jobset["metadata"].get("labels") or {}).get(k8s_render.RUN_LABEL, ""))
        return sorted(found - {""})

    def attach(self, target: RunDir | str) -> LaunchPlan | None:
        """A run id: the plan of a kubectl-applied lab, from its Job's (or JobSet's)
        `labctl.dev/spec` annotation. A run folder: where it ran is in its record (a folder
        `labctl collect` made without it: this cluster's, said in `self.for_record`)."""
        if isinstance(target, RunDir):
            return self._attach_folder(target)
        run_id = target
        cluster = self._connect(self.options.context, self.options.namespace)
        where = f"in namespace {cluster.namespace} (context {cluster.context})"
        jobsets = [j for j in _jobsets(cluster, k8s_render.run_selector(run_id))
                   if SPEC_KEY in (j["metadata"].get("annotations") or {})]
        if jobsets:
            jobset = sorted(jobsets, key=lambda j: j["metadata"]["name"])[0]
            name = jobset["metadata"]["name"]
            return self._plan_of(spec_from_stored(jobset["metadata"]["annotations"][SPEC_KEY],
                                                  f"jobset/{name} {where}"), run_id)
        jobs = cluster.call(cluster.batch.list_namespaced_job, cluster.namespace,
                            label_selector=k8s_render.run_selector(run_id)).items
        stored = [j for j in jobs if SPEC_KEY in (j.metadata.annotations or {})]
        if not stored:
            left = _objects(cluster, run_id)
            if not left:
                raise UnknownRun.of(run_id, where, self.find_runs())
            if not jobs:
                raise LabError(
                    f"run {run_id} {where}: its Job and pods are gone (removed "
                    f"ttlSecondsAfterFinished={k8s_render.TTL_AFTER_FINISHED_S}s after the Job "
                    f"finished, or deleted), and with them every log; left: {', '.join(left)} "
                    f"(remove: kubectl delete -n {cluster.namespace} service,networkpolicy,"
                    f"configmap -l {k8s_render.run_selector(run_id)})")
            raise LabError(f"run {run_id} {where}: job/{jobs[0].metadata.name} has no {SPEC_KEY} "
                           "annotation (rendered by an older labctl?); render and apply it again")
        job = sorted(stored, key=lambda j: j.metadata.name)[0]
        spec = spec_from_stored(job.metadata.annotations[SPEC_KEY],
                                f"job/{job.metadata.name} {where}")
        return self._plan_of(spec, run_id)

    def _plan_of(self, spec: LabSpec, run_id: str) -> LaunchPlan:
        the_plan = make_plan(spec, _placement(spec), run_id)
        self._bind(BoundRun.of_plan(the_plan, Bound.FOUND))
        return the_plan

    def _attach_folder(self, rundir: RunDir) -> None:
        where = rundir.record.backend_state or {}
        context = self.options.context or (
            where.get("context") if where.get("context") != "in-cluster" else None)
        cluster = self._connect(context, self.options.namespace or where.get("namespace"))
        self._bind(BoundRun.of_folder(rundir))
        if not where:                       # a folder `labctl collect` made: say where it ran
            self.for_record = BackendState(_where(cluster, self.run_id))
        return None

    def _alive(self) -> bool:
        return bool(_objects(self.api, self.run_id, self.kind))

    def _delete_leftovers(self) -> str:
        deleted = delete_run(self.api, self.run_id, jobset=self.kind == jobset_render.KIND)
        if not deleted:
            return (f"nothing to delete: no objects labelled {k8s_render.run_selector(self.run_id)} "
                    f"in namespace {self.api.namespace}")
        return f"deleted {len(deleted)} object(s) in namespace {self.api.namespace}: {', '.join(deleted)}"


def _where(cluster: Cluster, run_id: str) -> dict[str, Any]:
    """Where a run is, as its record holds it (status.json's `k8s`)."""
    return {"namespace": cluster.namespace, "context": cluster.context,
            "selector": k8s_render.run_selector(run_id)}


def _objects(cluster: Cluster, run_id: str, kind: str = "Job") -> list[str]:
    """What of a run is on the cluster: its JobSet, Jobs, pods and Services, by name."""
    ns, selector = cluster.namespace, k8s_render.run_selector(run_id)
    found = [f"jobset/{j['metadata']['name']}" for j in
             _jobsets(cluster, selector, required=kind == jobset_render.KIND)]
    for what, list_fn in (("job", cluster.batch.list_namespaced_job),
                          ("pod", cluster.core.list_namespaced_pod),
                          ("service", cluster.core.list_namespaced_service)):
        found += [f"{what}/{o.metadata.name}" for o in
                  cluster.call(list_fn, ns, label_selector=selector).items]
    return found
