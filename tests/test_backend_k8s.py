"""The k8s backend against a small in-memory API server (no cluster can run here).

The fakes stand in for CoreV1Api, BatchV1Api and NetworkingV1Api only: they
keep objects, answer with the client's real model classes, and play a tiny
Job controller + kubelet (pods go Pending -> Running -> their scripted exit).
They fail as a real API server does, through the client's own code: errors are
the exceptions `ApiException.from_response` makes of a real urllib3 response
(NotFoundException, ServiceException ..., headers such as Retry-After
included), connections drop with urllib3's own exceptions, and pod logs and
event lists with `_preload_content=False` are real urllib3 responses whose
bodies are bytes read off a (fake) socket, made as they are read and cut where
a test says. Everything else — rendering, the run folder, log splitting — is
the real code.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

import pytest
import urllib3
from kubernetes import client as kc
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

from labctl import driver, lab
from labctl import spec as specmod
from labctl.backends.k8s import api as k8s_api, backend, collection
from labctl.errors import LabError
from labctl.plan import plan
from labctl.backends.k8s import render
from labctl.runrecord import Controller
from labctl.rundir import RunDir
from conftest import decided, finalize

REPO = Path(__file__).resolve().parent.parent
NS = "labs"
RESET = "ConnectionResetError(104, 'Connection reset by peer')"


# ---- how a real API server fails, through the client's own code -----------------------
def api_error(status: int, reason: str, message: str | None = None,
              headers: dict[str, str] | None = None) -> ApiException:
    """What the client raises for this answer: `ApiException.from_response` of a real
    urllib3 response with a Status body (NotFoundException for 404, ServiceException for
    5xx, ApiException for 429 ...), its headers (Retry-After) on `.headers`."""
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                       "reason": reason.replace(" ", ""), "message": message or reason}).encode()
    raw = urllib3.HTTPResponse(body=io.BytesIO(body), status=status, reason=reason,
                               headers={"Content-Type": "application/json", **(headers or {})},
                               preload_content=False)
    response = RESTResponse(raw)
    response.read()
    try:
        ApiException.from_response(http_resp=response, body=body.decode(), data=None)
    except ApiException as exc:
        return exc
    raise AssertionError("from_response always raises")


def read_timeout(method: str = "GET") -> Exception:
    """A read that timed out, as the client raises it: urllib3 retries a GET's read
    itself (3 times) and then gives up with MaxRetryError; a POST's comes as it is."""
    url = f"/api/v1/namespaces/{NS}/x"
    error = urllib3.exceptions.ReadTimeoutError(None, url, "Read timed out. (read timeout=15)")
    return urllib3.exceptions.MaxRetryError(None, url, error) if method == "GET" else error


def refused() -> Exception:
    """Nobody listening (a control plane restarting): urllib3's MaxRetryError(NewConnectionError)."""
    conn = urllib3.connection.HTTPSConnection("10.0.0.1", 6443)
    error = urllib3.exceptions.NewConnectionError(
        conn, "Failed to establish a new connection: [Errno 111] Connection refused")
    return urllib3.exceptions.MaxRetryError(None, f"/api/v1/namespaces/{NS}/pods", error)


def dropped() -> Exception:
    """A connection reset while the request was on its way (no answer came back)."""
    return urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))


class SocketBody(io.RawIOBase):
    """A response body as urllib3 reads it off a socket: the pieces are made as they are
    read (a 100 MB log costs no 100 MB here), and the connection drops after `cut_at`
    bytes the way a reset one does (urllib3 turns it into its own ProtocolError)."""

    def __init__(self, pieces: Iterable[bytes], cut_at: int | None = None):
        self.pieces, self.left, self.sent, self.cut_at = iter(pieces), b"", 0, cut_at

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.cut_at is not None and self.sent >= self.cut_at:
            raise ConnectionResetError(104, "Connection reset by peer")
        while not self.left:
            piece = next(self.pieces, None)
            if piece is None:
                return 0
            self.left = piece
        n = min(len(buffer), len(self.left))
        if self.cut_at is not None:
            n = min(n, self.cut_at - self.sent)
        buffer[:n] = self.left[:n]
        self.left, self.sent = self.left[n:], self.sent + n
        return n


def streamed(pieces: Iterable[bytes], cut_at: int | None = None, content_type: str = "text/plain"):
    """What `_preload_content=False` returns: the urllib3 response, its body unread."""
    return urllib3.HTTPResponse(body=SocketBody(pieces, cut_at), status=200, reason="OK",
                                headers={"Content-Type": content_type}, preload_content=False)


def served(method: Callable) -> Callable:
    """A fake API method: the scripted failures (FakeState.fail, .outage) come first."""
    @functools.wraps(method)
    def serve(self, *args, **kwargs):
        self.s.answer(method.__name__)
        return method(self, *args, **kwargs)
    return serve


class FakeState:
    """One namespace: objects by kind and name, every call in order, a clock of polls."""

    def __init__(self, exit_codes: dict[int, int | None] | None = None, interrupt_at_poll=None,
                 waiting_reason: str | None = None, unschedulable: str | None = None,
                 admitted_at_poll: int | None = 0):
        self.objects: dict[str, dict[str, dict]] = {}
        self.calls: list[tuple] = []
        self.polls = 0
        self.exit_codes = exit_codes or {}
        self.interrupt_at_poll = interrupt_at_poll
        self.waiting_reason = waiting_reason
        self.pod_logs: dict[str, str] = {}
        self.unschedulable = unschedulable          # the scheduler's message for node 1's pod
        self.admitted_at_poll = admitted_at_poll    # Kueue: the Job stays suspended until then
        self.started_at_poll: int | None = 0        # None while no pods exist (suspended Job)
        self.nodes: list[dict] | Exception = []     # what list_node answers (or raises)
        # how the server fails: the next calls of a method, every call (an outage), a
        # call done whose answer is lost, a log stream cut after so many bytes
        self.failures: dict[str, list[Exception]] = collections.defaultdict(list)
        self.outage: Callable[[], Exception] | None = None
        self.answers_lost: dict[str, int] = collections.Counter()
        self.log_cuts: dict[str, list[int | None]] = collections.defaultdict(list)
        self.on_poll: dict[int, Callable[[], None]] = {}
        self.tries: dict[str, list[float]] = collections.defaultdict(list)   # method -> when
        self.pod_events: dict[str, list[dict]] = {}     # more events of a pod (raw dicts)
        self.raw_event_bytes = b""                      # spliced into every event message

    def answer(self, method: str) -> None:
        """Every call: noted, then failed if the script says so."""
        self.tries[method].append(time.monotonic())
        if self.outage is not None:
            raise self.outage()
        if self.failures[method]:
            raise self.failures[method].pop(0)

    def fail(self, method: str, *errors: Exception) -> None:
        """The next len(errors) calls of `method` fail with these, in order."""
        self.failures[method].extend(errors)

    def lose_answer(self, method: str) -> None:
        """After a call that worked: the answer never arrives (the connection dropped)."""
        if self.answers_lost[method]:
            self.answers_lost[method] -= 1
            raise dropped()

    # -- generic object store ---------------------------------------------------
    def create(self, kind: str, ns: str, body: dict) -> None:
        assert ns == NS and isinstance(body, dict)
        name = body["metadata"]["name"]
        self.calls.append(("create", kind, name))
        if name in self.objects.setdefault(kind, {}):
            raise api_error(409, "Conflict", f'{kind.lower()}s "{name}" already exists')
        self.objects[kind][name] = body
        if kind == "Job" and not body["spec"].get("suspend"):
            self._start_pods(body)
        elif kind == "Job":
            self.started_at_poll = None

    def listing(self, kind: str, ns: str, label_selector: str):
        """Equality (`k=v`) and existence (`k`) selectors, as the API server reads them."""
        want = [part.split("=", 1) for part in label_selector.split(",")]
        self.calls.append(("list", kind, label_selector))
        return [b for b in self.objects.get(kind, {}).values()
                if all(w[0] in b["metadata"].get("labels", {}) if len(w) == 1 else
                       b["metadata"].get("labels", {}).get(w[0]) == w[1] for w in want)]

    def delete(self, kind: str, name: str, ns: str, **options) -> None:
        self.calls.append(("delete", kind, name, options.get("propagation_policy")))
        if name not in self.objects.get(kind, {}):
            raise api_error(404, "Not Found", f'{kind.lower()}s "{name}" not found')
        body = self.objects[kind].pop(name)
        if kind == "Job" and options.get("propagation_policy") in ("Background", "Foreground"):
            for pod in [p for p in self.objects.get("Pod", {}).values()
                        if p["metadata"]["labels"].get("job-name") == name]:
                self.objects["Pod"].pop(pod["metadata"]["name"])
        return body

    # -- a tiny Job controller and kubelet --------------------------------------------
    def _start_pods(self, job: dict) -> None:
        template = job["spec"]["template"]
        for i in range(job["spec"]["completions"]):
            name = f"{job['metadata']['name']}-{i}-x{i}z"
            self.objects.setdefault("Pod", {})[name] = {
                "metadata": {"name": name, "labels": {**template["metadata"]["labels"],
                                                      "job-name": job["metadata"]["name"]},
                             "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
                             "creationTimestamp": f"2026-01-01T00:00:0{i}Z"},
                "status": {"phase": "Pending"},
            }
            self.pod_logs[name] = _node_log(job, i)
        job["status"] = {"startTime": "2026-01-01T00:00:00Z"}

    def tick(self) -> None:
        """One poll of the Job: pods advance one step."""
        self.polls += 1
        if self.interrupt_at_poll == self.polls:
            raise KeyboardInterrupt
        if self.polls in self.on_poll:
            self.on_poll.pop(self.polls)()
        for job in self.objects.get("Job", {}).values():
            admitted = self.admitted_at_poll is not None and self.polls >= self.admitted_at_poll
            if job["spec"].get("suspend") and admitted:
                job["spec"]["suspend"] = False          # Kueue admits the workload
                self._start_pods(job)
                self.started_at_poll = self.polls
        for pod in self.objects.get("Pod", {}).values():
            index = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            code = self.exit_codes.get(index, 0)
            step = self.polls - (self.started_at_poll or 0)
            if self.unschedulable and index == 1:
                pod["status"] = {"phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": self.unschedulable}]}
                continue
            if step < 2:
                continue
            if self.waiting_reason and self.polls >= 2:
                pod["status"] = {"phase": "Pending", "containerStatuses": [_status(
                    {"waiting": {"reason": self.waiting_reason, "message": "no such image"}})]}
            elif step == 2:
                pod["status"] = {"phase": "Running", "containerStatuses": [_status({"running": {}})]}
            elif step >= 3 and code is not None:
                pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed",
                                 "containerStatuses": [_status({"terminated": {
                                     "exitCode": code, "finishedAt": f"2026-01-01T00:00:1{index}Z"}})]}
        for job in self.objects.get("Job", {}).values():
            if self.started_at_poll is None:
                continue
            codes = [self.exit_codes.get(i, 0) for i in range(job["spec"]["completions"])]
            if self.polls - self.started_at_poll >= 3 and any(c not in (0, None) for c in codes):
                job["status"]["conditions"] = [{"type": "Failed", "status": "True",
                                                "reason": "BackoffLimitExceeded"}]
            elif self.polls - self.started_at_poll >= 3 and all(c == 0 for c in codes):
                job["status"]["conditions"] = [{"type": "Complete", "status": "True"}]


def _status(state: dict) -> dict:
    return {"name": "node", "image": "labctl-cpu:latest", "imageID": "", "ready": False,
            "restartCount": 0, "state": state}


def _node_log(job: dict, index: int) -> bytes:
    """What torchrun would print on node `index`: tee-prefixed result lines per rank."""
    nproc = int(next(e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
                     if e["name"] == "LAB_NPROC_PER_NODE"))
    lines = []
    for rank in range(index * nproc, (index + 1) * nproc):
        for name in ("ring", "workload_done"):
            record = {"workload": "env", "name": name, "rank": rank, "ok": True}
            lines.append(f"[rank{rank}]:@@labctl-result {json.dumps(record)}")
    return ("\n".join(lines) + "\n").encode()


def _never_started(pod: dict) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return not any("running" in c["state"] or "terminated" in c["state"] for c in statuses)


def _items(model: str, bodies: list[dict]):
    return getattr(kc, model).from_dict({"items": bodies})


class FakeCoreV1Api:
    def __init__(self, state: FakeState):
        self.s = state

    @served
    def create_namespaced_config_map(self, namespace, body, **_kw):
        self.s.create("ConfigMap", namespace, body)
        self.s.lose_answer("create_namespaced_config_map")

    @served
    def create_namespaced_service(self, namespace, body, **_kw):
        self.s.create("Service", namespace, body)
        self.s.lose_answer("create_namespaced_service")

    @served
    def list_node(self, **_kw):
        self.s.calls.append(("list", "Node"))
        if isinstance(self.s.nodes, Exception):
            raise self.s.nodes
        return _items("V1NodeList", self.s.nodes)

    @served
    def list_namespaced_pod(self, namespace, label_selector, **_kw):
        return _items("V1PodList", self.s.listing("Pod", namespace, label_selector))

    @served
    def list_namespaced_service(self, namespace, label_selector, **_kw):
        return _items("V1ServiceList", self.s.listing("Service", namespace, label_selector))

    @served
    def list_namespaced_config_map(self, namespace, label_selector, **_kw):
        return _items("V1ConfigMapList", self.s.listing("ConfigMap", namespace, label_selector))

    @served
    def delete_namespaced_pod(self, name, namespace, **kw):
        self.s.delete("Pod", name, namespace, **kw)

    @served
    def delete_namespaced_service(self, name, namespace, **kw):
        self.s.delete("Service", name, namespace, **kw)

    @served
    def delete_namespaced_config_map(self, name, namespace, **kw):
        self.s.delete("ConfigMap", name, namespace, **kw)

    @served
    def read_namespaced_pod_log(self, name, namespace, container, _preload_content=True, **_kw):
        """The kubelet's bytes. With `_preload_content` (the client's default) the client
        decodes them as UTF-8, strictly (`ApiClient.response_deserialize`), as here."""
        assert container == "node"
        self.s.calls.append(("log", "Pod", name))
        if name not in self.s.objects.get("Pod", {}):
            raise api_error(404, "Not Found", f'pods "{name}" not found')
        if _never_started(self.s.objects["Pod"][name]):
            raise api_error(400, "Bad Request",
                            f'container "node" in pod "{name}" is waiting to start: ContainerCreating')
        log = self.s.pod_logs[name]
        pieces = log() if callable(log) else [log.encode() if isinstance(log, str) else log]
        if _preload_content:
            return b"".join(pieces).decode("utf-8")
        cuts = self.s.log_cuts[name]
        return streamed(pieces, cuts.pop(0) if cuts else None)

    @served
    def list_namespaced_event(self, namespace, field_selector, limit=None, _continue=None,
                              _preload_content=True, **_kw):
        """Events as the client's models, or (`_preload_content=False`) as the JSON bytes
        of one page of `limit` (the `continue` token: where the next page starts)."""
        fields = dict(part.split("=", 1) for part in field_selector.split(","))
        if fields.get("reason") == "FailedScheduling":
            self.s.calls.append(("events", "FailedScheduling", ""))
            pods = [p for p in self.s.objects.get("Pod", {}).values()
                    if self.s.unschedulable and p["metadata"]["name"].startswith("lab-1-")]
            return _items("CoreV1EventList", [{
                "metadata": {"name": f"{p['metadata']['name']}.fs"},
                "involvedObject": {"kind": "Pod", "name": p["metadata"]["name"]},
                "reason": "FailedScheduling", "message": self.s.unschedulable, "type": "Warning",
                "lastTimestamp": "2026-01-01T00:00:02Z", "count": 3} for p in pods])
        kind, name = fields["involvedObject.kind"], fields["involvedObject.name"]
        self.s.calls.append(("events", kind, name))
        reason = "SuccessfulCreate" if kind == "Job" else "Started"
        if kind == "Pod" and self.s.unschedulable and name.startswith("lab-1-"):
            reason = "FailedScheduling"
        items = [{"metadata": {"name": f"{name}.1"}, "involvedObject": {"kind": kind, "name": name},
                  "reason": reason, "message": f"{reason} for {name}@@raw@@", "type": "Normal",
                  "lastTimestamp": "2026-01-01T00:00:01Z", "count": 1}] + self.s.pod_events.get(name, [])
        start = int(_continue or 0)
        end = start + limit if limit else len(items)
        page = {"kind": "EventList", "apiVersion": "v1", "items": items[start:end],
                "metadata": {"continue": str(end)} if end < len(items) else {}}
        body = json.dumps(page).encode().replace(b"@@raw@@", self.s.raw_event_bytes)
        if _preload_content:                # the client decodes the body strictly, then models
            return _items("CoreV1EventList", json.loads(body.decode("utf-8"))["items"])
        return streamed([body], content_type="application/json")


class FakeBatchV1Api:
    def __init__(self, state: FakeState):
        self.s = state

    @served
    def create_namespaced_job(self, namespace, body, **_kw):
        self.s.create("Job", namespace, body)
        self.s.lose_answer("create_namespaced_job")

    @served
    def read_namespaced_job(self, name, namespace, **_kw):
        self.s.tick()
        if name not in self.s.objects.get("Job", {}):
            raise api_error(404, "Not Found", f'jobs.batch "{name}" not found')
        return kc.V1Job.from_dict(self.s.objects["Job"][name])

    @served
    def list_namespaced_job(self, namespace, label_selector, **_kw):
        return _items("V1JobList", self.s.listing("Job", namespace, label_selector))

    @served
    def delete_namespaced_job(self, name, namespace, **kw):
        self.s.delete("Job", name, namespace, **kw)


class FakeNetworkingV1Api:
    def __init__(self, state: FakeState):
        self.s = state

    @served
    def create_namespaced_network_policy(self, namespace, body, **_kw):
        self.s.create("NetworkPolicy", namespace, body)
        self.s.lose_answer("create_namespaced_network_policy")

    @served
    def list_namespaced_network_policy(self, namespace, label_selector, **_kw):
        return _items("V1NetworkPolicyList", self.s.listing("NetworkPolicy", namespace, label_selector))

    @served
    def delete_namespaced_network_policy(self, name, namespace, **kw):
        self.s.delete("NetworkPolicy", name, namespace, **kw)


def fake_cluster(state: FakeState) -> backend.Cluster:
    return backend.Cluster(FakeCoreV1Api(state), FakeBatchV1Api(state), FakeNetworkingV1Api(state),
                           NS, "fake-context")


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    """Polls and retries at test speed: backoff 10 ms doubling to 50 ms, 1 s per call."""
    monkeypatch.setattr(backend, "POLL_S", 0.01)
    monkeypatch.setattr(k8s_api, "BACKOFF_S", 0.01)
    monkeypatch.setattr(k8s_api, "BACKOFF_MAX_S", 0.05)
    monkeypatch.setattr(k8s_api, "RETRY_MAX_S", 1.0)


def setup_run(tmp_path, run_id="lab-run-1", **fields):
    s = specmod.from_dict({"backend": "k8s", **fields})
    p = plan(s, backend.K8sBackend().placement(s), run_id)
    return p, RunDir.create(p, out=tmp_path / run_id)


def up(state, p, rundir, timeout=None):
    """The driver with the k8s backend on the fakes: (outcomes, state, message), progress."""
    lines: list[str] = []
    if timeout is not None:
        p = plan(dataclasses.replace(p.spec, timeout=timeout), p.placement, p.run_id)
    result = driver.run(p, backend.K8sBackend(lines.append, cluster=fake_cluster(state)), rundir,
                        lines.append, grace=0.05)
    if result.error is not None:
        raise result.error
    result = decided(result, rundir)
    return (result.outcomes, result.state.value, result.message), lines


def created_kinds(state):
    return [c[1] for c in state.calls if c[0] == "create"]


def test_a_passing_lab_is_created_in_order_watched_collected_and_deleted(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=3)
    state = FakeState()
    (outcomes, status, message), lines = up(state, p, rundir)
    assert (status, message) == ("passed", "")
    assert created_kinds(state) == ["Service", "NetworkPolicy", "Job"]
    bodies = {c[1]: c for c in state.calls if c[0] == "create"}
    assert set(bodies) == {o["kind"] for o in render.render(p)}
    # progress: one line per change of any index's state, with the deadline
    assert any("node-0: pending  node-1: pending  node-2: pending" in l for l in lines)
    assert any("node-0: running" in l for l in lines)
    assert any("node-0: succeeded  node-1: succeeded  node-2: succeeded" in l for l in lines)
    # logs of every pod and the events, before anything was deleted
    first_delete = next(i for i, c in enumerate(state.calls) if c[0] == "delete")
    logs = [c[2] for c in state.calls[:first_delete] if c[0] == "log"]
    assert sorted(logs) == ["lab-0-x0z", "lab-1-x1z", "lab-2-x2z"]
    for i in range(3):
        assert "[rank" in rundir.node_log(i).read_text()
    events = sorted(f.name for f in (rundir.path / "events").iterdir())
    assert events == ["job-lab.log", "pod-lab-0-x0z.log", "pod-lab-1-x1z.log", "pod-lab-2-x2z.log"]
    assert "SuccessfulCreate" in (rundir.path / "events" / "job-lab.log").read_text()
    # everything with the run label is gone; the Job went with its pods
    assert all(not objs for objs in state.objects.values())
    assert ("delete", "Job", "lab", "Background") in state.calls
    assert [o.state for o in outcomes] == ["succeeded"] * 3
    assert [o.exited_s for o in outcomes] == [10.0, 11.0, 12.0]
    # the run folder knows where it ran, and the real finalize agrees it passed
    assert RunDir.open(rundir.path).status["k8s"]["namespace"] == NS
    assert (rundir.path / "rendered" / "k8s.yaml").read_text() == render.text(p)
    finalize(rundir, outcomes, status, message)
    assert rundir.status["state"] == "passed" and rundir.status["checks"]["total"] == 6


def test_a_script_lab_creates_its_configmap_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("print('hello')\n")
    p, rundir = setup_run(tmp_path, script="train.py")
    state = FakeState()
    (_, status, _), _ = up(state, p, rundir)
    assert created_kinds(state) == ["ConfigMap", "Service", "NetworkPolicy", "Job"]
    assert status == "passed" and not state.objects["ConfigMap"]


def test_a_name_conflict_is_one_clear_error_and_leaves_the_other_run_alone(tmp_path):
    p, rundir = setup_run(tmp_path)
    state = FakeState()
    other = render.render(plan(p.spec, p.placement, "lab-other-run"))
    for obj in other:
        state.objects.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    with pytest.raises(LabError) as err:
        up(state, p, rundir)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"service lab already exists in namespace {NS}")
    assert "labctl down" in text and "kubectl delete -n labs" in text
    assert "app.kubernetes.io/name=lab" in text
    assert state.objects["Service"]["lab"]["metadata"]["labels"][render.RUN_LABEL] == "lab-other-run"
    assert state.objects["Job"]["lab"] is other[-1], "the other run's Job must survive"
    assert not [c for c in state.calls if c[0] in ("log", "events")]


def test_a_failing_node_fails_the_lab_with_logs_kept_and_everything_deleted(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState(exit_codes={0: None, 1: 1})      # node 1 fails, node 0 still running
    (outcomes, status, message), _ = up(state, p, rundir)
    assert status == "failed"
    assert [o.state for o in outcomes] == ["stopped", "failed"]
    assert "after node 1 failed" in outcomes[0].reason
    assert outcomes[1].exit_code == 1
    assert rundir.node_log(0).read_text() and rundir.node_log(1).read_text()
    assert all(not objs for objs in state.objects.values())


def test_the_deadline_stops_the_lab_with_logs_kept(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState(exit_codes={0: None, 1: None})
    (outcomes, status, message), lines = up(state, p, rundir, timeout=0.3)
    assert status == "timeout" and "deadline" in message
    assert any(l.startswith("timeout:") for l in lines)
    assert rundir.node_log(0).read_text() and rundir.node_log(1).read_text()
    assert all(not objs for objs in state.objects.values())


def test_ctrl_c_collects_logs_then_deletes(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState(exit_codes={0: None, 1: None}, interrupt_at_poll=3)
    (outcomes, status, message), lines = up(state, p, rundir)
    assert status == "interrupted"
    assert rundir.node_log(0).read_text() and rundir.node_log(1).read_text()
    assert (rundir.path / "events" / "job-lab.log").is_file()
    assert all(not objs for objs in state.objects.values())


def test_an_image_that_cannot_be_pulled_fails_fast(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState(waiting_reason="ErrImagePull")
    (_, status, message), _ = up(state, p, rundir, timeout=600)
    assert status == "failed" and "ErrImagePull" in message and state.polls < 5
    assert all(not objs for objs in state.objects.values())


def test_an_unschedulable_pod_is_shown_within_a_poll_and_fails_at_schedule_timeout(tmp_path, monkeypatch):
    message = "0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: }."
    p, rundir = setup_run(tmp_path, nodes=2, k8s={"schedule_timeout": 0.2})
    state = FakeState(unschedulable=message)
    (outcomes, status, why), lines = up(state, p, rundir)
    assert status == "failed"
    assert why == ("not placed within k8s.schedule_timeout (0.2s): pod lab-1-x1z (node 1) cannot "
                   f"be scheduled: {message}")
    shown = next(i for i, l in enumerate(lines) if "cannot be scheduled" in l)
    assert shown <= 3, "the scheduler's message is shown within one poll"
    events = (rundir.path / "events" / "pod-lab-1-x1z.log").read_text()
    assert "FailedScheduling" in events, "events are saved before the delete"
    assert all(not objs for objs in state.objects.values())
    finalize(rundir, outcomes, status, why)
    assert "cannot be scheduled" in rundir.status["message"]


def test_a_job_waiting_for_kueue_runs_once_admitted(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2, k8s={"queue": "team-a", "schedule_timeout": 30})
    state = FakeState(admitted_at_poll=4)
    (outcomes, status, _), lines = up(state, p, rundir)
    assert status == "passed", lines
    assert any("waiting for admission in queue team-a" in l for l in lines)
    assert state.objects.get("Job") == {} and [o.state for o in outcomes] == ["succeeded"] * 2


def test_a_job_never_admitted_fails_at_schedule_timeout_naming_the_queue(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2, k8s={"queue": "team-a", "schedule_timeout": 0.2})
    state = FakeState(admitted_at_poll=None)
    (_, status, why), _ = up(state, p, rundir)
    assert status == "failed"
    assert why == "not placed within k8s.schedule_timeout (0.2s): waiting for admission in queue team-a"
    assert all(not objs for objs in state.objects.values())


def test_down_deletes_exactly_its_own_run(tmp_path):
    p, rundir = setup_run(tmp_path)
    rundir.record.backend_state = {"namespace": NS, "context": "fake-context"}
    state = FakeState()
    for run_id in (p.run_id, "lab-someone-else"):
        for obj in render.render(plan(p.spec, p.placement, run_id)):
            obj["metadata"]["name"] += f"-{run_id}"         # two runs side by side
            state.objects.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    summary = lab.down(rundir, progress=lambda line: None,
                       backend=backend.K8sBackend(cluster=fake_cluster(state)))
    assert f"deleted 3 object(s) in namespace {NS}: " in summary
    assert summary.startswith(f"saved the logs into {rundir.path}")
    left = [o["metadata"]["labels"][render.RUN_LABEL] for objs in state.objects.values() for o in objs.values()]
    assert left == ["lab-someone-else"] * 3
    again = lab.down(RunDir.open(rundir.path), progress=lambda line: None,
                     backend=backend.K8sBackend(cluster=fake_cluster(state)))
    assert "nothing to delete" in again


# ---- labctl down after labctl died (issue: down never deletes unsaved logs) -----------
def _dead_controller_run(tmp_path, state: FakeState):
    """What `labctl up` left when it was killed -9 while the pods ran: a folder at
    'running' whose labctl is gone, and the lab's objects in the cluster."""
    p, rundir = setup_run(tmp_path)
    rundir.record.backend_state = {"namespace": NS, "context": "fake-context"}
    rundir.record.controller = Controller(2 ** 22 + 1, os.uname().nodename, 1)
    rundir.save()
    kubectl_apply(state, p)
    state.tick(), state.tick()                         # pods running, logs written so far
    return p, RunDir.open(rundir.path)


def test_down_of_a_dead_labctls_run_saves_every_log_then_deletes(tmp_path):
    state = FakeState(exit_codes={0: None, 1: None})
    p, rundir = _dead_controller_run(tmp_path, state)
    assert rundir.controller_gone()
    summary = lab.down(rundir, progress=lambda line: None,
                       backend=backend.K8sBackend(cluster=fake_cluster(state)))
    assert summary.startswith(f"saved the logs into {rundir.path}")
    first_delete = next(i for i, c in enumerate(state.calls) if c[0] == "delete")
    assert sorted(c[2] for c in state.calls[:first_delete] if c[0] == "log") == ["lab-0-x0z", "lab-1-x1z"]
    status = json.loads((rundir.path / "status.json").read_text())
    assert status["state"] == "abandoned"
    assert [n["state"] for n in status["node_outcomes"]] == ["stopped", "stopped"]
    assert "still running when `labctl down` stopped it" in status["node_outcomes"][0]["reason"]
    assert "[rank1]:" in rundir.node_log(0).read_text() and rundir.rank_log(3).read_text()
    assert (rundir.path / "events" / "job-lab.log").is_file()
    assert (rundir.path / "report.md").read_text().startswith("# Lab lab: ABANDONED")
    assert all(not objs for objs in state.objects.values())


def test_down_deletes_nothing_when_the_logs_cannot_be_saved(tmp_path):
    state = FakeState(exit_codes={0: None, 1: None})
    p, rundir = _dead_controller_run(tmp_path, state)
    core = FakeCoreV1Api(state)

    def broken_log(name, namespace, container, **_kw):
        raise api_error(500, "Internal Server Error")
    core.read_namespaced_pod_log = broken_log
    cluster = backend.Cluster(core, FakeBatchV1Api(state), FakeNetworkingV1Api(state), NS, "fake-context")
    before = {kind: sorted(objs) for kind, objs in state.objects.items()}
    with pytest.raises(LabError, match=r"could not save the logs of run lab-run-1 \(could not read "
                                       r"the log of pod lab-0-x0z: .*500.*\); nothing was deleted") as err:
        lab.down(rundir, progress=lambda line: None, backend=backend.K8sBackend(cluster=cluster))
    assert err.value.exit_code == 1 and "\n" not in str(err.value)
    assert not [c for c in state.calls if c[0] == "delete"]
    assert {kind: sorted(objs) for kind, objs in state.objects.items()} == before
    assert RunDir.open(rundir.path).status["state"] == "running"      # not written down as done


def test_down_stopped_by_a_signal_while_saving_the_logs_says_so_and_deletes_nothing(tmp_path):
    """Issue 38: an interrupted `labctl down` exited 143 with no line. Ctrl-C while it reads
    the pods' logs: one line (what was done, what is left), 130, nothing deleted."""
    import signal

    state = FakeState(exit_codes={0: None, 1: None})
    p, rundir = _dead_controller_run(tmp_path, state)
    core = FakeCoreV1Api(state)

    def interrupted_log(name, namespace, container, **_kw):
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the signal should have stopped the read")
    core.read_namespaced_pod_log = interrupted_log
    cluster = backend.Cluster(core, FakeBatchV1Api(state), FakeNetworkingV1Api(state), NS, "fake-context")
    before = {kind: sorted(objs) for kind, objs in state.objects.items()}
    handler = signal.getsignal(signal.SIGINT)   # default_int_handler; SIG_IGN under `nohup ... &`
    with pytest.raises(LabError) as err:
        lab.down(rundir, progress=lambda line: None, backend=backend.K8sBackend(cluster=cluster))
    assert str(err.value) == ("interrupted (SIGINT) while saving the logs: nothing was deleted; left: the lab "
                              f"(still running) and its logs, not saved; `labctl down {rundir.path}` again "
                              "finishes it")
    assert err.value.exit_code == 130
    assert {kind: sorted(objs) for kind, objs in state.objects.items()} == before
    assert signal.getsignal(signal.SIGINT) is handler      # its handler is gone, the one before is back


def test_down_stopped_by_a_signal_while_deleting_finishes_deleting_and_says_so(tmp_path):
    import signal

    state = FakeState(exit_codes={0: None, 1: None})
    p, rundir = _dead_controller_run(tmp_path, state)
    k8s_backend = backend.K8sBackend(cluster=fake_cluster(state))
    delete = k8s_backend.delete

    def delete_interrupted():
        os.kill(os.getpid(), signal.SIGTERM)            # deferred: a half-deleted lab helps nobody
        return delete()
    k8s_backend.delete = delete_interrupted
    with pytest.raises(LabError) as err:
        lab.down(rundir, progress=lambda line: None, backend=k8s_backend)
    text = str(err.value)
    assert text.startswith(f"interrupted (SIGTERM) while deleting the lab: the logs were saved into {rundir.path}; "
                           f"deleted 3 object(s) in namespace {NS}") and text.endswith("; left: nothing"), text
    assert err.value.exit_code == 143
    assert all(not objs for objs in state.objects.values())
    assert RunDir.open(rundir.path).status["state"] == "abandoned"


# ---- labctl collect: labs that kubectl applied ---------------------------------------
def kubectl_apply(state: FakeState, p) -> None:
    """`kubectl apply -f` of `labctl render k8s`: the rendered objects, as rendered."""
    for obj in render.render(p):
        state.create(obj["kind"], NS, json.loads(json.dumps(obj)))


def applied(tmp_path, state: FakeState, run_id="lab-applied", ticks=0, **fields):
    s = specmod.from_dict({"backend": "k8s", **fields})
    p = plan(s, backend.K8sBackend().placement(s), run_id)
    kubectl_apply(state, p)
    for _ in range(ticks):
        state.tick()
    return p


def collect(state: FakeState, tmp_path, run_id="lab-applied", out_name="collected", **kw):
    lines: list[str] = []
    run = lab.collect("k8s", run_id, out=str(tmp_path / out_name), progress=lines.append,
                      backend=backend.K8sBackend(lines.append, cluster=fake_cluster(state)), **kw)
    return run, lines


def test_collect_of_a_finished_job_writes_the_run_folder_of_up(tmp_path):
    state = FakeState()
    p = applied(tmp_path, state, ticks=4, nodes=3, nproc_per_node=1)
    run, lines = collect(state, tmp_path)
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "passed" and status["ok"] is True
    assert status["run_id"] == "lab-applied" and status["world_size"] == 3
    assert status["checks"] == {"total": 3, "failed": 0, "skipped": 0}
    assert status["k8s"]["namespace"] == NS
    assert [n["state"] for n in status["node_outcomes"]] == ["succeeded"] * 3
    # the plan rebuilt from the Job's annotation is the plan that was rendered
    assert json.loads((run.path / "plan.json").read_text()) == p.to_dict()
    assert specmod.load(run.path / "spec.yaml") == dataclasses.replace(p.spec, out=None)
    for rank in range(3):
        assert "workload_done" in run.rank_log(rank).read_text()
    assert len((run.path / "results.jsonl").read_text().splitlines()) == 6
    assert sorted(f.name for f in (run.path / "events").iterdir()) == [
        "job-lab.log", "pod-lab-0-x0z.log", "pod-lab-1-x1z.log", "pod-lab-2-x2z.log"]
    assert (run.path / "report.md").read_text().startswith("# Lab lab: PASSED")
    assert not [c for c in state.calls if c[0] == "delete"], "collect deletes nothing"
    assert state.objects["Job"] and state.objects["Pod"]
    # `labctl down` of the collected folder finds the lab (the folder says where it ran)
    # and leaves the finished folder as it is
    summary = lab.down(RunDir.open(run.path), progress=lambda line: None,
                       backend=backend.K8sBackend(cluster=fake_cluster(state)))
    assert summary == f"deleted 3 object(s) in namespace {NS}: job/lab, service/lab, networkpolicy/lab"
    assert all(not objs for objs in state.objects.values())
    assert RunDir.open(run.path).status["state"] == "passed"


def test_collect_delete_removes_the_lab_only_after_the_folder_is_written(tmp_path):
    state = FakeState(exit_codes={1: 2})
    applied(tmp_path, state, ticks=4)
    run, lines = collect(state, tmp_path, delete=True)
    assert run.status["state"] == "failed"     # the fake ranks all passed: the pod exit code decides
    assert [n["state"] for n in run.status["node_outcomes"]] == ["succeeded", "failed"]
    first_delete = next(i for i, c in enumerate(state.calls) if c[0] == "delete")
    assert [c for c in state.calls[first_delete:] if c[0] in ("log", "events")] == []
    assert lines[-1].startswith(f"deleted 3 object(s) in namespace {NS}: job/lab")
    assert all(not objs for objs in state.objects.values())


def test_collect_waits_for_a_running_job_to_end(tmp_path):
    state = FakeState()
    applied(tmp_path, state)                            # pods pending: collect waits
    run, lines = collect(state, tmp_path)
    assert run.status["state"] == "passed"
    assert any("node-0: running" in l for l in lines)
    assert [n["exited_s"] for n in run.status["node_outcomes"]] == [10.0, 11.0]


def test_collect_no_wait_of_a_running_job_takes_what_is_there_and_says_running(tmp_path):
    state = FakeState(exit_codes={0: None, 1: None})
    applied(tmp_path, state, ticks=2)
    run, lines = collect(state, tmp_path, wait=False)
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "running" and status["ok"] is False
    assert status["message"] == "node(s) 0, 1 still running (--no-wait): collected what they wrote so far"
    assert [n["state"] for n in status["node_outcomes"]] == ["running", "running"]
    assert "ring" in run.rank_log(0).read_text()
    assert (run.path / "report.md").read_text().startswith("# Lab lab: RUNNING")
    assert sum("node-0:" in l for l in lines) == 1, "one look, no waiting"
    assert not [c for c in state.calls if c[0] == "delete"]


def test_collect_stops_waiting_at_the_timeout_and_says_so(tmp_path):
    state = FakeState(exit_codes={0: None, 1: None})
    applied(tmp_path, state)
    run, _ = collect(state, tmp_path, timeout=0.3)
    assert run.status["state"] == "running"
    assert "not ended within --timeout 0.3s" in run.status["message"]


def test_ctrl_c_during_collect_stops_the_waiting_not_the_lab(tmp_path):
    state = FakeState(exit_codes={0: None, 1: None}, interrupt_at_poll=4)
    applied(tmp_path, state)
    run, lines = collect(state, tmp_path)
    assert run.status["state"] == "running" and run.status["signal"] == "SIGINT"
    assert "SIGINT stopped the waiting" in run.status["message"]
    assert run.node_log(0).read_text() and (run.path / "events" / "job-lab.log").is_file()
    assert not [c for c in state.calls if c[0] == "delete"]


def test_collect_again_goes_into_a_folder_of_its_own(tmp_path, monkeypatch):
    state = FakeState()
    applied(tmp_path, state, ticks=4)
    monkeypatch.chdir(tmp_path)
    first = lab.collect("k8s", "lab-applied", progress=lambda line: None,
                        backend=backend.K8sBackend(cluster=fake_cluster(state)))
    second = lab.collect("k8s", "lab-applied", progress=lambda line: None,
                         backend=backend.K8sBackend(cluster=fake_cluster(state)))
    assert (first.path, second.path) == (Path("runs/lab-applied"), Path("runs/lab-applied.2"))
    assert second.status["state"] == "passed"


def test_collect_of_a_job_whose_pods_are_gone_says_what_was_lost_and_why(tmp_path):
    state = FakeState()
    applied(tmp_path, state, ticks=4)
    state.objects["Pod"].clear()                        # deleted, evicted ...
    run, _ = collect(state, tmp_path)
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "failed"
    assert [n["state"] for n in status["node_outcomes"]] == ["lost", "lost"]
    assert status["node_outcomes"][0]["reason"] == backend.POD_GONE + "; the Job says Complete"
    assert "ttlSecondsAfterFinished=3600s" in backend.POD_GONE
    assert "node 0 lost: pod gone before its log was read" in status["message"]
    assert "its log is lost" in (run.path / "report.md").read_text()


def test_collect_after_the_ttl_removed_job_and_pods_names_what_is_left(tmp_path):
    state = FakeState()
    applied(tmp_path, state, ticks=4)
    state.objects["Pod"].clear()
    state.objects["Job"].clear()
    with pytest.raises(LabError, match=r"run lab-applied in namespace labs \(context fake-context\): "
                                       r"its Job and pods are gone \(removed ttlSecondsAfterFinished=3600s") as err:
        collect(state, tmp_path)
    assert err.value.exit_code == 1
    assert "left: service/lab" in str(err.value)
    assert not (tmp_path / "collected").exists()


def test_collect_of_an_unknown_run_id_names_the_runs_there_are(tmp_path):
    state = FakeState()
    applied(tmp_path, state, run_id="lab-one")
    applied(tmp_path, state, run_id="lab-two", name="other")
    with pytest.raises(backend.UnknownRun) as err:
        collect(state, tmp_path, run_id="lab-nope")
    assert err.value.exit_code == 2
    assert str(err.value).startswith(f"no run lab-nope in namespace {NS} (context fake-context); "
                                     "runs there: lab-one, lab-two (the run id is on the first line")
    assert not (tmp_path / "collected").exists()


# ---- finding the cluster (real client, real config loading) ------------------------
def _kubeconfig(tmp_path, server="https://127.0.0.1:9") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
contexts:
- {{name: first, context: {{cluster: c, user: u, namespace: ns-first}}}}
- {{name: second, context: {{cluster: c, user: u}}}}
current-context: first
users: [{{name: u, user: {{token: t}}}}]
""")
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)


def test_no_kubeconfig_is_one_clear_error(clean_env):
    with pytest.raises(LabError, match=r"^no Kubernetes cluster reachable: no kubeconfig at .*; "
                                       r"set KUBECONFIG or --context$"):
        backend.connect()


def test_without_tenacity_the_k8s_backend_says_what_to_install(clean_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "tenacity", None)         # `import tenacity` fails
    with pytest.raises(LabError, match=r"^the k8s backend needs the kubernetes Python client and "
                                       r"tenacity \(.*\); install them with: pip install 'labctl\[k8s\]'$"):
        backend.connect()


def test_an_unreachable_cluster_is_one_clear_error(clean_env, tmp_path, monkeypatch):
    """Loopback port 9 (discard) is closed here: the client's real connection fails."""
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path)))
    with pytest.raises(LabError, match=r"no Kubernetes cluster reachable at https://127.0.0.1:9 "
                                       r"\(context first\)"):
        backend.connect()
    with pytest.raises(LabError, match=r"no Kubernetes cluster reachable: .*nope"):
        backend.connect(context="nope")


def test_namespace_comes_from_the_flag_then_the_context(clean_env, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path)))
    monkeypatch.setattr(kc.VersionApi, "get_code", lambda self, **kw: None)   # no server here
    assert (backend.connect().namespace, backend.connect().context) == ("ns-first", "first")
    assert backend.connect(context="second").namespace == "default"
    assert backend.connect(context="second", namespace="mine").namespace == "mine"


def test_cli_up_and_preflight_without_a_cluster_exit_1_with_one_line_and_create_nothing(tmp_path):
    """No cluster: one line, exit 1, no run folder and nothing on stdout about collecting
    or finishing one (issue 53 item 4: a run folder was made and finished first)."""
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    for command in (["up", "--out", str(tmp_path / "run")], ["preflight"]):
        out = subprocess.run([sys.executable, "-m", "labctl.cli", *command, "--backend", "k8s"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert out.returncode == 1, out.stderr
        assert out.stderr.strip().splitlines() == [
            f"error: no Kubernetes cluster reachable: no kubeconfig at {tmp_path / 'missing'} "
            "and not running in a pod; set KUBECONFIG or --context"], out.stderr
        assert "collecting" not in out.stdout and "finishing" not in out.stdout, out.stdout
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()


def k8s_node(name: str, gpus: int | None) -> dict:
    allocatable = {"cpu": "8", **({"nvidia.com/gpu": str(gpus)} if gpus is not None else {})}
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


@pytest.mark.parametrize("nodes, nproc, refused", [
    ([k8s_node("cpu-a", None), k8s_node("cpu-b", 0)], 1, "no node of context fake-context advertises nvidia.com/gpu (2 node(s)"),
    ([k8s_node("cpu-a", None), k8s_node("gpu-a", 2)], 4, "the most any node of context fake-context has is 2 (gpu-a); use --nproc-per-node 2"),
    ([k8s_node("gpu-a", 8)], 4, None),
    (api_error(403, "Forbidden"), 1, None),       # no right to list nodes: the scheduler will say
])
def test_preflight_refuses_nccl_when_the_api_says_no_node_has_the_gpus(nodes, nproc, refused):
    from labctl.backends.base import PreflightError

    state = FakeState()
    state.nodes = nodes
    s = specmod.from_dict({"backend": "k8s", "dist_backend": "nccl", "nproc_per_node": nproc})
    p = plan(s, backend.K8sBackend().placement(s), "lab-run-1")
    k8s = backend.K8sBackend(cluster=fake_cluster(state))
    if refused:
        with pytest.raises(PreflightError, match=re.escape(refused)):
            k8s.preflight(p)
    else:
        k8s.preflight(p)
    assert state.calls == [("list", "Node")] and not state.objects, "a preflight creates nothing"


def test_preflight_asks_the_api_nothing_for_a_gloo_lab():
    state = FakeState()
    s = specmod.from_dict({"backend": "k8s"})
    backend.K8sBackend(cluster=fake_cluster(state)).preflight(plan(s, backend.K8sBackend().placement(s), "r"))
    assert state.calls == []

def test_kill_node_deletes_the_pod_and_the_node_reads_killed_by_the_fault(tmp_path):
    p, rundir = setup_run(tmp_path, faults=["kill-node:1@0"], timeout=30)
    state = FakeState(exit_codes={0: None, 1: None})        # both would run until stopped
    (outcomes, status, _), lines = up(state, p, rundir)
    assert ("delete", "Pod", "lab-1-x1z", None) in state.calls
    node1 = outcomes[1]
    assert (node1.state, node1.signal) == ("killed", "SIGKILL")
    assert node1.reason == "pod lab-1-x1z deleted by fault kill-node:1@0"
    assert status == "failed"
    (record,) = [json.loads(line) for line in (rundir.path / "faults.jsonl").read_text().splitlines()]
    assert record["ok"] and record["did"].startswith("deleted pod lab-1-x1z")
    assert any("fault kill-node:1@0 (begin)" in line for line in lines)


# ---- nothing lost: any bytes, any size, an API server that fails now and then (issue 28) ----
BAD_BYTES = (b"[rank0]:latin-1 \xe9t\xe9, a lone \xff, half a euro \xe2\x82 and NUL \x00\n"
             b"[rank1]:\xfe\xfe not UTF-8 at all\n")


def test_a_log_that_is_not_utf8_arrives_byte_for_byte_in_the_node_and_rank_logs(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState()
    served_bytes = {}

    def bad_bytes_in_node_0():
        state.pod_logs["lab-0-x0z"] = served_bytes[0] = BAD_BYTES + state.pod_logs["lab-0-x0z"]
    state.on_poll[1] = bad_bytes_in_node_0
    (outcomes, status, message), _ = up(state, p, rundir)
    assert (status, message) == ("passed", "")
    assert rundir.node_log(0).read_bytes() == served_bytes[0]
    finalize(rundir, outcomes, status, message)
    assert rundir.status["state"] == "passed" and rundir.status["checks"]["total"] == 4
    assert b"latin-1 \xe9t\xe9, a lone \xff, half a euro \xe2\x82 and NUL \x00\n" in rundir.rank_log(0).read_bytes()
    assert b"\xfe\xfe not UTF-8 at all\n" in rundir.rank_log(1).read_bytes()


def test_a_100_mb_log_is_streamed_to_the_node_log_in_bounded_memory(tmp_path):
    """The pod's 100 MiB are made as the client reads them; labctl holds LOG_CHUNK at a time
    (the old read held the whole log twice over: bytes, then the decoded string)."""
    import tracemalloc

    state = FakeState()
    applied(tmp_path, state, ticks=4)
    line = b"[rank0]:" + b"x" * 1015 + b"\n"                       # 1 KiB
    state.pod_logs["lab-0-x0z"] = lambda: (line * 64 for _ in range(1600))   # 100 MiB
    p, rundir = setup_run(tmp_path, run_id="lab-applied")
    cluster, lines = fake_cluster(state), []
    tracemalloc.start()
    try:
        collection.collect_run({0: "lab-0", 1: "lab-1"}, "lab", "lab-applied", rundir, cluster, lines.append)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rundir.node_log(0).stat().st_size == 100 << 20
    with open(rundir.node_log(0), "rb") as f:
        assert f.read(1024) == line and (f.seek(-1024, 2), f.read())[1] == line
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB while streaming a 100 MiB log"


def test_a_429_is_waited_out_as_its_retry_after_says_and_the_lab_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(k8s_api, "RETRY_MAX_S", 5.0)      # room for the 1 s it asks for
    p, rundir = setup_run(tmp_path)
    state = FakeState()
    state.on_poll[2] = lambda: state.fail("list_namespaced_pod", api_error(
        429, "Too Many Requests", "too many requests, please try again later", {"Retry-After": "1"}))
    (outcomes, status, message), _ = up(state, p, rundir)
    assert (status, message) == ("passed", "")
    times = state.tries["list_namespaced_pod"]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert sum(g >= 1.0 for g in gaps) == 1, "one wait of the server's Retry-After (1 s), not 10 ms"
    assert all(not objs for objs in state.objects.values())


@pytest.mark.parametrize("failures", [
    [api_error(503, "Service Unavailable")] * 3,
    [api_error(500, "Internal Server Error"), api_error(502, "Bad Gateway"), api_error(504, "Gateway Timeout")],
    [refused(), refused()],
    [read_timeout(), dropped()],
], ids=["503x3", "500-502-504", "refused", "timeout-dropped"])
def test_a_poll_that_fails_a_few_times_is_retried_and_the_lab_passes(tmp_path, failures):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState()
    state.on_poll[2] = lambda: state.fail("read_namespaced_job", *failures)
    (outcomes, status, message), _ = up(state, p, rundir)
    assert (status, message) == ("passed", "")
    assert len(state.tries["read_namespaced_job"]) == state.polls + len(failures)
    assert rundir.node_log(0).read_bytes() and rundir.node_log(1).read_bytes()
    assert all(not objs for objs in state.objects.values())


def test_a_create_whose_answer_was_lost_is_retried_and_finds_its_own_object(tmp_path):
    """A POST that worked but whose answer never came: the retry gets 409 for the run's
    own Job, which is no conflict with another run."""
    p, rundir = setup_run(tmp_path)
    state = FakeState()
    state.answers_lost["create_namespaced_job"] = 1
    (outcomes, status, message), _ = up(state, p, rundir)
    assert (status, message) == ("passed", "")
    assert created_kinds(state) == ["Service", "NetworkPolicy", "Job", "Job"]


def test_a_refusal_during_the_poll_is_one_line_not_an_internal_error(tmp_path):
    p, rundir = setup_run(tmp_path)
    state = FakeState(exit_codes={0: None, 1: None})
    forbidden = ('pods is forbidden: User "system:serviceaccount:labs:lab" cannot list resource '
                 '"pods" in API group "" in the namespace "labs"')
    state.on_poll[3] = lambda: state.fail("list_namespaced_pod", api_error(403, "Forbidden", forbidden))
    with pytest.raises(LabError) as err:
        up(state, p, rundir)
    assert str(err.value) == f"Kubernetes API: GET pods in namespace labs: 403 Forbidden: {forbidden}"
    answered = [c for c in state.calls if c[:2] == ("list", "Pod")]
    assert len(state.tries["list_namespaced_pod"]) == len(answered) + 1, "the 403 was not retried"
    assert rundir.node_log(0).read_bytes(), "the logs were collected (the API answers) ..."
    assert all(not objs for objs in state.objects.values()), "... and the lab deleted"


def test_an_api_that_times_out_past_the_deadline_ends_the_lab_in_one_line_and_keeps_it(tmp_path, monkeypatch):
    """Every call times out from the third poll on, past the lab's deadline (2 s; the
    per-call cap is 60 s): one line naming the call, the lab kept with nothing deleted;
    once the API is back, `labctl down` saves every log, then deletes."""
    monkeypatch.setattr(k8s_api, "RETRY_MAX_S", 60.0)
    spec = specmod.from_dict({"backend": "k8s", "nodes": 2, "timeout": 2})
    state = FakeState(exit_codes={0: None, 1: None})
    state.on_poll[3] = lambda: setattr(state, "outage", read_timeout)
    lines: list[str] = []
    t0 = time.monotonic()
    with pytest.raises(LabError) as err:
        lab.up(spec, out=str(tmp_path / "run"), progress=lines.append,
               backend=backend.K8sBackend(lines.append, cluster=fake_cluster(state)))
    took = time.monotonic() - t0
    text = str(err.value)
    assert "\n" not in text and "internal error" not in text
    assert re.fullmatch(r"Kubernetes API: GET \S+ in namespace labs: timed out \(.*Read timed out.*\), "
                        r"\d+ tries over [12]s, until the lab's deadline; the lab was kept: "
                        rf"`labctl down {re.escape(str(tmp_path / 'run'))}` saves the logs, then removes it",
                        text), text
    assert took < 10, f"{took:.1f}s: the cleanup after a lasting failure tries each call once"
    assert not [c for c in state.calls if c[0] == "delete"] and state.objects["Job"], "nothing deleted"
    run = RunDir.open(tmp_path / "run")
    assert run.status["state"] == "error" and run.status["logs_uncollected"] is True
    assert "collecting the logs failed: Kubernetes API: GET pods in namespace labs" in run.status["message"]
    state.outage = None                                    # the control plane is back
    summary = lab.down(run, progress=lambda line: None,
                       backend=backend.K8sBackend(cluster=fake_cluster(state)))
    assert summary.startswith(f"saved the logs into {run.path}")
    assert run.node_log(0).read_bytes() and run.node_log(1).read_bytes()
    assert all(not objs for objs in state.objects.values())
    after = RunDir.open(run.path).status
    assert after["state"] == "error" and after["message"].endswith("`labctl down` saved the logs afterwards")


def test_a_log_cut_in_the_middle_is_read_again_whole(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState()
    state.log_cuts["lab-0-x0z"] = [100]                  # the first read breaks off after 100 bytes
    (outcomes, status, message), _ = up(state, p, rundir)
    assert (status, message) == ("passed", "")
    assert rundir.node_log(0).read_bytes() == state.pod_logs["lab-0-x0z"]
    assert [c for c in state.calls if c == ("log", "Pod", "lab-0-x0z")] == [("log", "Pod", "lab-0-x0z")] * 2


def test_a_log_cut_every_time_keeps_the_lab_and_says_so(tmp_path):
    p, rundir = setup_run(tmp_path, nodes=2)
    state = FakeState()
    state.log_cuts["lab-0-x0z"] = [100] * 10_000
    lines: list[str] = []
    result = decided(driver.run(p, backend.K8sBackend(lines.append, cluster=fake_cluster(state)),
                                rundir, lines.append, grace=0.05), rundir)
    assert result.state.value == "error" and result.kept
    assert re.match(r"collecting the logs failed: could not read the log of pod lab-0-x0z: Kubernetes "
                    r"API: GET pods/lab-0-x0z/log in namespace labs: cut after \d+ bytes: connection "
                    rf"broken \(Connection broken: {re.escape(RESET)}\), \d+ tries over 1s; nothing was "
                    r"deleted", result.message), result.message
    assert rundir.node_log(1).read_bytes() == state.pod_logs["lab-1-x1z"], "the other logs are saved"
    assert not [c for c in state.calls if c[0] == "delete"]


def test_events_are_read_in_pages_and_bytes_that_are_not_utf8_do_not_lose_them(tmp_path, monkeypatch):
    monkeypatch.setattr(k8s_api, "EVENT_PAGE", 500)
    p, rundir = setup_run(tmp_path)
    state = FakeState()
    state.raw_event_bytes = b" \xff\xfe"
    state.pod_events["lab-0-x0z"] = [
        {"metadata": {"name": f"lab-0-x0z.{i}"}, "involvedObject": {"kind": "Pod", "name": "lab-0-x0z"},
         "reason": "Pulled", "message": f"event {i}", "type": "Normal",
         "lastTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z", "count": 1} for i in range(1200)]
    (outcomes, status, message), _ = up(state, p, rundir)
    assert (status, message) == ("passed", "")
    text = (rundir.path / "events" / "pod-lab-0-x0z.log").read_text()
    assert len(text.splitlines()) == 1201
    assert "Started pod/lab-0-x0z: Started for lab-0-x0z \ufffd\ufffd" in text
    assert [c for c in state.calls if c == ("events", "Pod", "lab-0-x0z")] == [("events", "Pod", "lab-0-x0z")] * 3


def test_an_api_that_keeps_failing_at_preflight_is_one_line_before_anything_is_created():
    state = FakeState()
    state.outage = lambda: api_error(503, "Service Unavailable")
    s = specmod.from_dict({"backend": "k8s", "dist_backend": "nccl"})
    p = plan(s, backend.K8sBackend().placement(s), "lab-run-1")
    with pytest.raises(k8s_api.ApiUnavailable, match=r"^Kubernetes API: GET nodes: 503 Service "
                                                     r"Unavailable, \d+ tries over 1s$"):
        backend.K8sBackend(cluster=fake_cluster(state)).preflight(p)
    assert not state.objects


def test_collect_rides_out_a_flaky_api_and_says_a_dead_one_in_one_line(tmp_path):
    """`labctl collect` polls and collects through the same calls as `up`."""
    state = FakeState()
    applied(tmp_path, state)
    state.on_poll[2] = lambda: state.fail("list_namespaced_pod", api_error(503, "Service Unavailable"),
                                          refused(), api_error(429, "Too Many Requests"))
    run, _ = collect(state, tmp_path)
    assert run.status["state"] == "passed"
    assert len(state.tries["list_namespaced_pod"]) == len([c for c in state.calls if c[:2] == ("list", "Pod")]) + 3

    state = FakeState(exit_codes={0: None, 1: None})
    applied(tmp_path, state)
    state.on_poll[3] = lambda: setattr(state, "outage", lambda: api_error(503, "Service Unavailable"))
    with pytest.raises(LabError) as err:
        collect(state, tmp_path, run_id="lab-applied", out_name="dead")
    assert re.fullmatch(r"Kubernetes API: GET pods in namespace labs: 503 Service Unavailable, \d+ tries "
                        r"over 1s; see \S+", str(err.value)), str(err.value)
    assert not [c for c in state.calls if c[0] == "delete"]
