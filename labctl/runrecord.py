"""The run record: how a run went, typed, with JSON in and out (status.json).

Everything labctl writes down about a run lives in one `RunRecord`: who ran it and
where, the state (decided by labctl/verdict.py, the one place that decides it), every
node's outcome, the first failure, the faults fired, the checks, the trace's summary
and the timings. The run folder (labctl/rundir.py) stores it as status.json; the
report, the page and the CLI read it. Nothing here decides anything: values only,
standard library only, so every layer above may use them.

`to_json`/`from_json` keep status.json's shape (the same keys and JSON types as
every labctl before this module wrote them), so folders of older runs read as
before; keys this version does not know are kept as they were (`extra`).
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, TypedDict

from workloads._protocol import records, results

from .runnames import STATUS_FILE, TRACE_FILE
from .outcome import NodeOutcome, NodeState, RunState
from .trace.model import Diagnosis, Hazard, Mismatch

# The largest lab labctl runs (labctl/limits.py's MAX_WORLD, MAX_TOTAL_NODES,
# MAX_NPROC_PER_NODE; tests/test_runrecord.py holds them equal): a run folder's sizes are
# read against them, since a loop over a damaged status.json's world of 10^30 never ends.
MAX_WORLD = records.MAX_WORLD   # the codec's bound on a rank number
MAX_TOTAL_NODES = results.MAX_TOTAL_NODES
MAX_NPROC_PER_NODE = 1_024
# status.json (and plan.json) are read no further than this: the largest lab's record
# (65,536 ranks' exit codes and errors) is a few tens of MB, its plan under 10 MB.
MAX_RECORD_BYTES = 64 << 20


class RecordDamaged(ValueError):
    """A status.json whose content is not a run record (one line saying what is wrong)."""


class ErrorQuote(TypedDict, total=False):
    """An exception as a rank (or its agent) raised it: its last line, and where."""
    exception: str
    file: str
    line: int
    function: str
    call: str                   # the torch.distributed function it was raised in, if any


def where(error: Mapping[str, Any]) -> str:
    """` at file:line` of an ErrorQuote that knows where it was raised."""
    return f" at {error['file']}:{error['line']}" if error.get("file") else ""


@dataclass
class FirstFailure:
    """Who failed first and why; status.json's `first_failure` (`to_dict`, same keys as ever)."""
    rank: int | None = None
    node: int | None = None
    exit_code: int | None = None
    ranks: list[int] | None = None       # left early: every rank that did (more than one)
    nodes: list[int] | None = None       # left early on several nodes: each of `ranks`' node
    check: str | None = None             # a failed check (workload/name), nothing exited
    lost: str | None = None              # the node vanished: the backend's word
    error: ErrorQuote | None = None      # the exception (exception, file, line, function)
    signal: str | None = None
    left_early: bool = False             # exited 0 while the others were in a collective
    symptom_rank: int | None = None      # left early: who raised the error
    hang: bool = False                   # nobody failed: the deadline came in a collective
    fault: str | None = None             # the kill fault that caused it
    fault_s: float | None = None
    peer_error: ErrorQuote | None = None  # with a fault: what the peers then raised
    peer_rank: int | None = None
    after_fault: str | None = None       # a freeze or cut-off that came before it
    collective: Diagnosis | None = None  # where the collectives stopped (labctl/trace/)
    # where the failed rank's trace records end, when its error names no line of its own
    # (a signal, os._exit): "in all_reduce [1] (collective #3 of default_pg) at job.py:9"
    last_op: str | None = None
    # the call the diagnosis names and where it was made: the script's torch.distributed
    # function (all_gather_object, not the all_gather it issued) and "file:line"
    op: str | None = None
    caller: str | None = None
    # a first failure that is another rank's symptom: "odd call" (the rank died in a
    # collective this one called differently), "absence" (it waited for this one) or
    # "named by torch" (torch's own check, on that rank, named this one: labctl/torchsays.py),
    # "sent it" (the root of an object collective whose object the others could not unpickle),
    # "deleted it" (a store key another rank was still to read)
    blamed_for: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.fault:
            keys = ("fault", "fault_s", "signal", "rank", "ranks", "node", "exit_code", "peer_error", "peer_rank")
            always = {"rank", "node", "exit_code"} | ({"peer_rank"} if self.peer_error else set())
        elif self.left_early:
            keys = ("rank", "ranks", "node", "nodes", "exit_code", "left_early", "error", "symptom_rank")
            always = {"rank", "node", "exit_code", "error", "symptom_rank"}
        elif self.hang:
            keys, always = ("rank", "node", "exit_code", "hang"), {"rank", "node", "exit_code"}
        else:
            keys = ("rank", "ranks", "node", "exit_code", "check", "lost", "error", "signal", "blamed_for",
                    "peer_rank", "peer_error")
            always = {"rank", "node", "exit_code"}
        d = {k: getattr(self, k) for k in (*keys, "after_fault", "collective", "last_op", "op", "caller")
             if k in always or getattr(self, k) is not None and getattr(self, k) is not False}
        if self.collective is not None:
            d["collective"] = self.collective.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FirstFailure":
        """From status.json (keys this version does not know are ignored)."""
        names = {f.name for f in fields(cls)}
        first = cls(**{k: v for k, v in data.items() if k in names})
        first.collective = Diagnosis.from_dict(data.get("collective"))
        return first

    def answer(self) -> tuple[int | None, list[int], str | None, str | None]:
        """(rank, ranks, op, caller) as one answer: its own, else its diagnosis' (the ranks a
        p2p deadlock's every rank waits on, the op and line the others wait in)."""
        said = self.collective
        ranks = list(self.ranks or []) or ([self.rank] if self.rank is not None else []) \
            or list(said.ranks if said is not None else [])
        op = self.op or (said.op if said is not None else None)
        caller = self.caller or (said.caller if said is not None else None)
        return self.rank, ranks, op, caller

    def describe(self) -> str:
        """One sentence: who failed first and why (the exception and where it was raised)."""
        if self.left_early:
            return f"{self._who_left()} exited 0 while the others were still in a collective (left the group early)"
        if self.fault:
            who = f"rank {self.rank} on node {self.node}" if self.rank is not None else f"node {self.node}"
            kind = self.fault.split(":", 1)[0]
            if kind not in ("stop-node", "partition"):
                return f"{who} was killed by fault {self.fault} ({self.signal or 'SIGKILL'})"
            what = "was frozen by" if kind == "stop-node" else "was cut off the network by"
            text = f"{who} {what} fault {self.fault}"
            if self.last_op:
                text += f" ({'it was ' if self.last_op.startswith('in ') else ''}{self.last_op})"
            if self.peer_error is not None and self.peer_rank is not None:
                text += f"; rank {self.peer_rank} waited for it in vain: {self.peer_error['exception'][:160]}"
            return text
        if self.lost:
            return f"node {self.node} lost: {self.lost}"
        if self.hang and self.collective:
            said = self.collective.text
            if self.rank is not None and self.caller and self.caller not in said:
                said += f" (rank {self.rank} at {self.caller})"
            return f"hang in a collective: {said}"
        if self.blamed_for == "named by torch" and self.peer_error is not None:
            who = (f"rank {self.rank}" + (f" on node {self.node}" if self.node is not None else "")
                   if self.rank is not None else f"ranks {', '.join(map(str, self.ranks or []))}")
            what = f" in {self.op}" if self.op else ""
            return (f"{who} is the rank torch's own check named{what}"
                    + (f" (at {self.caller})" if self.caller else "")
                    + f": rank {self.peer_rank} raised {self.peer_error.get('exception', '')[:300]}")
        if self.blamed_for == "deleted it" and self.peer_error is not None:
            return (f"rank {self.rank}" + (f" on node {self.node}" if self.node is not None else "")
                    + f" deleted a store key another rank still had to read (store.delete_key"
                    + (f" at {self.caller}" if self.caller else "") + f"): rank {self.peer_rank} "
                    + str(self.peer_error.get("exception", ""))[:300])
        if self.blamed_for == "sent it" and self.peer_error is not None:
            return (f"rank {self.rank}" + (f" on node {self.node}" if self.node is not None else "")
                    + f" sent an object the other ranks could not load in {self.op}"
                    + (f" (at {self.caller})" if self.caller else "")
                    + f": rank {self.peer_rank} raised {self.peer_error.get('exception', '')[:300]}")
        if self.blamed_for and self.peer_error is not None and self.collective:   # another rank's symptom
            who = f"rank {self.rank}" + (f" on node {self.node}" if self.node is not None else "")
            said = self.peer_error["exception"]                      # its words: peer_error, the report
            how = f"raised {said.split(':', 1)[0]}" if self.peer_error.get("file") else said.split(": ", 1)[0]
            what = ("made the odd call of a mismatched collective" if self.blamed_for == "odd call"
                    else "is the rank the others waited for")
            return f"{who} {what}: {self.collective.text}; rank {self.peer_rank} {how}"
        if self.rank is None and self.ranks and self.error:   # every one of them raised it
            text = self._who_left() + (" each" if len(self.ranks) > 1 else "")
        else:
            text = f"rank {self.rank}" if self.rank is not None else "the launcher"
            if self.node is not None:
                text += f" on node {self.node}"
        if self.check:
            text += f" failed check {self.check}"
        elif self.signal:
            text += f" was killed by {self.signal}"
        elif self.exit_code is not None:
            text += f" exited with code {self.exit_code}"
        if self.error:
            text += f": {self.error['exception']}{where(self.error)}"
        if self.op == "destroy_process_group" and self.caller:
            text += f" (its own destroy_process_group at {self.caller} had torn the group down)"
        if self.last_op:
            text += f" ({'it was ' if self.last_op.startswith('in ') else ''}{self.last_op})"
        if self.after_fault:
            text += f" (after fault {self.after_fault})"
        return text

    def _who_left(self) -> str:
        """'rank 1 on node 0', 'rank 1, 3 on node 0', 'rank 1 on node 0 and rank 2, 3 on node 1'."""
        ranks = self.ranks or ([self.rank] if self.rank is not None else [])
        if not ranks:
            return f"its ranks on node {self.node}"
        nodes = self.nodes if self.nodes and len(self.nodes) == len(ranks) else [self.node] * len(ranks)
        by_node: dict[int | None, list[int]] = {}
        for rank, node in zip(ranks, nodes):
            by_node.setdefault(node, []).append(rank)
        return " and ".join(f"rank {', '.join(map(str, rs))} on node {node}" for node, rs in by_node.items())


@dataclass(frozen=True)
class FiredFault:
    """One event of an injected fault, as it fired (a line of faults.jsonl)."""
    fault: str                      # as written: kill-rank:1@5
    kind: str
    target: int
    phase: str                      # begin | end
    did: str                        # what labctl did, or "could not: ..."
    lab_s: float                    # seconds after labctl started the lab
    ok: bool = True
    planned_s: float = 0.0          # its T (or T + D)
    clock: str = "start"            # start | join: where T counts from
    fired_s: float = 0.0            # seconds on the fault clock
    took_s: float = 0.0
    time: float = 0.0               # epoch seconds
    note: str | None = None

    REQUIRED = ("fault", "kind", "target", "phase", "did", "lab_s")
    _ORDER = ("fault", "kind", "target", "phase", "planned_s", "clock", "fired_s", "lab_s",
              "took_s", "time", "did", "ok", "note")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._ORDER if k != "note" or self.note is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FiredFault":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def began(self) -> bool:
        """A fault that began (not its end) and could be done."""
        return self.phase == "begin" and self.ok


@dataclass(frozen=True)
class Checks:
    total: int = 0
    failed: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class FailedCheck:
    workload: Any = None
    name: Any = None
    rank: Any = None
    detail: Any = None


@dataclass(frozen=True)
class TraceSummary:
    """What the trace merge wrote (trace.json) and what it could not read."""
    file: str
    ops: int
    missing_ranks: list[int] = field(default_factory=list)
    bad_records: int = 0
    straggler: dict | None = None       # the rank that arrived last at most collectives (labctl/trace/)
    mismatch: Mismatch | None = None    # a collective whose ranks' calls differed, though it completed
    hazard: Hazard | None = None        # a call torch let pass that is almost always a bug

    def to_dict(self) -> dict[str, Any]:
        """status.json's `trace` (what a run without a straggler or a mismatch wrote before)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("mismatch", "hazard"):
            if d[key] is not None:
                d[key] = d[key].to_dict()
        return {k: v for k, v in d.items() if v is not None or k not in ("straggler", "mismatch", "hazard")}


@dataclass
class LiveDiagnosis:
    """What the live watcher said while the lab hung (labctl/live/): status.json's `live`,
    written when it was said, so `labctl report RUN` and the page show it while the lab
    still runs; the finish says whether the final diagnosis confirmed it."""
    made_at: float                      # epoch s: when it was said
    since: float                        # epoch s: when the hang began (the first rank's last op)
    reason: str                         # why the lab was called stalled
    text: str                           # who, what and where (the first failure's sentence)
    rank: int | None = None
    ranks: list[int] = field(default_factory=list)
    op: str | None = None
    caller: str | None = None
    where: dict[str, dict] = field(default_factory=dict)   # rank -> its stack's place (stackdumps.where_stuck)
    waiting: list[str] = field(default_factory=list)       # what the others wait in
    resumed_at: float | None = None     # epoch s: progress came back after it was said
    verdict: str | None = None          # at the finish: "confirmed" or "corrected: <the final answer>"

    @property
    def after_s(self) -> float:
        """Seconds from the hang's start to the answer."""
        return round(self.made_at - self.since, 3)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LiveDiagnosis | None":
        """From status.json's `live`; None when a field is not of its type (a damaged or
        edited record: the report and the page go on without it)."""
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in data.items() if k in names}
        for key, check in _LIVE_TYPES.items():
            if key in given and not check(given[key]):
                return None
        try:
            return cls(**given)
        except TypeError:
            return None


def _finite(value: Any) -> bool:
    return (isinstance(value, float) and value == value and abs(value) != float("inf")) or \
        (_whole(value) and abs(value) <= 1 << 62)


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


_LIVE_TYPES: dict[str, Any] = {
    "made_at": _finite, "since": _finite, "resumed_at": lambda v: v is None or _finite(v),
    "reason": lambda v: isinstance(v, str), "text": lambda v: isinstance(v, str),
    "rank": lambda v: v is None or _rank(v),
    "ranks": lambda v: isinstance(v, list) and len(v) <= MAX_WORLD and all(_rank(x) for x in v),
    "op": lambda v: v is None or isinstance(v, str), "caller": lambda v: v is None or isinstance(v, str),
    "verdict": lambda v: v is None or isinstance(v, str), "waiting": _texts,
    "where": lambda v: isinstance(v, dict) and len(v) <= MAX_WORLD and all(isinstance(w, dict) for w in v.values()),
}


@dataclass(frozen=True)
class Controller:
    """The labctl that runs the lab: `report`/`down` tell a live run from an abandoned one."""
    pid: int
    host: str
    start_ticks: int | None


@dataclass(frozen=True)
class Leftover:
    """A process a rank left behind, killed with its node (local)."""
    node: int | None
    pid: int
    command: str


@dataclass(frozen=True)
class Collected:
    """A run folder `labctl collect` wrote (the lab was started elsewhere)."""
    by: str = "labctl collect"
    wait: bool = True


# status.json's keys, in the order they are written; the rest of a record's fields
# are written in their place below (`to_json`).
_IDENTITY = ("run_id", "lab", "backend", "launcher", "dist_backend", "nodes", "nproc_per_node",
             "world_size")


@dataclass
class RunRecord:
    """How one run went. `state` stays RUNNING until labctl/verdict.py decides it; the
    fields below `finished` are what the logs showed, known once the run folder is
    finished (`checks` None: the logs were not read)."""
    run_id: str
    lab: str
    backend: str
    launcher: str
    dist_backend: str
    nodes: int
    nproc_per_node: int
    world_size: int
    state: RunState = RunState.RUNNING
    started: str = ""
    workdir: str | None = None                  # local: node | invoking
    controller: Controller | None = None
    backend_state: dict[str, Any] | None = None  # the backend's own notes (local: guards; k8s: namespace)
    collected: Collected | None = None
    leftovers: list[Leftover] | None = None
    seconds: float | None = None
    seconds_watched: float | None = None
    signal: str | None = None                   # what interrupted it
    notes: list[str] = field(default_factory=list)
    logs_uncollected: bool = False              # `labctl down` must save the logs first
    faults: list[FiredFault] = field(default_factory=list)
    trace: TraceSummary | None = None
    live: LiveDiagnosis | None = None           # what the live watcher said while the lab hung
    # -- how it ended (verdict.decide) and what the logs showed
    first_failure: FirstFailure | None = None
    finished: str | None = None
    message: str = ""
    node_outcomes: list[NodeOutcome] = field(default_factory=list)
    rank_exit_codes: dict[int, int] = field(default_factory=dict)
    rank_errors: dict[int, ErrorQuote] = field(default_factory=dict)
    failed_ranks: list[int] = field(default_factory=list)
    ranks_without_output: list[int] = field(default_factory=list)
    stacks: dict[int, dict] = field(default_factory=dict)   # rank -> where it was (stackdumps.where_stuck)
    checks: Checks | None = None
    failed_checks: list[FailedCheck] = field(default_factory=list)
    # result lines the ranks printed that were left out (a field out of the lab's bounds)
    ignored_results: results.Ignored | None = None
    finalize_seconds: float | None = None
    unfinished: list[str] = field(default_factory=list)     # a cut finish: what is missing
    rank_logs_by_guards: bool = False
    extra: dict[str, Any] = field(default_factory=dict)     # keys this version does not know

    @property
    def ok(self) -> bool:
        return self.state is RunState.PASSED

    @property
    def ended(self) -> bool:
        return self.state is not RunState.RUNNING

    # ---- JSON ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """status.json's object."""
        d: dict[str, Any] = {k: getattr(self, k) for k in _IDENTITY}
        d["state"] = self.state.value
        d["started"] = self.started
        _put(d, "workdir", self.workdir)
        if self.controller is not None:
            d["controller"] = dataclasses.asdict(self.controller)
        if self.collected is not None:
            d["collected"] = dataclasses.asdict(self.collected)
        if self.backend_state is not None:
            d[self.backend] = self.backend_state
        if self.faults:
            d["faults"] = [f.to_dict() for f in self.faults]
        if self.leftovers is not None:
            d["leftovers"] = [dataclasses.asdict(x) for x in self.leftovers]
        _put(d, "seconds", self.seconds)
        _put(d, "seconds_watched", self.seconds_watched)
        _put(d, "signal", self.signal)
        if self.notes:
            d["notes"] = list(self.notes)
        if self.logs_uncollected:
            d["logs_uncollected"] = True
        if self.finished is not None:
            d["first_failure"] = self.first_failure.to_dict() if self.first_failure else None
            d["ok"] = self.ok
            d["finished"] = self.finished
            d["message"] = self.message
            d["node_outcomes"] = [n.to_dict() for n in self.node_outcomes]
            if self.checks is not None:
                d["rank_exit_codes"] = {str(k): v for k, v in sorted(self.rank_exit_codes.items())}
                d["rank_errors"] = {str(k): dict(v) for k, v in sorted(self.rank_errors.items())}
                d["failed_ranks"] = list(self.failed_ranks)
                d["ranks_without_output"] = list(self.ranks_without_output)
                if self.stacks:
                    d["stacks"] = {str(k): v for k, v in sorted(self.stacks.items())}
                d["checks"] = dataclasses.asdict(self.checks)
                d["failed_checks"] = [dataclasses.asdict(c) for c in self.failed_checks]
                if self.ignored_results is not None:
                    d["ignored_results"] = self.ignored_results.to_dict()
        elif self.message:
            d["message"] = self.message
        if self.trace is not None:
            d["trace"] = self.trace.to_dict()
        if self.live is not None:
            d["live"] = self.live.to_dict()
        _put(d, "finalize_seconds", self.finalize_seconds)
        if self.unfinished:
            d["unfinished"] = list(self.unfinished)
        if self.rank_logs_by_guards:
            d["rank_logs_by_guards"] = True
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str) + "\n"

    @classmethod
    def from_dict(cls, d: Any) -> "RunRecord":
        """From status.json's object, of this labctl or an older one; RecordDamaged, one
        line, when it is not a run record."""
        damage = status_damage(d)
        if damage:
            raise RecordDamaged(damage)
        known = {f.name for f in fields(cls)} | {"ok"}
        backend = d.get("backend") or ""
        rec = cls(**{k: d.get(k) for k in _IDENTITY}, state=RunState(d.get("state", "running")))
        rec.started = d.get("started") or ""
        rec.workdir = d.get("workdir")
        if isinstance(d.get("controller"), dict):
            c = d["controller"]
            rec.controller = Controller(c.get("pid"), c.get("host"), c.get("start_ticks"))
        if isinstance(d.get(backend), dict):
            rec.backend_state = d[backend]
        if isinstance(d.get("collected"), dict):
            rec.collected = Collected(**{k: v for k, v in d["collected"].items() if k in ("by", "wait")})
        if d.get("leftovers") is not None:
            rec.leftovers = [Leftover(x.get("node"), x.get("pid"), x.get("command"))
                             for x in d["leftovers"]]
        rec.seconds, rec.seconds_watched = d.get("seconds"), d.get("seconds_watched")
        rec.signal = d.get("signal")
        rec.notes = list(d.get("notes") or [])
        rec.logs_uncollected = d.get("logs_uncollected") is True
        rec.faults = [FiredFault.from_dict(f) for f in d.get("faults") or []]
        if isinstance(d.get("trace"), dict):
            t = d["trace"]
            rec.trace = TraceSummary(t.get("file", TRACE_FILE), t.get("ops", 0),
                                     list(t.get("missing_ranks") or []), t.get("bad_records", 0),
                                     t["straggler"] if isinstance(t.get("straggler"), dict) else None,
                                     Mismatch.from_dict(t.get("mismatch")), Hazard.from_dict(t.get("hazard")))
        if isinstance(d.get("live"), dict):
            rec.live = LiveDiagnosis.from_dict(d["live"])
        if d.get("first_failure"):
            rec.first_failure = FirstFailure.from_dict(d["first_failure"])
        rec.finished = d.get("finished")
        rec.message = d.get("message") or ""
        rec.node_outcomes = [_node_outcome(n) for n in d.get("node_outcomes") or []]
        rec.rank_exit_codes = {int(k): v for k, v in (d.get("rank_exit_codes") or {}).items()}
        rec.rank_errors = {int(k): v for k, v in (d.get("rank_errors") or {}).items()}
        rec.failed_ranks = list(d.get("failed_ranks") or [])
        rec.ranks_without_output = list(d.get("ranks_without_output") or [])
        rec.stacks = {int(k): v for k, v in (d.get("stacks") or {}).items()}
        if isinstance(d.get("checks"), dict):
            rec.checks = Checks(**{k: v for k, v in d["checks"].items() if k in ("total", "failed", "skipped")})
        rec.failed_checks = [FailedCheck(**{k: c.get(k) for k in ("workload", "name", "rank", "detail")})
                             for c in d.get("failed_checks") or []]
        rec.ignored_results = results.Ignored.from_dict(d.get("ignored_results"))
        rec.finalize_seconds = d.get("finalize_seconds")
        rec.unfinished = list(d.get("unfinished") or [])
        rec.rank_logs_by_guards = d.get("rank_logs_by_guards") is True
        rec.extra = {k: v for k, v in d.items() if k not in known and k != backend}
        return rec

    @classmethod
    def read(cls, path: "os.PathLike[str] | str") -> "RunRecord":
        """status.json at `path`, read no further than MAX_RECORD_BYTES (RecordDamaged
        past it: a damaged or hostile file, not a run record)."""
        return cls.from_json(read_bounded(path, STATUS_FILE))

    @classmethod
    def from_json(cls, text: str | bytes) -> "RunRecord":
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise RecordDamaged(f"unreadable ({str(exc)[:200]})") from None
        return cls.from_dict(data)


def read_bounded(path: "os.PathLike[str] | str", what: str, limit: int = MAX_RECORD_BYTES) -> bytes:
    """A run folder's JSON file, at most `limit` bytes of it (RecordDamaged past that)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
        raise RecordDamaged(f"larger than {size}, the most a {what} may be "
                            "(docs/limits.md)")
    return data


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        d[key] = value


def _node_outcome(n: Mapping[str, Any]) -> NodeOutcome:
    return NodeOutcome(n["index"], n.get("hostname", ""), n.get("exit_code"),
                       NodeState(n["state"]), n.get("exited_s"), n.get("signal"), n.get("reason"))


# status.json's fields that code reads, and the JSON type each must have when present
_STATUS_TYPES: dict[str, type | tuple[type, ...]] = {
    "state": str, "run_id": str, "lab": str, "backend": str, "launcher": str,
    "message": str,
    "node_outcomes": list, "rank_exit_codes": dict, "rank_errors": dict, "failed_ranks": list,
    "ranks_without_output": list, "first_failure": dict, "faults": list, "leftovers": list,
    "notes": list, "stacks": dict, "checks": dict, "failed_checks": list, "controller": dict,
    "local": dict, "seconds": (int, float), "workdir": str, "unfinished": list,
}
_STATUS_ITEMS: dict[str, type] = {"node_outcomes": dict, "faults": dict, "leftovers": dict,
                                  "failed_checks": dict, "notes": str, "unfinished": str}
_JSON_NAMES = {str: "a string", int: "a number", float: "a number", list: "a list",
               dict: "an object", bool: "true/false"}


def status_damage(meta: Any) -> str | None:
    """What is wrong with a status.json's content (None: readable), in a few words."""
    if not isinstance(meta, dict):
        return f"expected a JSON object, found {_JSON_NAMES.get(type(meta), type(meta).__name__)}"
    for key, kind in _STATUS_TYPES.items():
        value = meta.get(key)
        if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
            pass
        else:
            want = _JSON_NAMES.get(kind if isinstance(kind, type) else kind[0], str(kind))
            return f"'{key}' should be {want}, found {_JSON_NAMES.get(type(value), type(value).__name__)}"
        item = _STATUS_ITEMS.get(key)
        if item and value is not None and not all(isinstance(x, item) for x in value):
            return f"'{key}' should hold only {_JSON_NAMES[item].split(' ', 1)[1]}s"
    if "state" in meta and meta["state"] not in {s.value for s in RunState}:
        return f"unknown state {str(meta['state'])[:40]!r} (one of: {', '.join(RunState)})"
    for n in meta.get("node_outcomes") or []:
        if not isinstance(n.get("index"), int) or not isinstance(n.get("state"), str) \
                or n["state"] not in {s.value for s in NodeState}:
            return "a node outcome without its index or a known state"
    first = meta.get("first_failure") or {}
    errors = [first.get("error"), first.get("peer_error")]
    if not all(e is None or isinstance(e, dict) and isinstance(e.get("exception"), str) for e in errors) \
            or not all(isinstance(e, dict) and isinstance(e.get("exception"), str)
                       for e in (meta.get("rank_errors") or {}).values()):
        return "an error record without its exception"
    if not all(isinstance(w, dict) for w in (meta.get("stacks") or {}).values()):
        return "'stacks' should hold an object per rank (where it was)"
    if not all(_whole(c) and -(1 << 31) <= c < 1 << 31 for c in (meta.get("rank_exit_codes") or {}).values()):
        return "'rank_exit_codes' should hold exit codes (whole numbers)"
    trace = meta.get("trace")
    if trace is not None and not (isinstance(trace, dict)
                                  and all(_whole(trace.get(k, 0)) and trace.get(k, 0) >= 0 for k in ("ops", "bad_records"))
                                  and isinstance(trace.get("file", ""), str)
                                  and isinstance(trace.get("missing_ranks") or [], list)
                                  and len(trace.get("missing_ranks") or []) <= MAX_WORLD
                                  and all(_rank(r) for r in trace.get("missing_ranks") or [])):
        return ("'trace' should be an object: its 'file' a string, 'ops' and 'bad_records' whole numbers, "
                "'missing_ranks' rank numbers")
    for f in meta.get("faults") or []:
        if not all(k in f for k in FiredFault.REQUIRED):
            return "a fault record without its fault, kind, target, phase, did or lab_s"
    for k, most in _SIZES.items():
        if k in meta and not (_whole(meta[k]) and 1 <= meta[k] <= most):
            return f"'{k}' should be a whole number from 1 to {most:,} (docs/limits.md), found {_shown(meta[k])}"
    for k in ("rank_exit_codes", "rank_errors", "stacks"):
        if not all(str(x).isdigit() and int(str(x)) < MAX_WORLD for x in meta.get(k) or {}):
            return f"'{k}' should be keyed by rank numbers (0 to {MAX_WORLD - 1:,})"
        if len(meta.get(k) or {}) > MAX_WORLD:
            return f"'{k}' should hold at most {MAX_WORLD:,} ranks"
    for k in ("failed_ranks", "ranks_without_output"):
        if not all(_rank(x) for x in meta.get(k) or []) or len(meta.get(k) or []) > MAX_WORLD:
            return f"'{k}' should hold at most {MAX_WORLD:,} rank numbers (0 to {MAX_WORLD - 1:,})"
    outcomes = meta.get("node_outcomes") or []
    if len(outcomes) > MAX_TOTAL_NODES or not all(0 <= n["index"] < MAX_TOTAL_NODES for n in outcomes):
        return f"'node_outcomes' should hold at most {MAX_TOTAL_NODES:,} nodes (0 to {MAX_TOTAL_NODES - 1:,})"
    for k in ("rank", "symptom_rank", "peer_rank"):
        if first.get(k) is not None and not _rank(first[k]):
            return f"'first_failure.{k}' should be a rank number (0 to {MAX_WORLD - 1:,}), found {_shown(first[k])}"
    if first.get("node") is not None and not (_whole(first["node"]) and 0 <= first["node"] < MAX_TOTAL_NODES):
        return f"'first_failure.node' should be a node number (0 to {MAX_TOTAL_NODES - 1:,})"
    for k in ("ranks", "nodes"):
        if first.get(k) is not None and not (isinstance(first[k], list) and len(first[k]) <= MAX_WORLD
                                             and all(_whole(x) and 0 <= x < MAX_WORLD for x in first[k])):
            return f"'first_failure.{k}' should be a list of at most {MAX_WORLD:,} numbers"
    checks = meta.get("checks") or {}
    if not all(_whole(checks.get(k, 0)) and checks.get(k, 0) >= 0 for k in ("total", "failed", "skipped")):
        return "'checks' should count with whole numbers"
    return None


# the sizes a run folder's readers loop over: bounded as a lab is (labctl/limits.py)
_SIZES = {"nodes": MAX_TOTAL_NODES, "nproc_per_node": MAX_NPROC_PER_NODE, "world_size": MAX_WORLD}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rank(value: Any) -> bool:
    return _whole(value) and 0 <= value < MAX_WORLD


def _shown(value: Any) -> str:
    """A value in an error line, never longer than a few words (a 10^30 or a 50 MB string)."""
    text = json.dumps(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
    return text if len(text) <= 24 else text[:20] + "..."
