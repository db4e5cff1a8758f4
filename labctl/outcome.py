"""What a run and each of its nodes came to: one vocabulary for every backend.

A node outcome means the same thing on local processes, compose containers
and Kubernetes pods: an exit code, or the signal that ended it (by name), and
who stopped it when labctl did. The run's state is decided in one place
(`run_state`, with the logs' part in blame.run_state), not once per backend.
"""
from __future__ import annotations

import enum
import signal
from dataclasses import dataclass
from typing import Any


class RunState(str, enum.Enum):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"            # the lab's deadline passed
    INTERRUPTED = "interrupted"    # Ctrl-C, SIGTERM or SIGHUP reached labctl
    ERROR = "error"                # the backend could not run the lab (or labctl broke)
    ABANDONED = "abandoned"        # labctl died; `labctl down` or `collect` finished the folder

    def __str__(self) -> str:
        return self.value


class NodeState(str, enum.Enum):
    PENDING = "pending"            # never started (or never seen)
    RUNNING = "running"
    SUCCEEDED = "succeeded"        # exit code 0
    FAILED = "failed"              # non-zero exit code
    KILLED = "killed"              # a signal labctl did not send (OOM killer, a fault, kubelet)
    STOPPED = "stopped"            # labctl stopped it: after another failure, deadline, Ctrl-C
    LOST = "lost"                  # gone without a trace (a pod deleted by TTL, a vanished container)

    def __str__(self) -> str:
        return self.value

    @property
    def ended(self) -> bool:
        return self not in (NodeState.PENDING, NodeState.RUNNING)

    @property
    def bad(self) -> bool:
        """A state that makes the lab fail by itself (a stopped node is a consequence)."""
        return self in (NodeState.FAILED, NodeState.KILLED, NodeState.LOST)


# Exit codes of a process whose shell or container runtime reports a signal as 128 + N.
SIGNAL_EXIT_BASE = 128


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def from_exit_code(code: int | None, *, shell_convention: bool = False) -> tuple[NodeState, str | None]:
    """(state, signal name) for an exit status.

    Python's subprocess reports a signal as a negative code; shells and
    container runtimes as 128 + N (`shell_convention`).
    """
    if code is None:
        return NodeState.RUNNING, None
    if code == 0:
        return NodeState.SUCCEEDED, None
    if code < 0:
        return NodeState.KILLED, signal_name(-code)
    if shell_convention and SIGNAL_EXIT_BASE < code <= SIGNAL_EXIT_BASE + 64:
        return NodeState.KILLED, signal_name(code - SIGNAL_EXIT_BASE)
    return NodeState.FAILED, None


@dataclass
class NodeOutcome:
    """How one node ended (or stands), as the backend saw it."""
    index: int
    hostname: str
    exit_code: int | None = None
    state: NodeState = NodeState.PENDING
    exited_s: float | None = None  # seconds after start when it ended, when known
    signal: str | None = None      # the signal that ended it, by name
    reason: str | None = None      # why labctl stopped it, or the backend's word (ErrImagePull ...)

    def __post_init__(self) -> None:
        self.state = NodeState(self.state)

    def to_dict(self) -> dict[str, Any]:
        data = {"index": self.index, "hostname": self.hostname, "exit_code": self.exit_code,
                "state": self.state.value, "exited_s": self.exited_s}
        if self.signal:
            data["signal"] = self.signal
        if self.reason:
            data["reason"] = self.reason
        return data

    def describe(self) -> str:
        text = self.state.value
        if self.signal:
            text += f" ({self.signal})"
        elif self.exit_code not in (None, 0):
            text += f" (exit {self.exit_code})"
        return text


def spared(outcomes: list[NodeOutcome], nodes: int, fewest: int) -> set[int]:
    """The nodes an elastic lab (`min_nodes` < `nodes`) goes on without.

    torchrun re-forms the world from the nodes that are left (`--nnodes MIN:MAX`)
    as long as at least MIN remain and the rendezvous store lives: node 0 of
    every replica hosts it (is_host=1), so losing node 0 is never survivable.
    Counted per replica (`nodes` consecutive indices each)."""
    if fewest >= nodes:
        return set()
    replicas: dict[int, list[NodeOutcome]] = {}
    for o in outcomes:
        replicas.setdefault(o.index // nodes, []).append(o)
    out: set[int] = set()
    for group in replicas.values():
        lost = [o for o in group if o.state.bad]
        if lost and all(o.index % nodes for o in lost) and len(group) - len(lost) >= fewest:
            out |= {o.index for o in lost}
    return out


def run_state(state: RunState, outcomes: list[NodeOutcome], nodes: int | None = None,
              fewest: int | None = None) -> RunState:
    """The one rule: a run that otherwise passed failed when a node did not succeed,
    unless it is a node an elastic lab went on without (`spared`). The logs' part of
    the rule (failed checks, exit codes, unfinished workloads) is blame.run_state."""
    gone = spared(outcomes, nodes, fewest) if nodes and fewest else set()
    if state is RunState.PASSED and any(o.state is not NodeState.SUCCEEDED and o.index not in gone
                                        for o in outcomes):
        return RunState.FAILED
    return state


# Exit codes of `labctl up` for a run stopped by a signal: 128 + N, as shells report it.
INTERRUPT_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}
