"""The engine's view of a compose project's containers: each container as `docker
inspect` sees it (`Container`), the project's containers now (`project_containers`),
each as a node outcome (`outcome`), and the project's event stream (`Events`), so that
a poll asks the engine only after something happened."""
from __future__ import annotations

import datetime as _dt
import os
import select
import subprocess
import time
from dataclasses import dataclass

from ...outcome import NodeOutcome, NodeState, from_exit_code
from .docker import Project, docker


class Events:
    """The engine's events for one compose project, read as they come (`docker events`):
    a poll needs to ask the engine again only after something happened to a container,
    and a wait ends as soon as one dies. One stream, not a `docker inspect` and a new
    `docker events` every second: each docker CLI start costs 0.05 s of CPU, which the
    lab's own processes are short of on a small machine. The stream is renewed every
    SPAN_S seconds (`--until`), so that one left behind by a killed labctl ends by itself;
    the next one starts where the last one ended (`--since`: the engine replays)."""

    SPAN_S = 30.0

    def __init__(self, project: str, since: float):
        self.project = project
        self.since = since
        self.changed = True                      # nothing read yet: ask the engine
        self.proc: subprocess.Popen | None = None
        self.until = since
        self.pending = b""
        self.broken = False                      # no stream could be had: sleep and ask

    def _open(self) -> None:
        self.until = max(time.time(), self.since) + self.SPAN_S
        try:
            self.proc = subprocess.Popen(
                ["docker", "events", "--since", f"{self.since:.3f}", "--until", f"{self.until:.3f}",
                 "--filter", "type=container", "--filter", f"label=com.docker.compose.project={self.project}",
                 "--format", "{{.Action}}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                start_new_session=True)
        except OSError:
            self.broken = True

    def wait(self, seconds: float) -> None:
        """At most `seconds`; less when a container of the project dies."""
        deadline = time.monotonic() + seconds
        while not self.broken:
            if self.proc is None:
                self._open()
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:                        # --until reached (or the engine went away)
                self.close()
                self.since = self.until
                self.changed = True
                continue
            *lines, self.pending = (self.pending + chunk).split(b"\n")
            if lines:
                self.changed = True
            if any(line.strip() == b"die" for line in lines):
                return
        time.sleep(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            self.proc = None


@dataclass(frozen=True)
class Container:
    """One container of a compose project, as `docker inspect` sees it."""
    service: str
    id: str
    status: str                   # created, running, paused, restarting, removing, exited, dead
    exit_code: int | None         # when exited
    started: _dt.datetime | None
    finished: _dt.datetime | None

    @property
    def state(self) -> tuple[str, int | None]:
        return self.status, self.exit_code

    @property
    def ended(self) -> bool:
        return self.status == "exited"

    @property
    def running(self) -> bool:
        """docker's State.Running: its processes exist (paused ones too), its log may grow."""
        return self.status in ("running", "paused", "restarting")


_INSPECT = ('{{index .Config.Labels "com.docker.compose.service"}}\t{{.Id}}\t{{.State.Status}}\t'
            "{{.State.ExitCode}}\t{{.State.StartedAt}}\t{{.State.FinishedAt}}")


def docker_time(text: str) -> _dt.datetime | None:
    """A docker timestamp (RFC 3339, nanoseconds), or None (never, or unreadable here)."""
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        head, dot, rest = text.partition(".")       # Python < 3.11: at most microseconds
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):].replace("Z", "+00:00")
        try:
            when = _dt.datetime.fromisoformat(f"{head}.{digits[:6].ljust(6, '0')}{zone}" if dot else text)
        except ValueError:
            return None
    return when if when.year > 1 else None


def inspect_containers(ids: list[str]) -> tuple[list[Container], bool]:
    """The containers `ids` (one `docker inspect`), and whether every one was found."""
    done = docker("inspect", "--format", _INSPECT, *ids)
    rows = []
    for line in done.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != 6:
            continue
        service, cid, status, code, started, finished = parts
        rows.append(Container(service, cid, status.lower(),
                              int(code) if status.lower() == "exited" and code.lstrip("-").isdigit()
                              else None, docker_time(started), docker_time(finished)))
    return rows, done.returncode == 0 and len(rows) == len(ids)


def project_containers(project: Project, known: list[str] | None = None) -> list[Container]:
    """Every container of the project, running or not, from one `docker inspect` of
    `known` ids (those of the last call); listed again (`docker ps`) when there are
    none or one is gone. The `docker` CLI, not `docker compose ps`: one start of
    the compose CLI costs several of docker's, and a poll runs every second."""
    if known:
        rows, ok = inspect_containers(known)
        if ok:
            return rows
    ids = docker("ps", "--all", "--quiet", "--no-trunc", "--filter",
                 f"label=com.docker.compose.project={project.name}", "--filter",
                 "label=com.docker.compose.oneoff=False").stdout.split()
    return inspect_containers(ids)[0] if ids else []


def outcome(index: int, hostname: str, state: tuple[str, int | None] | None) -> NodeOutcome:
    if state is None:
        return NodeOutcome(index, hostname)
    status, code = state
    if status != "exited":
        return NodeOutcome(index, hostname, state=NodeState.PENDING if status == "created"
                           else NodeState.RUNNING, reason=None if status in ("running", "created")
                           else status)
    node_state, sig = from_exit_code(code, shell_convention=True)
    return NodeOutcome(index, hostname, code, node_state, signal=sig)

