"""labctl/backends/k8s/api.py: which failures are retried, how long, and what a lasting one says.

The second half runs the real kubernetes client (and its urllib3) against a small
HTTP server on loopback that answers as an API server does when it is busy,
rolling or cut off: that is where the fakes of tests/test_backend_k8s.py get
their shape (bytes from `_preload_content=False`, the exception classes, the
Retry-After header), checked against the client itself.
"""
from __future__ import annotations

import collections
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import urlsplit

import pytest
import urllib3
from kubernetes import client as kc

from labctl.backends.k8s import api as k8s_api
from labctl.backends.k8s.api import ApiRefused, ApiUnavailable, Cluster
from test_backend_k8s import NS, api_error, dropped, read_timeout, refused


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(k8s_api, "BACKOFF_S", 0.01)
    monkeypatch.setattr(k8s_api, "BACKOFF_MAX_S", 0.05)
    monkeypatch.setattr(k8s_api, "RETRY_MAX_S", 2.0)


# ---- the rules ------------------------------------------------------------------------
@pytest.mark.parametrize("error, retried", [
    (api_error(429, "Too Many Requests"), True),
    (api_error(500, "Internal Server Error"), True),
    (api_error(502, "Bad Gateway"), True),
    (api_error(503, "Service Unavailable"), True),
    (api_error(504, "Gateway Timeout"), True),
    (api_error(400, "Bad Request"), False),
    (api_error(401, "Unauthorized"), False),
    (api_error(403, "Forbidden"), False),
    (api_error(404, "Not Found"), False),
    (api_error(409, "Conflict"), False),
    (api_error(422, "Unprocessable Entity"), False),
    (kc.ApiException(status=0, reason="SSLError\ncertificate verify failed"), False),
    (read_timeout("GET"), True),
    (read_timeout("POST"), True),
    (refused(), True),
    (dropped(), True),
    (urllib3.exceptions.SSLError("certificate verify failed"), False),
    (urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.SSLError("bad cert")), False),
    (ConnectionResetError(104, "reset"), True),
    (ValueError("a bug"), False),
])
def test_what_is_retried(error, retried):
    assert k8s_api.transient(error) is retried


def test_the_client_raises_subclasses_and_their_status_is_read():
    """This client raises NotFoundException (a subclass) for 404: a check on the class
    name `ApiException` alone misses it (the 404 of a Job deleted meanwhile)."""
    error = api_error(404, "Not Found", 'jobs.batch "lab" not found')
    assert type(error).__name__ == "NotFoundException"
    assert k8s_api.api_status(error) == 404
    assert k8s_api.failure_text(error) == '404 Not Found: jobs.batch "lab" not found'


def test_a_refused_connection_is_not_retried_where_asked():
    """`connect`: nothing listening is a wrong address far more often than a restart."""
    assert not k8s_api.transient(refused(), connection_errors=False)
    assert k8s_api.transient(read_timeout(), connection_errors=False)


@pytest.mark.parametrize("value, seconds", [("7", 7.0), ("0", 0.0), ("soon", None), ("-3", None)])
def test_retry_after_in_seconds(value, seconds):
    assert k8s_api.retry_after(api_error(429, "Too Many Requests", headers={"Retry-After": value})) == seconds


def test_retry_after_as_a_date():
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    asked = k8s_api.retry_after(api_error(503, "Service Unavailable", headers={"Retry-After": when}))
    assert 25 <= asked <= 31


@pytest.mark.parametrize("method, args, kwargs, said", [
    ("list_namespaced_pod", ("labs",), {"label_selector": "x"}, "GET pods in namespace labs"),
    ("read_namespaced_job", ("lab", "labs"), {}, "GET jobs/lab in namespace labs"),
    ("read_namespaced_pod_log", ("lab-0-x", "labs"), {"container": "node"},
     "GET pods/lab-0-x/log in namespace labs"),
    ("create_namespaced_network_policy", ("labs", {}), {}, "POST networkpolicies in namespace labs"),
    ("delete_namespaced_config_map", ("lab-script", "labs"), {}, "DELETE configmaps/lab-script in namespace labs"),
    ("list_namespaced_event", ("labs",), {}, "GET events in namespace labs"),
    ("list_node", (), {}, "GET nodes"),
    ("get_namespaced_custom_object", ("jobset.x-k8s.io", "v1alpha2", "labs", "jobsets", "lab"), {},
     "GET jobsets/lab in namespace labs"),
    ("create_namespaced_custom_object", ("jobset.x-k8s.io", "v1alpha2", "labs", "jobsets", {}), {},
     "POST jobsets in namespace labs"),
])
def test_a_call_is_named_as_the_api_server_sees_it(method, args, kwargs, said):
    def fn(*a, **kw):
        pass
    fn.__name__ = method
    assert k8s_api.describe(fn, args, kwargs) == said


def _cluster_calling(fn: Callable) -> tuple[Cluster, Callable]:
    core = type("Core", (), {"list_namespaced_pod": staticmethod(fn)})()
    return Cluster(core, None, None, NS), core.list_namespaced_pod


def test_503_three_times_then_an_answer():
    answers = [api_error(503, "Service Unavailable")] * 3 + ["pods"]
    tries = []

    def list_namespaced_pod(namespace, _request_timeout=None):
        tries.append(_request_timeout)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    cluster, fn = _cluster_calling(list_namespaced_pod)
    assert cluster.call(fn, NS) == "pods"
    assert len(tries) == 4 and all(0 < t <= k8s_api.REQUEST_TIMEOUT_S for t in tries)


def test_a_refusal_is_not_retried_and_is_one_line():
    tries = []

    def list_namespaced_pod(namespace, _request_timeout=None):
        tries.append(1)
        raise api_error(403, "Forbidden", 'pods is forbidden: User "me" cannot list resource "pods"')
    cluster, fn = _cluster_calling(list_namespaced_pod)
    with pytest.raises(ApiRefused) as err:
        cluster.call(fn, NS)
    assert len(tries) == 1 and err.value.status == 403
    assert str(err.value) == ('Kubernetes API: GET pods in namespace labs: 403 Forbidden: pods is '
                              'forbidden: User "me" cannot list resource "pods"')


def test_a_lasting_failure_is_one_line_and_the_next_call_gets_one_try():
    tries = []

    def list_namespaced_pod(namespace, _request_timeout=None):
        tries.append(time.monotonic())
        raise api_error(503, "Service Unavailable")
    cluster, fn = _cluster_calling(list_namespaced_pod)
    with pytest.raises(ApiUnavailable) as err:
        cluster.call(fn, NS)
    spent = tries[-1] - tries[0]
    assert 1.5 <= spent <= 2.0, "retried for the window (RETRY_MAX_S 2 s here), not past it"
    assert str(err.value) == (f"Kubernetes API: GET pods in namespace labs: 503 Service Unavailable, "
                              f"{len(tries)} tries over 2s")
    assert cluster.unavailable is err.value
    tries.clear()
    with pytest.raises(ApiUnavailable, match=r", 1 try over 0s \(not retried: the API server was "
                                             r"failing just before\)$"):
        cluster.call(fn, NS)
    assert len(tries) == 1


def test_the_lab_deadline_ends_the_retries_first():
    tries = []

    def list_namespaced_pod(namespace, _request_timeout=None):
        tries.append((time.monotonic(), _request_timeout))
        raise read_timeout()
    cluster, fn = _cluster_calling(list_namespaced_pod)
    cluster.deadline = time.monotonic() + 0.5
    with pytest.raises(ApiUnavailable, match=r"^Kubernetes API: GET pods in namespace labs: timed out "
                                             r"\(.*Read timed out.*\), \d+ tries over [01]s, until the lab's "
                                             r"deadline$"):
        cluster.call(fn, NS)
    assert tries[-1][0] <= cluster.deadline, "no try after the deadline"


def test_a_retry_after_past_the_window_is_not_waited_for():
    def list_namespaced_pod(namespace, _request_timeout=None):
        raise api_error(429, "Too Many Requests", headers={"Retry-After": "30"})
    cluster, fn = _cluster_calling(list_namespaced_pod)
    t0 = time.monotonic()
    with pytest.raises(ApiUnavailable, match=r"429 Too Many Requests, 1 try over 0s \(it asked to retry "
                                             r"after 30s, past the retry window\)$"):
        cluster.call(fn, NS)
    assert time.monotonic() - t0 < 1.0


# ---- the real client on loopback ----------------------------------------------------------
Answer = Callable[[BaseHTTPRequestHandler], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.server.answer(self)

    def log_message(self, *args):
        pass


class ApiServer(ThreadingHTTPServer):
    """Answers GETs by path from a script (the last answer of a path repeats); notes
    when each request came."""
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: dict[str, list[Answer]] = collections.defaultdict(list)
        self.seen: dict[str, list[float]] = collections.defaultdict(list)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = urlsplit(handler.path).path
        self.seen[path].append(time.monotonic())
        queue = self.script[path]
        (queue.pop(0) if len(queue) > 1 else queue[0])(handler)

    def handle_error(self, request, client_address):
        pass                               # a client that timed out and left: expected


def status(code: int, reason: str, headers: dict[str, str] | None = None) -> Answer:
    def answer(h: BaseHTTPRequestHandler) -> None:
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": reason, "code": code}).encode()
        h.send_response(code, reason)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)),
                     **(headers or {})}.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
    return answer


def chunked(pieces: list[bytes], content_type: str = "text/plain", cut_after: int | None = None,
            delay: float = 0.0) -> Answer:
    """A streamed body (the API server streams logs chunked); `cut_after`: the connection
    is closed after that many pieces, mid-body; `delay`: before the headers."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        time.sleep(delay)
        h.send_response(200, "OK")
        h.send_header("Content-Type", content_type)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for n, piece in enumerate(pieces):
            if cut_after is not None and n == cut_after:
                h.wfile.flush()
                h.connection.shutdown(socket.SHUT_RDWR)
                h.close_connection = True
                return
            h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")
    return answer


def pod_list(delay: float = 0.0) -> Answer:
    return chunked([json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                "items": []}).encode()], "application/json", delay=delay)


@pytest.fixture
def server():
    srv = ApiServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def real_cluster(port: int) -> Cluster:
    """The backend's Cluster over the real client, made the way `connect` makes it."""
    configuration = kc.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    api = k8s_api.api_client(configuration)
    return Cluster(kc.CoreV1Api(api), kc.BatchV1Api(api), kc.NetworkingV1Api(api), NS)


LOG = f"/api/v1/namespaces/{NS}/pods/lab-0/log"
PODS = f"/api/v1/namespaces/{NS}/pods"
EVENTS = f"/api/v1/namespaces/{NS}/events"
NOT_UTF8 = [b"[rank0]: plain line\n", b"[rank0]: latin-1 \xe9t\xe9 and a lone \xff byte\n",
            b"[rank1]: half a character \xe2\x82", b"\n"]


def test_the_client_decodes_logs_strictly_unless_asked_for_bytes(server, tmp_path):
    """The trap: the client's default read of this log fails outright; read as bytes it
    arrives byte for byte, in one streamed pass."""
    server.script[LOG] = [chunked(NOT_UTF8)]
    cluster = real_cluster(server.server_port)
    with pytest.raises(UnicodeDecodeError):
        cluster.core.read_namespaced_pod_log("lab-0", NS, container="node")
    assert cluster.save_pod_log("lab-0", "node", tmp_path / "node-0.log") == len(b"".join(NOT_UTF8))
    assert (tmp_path / "node-0.log").read_bytes() == b"".join(NOT_UTF8)


def test_a_log_cut_mid_stream_is_read_again_whole(server, tmp_path):
    server.script[LOG] = [chunked(NOT_UTF8 * 50, cut_after=60), chunked(NOT_UTF8 * 50)]
    cluster = real_cluster(server.server_port)
    cluster.save_pod_log("lab-0", "node", tmp_path / "node-0.log")
    assert (tmp_path / "node-0.log").read_bytes() == b"".join(NOT_UTF8 * 50)
    assert len(server.seen[LOG]) == 2


def test_a_log_cut_every_time_is_a_lasting_failure_that_says_where(server, tmp_path):
    server.script[LOG] = [chunked(NOT_UTF8 * 50, cut_after=60)]
    cluster = real_cluster(server.server_port)
    with pytest.raises(ApiUnavailable, match=r"^Kubernetes API: GET pods/lab-0/log in namespace labs: "
                                             r"cut after \d+ bytes: .*, \d+ tries over 2s$"):
        cluster.save_pod_log("lab-0", "node", tmp_path / "node-0.log")


def test_503_three_times_then_200_through_the_client(server):
    server.script[PODS] = [status(503, "Service Unavailable")] * 3 + [pod_list()]
    cluster = real_cluster(server.server_port)
    assert cluster.call(cluster.core.list_namespaced_pod, NS).items == []
    assert len(server.seen[PODS]) == 4


def test_429_waits_for_its_retry_after_through_the_client(server):
    server.script[PODS] = [status(429, "Too Many Requests", {"Retry-After": "1"}), pod_list()]
    cluster = real_cluster(server.server_port)
    assert cluster.call(cluster.core.list_namespaced_pod, NS).items == []
    first, second = server.seen[PODS]
    assert second - first >= 1.0, "the server's Retry-After, not the 10 ms backoff"


def test_a_read_timeout_is_retried_through_the_client(server, monkeypatch):
    monkeypatch.setattr(k8s_api, "REQUEST_TIMEOUT_S", 0.5)
    server.script[PODS] = [pod_list(delay=3.0), pod_list()]
    cluster = real_cluster(server.server_port)
    assert cluster.call(cluster.core.list_namespaced_pod, NS).items == []
    assert len(server.seen[PODS]) == 2, "urllib3 did not retry on its own (retries off)"


def test_a_404_through_the_client_is_refused_at_once(server):
    server.script[PODS] = [status(404, "Not Found")]
    cluster = real_cluster(server.server_port)
    with pytest.raises(ApiRefused) as err:
        cluster.call(cluster.core.list_namespaced_pod, NS)
    assert err.value.status == 404 and len(server.seen[PODS]) == 1


def test_nobody_listening_is_retried_then_named(monkeypatch):
    monkeypatch.setattr(k8s_api, "RETRY_MAX_S", 1.0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                     # closed again: nothing listens there
    cluster = real_cluster(port)
    with pytest.raises(ApiUnavailable, match=r"^Kubernetes API: GET pods in namespace labs: cannot "
                                             r"connect: .*Connection refused, \d+ tries over 1s$") as err:
        cluster.call(cluster.core.list_namespaced_pod, NS)
    assert err.value.tries > 2


def test_events_are_read_as_bytes_a_page_at_a_time(server, tmp_path, monkeypatch):
    """Events in pages of EVENT_PAGE (3 here), the continue token followed; a message
    that is not UTF-8 becomes U+FFFD instead of failing the read."""
    monkeypatch.setattr(k8s_api, "EVENT_PAGE", 3)

    def page(items, token):
        body = json.dumps({"kind": "EventList", "apiVersion": "v1", "items": items,
                           "metadata": {"continue": token} if token else {}}).encode()
        return chunked([body.replace(b"@@", b"\xff")], "application/json")
    events = [{"type": "Normal", "reason": f"R{i}", "message": f"m{i}@@",
               "lastTimestamp": f"2026-01-01T00:00:{i:02d}Z", "count": i} for i in range(7)]
    server.script[EVENTS] = [page(events[0:3], "a"), page(events[3:6], "b"), page(events[6:], None)]
    cluster = real_cluster(server.server_port)
    assert cluster.save_events("Pod", "lab-0", tmp_path / "ev.log") == 7
    lines = (tmp_path / "ev.log").read_text().splitlines()
    assert len(lines) == 7 and len(server.seen[EVENTS]) == 3
    assert lines[2] == "2026-01-01T00:00:02Z Normal R2 pod/lab-0: m2\ufffd (x2)"
