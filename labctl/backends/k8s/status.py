"""What a run's pods and their Job (or JobSet) say now, read from the API: each node's
pod (by completion index and replica), its outcome, why it is stuck, and the verdict of
the Job controller (or the JobSet's), with when the nodes' Job started."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...outcome import NodeOutcome, NodeState, from_exit_code
from . import jobset as jobset_render
from . import render as k8s_render
from .api import Cluster, api_status

# Container waiting reasons that never resolve by themselves: fail now, not at the deadline.
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                           "CreateContainerConfigError", "CreateContainerError"})
# Why a node's pod can be missing once its Job exists: said where the log is missed.
POD_GONE = ("pod gone before its log was read (deleted, evicted, or removed with its Job "
            f"ttlSecondsAfterFinished={k8s_render.TTL_AFTER_FINISHED_S}s after the Job finished): "
            "its log is lost")


@dataclass
class Watched:
    """What a run's pods belong to, read once per poll: the lab's Job (kind job: the
    first replica's) or its JobSet. `verdict` is ('Complete'|'Failed', reason) once decided."""
    kind: str                              # "Job" | "JobSet"
    name: str
    start: Any = None                      # the (node) Job's start time: exit times count from it
    verdict: tuple[str, str] | None = None
    suspended: bool = False                # waiting for Kueue (or someone) to un-suspend it


def read_watched(cluster: Cluster, kind: str, name: str) -> Watched | None:
    """The Job or JobSet as it is now; None once it is gone (404)."""
    try:
        if kind == "Job":
            job = cluster.call(cluster.batch.read_namespaced_job, name, cluster.namespace)
            return Watched(kind, name, job.status.start_time if job.status else None,
                           job_condition(job), bool(job.spec is not None and job.spec.suspend))
        found = cluster.call(cluster.custom.get_namespaced_custom_object, jobset_render.GROUP,
                             jobset_render.VERSION, cluster.namespace, jobset_render.PLURAL, name)
    except Exception as exc:
        if api_status(exc) != 404:
            raise
        return None
    return Watched(kind, name, jobset_start(cluster, found), jobset_condition(found),
                   bool((found.get("spec") or {}).get("suspend")))


def jobset_condition(jobset: dict[str, Any]) -> tuple[str, str] | None:
    """The JobSet controller's verdict: its `Completed` or `Failed` condition, as the Job's words."""
    for cond in (jobset.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Completed", "Failed"):
            return ("Complete" if cond["type"] == "Completed" else "Failed"), cond.get("reason") or ""
    return None


def jobset_start(cluster: Cluster, jobset: dict[str, Any]) -> Any:
    """When the first node Job of the JobSet started (a JobSet has no start time of its own)."""
    selector = f"{jobset_render.JOBSET_NAME_LABEL}={jobset['metadata']['name']}"
    jobs = cluster.call(cluster.batch.list_namespaced_job, cluster.namespace,
                        label_selector=selector).items
    starts = [j.status.start_time for j in jobs if j.status is not None and j.status.start_time
              and (j.metadata.labels or {}).get("app.kubernetes.io/component") == "node"]
    return min(starts) if starts else None


def completion_index(pod: Any) -> int | None:
    annotations = pod.metadata.annotations or {}
    value = annotations.get("batch.kubernetes.io/job-completion-index")
    return int(value) if value is not None and value.isdigit() else None


def pods_by_index(cluster: Cluster, run_id: str, nodes_per_replica: int = 0) -> dict[int, Any]:
    """The newest pod of every node: its completion index, plus replica x nodes when the
    lab has replicas (each replica is an Indexed Job of its own; the store pod has no index)."""
    pods = cluster.call(cluster.core.list_namespaced_pod, cluster.namespace,
                        label_selector=k8s_render.run_selector(run_id)).items
    found: dict[int, Any] = {}
    for pod in sorted(pods, key=lambda p: str(p.metadata.creation_timestamp or "")):
        index = completion_index(pod)
        if (pod.metadata.labels or {}).get("app.kubernetes.io/component") == "store":
            continue                # a JobSet's store Job is Indexed too: it is no node
        if index is not None:
            replica = (pod.metadata.labels or {}).get(k8s_render.REPLICA_LABEL)
            if replica is not None and str(replica).isdigit():
                index += int(replica) * nodes_per_replica
            found[index] = pod
    return found


def container_state(pod: Any) -> Any:
    statuses = (pod.status.container_statuses or []) if pod.status else []
    return statuses[0].state if statuses else None


def stuck(pods: dict[int, Any]) -> str | None:
    for index, pod in sorted(pods.items()):
        state = container_state(pod)
        waiting = getattr(state, "waiting", None) if state else None
        if waiting is not None and waiting.reason in STUCK_REASONS:
            return f"pod {pod.metadata.name} (node {index}): {waiting.reason}: {waiting.message or ''}".strip()
    return None


def job_condition(job: Any) -> tuple[str, str] | None:
    """('Complete'|'Failed', reason) once the Job controller has decided."""
    for cond in (job.status.conditions or []) if job.status else []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return cond.type, cond.reason or ""
    return None



def outcome(index: int, hostname: str, pod: Any | None, job_start: Any = None) -> NodeOutcome:
    """A pod's outcome: its container's exit code (128 + N: killed by signal N)."""
    if pod is None:
        return NodeOutcome(index, hostname)
    state = container_state(pod)
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


def never_started(pod: Any) -> bool:
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
