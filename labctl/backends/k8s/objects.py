"""A run's objects on the cluster, by its run label: created (a create retried after a
lost answer finds its own object), found (JobSets where the cluster serves them) and
deleted. Every call goes through `Cluster.call` (api.py)."""
from __future__ import annotations

from typing import Any

from ...errors import LabError
from ..base import PreflightError
from . import jobset as jobset_render
from . import render as k8s_render
from .api import ApiUnavailable, Cluster, api_status, failure_text


def create(cluster: Cluster, obj: dict[str, Any]) -> None:
    """Create one rendered object; a name taken by another run is one line (LabError)."""
    ns, kind = cluster.namespace, obj["kind"]
    try:
        if kind == jobset_render.KIND:
            cluster.call(cluster.custom.create_namespaced_custom_object, jobset_render.GROUP,
                         jobset_render.VERSION, ns, jobset_render.PLURAL, obj)
        else:
            create_fn = {
                "ConfigMap": cluster.core.create_namespaced_config_map,
                "Service": cluster.core.create_namespaced_service,
                "NetworkPolicy": cluster.networking.create_namespaced_network_policy,
                "Job": cluster.batch.create_namespaced_job,
            }[kind]
            cluster.call(create_fn, ns, obj)
    except ApiUnavailable:
        raise
    except Exception as exc:
        name, lab = obj["metadata"]["name"], obj["metadata"]["labels"]["app.kubernetes.io/name"]
        if api_status(exc) == 409 and made_by_this_run(cluster, obj):
            return                  # an earlier try created it; its answer was lost on the way
        if api_status(exc) == 409:
            raise LabError(
                f"{kind.lower()} {name} already exists in namespace {ns} (another run of lab "
                f"{lab}?); delete it with: labctl down <its run folder>, or kubectl delete -n {ns} "
                f"{'jobset,' if kind == jobset_render.KIND else ''}job,pod,service,networkpolicy,configmap -l "
                f"app.kubernetes.io/name={lab},app.kubernetes.io/managed-by=labctl") from None
        if api_status(exc) is not None:
            raise LabError(f"creating {kind.lower()} {name} in namespace {ns} failed: "
                           f"{failure_text(exc)}") from None
        raise


def made_by_this_run(cluster: Cluster, obj: dict[str, Any]) -> bool:
    """Whether the object of `obj`'s kind and name that exists carries `obj`'s run label:
    a create retried after a dropped answer finds its own object (409), not another run's."""
    run_id = obj["metadata"]["labels"].get(k8s_render.RUN_LABEL)
    selector, name = k8s_render.run_selector(run_id), obj["metadata"]["name"]
    if obj["kind"] == jobset_render.KIND:
        return any(j["metadata"]["name"] == name for j in jobsets(cluster, selector))
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
        status = api_status(exc)
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


def jobsets(cluster: Cluster, selector: str, required: bool = False) -> list[dict[str, Any]]:
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
        if api_status(exc) == 404 or (api_status(exc) == 403 and not required):
            return []                    # no JobSet CRD (or no right to see JobSets): none
        if api_status(exc) == 403:
            raise LabError(f"not allowed to list {jobset_render.PLURAL}.{jobset_render.GROUP} in "
                           f"namespace {cluster.namespace} (403), so this JobSet lab cannot be found "
                           "or deleted; ask for get/list/delete on jobsets") from None
        raise
    return list(found.get("items") or [])


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
    for obj in jobsets(cluster, selector, required=jobset):
        name = obj["metadata"]["name"]
        try:
            cluster.call(cluster.custom.delete_namespaced_custom_object, jobset_render.GROUP,
                         jobset_render.VERSION, ns, jobset_render.PLURAL, name, **background)
            deleted.append(f"jobset/{name}")
        except Exception as exc:
            if api_status(exc) != 404:
                raise
    for kind, list_fn, delete_fn, extra in kinds:
        for obj in cluster.call(list_fn, ns, label_selector=selector).items:
            try:
                cluster.call(delete_fn, obj.metadata.name, ns, **extra)
                deleted.append(f"{kind}/{obj.metadata.name}")
            except Exception as exc:
                if api_status(exc) != 404:      # gone already (the Job took its pods along)
                    raise
    return deleted



def run_location(cluster: Cluster, run_id: str) -> dict[str, Any]:
    """Where a run is, as its record holds it (status.json's `k8s`)."""
    return {"namespace": cluster.namespace, "context": cluster.context,
            "selector": k8s_render.run_selector(run_id)}


def objects(cluster: Cluster, run_id: str, kind: str = "Job") -> list[str]:
    """What of a run is on the cluster: its JobSet, Jobs, pods and Services, by name."""
    ns, selector = cluster.namespace, k8s_render.run_selector(run_id)
    found = [f"jobset/{j['metadata']['name']}" for j in
             jobsets(cluster, selector, required=kind == jobset_render.KIND)]
    for what, list_fn in (("job", cluster.batch.list_namespaced_job),
                          ("pod", cluster.core.list_namespaced_pod),
                          ("service", cluster.core.list_namespaced_service)):
        found += [f"{what}/{o.metadata.name}" for o in
                  cluster.call(list_fn, ns, label_selector=selector).items]
    return found
