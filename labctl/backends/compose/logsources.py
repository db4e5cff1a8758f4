"""Where a compose node's output is read from: the whole log of each container for the
collector (`log_source`: `docker logs`, its last entry the witness), and the join lines
logged so far for the join fault clock (`JoinReader`: `docker logs --since` where the
last read ended)."""
from __future__ import annotations

from ...collect import ProcessSource
from ...logs import joins_in
from .docker import docker_all
from .engine import Container, docker_time

LOGS_TIMEOUT_S = 900.0     # one node's whole log (hundreds of MB on a loaded machine)
JOIN_REREAD_S = 1.0      # each join read starts this long before the last line read


def since(epoch: float | None) -> list[str]:
    return ["--since", f"{epoch - JOIN_REREAD_S:.6f}"] if epoch else []


def last_timestamp(data: bytes) -> float:
    """When the last whole line of `data` was logged (Unix seconds, from the stamp
    `docker logs --timestamps` puts before it), or 0."""
    end = data.rfind(b"\n")
    if end < 0:
        return 0.0
    stamp = data[data.rfind(b"\n", 0, end) + 1:end].split(b" ", 1)[0]
    when = docker_time(stamp.decode("ascii", "replace"))
    return when.timestamp() if when else 0.0


def log_source(index: int, c: Container) -> ProcessSource:
    """Where a container's log comes from: `docker logs`, byte for byte as its processes
    wrote it (stdout and stderr in the engine's order: both go to the one file). A stopped
    container's log no longer changes, so its last entry is asked for while the whole log
    is read (`--tail 1`, the witness): the file must end with it (empty only when the
    container printed nothing)."""
    witness = None if c.running else ["docker", "logs", "--tail", "1", c.id]  # a running one grows on
    return ProcessSource(index, c.service, ["docker", "logs", c.id], f"docker logs {c.service}",
                         witness, f"docker logs --tail 1 {c.service}", holder="the engine")


class JoinReader:
    """The join lines in a project's container logs, read a piece at a time. Each `docker
    logs --timestamps` starts JOIN_REREAD_S before the last line the previous one read
    (stdout and stderr are logged apart: a line of one may land after a later line of the
    other; a line read twice is one join), so a rank that prints much before it joins is
    not read again on every poll. Counted per container: each has its own pid namespace,
    so two replicas' rank 0 may share a pid."""

    def __init__(self) -> None:
        self.joins: dict[str, set[tuple[int | None, int | None]]] = {}  # container id -> (rank, pid) joined
        self.read_to: dict[str, float] = {}  # container id -> when its last line read was logged

    def count(self, seen: list[Container]) -> int:
        """The ranks that joined so far in the containers `seen` (one read of each)."""
        containers = [c for c in seen if c.status != "created"]
        calls = [["logs", "--timestamps", *since(self.read_to.get(c.id)), c.id] for c in containers]
        reads = docker_all(*calls, text=False) if containers else []
        for container, read in zip(containers, reads):
            out, err = read.stdout or b"", read.stderr or b""
            self.joins.setdefault(container.id, set()).update(joins_in(out) | joins_in(err))
            last = max(last_timestamp(out), last_timestamp(err))
            if last:
                self.read_to[container.id] = last
        return sum(len(found) for found in self.joins.values())
