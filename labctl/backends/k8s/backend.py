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

The verbs only: finding the cluster is connect.py (the `kubernetes` package is
imported only inside `connect()`, so that `labctl --help` and `labctl render k8s`
never pay for it), the run's objects objects.py, what the pods say status.py, the
logs and events brought home collection.py. Tests inject a `Cluster` made of small
fakes in place of the real API objects.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import LabError
from ...faults import Fault, NotYet
from ...outcome import NodeOutcome, NodeState
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
from . import podspec
from . import render as k8s_render
from . import scheduling as k8s_scheduling
from . import settings as k8s_settings
from .api import ApiUnavailable, Cluster
from .collection import collect_run
from .connect import connect
from .objects import create, delete_run, jobsets, objects, require_jobset_crd, run_location
from .status import POD_GONE, Watched, outcome, pods_by_index, read_watched, stuck

POLL_S = 2.0


def _count(value: Any) -> int:
    """An extended resource's count ("8"); anything unreadable counts as none."""
    try:
        return int(quantity(value))
    except ValueError:
        return 0


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
        return podspec.links_refusal(spec)

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
                                        .get(podspec.GPU_RESOURCE, "0")) for n in nodes}
        where = f"context {cluster.context}" if cluster.context else "this cluster"
        if not any(gpus.values()):
            raise PreflightError(
                f"dist_backend nccl needs GPUs, and no node of {where} advertises "
                f"{podspec.GPU_RESOURCE} ({len(gpus)} node(s); see: kubectl get nodes -o "
                "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu); "
                "use --dist-backend gloo, or a cluster with the NVIDIA device plugin")
        if max(gpus.values()) < spec.nproc_per_node:
            best = max(gpus, key=gpus.get)
            raise PreflightError(
                f"each pod asks for {spec.nproc_per_node} {podspec.GPU_RESOURCE} (one per "
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
        self.tell(BackendState(run_location(cluster, plan.run_id)))
        for obj in manifests:
            create(cluster, obj)
            self.created.append(obj["kind"])
            self.progress(f"created {obj['kind'].lower()}/{obj['metadata']['name']} "
                          f"in namespace {cluster.namespace}")
        return self.for_record

    def debug_server_at(self, plan: LaunchPlan) -> str | None:
        """`kubectl port-forward` to node 0's pod (by name once it exists, else by its labels)."""
        if plan.placement.debug_server_port is None or self.cluster is None:
            return None
        try:
            pod = pods_by_index(self.api, self.run_id, self.nodes_per_replica).get(0)
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
            pods = pods_by_index(self.api, self.run_id, self.nodes_per_replica)
            return [outcome(i, h, pods.get(i)) for i, h in sorted(self.hostnames.items())]
        # None: deleted (by hand, or its TTL) while watched
        job = read_watched(self.api, self.kind, self.job)
        pods = pods_by_index(self.api, self.run_id, self.nodes_per_replica)
        why_stuck = stuck(pods)
        if why_stuck:
            raise BackendFailure(f"stuck: {why_stuck}")
        job_start = job.start if job is not None else None
        outcomes = [outcome(i, h, pods.get(i), job_start) for i, h in sorted(self.hostnames.items())]
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
        return self._blame(collect_run(self.hostnames, self.job, self.run_id, rundir, self.api,
                                    self.progress, strict=strict,
                                    nodes_per_replica=self.nodes_per_replica, kind=self.kind))

    # ---- the failure lab ----------------------------------------------------------------
    def _inject(self, fault: Fault) -> str:
        """kill-node: delete the node's pod at once (grace period 0: its container gets SIGKILL)."""
        if fault.kind != "kill-node":
            raise LabError(f"the k8s backend cannot do {fault.kind}")
        pod = pods_by_index(self.api, self.run_id, self.nodes_per_replica).get(fault.target)
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
        for jobset in jobsets(cluster, k8s_render.RUN_LABEL):
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
        stored_sets = [j for j in jobsets(cluster, k8s_render.run_selector(run_id))
                   if SPEC_KEY in (j["metadata"].get("annotations") or {})]
        if stored_sets:
            jobset = sorted(stored_sets, key=lambda j: j["metadata"]["name"])[0]
            name = jobset["metadata"]["name"]
            return self._plan_of(spec_from_stored(jobset["metadata"]["annotations"][SPEC_KEY],
                                                  f"jobset/{name} {where}"), run_id)
        jobs = cluster.call(cluster.batch.list_namespaced_job, cluster.namespace,
                            label_selector=k8s_render.run_selector(run_id)).items
        stored = [j for j in jobs if SPEC_KEY in (j.metadata.annotations or {})]
        if not stored:
            left = objects(cluster, run_id)
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
            self.for_record = BackendState(run_location(cluster, self.run_id))
        return None

    def _alive(self) -> bool:
        return bool(objects(self.api, self.run_id, self.kind))

    def _delete_leftovers(self) -> str:
        deleted = delete_run(self.api, self.run_id, jobset=self.kind == jobset_render.KIND)
        if not deleted:
            return (f"nothing to delete: no objects labelled {k8s_render.run_selector(self.run_id)} "
                    f"in namespace {self.api.namespace}")
        return f"deleted {len(deleted)} object(s) in namespace {self.api.namespace}: {', '.join(deleted)}"

