"""JobSet renderer: the lab as one `JobSet` (jobset.x-k8s.io/v1alpha2), pure and deterministic.

For clusters that run the JobSet controller (kubernetes-sigs/jobset; Kueue
admits a JobSet as one workload, Kubeflow Trainer v2 builds on it). The lab
field `k8s: {kind: jobset}` picks this render; the default (`job`) stays
render.py's Indexed Job + headless Service, byte for byte.

One JobSet per lab, named after the lab, instead of Jobs and Services:

- one replicated Job per replica (`replicas: 1` each: the replica's nodes are
  the Indexed Job's completions), named `node` (one replica) or `r<k>`; the
  replica store, when there is one, is a replicated Job of its own, `store`,
  listed first and started first (`startupPolicy: InOrder`);
- `network: {enableDNSHostnames: true, subdomain: <lab>, publishNotReadyAddresses:
  true}`: the JobSet controller creates the headless Service `<lab>` and pod i of
  Job k of replicated Job `rj` is `<lab>-<rj>-<k>-<i>.<lab>` — the plan's
  hostnames (`placement`), MASTER_ADDR and REPLICA_STORE_ADDR are those names;
- each replicated Job's template is the Job render's Job of that replica (the
  one pod template that reproduces every node, security context, resources,
  scheduling, volumes), less what the JobSet owns: the name (JobSet names the
  Jobs), `suspend` and the queue label (Kueue suspends and admits the JobSet),
  `ttlSecondsAfterFinished` (the JobSet's, which removes its Jobs with it) and
  the `labctl.dev/spec` annotation (on the JobSet, where `labctl collect` reads it);
- failure: `failurePolicy: {maxRestarts: 0}` — any failed Job fails the JobSet
  (a JobSet restart would recreate every Job: a new lab, not torchrun's
  `max_restarts`, which stays inside each pod). With `min_nodes < nodes` a
  replica's Job tolerates `nodes - min_nodes` failed indexes
  (`backoffLimitPerIndex: 0`, `maxFailedIndexes`) so the lab goes on without
  them, as torchrun's elastic rendezvous does;
- success: `successPolicy: {operator: All, targetReplicatedJobs: <the nodes'>}`:
  every node Job complete (the store serves until its lifetime ends).

The ConfigMap (script) and the NetworkPolicy are the Job render's, unchanged.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ...errors import LabError
from ...plan import LaunchPlan, Placement
from ...rendered import SPEC_KEY, dump_yaml, stored_spec
from ...spec import LabSpec
from ..containers import container_placement
from . import render as k8s
from . import settings as k8s_settings
from .settings import QUEUE_LABEL

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "jobsets"
KIND = "JobSet"
# Labels the JobSet controller puts on its Jobs and their pods (api/jobset/v1alpha2/jobset_types.go).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
NODE_JOB = "node"           # the one replicated Job of a lab without replicas
STORE_JOB = "store"         # the replica store's replicated Job
FILE_ORDER = ("configmap.yaml", "networkpolicy.yaml", "jobset.yaml")


# ---- names ------------------------------------------------------------------
def jobset_name(spec: LabSpec) -> str:
    return spec.name


def subdomain(spec: LabSpec) -> str:
    """The headless Service the JobSet controller creates (its default, said explicitly)."""
    return spec.name


def replicated_job(spec: LabSpec, replica: int = 0) -> str:
    return NODE_JOB if spec.replicas == 1 else f"r{replica}"


def pod_hostname(spec: LabSpec, index: int, replica: int = 0, job: str | None = None) -> str:
    """`<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`: each replicated Job has one Job (index 0)."""
    return f"{jobset_name(spec)}-{job or replicated_job(spec, replica)}-0-{index}"


def master_addr(spec: LabSpec, replica: int = 0) -> str:
    return f"{pod_hostname(spec, 0, replica)}.{subdomain(spec)}"


def store_addr(spec: LabSpec) -> str:
    return f"{pod_hostname(spec, 0, job=STORE_JOB)}.{subdomain(spec)}"


def placement(spec: LabSpec) -> Placement:
    """The Job render's container placement, with JobSet's pod names and DNS form."""
    base = container_placement(spec, "k8s", master_addr=master_addr(spec),
                               replica_master_addrs=tuple(master_addr(spec, k) for k in range(spec.replicas)))
    hostnames = tuple(pod_hostname(spec, i, k) for k in range(spec.replicas) for i in range(spec.nodes))
    return dataclasses.replace(base, hostnames=hostnames,
                               store_addr=store_addr(spec) if spec.replicas > 1 else None)


# ---- the JobSet ------------------------------------------------------------------
def render(plan: LaunchPlan, script_text: str | None = None) -> list[dict[str, Any]]:
    """The lab's objects in creation order: [ConfigMap], NetworkPolicy, JobSet."""
    spec = plan.spec
    if plan.placement.hostnames != placement(spec).hostnames:
        raise LabError("jobset render: the plan's pods are not named the JobSet way "
                       "(plan it with labctl.backends.k8s.jobset.placement)")
    objects = k8s.render(plan, script_text)
    kept = [o for o in objects if o["kind"] in ("ConfigMap", "NetworkPolicy")]
    jobs = [o for o in objects if o["kind"] == "Job"]
    store = [j for j in jobs if _component(j) == "store"]
    nodes = sorted((j for j in jobs if _component(j) == "node"),
                   key=lambda j: int(j["metadata"]["labels"].get(k8s.REPLICA_LABEL, "0")))
    assert len(nodes) == spec.replicas and len(store) == (spec.replicas > 1)
    replicated = [_replicated(plan, j, STORE_JOB) for j in store]
    replicated += [_replicated(plan, j, replicated_job(spec, k)) for k, j in enumerate(nodes)]
    return kept + [_jobset(plan, replicated)]


def _component(obj: dict[str, Any]) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def _replicated(plan: LaunchPlan, job: dict[str, Any], name: str) -> dict[str, Any]:
    """One replicated Job (one Job) from the Job render's Job: Indexed (the pod
    hostname `<jobset>-<name>-0-<i>` needs a completion index), in the JobSet's subdomain."""
    spec = plan.spec
    job_spec = {"completionMode": "Indexed"}
    for key, value in copy.deepcopy(job["spec"]).items():
        if key in ("suspend", "ttlSecondsAfterFinished", "completionMode"):
            continue
        job_spec[key] = value
    if name != STORE_JOB and spec.fewest_nodes < spec.nodes:
        # Elastic: up to nodes - min_nodes nodes may fail and the rest go on (torchrun
        # re-forms the world); a global backoffLimit would fail the Job at the first.
        del job_spec["backoffLimit"]
        items = list(job_spec.items())
        at = [k for k, _ in items].index("activeDeadlineSeconds")
        items[at:at] = [("backoffLimitPerIndex", 0), ("maxFailedIndexes", spec.nodes - spec.fewest_nodes)]
        job_spec = dict(items)
    pod = job_spec["template"]["spec"]
    pod.pop("subdomain", None)
    job_spec["template"]["spec"] = {"subdomain": subdomain(spec), **pod}
    meta = job["metadata"]
    template_meta: dict[str, Any] = {
        "labels": {k: v for k, v in meta["labels"].items() if k != QUEUE_LABEL}}
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if k != SPEC_KEY}
    if annotations:
        template_meta["annotations"] = annotations
    return {"name": name, "replicas": 1, "template": {"metadata": template_meta, "spec": job_spec}}


def _jobset(plan: LaunchPlan, replicated: list[dict[str, Any]]) -> dict[str, Any]:
    spec, settings = plan.spec, k8s_settings.settings(plan.spec)
    node_jobs = [r["name"] for r in replicated if r["name"] != STORE_JOB]
    body: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "subdomain": subdomain(spec),
                    "publishNotReadyAddresses": True},
        "failurePolicy": {"maxRestarts": 0},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": node_jobs},
    }
    if len(replicated) > len(node_jobs):
        # The store's Job is ready (its pod runs) before any node starts.
        body["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    if settings.queue:
        body["suspend"] = True          # Kueue admits the whole JobSet by un-suspending it
    body["ttlSecondsAfterFinished"] = k8s.TTL_AFTER_FINISHED_S
    body["replicatedJobs"] = replicated
    queue = {QUEUE_LABEL: settings.queue} if settings.queue else None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": k8s.metadata(plan, jobset_name(spec), "lab", extra_labels=queue,
                                 extra_annotations={SPEC_KEY: stored_spec(spec)}),
        "spec": body,
    }


# ---- text ------------------------------------------------------------------
def _header(plan: LaunchPlan, run: str = k8s.RUN_FILE) -> str:
    spec = plan.spec
    shape = f"{spec.nodes} node(s) x {spec.nproc_per_node} process(es)"
    if spec.replicas > 1:
        shape = f"{spec.replicas} replicas of {shape}, and the replica store"
    return (f"# labctl render k8s: lab {spec.name}, run id {plan.run_id}, {shape}, as one JobSet "
            f"({API_VERSION}: needs the JobSet controller)\n" + run +
            f"# Then: labctl collect --backend k8s --run-id {plan.run_id} --namespace NS"
            "  (logs, results, report; --delete removes the lab)\n")


def text(plan: LaunchPlan, script_text: str | None = None) -> str:
    """All objects as one multi-document YAML stream, for `kubectl apply -f -`."""
    return _header(plan) + "---\n".join(dump_yaml(o) for o in render(plan, script_text))


def files(plan: LaunchPlan, script_text: str | None = None) -> dict[str, str]:
    """One file per object plus a kustomization.yaml, for `kubectl apply -k DIR`."""
    out = {f"{o['kind'].lower()}.yaml": _header(plan, k8s.RUN_FOLDER) + dump_yaml(o) for o in render(plan, script_text)}
    out["kustomization.yaml"] = _header(plan, k8s.RUN_FOLDER) + dump_yaml({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [n for n in FILE_ORDER if n in out],
    })
    return out
