"""Injected faults: what can go wrong on purpose, parsed once and fired by the driver.

A fault is written as one string, in the spec (`faults: [...]`) or on the
command line (`--fault`, repeatable); times are seconds after every node of
the lab has started:

    kill-rank:R@T        SIGKILL worker rank R (its node's agent stays)
    kill-node:N@T        kill node N entirely (agent, workers; the container)
    stop-node:N@T+D      freeze node N for D seconds (SIGSTOP / docker pause), then resume
    partition:N@T+D      cut node N off the lab network for D seconds, then reconnect
    delay:N=MS           MS milliseconds more latency on node N's traffic, the whole run

`FaultClock` holds a lab's faults as timed events; the driver (labctl/driver.py) runs
it and asks the backend `signal(BeginFault(fault))` (and `signal(EndFault(fault))` at the
end of a fault with a duration); which kinds a backend can do is its `fault_kinds`.
Standard library only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("kill-rank", "kill-node", "stop-node", "partition", "delay")
USAGE = ("kill-rank:R@T, kill-node:N@T, stop-node:N@T+D, partition:N@T+D or delay:N=MS "
         "(T, D: seconds after every node started; example: kill-node:1@5)")
_NUM = r"[0-9]+(?:\.[0-9]+)?"
_SYNTAX = {
    "kill-rank": re.compile(rf"^kill-rank:(?P<target>[0-9]+)@(?P<at>{_NUM})$"),
    "kill-node": re.compile(rf"^kill-node:(?P<target>[0-9]+)@(?P<at>{_NUM})$"),
    "stop-node": re.compile(rf"^stop-node:(?P<target>[0-9]+)@(?P<at>{_NUM})\+(?P<duration>{_NUM})$"),
    "partition": re.compile(rf"^partition:(?P<target>[0-9]+)@(?P<at>{_NUM})\+(?P<duration>{_NUM})$"),
    "delay": re.compile(r"^delay:(?P<target>[0-9]+)=(?P<ms>[0-9]+)$"),
}
_EXAMPLE = {"kill-rank": "kill-rank:1@5", "kill-node": "kill-node:1@5",
            "stop-node": "stop-node:1@5+30", "partition": "partition:1@5+30", "delay": "delay:1=50"}


class NotYet(Exception):
    """The fault's target does not exist yet (a rank still importing torch): try again
    at the next poll; the fault fires, and is written down, when it really happens."""


class FaultSyntaxError(ValueError):
    """The text is not a fault; the message says what is expected."""


@dataclass(frozen=True)
class Fault:
    kind: str
    target: int                    # a global rank (kill-rank) or a node index
    at: float = 0.0                # seconds after every node started
    duration: float | None = None  # stop-node, partition
    ms: int | None = None          # delay

    @property
    def text(self) -> str:
        """The fault as it is written (round-trips through `parse`)."""
        if self.kind == "delay":
            return f"delay:{self.target}={self.ms}"
        text = f"{self.kind}:{self.target}@{_num(self.at)}"
        return text + (f"+{_num(self.duration)}" if self.duration is not None else "")

    @property
    def node_fault(self) -> bool:
        return self.kind != "kill-rank"

    @property
    def kills(self) -> bool:
        """A kill is a root cause (blame.fault_cause); a freeze, cut-off or delay is not."""
        return self.kind in ("kill-rank", "kill-node")

    def __str__(self) -> str:
        return self.text


def _num(x: float) -> str:
    return f"{x:g}"


def parse(text: str) -> Fault:
    """One fault from its text; FaultSyntaxError with the expected forms otherwise."""
    if not isinstance(text, str):
        raise FaultSyntaxError(f"expected a string like {USAGE}")
    text = text.strip()
    kind = text.split(":", 1)[0]
    if kind not in KINDS:
        raise FaultSyntaxError(f"unknown fault kind {kind!r}; expected one of {USAGE}")
    m = _SYNTAX[kind].match(text)
    if not m:
        raise FaultSyntaxError(f"{kind} is written {_SYNTAX_TEXT[kind]} (example: {_EXAMPLE[kind]})")
    g = m.groupdict()
    return Fault(kind, int(g["target"]), float(g.get("at") or 0.0),
                 float(g["duration"]) if g.get("duration") else None,
                 int(g["ms"]) if g.get("ms") else None)


_SYNTAX_TEXT = {"kill-rank": "kill-rank:R@T", "kill-node": "kill-node:N@T",
                "stop-node": "stop-node:N@T+D", "partition": "partition:N@T+D",
                "delay": "delay:N=MS"}


RETRY_S = 0.5             # a fault whose target is not there yet is tried again this often


class FaultClock:
    """The spec's faults as timed events (begin, and end for those with a duration),
    on a clock that starts when every node is running: a fault at T means T seconds
    after the last node started, whatever the backend's start-up time. With
    `fault_clock: join` it starts when every rank has said it joined its process group
    (`Backend.describe(joins=True)`): T seconds into the collectives, however long torch took to load."""

    def __init__(self, faults: tuple[Fault, ...]):
        events = []
        for fault in faults:
            events.append((fault.at, 0, fault, "begin"))
            if fault.duration is not None:
                events.append((fault.at + fault.duration, 1, fault, "end"))
        self.events = sorted(events, key=lambda e: (e[0], e[1]))
        self.started_at: float | None = None      # clock() when every node ran
        self.active: list[Fault] = []              # begun, not yet ended
        self.waiting: list[tuple[float, Fault, str]] = []   # due, but the target is not there yet

    def start(self, now: float) -> None:
        if self.started_at is None:
            self.started_at = now

    def due(self, now: float) -> list[tuple[float, Fault, str]]:
        """Events whose time has come, those still waiting for their target first."""
        if self.started_at is None:
            return []
        out, self.waiting = self.waiting, []
        while self.events and self.started_at + self.events[0][0] <= now:
            at, _, fault, phase = self.events.pop(0)
            out.append((at, fault, phase))
        return out

    def retry(self, at: float, fault: Fault, phase: str) -> None:
        """An event whose target is not there yet: tried again at the next poll."""
        self.waiting.append((at, fault, phase))

    def next_in(self, now: float) -> float:
        """Seconds until the next event (a long time when none is scheduled yet)."""
        if self.waiting:
            return RETRY_S
        if self.started_at is None or not self.events:
            return 3600.0
        return max(0.0, self.started_at + self.events[0][0] - now)
