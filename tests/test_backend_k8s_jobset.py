"""The k8s backend with `k8s: {kind: jobset}`, against the in-memory API of test_backend_k8s
plus a CustomObjectsApi fake that plays a tiny JobSet controller: it makes one Job per
replicated Job (`<jobset>-<replicatedJob>-0`, with JobSet's labels), un-suspends on
Kueue admission, sets the JobSet's Completed/Failed condition from its Jobs, and takes
its Jobs and pods along when deleted. A cluster without the CRD answers 404, as an API
server does for a resource it does not serve.
"""
from __future__ import annotations

import copy
import inspect
import json

import pytest
from kubernetes import client as kc

from labctl import lab
from labctl import spec as specmod
from labctl.backends.k8s import backend
from labctl.backends.base import PreflightError
from labctl.errors import LabError
from labctl.plan import plan
from labctl.backends.k8s import jobset as render
from labctl.rundir import RunDir
from test_backend_k8s import (NS, FakeBatchV1Api, FakeCoreV1Api, FakeNetworkingV1Api, FakeState,  # noqa: F401
                              api_error, created_kinds, fast_polls, served, up)
from conftest import finalize

JOBSET = {"kind": "jobset"}


class JobSetState(FakeState):
    """FakeState with JobSets: `crd=False` is a cluster without the JobSet CRD."""

    def __init__(self, *args, crd: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.crd = crd

    def create(self, kind: str, ns: str, body: dict) -> None:
        super().create(kind, ns, body)
        if kind == "JobSet" and not body["spec"].get("suspend"):
            self._start_jobset(body)
        elif kind == "JobSet":
            self.started_at_poll = None

    def _start_jobset(self, js: dict) -> None:
        name = js["metadata"]["name"]
        for rj in js["spec"]["replicatedJobs"]:
            own = {render.JOBSET_NAME_LABEL: name, render.REPLICATED_JOB_LABEL: rj["name"],
                   render.JOB_INDEX_LABEL: "0"}
            spec = copy.deepcopy(rj["template"]["spec"])
            pod_meta = spec["template"]["metadata"]
            pod_meta["labels"] = {**pod_meta["labels"], **own}
            job = {"metadata": {"name": f"{name}-{rj['name']}-0",
                                "labels": {**rj["template"]["metadata"]["labels"], **own}},
                   "spec": spec}
            self.objects.setdefault("Job", {})[job["metadata"]["name"]] = job
            self._start_pods(job)

    def _start_pods(self, job: dict) -> None:
        """The store Job's one pod prints no result lines (the node log fake needs a node's env)."""
        if job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] != "store":
            return super()._start_pods(job)
        name = f"{job['metadata']['name']}-0-store"
        self.objects.setdefault("Pod", {})[name] = {
            "metadata": {"name": name, "labels": {**job["spec"]["template"]["metadata"]["labels"],
                                                  "job-name": job["metadata"]["name"]},
                         "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
                         # newer than node 0's pod: were it taken for a node, it would win index 0
                         "creationTimestamp": "2026-01-01T00:00:09Z"},
            "status": {"phase": "Pending"}}
        self.pod_logs[name] = "store: serving\n"
        job["status"] = {"startTime": "2026-01-01T00:00:00Z"}

    def tick(self) -> None:
        super().tick()
        for js in self.objects.get("JobSet", {}).values():
            admitted = self.admitted_at_poll is not None and self.polls >= self.admitted_at_poll
            if js["spec"].get("suspend") and admitted:
                js["spec"]["suspend"] = False           # Kueue admits the JobSet
                self._start_jobset(js)
                self.started_at_poll = self.polls
            jobs = {j["metadata"]["labels"][render.REPLICATED_JOB_LABEL]: j
                    for j in self.objects.get("Job", {}).values()
                    if j["metadata"]["labels"].get(render.JOBSET_NAME_LABEL) == js["metadata"]["name"]}
            verdicts = {n: c["type"] for n, j in jobs.items()
                        for c in (j.get("status") or {}).get("conditions", []) if c["status"] == "True"}
            targets = js["spec"]["successPolicy"]["targetReplicatedJobs"]
            if "Failed" in verdicts.values():
                js["status"] = _condition("Failed", "FailedJobs")
            elif jobs and all(verdicts.get(n) == "Complete" for n in targets):
                js["status"] = _condition("Completed", "AllJobsCompleted")

    def delete(self, kind: str, name: str, ns: str, **options) -> None:
        body = super().delete(kind, name, ns, **options)
        if kind == "JobSet" and options.get("propagation_policy") in ("Background", "Foreground"):
            for job in [j for j in self.objects.get("Job", {}).values()
                        if j["metadata"]["labels"].get(render.JOBSET_NAME_LABEL) == name]:
                self.objects["Job"].pop(job["metadata"]["name"])
                for pod in [p for p in self.objects.get("Pod", {}).values()
                            if p["metadata"]["labels"].get("job-name") == job["metadata"]["name"]]:
                    self.objects["Pod"].pop(pod["metadata"]["name"])
        return body


def _condition(kind: str, reason: str) -> dict:
    return {"conditions": [{"type": kind, "status": "True", "reason": reason, "message": reason,
                            "lastTransitionTime": "2026-01-01T00:00:20Z"}],
            "terminalState": kind}


class FakeCustomObjectsApi:
    """CustomObjectsApi for jobsets.jobset.x-k8s.io/v1alpha2, with the client's parameter names."""

    def __init__(self, state: JobSetState):
        self.s = state

    def _served(self, group, version, plural) -> None:
        assert (group, version, plural) == (render.GROUP, render.VERSION, render.PLURAL)
        if not self.s.crd:
            self.s.calls.append(("404", "JobSet"))
            raise api_error(404, "Not Found")

    @served
    def create_namespaced_custom_object(self, group, version, namespace, plural, body, _request_timeout=None):
        self._served(group, version, plural)
        self.s.create("JobSet", namespace, body)
        self.s.lose_answer("create_namespaced_custom_object")
        return body

    @served
    def get_namespaced_custom_object(self, group, version, namespace, plural, name, _request_timeout=None):
        self._served(group, version, plural)
        self.s.tick()
        if name not in self.s.objects.get("JobSet", {}):
            raise api_error(404, "Not Found")
        return copy.deepcopy(self.s.objects["JobSet"][name])

    @served
    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=None,
                                      limit=None, _request_timeout=None):
        self._served(group, version, plural)
        items = (self.s.listing("JobSet", namespace, label_selector) if label_selector
                 else list(self.s.objects.get("JobSet", {}).values()))
        return {"apiVersion": render.API_VERSION, "kind": "JobSetList",
                "items": copy.deepcopy(items[:limit] if limit else items)}

    @served
    def delete_namespaced_custom_object(self, group, version, namespace, plural, name,
                                        propagation_policy=None, _request_timeout=None):
        self._served(group, version, plural)
        self.s.delete("JobSet", name, namespace, propagation_policy=propagation_policy)


def fake_cluster(state: JobSetState) -> backend.Cluster:
    return backend.Cluster(FakeCoreV1Api(state), FakeBatchV1Api(state), FakeNetworkingV1Api(state),
                           NS, "fake-context", custom=FakeCustomObjectsApi(state))




def setup_run(tmp_path, run_id="lab-run-1", **fields):
    s = specmod.from_dict({"backend": "k8s", **fields, "k8s": {**fields.get("k8s", {}), **JOBSET}})
    p = plan(s, backend.K8sBackend().placement(s), run_id)
    return p, RunDir.create(p, out=tmp_path / run_id)


def run_up(state, p, rundir):
    """test_backend_k8s.up with the custom objects API in the cluster."""
    import test_backend_k8s

    original = test_backend_k8s.fake_cluster
    test_backend_k8s.fake_cluster = fake_cluster
    try:
        return up(state, p, rundir)
    finally:
        test_backend_k8s.fake_cluster = original


def test_the_fake_speaks_the_real_clients_parameters():
    """A fake that accepted arguments the real CustomObjectsApi does not would prove nothing."""
    for name, method in inspect.getmembers(FakeCustomObjectsApi, inspect.isfunction):
        if name.startswith("_"):
            continue
        real = list(inspect.signature(getattr(kc.CustomObjectsApi, name)).parameters)
        fake = list(inspect.signature(method).parameters)
        assert set(fake) <= set(real), (name, set(fake) - set(real))
        required = [p for p, v in inspect.signature(method).parameters.items()
                    if v.default is inspect.Parameter.empty]
        assert required == real[:len(required)], name


def test_a_jobset_lab_is_created_watched_collected_and_deleted(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=3)
    state = JobSetState()
    (outcomes, status, message), lines = run_up(state, p, rundir)
    assert (status, message) == ("passed", "")
    assert created_kinds(state) == ["NetworkPolicy", "JobSet"]          # no Job, no Service of labctl's
    (js,) = [c for c in state.calls if c[:2] == ("create", "JobSet")]
    assert js[2] == "lab"
    assert any("created jobset/lab in namespace labs" in l for l in lines)
    assert any("node-0: running" in l for l in lines)
    first_delete = next(i for i, c in enumerate(state.calls) if c[0] == "delete")
    logs = [c[2] for c in state.calls[:first_delete] if c[0] == "log"]
    assert sorted(logs) == ["lab-node-0-0-x0z", "lab-node-0-1-x1z", "lab-node-0-2-x2z"]
    for i in range(3):
        assert "[rank" in rundir.node_log(i).read_text()
    events = sorted(f.name for f in (rundir.path / "events").iterdir())
    assert events == ["jobset-lab.log", "pod-lab-node-0-0-x0z.log", "pod-lab-node-0-1-x1z.log",
                      "pod-lab-node-0-2-x2z.log"]
    # one delete of the JobSet (Background) takes its Job and pods; nothing is left
    assert ("delete", "JobSet", "lab", "Background") in state.calls
    assert not [c for c in state.calls if c[:2] == ("delete", "Job")]
    assert all(not objs for objs in state.objects.values())
    assert [o.state for o in outcomes] == ["succeeded"] * 3
    assert [o.hostname for o in outcomes] == ["lab-node-0-0", "lab-node-0-1", "lab-node-0-2"]
    assert [o.exited_s for o in outcomes] == [10.0, 11.0, 12.0]      # from the node Job's start
    assert (rundir.path / "rendered" / "k8s.yaml").read_text() == render.text(p)
    finalize(rundir, outcomes, status, message)
    assert rundir.status["state"] == "passed" and rundir.status["checks"]["total"] == 6


def test_a_failing_node_fails_the_jobset_lab_with_logs_kept(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = JobSetState(exit_codes={0: None, 1: 1})
    (outcomes, status, _), _ = run_up(state, p, rundir)
    assert status == "failed"
    assert [o.state for o in outcomes] == ["stopped", "failed"] and outcomes[1].exit_code == 1
    assert rundir.node_log(0).read_text() and rundir.node_log(1).read_text()
    assert all(not objs for objs in state.objects.values())


def test_replicas_are_replicated_jobs_and_the_store_pod_is_no_node(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2, nproc_per_node=1, replicas=2, init_method="tcp",
                          workloads=["replicas"])
    state = JobSetState()
    (outcomes, status, message), _ = run_up(state, p, rundir)
    assert (status, message) == ("passed", "")
    assert [o.hostname for o in outcomes] == ["lab-r0-0-0", "lab-r0-0-1", "lab-r1-0-0", "lab-r1-0-1"]
    logs = sorted(c[2] for c in state.calls if c[0] == "log")
    assert logs == ["lab-r0-0-0-x0z", "lab-r0-0-1-x1z", "lab-r1-0-0-x0z", "lab-r1-0-1-x1z"]
    assert all(not objs for objs in state.objects.values())


def test_a_jobset_waiting_for_kueue_runs_once_admitted(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2, k8s={"queue": "team-a", "schedule_timeout": 30})
    state = JobSetState(admitted_at_poll=4)
    (outcomes, status, _), lines = run_up(state, p, rundir)
    assert status == "passed", lines
    assert any("waiting for admission in queue team-a" in l for l in lines)
    assert [o.state for o in outcomes] == ["succeeded"] * 2


def test_a_jobset_never_admitted_fails_at_schedule_timeout(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2, k8s={"schedule_timeout": 0.2})
    state = JobSetState(admitted_at_poll=None)
    assert "suspend" not in render.render(p)[-1]["spec"]          # no queue: rendered running
    # suspended by someone else (a webhook): named as the JobSet it is
    (outcomes, status, message), _ = run_up(_suspending(state), p, rundir)
    assert status == "failed"
    assert message == ("not placed within k8s.schedule_timeout (0.2s): jobset lab is suspended (waiting "
                       "for a queue controller such as Kueue to admit it; the lab names no k8s.queue)")
    assert all(not objs for objs in state.objects.values())


def _suspending(state: JobSetState) -> JobSetState:
    """A mutating webhook that suspends every JobSet at creation."""
    create = state.create

    def suspended(kind, ns, body):
        if kind == "JobSet":
            body = {**body, "spec": {**body["spec"], "suspend": True}}
        create(kind, ns, body)
    state.create = suspended
    return state


def test_a_cluster_without_the_jobset_crd_is_refused_before_anything_is_created(tmp_path):
    s = specmod.from_dict({"backend": "k8s", "k8s": JOBSET})
    state = JobSetState(crd=False)
    k8s = backend.K8sBackend(cluster=fake_cluster(state))
    with pytest.raises(PreflightError) as err:
        lab.up(s, out=str(tmp_path / "run"), progress=lambda line: None, backend=k8s)
    text = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in text
    assert text.startswith("k8s.kind jobset needs the JobSet CRD (jobsets.jobset.x-k8s.io, "
                           "jobset.x-k8s.io/v1alpha2), and the cluster does not serve it in namespace labs "
                           "(context fake-context)")
    assert "use k8s.kind: job" in text
    assert not (tmp_path / "run").exists(), "refused before the run folder"
    assert state.calls == [("404", "JobSet")] and not state.objects
    # `start` checks too (a backend used without preflight): still nothing created
    p, rundir = setup_run(tmp_path)
    with pytest.raises(PreflightError, match="needs the JobSet CRD"):
        run_up(state, p, rundir)
    assert not [c for c in state.calls if c[0] == "create"] and not state.objects
    # a Job lab on the same cluster: down/delete just finds no JobSets
    assert backend.delete_run(fake_cluster(state), "lab-run-1") == []


def test_the_cli_exits_2_with_one_line_without_the_crd(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from labctl import cli

    state = JobSetState(crd=False)
    monkeypatch.setattr(backend, "connect", lambda context=None, namespace=None: fake_cluster(state))
    (tmp_path / "lab.yaml").write_text("backend: k8s\nk8s: {kind: jobset}\n")
    result = CliRunner().invoke(cli.main, ["up", "-f", str(tmp_path / "lab.yaml"), "--out",
                                           str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    errors = [l for l in result.output.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "needs the JobSet CRD" in errors[0]
    assert not state.objects and not (tmp_path / "run").exists()


# ---- labs that kubectl applied: collect and down ---------------------------------------
def test_collect_and_down_of_a_kubectl_applied_jobset(tmp_path):
    state = JobSetState()
    s = specmod.from_dict({"backend": "k8s", "nodes": 3, "nproc_per_node": 1, "k8s": JOBSET})
    p = plan(s, backend.K8sBackend().placement(s), "lab-applied")
    for obj in render.render(p):                         # `kubectl apply -f` of the render
        state.create(obj["kind"], NS, json.loads(json.dumps(obj)))
    for _ in range(4):
        state.tick()
    cluster = fake_cluster(state)
    assert backend.K8sBackend(cluster=cluster).find_runs() == ["lab-applied"]
    run = lab.collect("k8s", "lab-applied", out=str(tmp_path / "collected"), progress=lambda line: None,
                      backend=backend.K8sBackend(cluster=cluster))
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "passed" and status["world_size"] == 3
    assert [n["hostname"] for n in status["node_outcomes"]] == ["lab-node-0-0", "lab-node-0-1", "lab-node-0-2"]
    # the plan rebuilt from the JobSet's annotation is the plan that was rendered
    assert json.loads((run.path / "plan.json").read_text()) == p.to_dict()
    assert "jobset-lab.log" in {f.name for f in (run.path / "events").iterdir()}
    assert not [c for c in state.calls if c[0] == "delete"], "collect deletes nothing"
    summary = lab.down(RunDir.open(run.path), progress=lambda line: None,
                       backend=backend.K8sBackend(cluster=fake_cluster(state)))
    assert summary == f"deleted 2 object(s) in namespace {NS}: jobset/lab, networkpolicy/lab"
    assert all(not objs for objs in state.objects.values())


def test_a_job_lab_does_not_need_the_right_to_list_jobsets(tmp_path):
    """A `job` lab on a cluster whose role may not list JobSets (403) still goes down;
    a JobSet lab there cannot, and says why instead of deleting half of it."""
    from test_backend_k8s import kubectl_apply

    state = JobSetState()
    s = specmod.from_dict({"backend": "k8s"})
    job_lab = plan(s, backend.K8sBackend().placement(s), "lab-job")
    kubectl_apply(state, job_lab)
    custom = FakeCustomObjectsApi(state)

    def forbidden(*args, **kwargs):
        raise api_error(403, "Forbidden")
    custom.list_namespaced_custom_object = forbidden
    cluster = backend.Cluster(FakeCoreV1Api(state), FakeBatchV1Api(state), FakeNetworkingV1Api(state),
                              NS, "fake-context", custom=custom)
    k8s = backend.K8sBackend(cluster=cluster)
    assert k8s.find_runs() == ["lab-job"]
    k8s.attach("lab-job")
    assert k8s.delete() == (f"deleted 3 object(s) in namespace {NS}: job/lab, service/lab, "
                               "networkpolicy/lab")
    with pytest.raises(LabError, match=r"not allowed to list jobsets.jobset.x-k8s.io in namespace "
                                       r"labs \(403\), so this JobSet lab cannot be found or deleted"):
        backend.delete_run(cluster, "lab-js", jobset=True)
