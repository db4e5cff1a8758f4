"""The Kubernetes API as a real API server answers: busy (429), rolling (503), slow, cut off.

Every call the k8s backend makes goes through `Cluster.call` (or, for what is
read as bytes, `Cluster.retrying`):

- retried on 429 (after its Retry-After, when given), 500, 502, 503, 504, a
  refused or dropped connection and a timeout, with exponential backoff and
  jitter (BACKOFF_S doubling to BACKOFF_MAX_S, plus up to BACKOFF_S at random);
- for at most RETRY_MAX_S per call, and, while the lab runs (`deadline` set),
  never past the lab's deadline; each try's request timeout is
  REQUEST_TIMEOUT_S or what is left of that window;
- never retried on any other answer (400, 401, 403, 404, 409, 422 ...): the
  server has answered, and the caller decides (404: gone, 409: taken ...);
- a lasting failure is `ApiUnavailable`, one line naming the request, the last
  answer and the tries (`Kubernetes API: GET pods in namespace labs: 503
  Service Unavailable, 9 tries over 60s`); any other refusal is `ApiRefused`,
  one line with the server's own message. Both are LabErrors: the driver ends
  the lab as an error, never an "internal error", and keeps it when its logs
  could not be saved (labctl/driver.py). After a lasting failure the next
  calls get one try each until one succeeds, so that a cluster that is gone
  ends the cleanup in seconds, not minutes.

Pod logs are read as bytes (`_preload_content=False`: the client otherwise
decodes them strictly as UTF-8, and one stray byte loses the whole log) and
streamed in LOG_CHUNK pieces straight into the node log by the core collector
(labctl/collect.py `stream`): flat memory for any size, every byte kept. A stream
cut in the middle is read again from the start (the log API has no offset). Events are read as bytes too, a page of EVENT_PAGE
at a time.

tenacity (the `k8s` extra) does the retrying: a well-kept library with a
deadline-shaped stop, exponential jitter and an injectable sleep. urllib3's
`Retry` (the client's own, `Configuration.retries`) was not taken: it counts
tries instead of honouring a deadline, does not retry a POST whose connection
dropped, cannot see a log stream cut after the headers, and sits below the API
objects, where the tests' fakes of those objects would never exercise it.
Neither tenacity nor the client is imported before a call is made, so
`labctl --help` and labs on other backends never load them.
"""
from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from ...collect import Cut, stream
from ...errors import LabError
from workloads._protocol import one_line

REQUEST_TIMEOUT_S = 15         # one try of one call (connect, and each read of a stream)
RETRY_MAX_S = 60.0             # one call, all its tries and waits
BACKOFF_S = 0.5                # first wait; doubles after every try ...
BACKOFF_MAX_S = 8.0            # ... up to this
CONNECT_RETRY_S = 20.0         # the version check of `connect`: 429/5xx/timeouts only
RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})
LOG_CHUNK = 64 << 10           # bytes of a pod log held at once
EVENT_PAGE = 500               # events read per request (bounded memory, any count)
_VERBS = {"create": "POST", "read": "GET", "list": "GET", "get": "GET", "delete": "DELETE",
          "patch": "PATCH", "replace": "PUT"}
_T = TypeVar("_T")


class ApiUnavailable(LabError):
    """The API server kept failing (429/5xx, no connection, timeouts) for a call's whole
    retry window: one line naming the request, the last failure and the tries."""

    def __init__(self, request: str, last: BaseException, tries: int, seconds: float, why: str = ""):
        self.request, self.last, self.tries = request, last, tries
        plural = "try" if tries == 1 else "tries"
        super().__init__(f"Kubernetes API: {request}: {failure_text(last)}, {tries} {plural} "
                         f"over {seconds:.0f}s{why}")


class ApiRefused(LabError):
    """The API server answered no (400, 403, 404, 409 ...): one line with its status and
    its own message. `status` is what callers branch on (404: gone; 409: taken)."""

    def __init__(self, request: str, exc: BaseException):
        self.request, self.status = request, api_status(exc)
        self.reason = getattr(exc, "reason", None) or ""
        self.detail = failure_text(exc)               # `403 Forbidden: <the server's message>`
        super().__init__(f"Kubernetes API: {request}: {self.detail}")


class StreamCut(Exception):
    """A response body that broke off after `received` bytes (retried like its cause)."""

    def __init__(self, received: int, cause: BaseException):
        super().__init__(f"cut after {received} bytes: {failure_text(cause)}")
        self.received, self.cause = received, cause


# ---- what failed, and is it worth another try ------------------------------------------
def api_status(exc: BaseException) -> int | None:
    """The HTTP status of the client's ApiException (or of its subclasses: this client
    raises NotFoundException, ServiceException ... ) or of an ApiRefused; None otherwise."""
    if isinstance(exc, ApiRefused):
        return exc.status
    if any(c.__name__ == "ApiException" for c in type(exc).__mro__):
        status = getattr(exc, "status", None)
        return status if isinstance(status, int) else None
    return None


def transient(exc: BaseException, connection_errors: bool = True) -> bool:
    """Worth another try: 429/5xx, a timeout, a dropped or (`connection_errors`) refused
    connection, a stream cut off. Not: any other answer, a TLS or configuration error."""
    if isinstance(exc, StreamCut):
        return transient(exc.cause, connection_errors)
    status = api_status(exc)
    if status is not None:
        return status in RETRIED_STATUS
    try:
        import urllib3.exceptions as u3
    except ImportError:                     # no client installed: only fakes call here
        u3 = None
    if u3 is not None:
        if isinstance(exc, u3.MaxRetryError):
            return exc.reason is not None and transient(exc.reason, connection_errors)
        if isinstance(exc, u3.NewConnectionError):       # refused, unreachable, no such host
            return connection_errors
        if isinstance(exc, (u3.TimeoutError, u3.ProtocolError, u3.IncompleteRead, u3.ResponseError)):
            return True
        if isinstance(exc, u3.HTTPError):    # SSLError, LocationParseError, ProxySchemeUnknown ...
            return False
    if isinstance(exc, (ConnectionRefusedError, ConnectionAbortedError)):
        return connection_errors
    return isinstance(exc, (ConnectionError, TimeoutError))


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (Retry-After: seconds, or an HTTP date), if it did."""
    headers = getattr(exc, "headers", None) or {}
    try:
        value = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    except AttributeError:
        return None
    if value is None:
        return None
    text = str(value).strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when is not None else None


def failure_text(exc: BaseException) -> str:
    """A failure in a few words: `503 Service Unavailable`, `403 Forbidden: <the
    server's message>`, `connection refused`, `read timed out`, `connection broken`."""
    if isinstance(exc, StreamCut):
        return str(exc)
    if isinstance(exc, ApiRefused):
        return exc.detail
    status = api_status(exc)
    if status is not None:
        reason = one_line(getattr(exc, "reason", None))
        text = f"{status} {reason}".strip() if status else reason
        message = _server_message(getattr(exc, "body", None))
        return _short(f"{text}: {message}" if message and message != reason else text)
    inner = getattr(exc, "reason", None)
    if type(exc).__name__ == "MaxRetryError" and isinstance(inner, BaseException):
        return failure_text(inner)
    name = type(exc).__name__
    if name in ("NewConnectionError", "NameResolutionError", "ConnectionRefusedError"):
        detail = str(exc).split(": ", 1)[-1]
        return _short(f"cannot connect: {detail}")
    if name in ("ReadTimeoutError", "ConnectTimeoutError") or isinstance(exc, TimeoutError):
        return _short(f"timed out ({one_line(str(exc)) or name})")
    if name == "ProtocolError":
        return _short(f"connection broken ({exc.args[0] if exc.args else exc})")
    return _short(f"{name}: {one_line(str(exc))}")


def _server_message(body: Any) -> str:
    """The `message` of the Status object the API server sends with an error."""
    if not body:
        return ""
    try:
        found = json.loads(body)
    except (TypeError, ValueError):
        return ""
    return one_line(found.get("message")) if isinstance(found, dict) else ""


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def describe(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> str:
    """`GET pods/<name>/log in namespace labs`, from the client method's name and
    arguments (`read_namespaced_pod_log(name, namespace)`), as the API server sees it."""
    method = getattr(fn, "__name__", "call")
    verb, _, rest = method.partition("_")
    namespaced = rest.startswith("namespaced_")
    rest = rest[len("namespaced_"):] if namespaced else rest
    named = verb not in ("create", "list")
    sub = ""
    if rest == "custom_object":             # (group, version, namespace, plural[, name | body])
        namespace = args[2] if len(args) > 2 else kwargs.get("namespace")
        resource = args[3] if len(args) > 3 else kwargs.get("plural", "objects")
        name = (args[4] if len(args) > 4 else kwargs.get("name")) if named else None
    else:
        if rest.endswith("_log"):
            rest, sub = rest[:-len("_log")], "/log"
        plain = rest.replace("_", "")
        resource = plain[:-1] + "ies" if plain.endswith("y") else plain + "s"
        position = 1 if named else 0
        name = (args[0] if args else kwargs.get("name")) if named else None
        namespace = None
        if namespaced:
            namespace = args[position] if len(args) > position else kwargs.get("namespace")
    path = f"{resource}/{name}{sub}" if name else f"{resource}{sub}"
    return f"{_VERBS.get(verb, verb.upper())} {path}" + (f" in namespace {namespace}" if namespace else "")


def api_client(configuration: Any = None) -> Any:
    """The client's ApiClient for `configuration` (default: the kubeconfig just loaded)
    with urllib3's own retries off (`retries = False`): one layer retries, this one, so
    one try lasts at most its request timeout, and a dropped connection surfaces as
    urllib3's own error instead of being retried three times unseen."""
    from kubernetes import client

    configuration = configuration or client.Configuration.get_default_copy()
    configuration.retries = False
    return client.ApiClient(configuration)


# ---- trying, waiting, giving up -----------------------------------------------------------
def retry_call(request: str, attempt: Callable[[float], _T], end: float, single: bool = False,
               connection_errors: bool = True, sleep: Callable[[float], None] = time.sleep,
               why_end: str = "") -> _T:
    """`attempt(request_timeout)` until it succeeds, fails for good, or the window
    (monotonic `end`) is spent; `single`: one try. A lasting failure is ApiUnavailable
    (`why_end`: what set the window's end, for the message); another answer is
    ApiRefused; anything else is raised as it is."""
    import tenacity

    start = time.monotonic()
    tries = 0
    backoff = (tenacity.wait_exponential(multiplier=BACKOFF_S, max=BACKOFF_MAX_S)
               + tenacity.wait_random(0, BACKOFF_S))

    def once() -> _T:
        nonlocal tries
        tries += 1
        left = end - time.monotonic()
        return attempt(REQUEST_TIMEOUT_S if single else max(1.0, min(REQUEST_TIMEOUT_S, left)))

    def wait(state: Any) -> float:
        asked = retry_after(state.outcome.exception())
        return max(backoff(state), asked or 0.0)

    def stop(state: Any) -> bool:
        return single or time.monotonic() + state.upcoming_sleep >= end

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: transient(exc, connection_errors)),
        wait=wait, stop=stop, sleep=sleep, reraise=True)
    try:
        return retrying(once)
    except LabError:
        raise
    except Exception as exc:
        if transient(exc, connection_errors):
            asked = retry_after(exc)
            if single:
                why = " (not retried: the API server was failing just before)"
            elif asked and time.monotonic() + asked >= end:
                why = f"{why_end} (it asked to retry after {asked:.0f}s, past the retry window)"
            else:
                why = why_end
            raise ApiUnavailable(request, exc, tries, time.monotonic() - start, why) from None
        if api_status(exc) is not None:
            raise ApiRefused(request, exc) from None
        raise


@dataclass
class Cluster:
    """The API groups the backend speaks to, where, and until when a call may retry."""
    core: Any            # CoreV1Api
    batch: Any           # BatchV1Api
    networking: Any      # NetworkingV1Api
    namespace: str
    context: str | None = None
    deadline: float | None = None        # monotonic; while set, no call retries past it
    custom: Any = None   # CustomObjectsApi: JobSets (k8s.kind jobset); None: no such calls
    unavailable: ApiUnavailable | None = None   # the last lasting failure, until a call succeeds

    def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """`fn(*args, **kwargs)` (a client method), retried (see the module docstring)."""
        return self.retrying(describe(fn, args, kwargs),
                             lambda timeout: fn(*args, _request_timeout=timeout, **kwargs))

    def retrying(self, request: str, attempt: Callable[[float], _T]) -> _T:
        """`attempt(request_timeout)` retried within this cluster's window for one call."""
        now = time.monotonic()
        end, why = now + RETRY_MAX_S, ""
        if self.deadline is not None and self.deadline < end:
            end, why = max(self.deadline, now), ", until the lab's deadline"
        try:
            result = retry_call(request, attempt, end, single=self.unavailable is not None,
                                why_end=why)
        except ApiUnavailable as exc:
            self.unavailable = exc
            raise
        except ApiRefused:                  # an answer: the server is there
            self.unavailable = None
            raise
        self.unavailable = None
        return result

    # ---- what is read as bytes ------------------------------------------------------
    def save_pod_log(self, pod: str, container: str, path: Path) -> int:
        """The container's whole log into `path`, byte for byte, LOG_CHUNK bytes at a time;
        read again from the start when the stream is cut. Returns its size."""
        request = f"GET pods/{pod}/log in namespace {self.namespace}"

        def attempt(timeout: float) -> int:
            response = self.core.read_namespaced_pod_log(
                pod, self.namespace, container=container, _preload_content=False,
                _request_timeout=(timeout, timeout))      # (connect, each read): a long log is no timeout
            try:
                return stream(response.stream(LOG_CHUNK, decode_content=True), path)
            except Cut as cut:              # the read broke off (a full disk passes as it is)
                if transient(cut.cause):
                    raise StreamCut(cut.received, cut.cause) from None
                raise cut.cause from None
            finally:
                _let_go(response)
        return self.retrying(request, attempt)

    def save_events(self, kind: str, name: str, path: Path) -> int:
        """The events of one object into `path`, one line each (oldest first within a page
        of EVENT_PAGE), read as bytes: anything that is not UTF-8 becomes U+FFFD, never a
        failure. Returns how many."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        count, token = 0, None
        with open(path, "w", encoding="utf-8") as out:
            while True:
                page = self._event_page(selector, token)
                lines = sorted(_event_line(ev, kind, name) for ev in page.get("items") or []
                               if isinstance(ev, dict))
                out.writelines(line + "\n" for _, line in lines)
                count += len(lines)
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    return count

    def _event_page(self, selector: str, token: str | None) -> dict[str, Any]:
        extra = {"_continue": token} if token else {}
        request = f"GET events in namespace {self.namespace}"

        def attempt(timeout: float) -> dict[str, Any]:
            response = self.core.list_namespaced_event(
                self.namespace, field_selector=selector, limit=EVENT_PAGE,
                _preload_content=False, _request_timeout=timeout, **extra)
            try:
                body = _read_body(response)
            finally:
                _let_go(response)
            found = json.loads(body.decode("utf-8", errors="replace"))
            return found if isinstance(found, dict) else {}
        return self.retrying(request, attempt)


def _read_body(response: Any) -> bytes:
    """A whole (small: one page) response body; a body cut short raises StreamCut."""
    parts, received = [], 0
    try:
        for chunk in response.stream(LOG_CHUNK, decode_content=True):
            parts.append(chunk)
            received += len(chunk)
    except Exception as exc:
        if transient(exc):
            raise StreamCut(received, exc) from None
        raise
    return b"".join(parts)


def _let_go(response: Any) -> None:
    """Close the response and give its connection back (a cut one is not reused)."""
    for step in ("close", "release_conn"):
        try:
            getattr(response, step)()
        except Exception:
            pass


def _event_line(ev: dict[str, Any], kind: str, name: str) -> tuple[str, str]:
    """(when, line) of one event as JSON: `<when> <type> <reason> <kind>/<name>: <message> (xN)`."""
    when = str(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or "")
    count = ev.get("count") or 1
    times = f" (x{count})" if isinstance(count, int) and count > 1 else ""
    return when, (f"{when} {ev.get('type') or ''} {ev.get('reason') or ''} {kind.lower()}/{name}: "
                  f"{ev.get('message') or ''}{times}")
