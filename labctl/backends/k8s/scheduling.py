"""Is a k8s lab waiting to be placed, why, and for how long may it wait?

On a shared cluster a lab can sit still for two reasons that never resolve by
waiting for the lab's own deadline: Kueue has not admitted the Job yet (it is
still `suspend: true`), or the scheduler cannot place a pod (a taint without
toleration, no node matching the selector, not enough GPUs, `spread: hostname`
with too few hosts). The scheduler says which in the pod's `PodScheduled`
condition and in `FailedScheduling` events; these functions turn that into one
line for the user, and decide when `k8s.schedule_timeout` has run out.

Pure functions on the kubernetes client's objects (V1Job, V1Pod, CoreV1Event),
read by attribute only, so the backend's fakes and the real models both work;
no `kubernetes` import. Meant to be called once per poll of the backend's watch
loop, after it has read the Job and the pods by completion index:

    clock = ScheduleClock(k8s_settings.settings(spec).schedule_timeout)          # once per run
    ...
    events = core.list_namespaced_event(                      # each poll
        ns, field_selector="involvedObject.kind=Pod,reason=FailedScheduling").items
    why = waiting(job, pods_by_index, events, k8s_settings.settings(spec).queue)
    if why and why != last_shown:
        progress(f"waiting: {why}")                           # within one poll
    failure = clock.update(why, time.monotonic())
    if failure:
        return "failed", failure   # then logs and events are collected as for any failure

A wait is one continuous stretch: admission and then an unschedulable pod
count against the same timeout; a poll with nothing waiting ends it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from workloads._protocol import one_line

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def _by_index(pods: Mapping[int, Any] | Iterable[Any]) -> dict[int, Any]:
    """Pods keyed by completion index: a mapping as given, else read from the annotation."""
    if isinstance(pods, Mapping):
        return dict(pods)
    found: dict[int, Any] = {}
    for pod in pods:
        value = (pod.metadata.annotations or {}).get(COMPLETION_INDEX)
        if value is not None and str(value).isdigit():
            found[int(value)] = pod
    return found


def _condition(pod: Any, kind: str) -> Any | None:
    status = getattr(pod, "status", None)
    return next((c for c in (getattr(status, "conditions", None) or []) if c.type == kind), None)


def _placed(pod: Any) -> bool:
    """Bound to a node: an older FailedScheduling event about it is history."""
    if getattr(getattr(pod, "spec", None), "node_name", None):
        return True
    cond = _condition(pod, "PodScheduled")
    return cond is not None and cond.status == "True"


def _event_time(event: Any) -> str:
    """Newest observation first: events.k8s.io-style series, then the core fields."""
    series = getattr(event, "series", None)
    when = (getattr(series, "last_observed_time", None) if series else None) or \
        event.last_timestamp or event.event_time or event.first_timestamp
    return str(when or "")


def unschedulable(pods: Mapping[int, Any] | Iterable[Any], events: Iterable[Any] = ()) -> str | None:
    """The first node (by index) whose pod the scheduler cannot place, as
    "pod <name> (node <i>) cannot be scheduled: <scheduler message>", or None.

    The pod's `PodScheduled=False, reason=Unschedulable` condition is current
    and wins; the newest `FailedScheduling` event about a pod that is still not
    bound to a node is the fallback (events of a placed pod are stale).
    """
    by_index = _by_index(pods)
    names = {pod.metadata.name: pod for pod in by_index.values()}
    latest: dict[str, tuple[str, str]] = {}
    for event in events or ():
        target = getattr(event, "involved_object", None)
        if event.reason != "FailedScheduling" or target is None or target.name not in names:
            continue
        if (getattr(target, "kind", None) or "Pod") != "Pod":
            continue
        pod_uid, event_uid = names[target.name].metadata.uid, getattr(target, "uid", None)
        if pod_uid and event_uid and pod_uid != event_uid:
            continue                          # an earlier pod of the same name
        when = _event_time(event)
        if target.name not in latest or when >= latest[target.name][0]:
            latest[target.name] = (when, event.message)
    for index, pod in sorted(by_index.items()):
        if _placed(pod):
            continue
        cond = _condition(pod, "PodScheduled")
        if cond is not None and cond.status == "False" and cond.reason == "Unschedulable":
            message = cond.message
        elif pod.metadata.name in latest:
            message = latest[pod.metadata.name][1]
        else:
            continue
        return (f"pod {pod.metadata.name} (node {index}) cannot be scheduled: "
                f"{one_line(message) or 'the scheduler gave no reason'}")
    return None


def waiting_for_admission(job: Any, queue: str | None) -> str | None:
    """"waiting for admission in queue Q" while the Job is suspended, else None.

    labctl creates a queued Job suspended (render), and Kueue un-suspends it on
    admission; it suspends it again when it evicts or preempts the workload,
    which is a wait for admission too. A suspended Job without a queue in the
    lab (suspended by a webhook or by hand) is named as such.
    """
    spec = getattr(job, "spec", None)
    if not (spec is not None and spec.suspend):
        return None
    return admission_wait("Job", job.metadata.name, queue)


def admission_wait(kind: str, name: str, queue: str | None) -> str:
    """The line for a suspended Job or JobSet (`kind`): Kueue admits a JobSet as one
    workload by un-suspending the JobSet, as it does a Job."""
    if queue:
        return f"waiting for admission in queue {queue}"
    return (f"{kind.lower()} {name} is suspended (waiting for a queue controller such as "
            "Kueue to admit it; the lab names no k8s.queue)")


def waiting(job: Any, pods: Mapping[int, Any] | Iterable[Any], events: Iterable[Any] = (),
            queue: str | None = None) -> str | None:
    """Why the lab is not running yet, if it waits on the cluster: admission first
    (no pods exist before it), then the first pod that cannot be scheduled."""
    return waiting_for_admission(job, queue) or unschedulable(pods, events)


@dataclass
class ScheduleClock:
    """When a wait to be placed has lasted `k8s.schedule_timeout`.

    `since` is when the current wait was first seen, on the caller's clock
    (time.monotonic()); `labctl collect`, attaching to a lab that already
    waits, may seed it from an older observation. Pass the same clock to
    `update` every poll.
    """
    timeout: float
    since: float | None = None
    reason: str | None = None

    def update(self, reason: str | None, now: float) -> str | None:
        """Record this poll's `waiting(...)`; the failure message once the wait
        has lasted `timeout`, with the latest reason as the root cause."""
        if reason is None:
            self.since = self.reason = None
            return None
        if self.since is None:
            self.since = now
        self.reason = reason
        if now - self.since >= self.timeout:
            return f"not placed within k8s.schedule_timeout ({self.timeout:g}s): {reason}"
        return None

    def waited(self, now: float) -> float:
        """Seconds of the current wait (0 when nothing waits), for progress lines."""
        return 0.0 if self.since is None else max(0.0, now - self.since)
