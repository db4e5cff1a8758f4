"""The trace's types (labctl/trace/): one op of one rank, what the merge saw of each rank,
per (pg, op) totals, stragglers, where the ranks of a process group stopped (`Stuck`), the
merge's `Summary`, and the hang diagnosis status.json carries (`Diagnosis`, `Mismatch`).
Data and small properties only; standard library only (labctl/runrecord.py stores a
`Diagnosis`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads._protocol.ops import CALLS

STRAGGLERS = 10
MAX_CALLS = 1000                    # a rank's calls (new_group, store reads ...) kept for the diagnosis
MAX_PROBLEMS = 20                   # bad records named one by one; the rest counted
CPP_OPS_NOTE = 10_000               # this many ops issued from C++: say what tracing them costs
CPP_OP_COST = "about 20-80 µs of CPU each"   # benchmarks/trace.py, CPU table (docs/trace.md)


def _ints(value: Any) -> list[int]:
    return [v for v in value if type(v) is int] if isinstance(value, list) else []


def _texts(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _by_rank(value: Any) -> dict[int, Any]:
    """A JSON object keyed by rank ("0": ...) with int keys; other keys left out."""
    if not isinstance(value, dict):
        return {}
    return {int(k): v for k, v in value.items() if isinstance(k, str) and k.isdigit()}


def _opt(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


@dataclass(slots=True)
class Op:
    """One op of one rank, times in ns on rank 0's clock (the rank's offset applied).
    Slots and shared strings: the merge may hold MAX_PENDING_OPS of them."""
    rank: int
    op: str
    pg: str
    seq: int | None                 # per-pg collective number; None for p2p
    p2p: int | None
    peer: int | None
    root: int | None
    shape: list[int] | None
    dtype: str | None
    nbytes: int
    caller: str
    start: int
    end: int | None                 # None: never completed (hang, crash, async never waited)
    api: str | None = None          # the torch.distributed function called (all_gather_object ...)
    via: str | None = None          # "c++": issued by torch's C++ (DDP's Reducer, functional collectives)
    raised: str | None = None       # the exception it raised before torch issued it (never a collective)
    reduce: str | None = None       # a reducing op's reduce op (SUM, MAX ...); None: not one, or not known
    members: list[int] | None = None   # a new_group call's ranks as the script passed them
    key: str | None = None          # a store read's key(s)
    splits: list[list[int]] | None = None   # all_to_all_single: [input split sizes, output split sizes]

    @property
    def is_call(self) -> bool:
        """A call, no op of a group (the op table's Kind.CALL): new_group,
        destroy_process_group, a store read the script made."""
        return self.op in CALLS

    @property
    def call(self) -> str:
        """The torch.distributed function the script called: the outermost public one on the
        way (`api`: all_gather_object, batch_isend_irecv), else the op itself."""
        return self.api if self.api and self.api != self.op else self.op

    @property
    def shape_text(self) -> str:
        return "[" + ", ".join(map(str, self.shape)) + "]" if self.shape is not None else "[]"

    @property
    def label(self) -> str:
        """"all_reduce [1000]"; the script's call first when it is another function:
        "all_gather_object (its all_gather [1])"."""
        if self.call != self.op:
            return f"{self.call} (its {self.op} {self.shape_text})"
        return f"{self.op} {self.shape_text}"

    @property
    def reduce_op(self) -> str | None:
        """The reduce op where it must agree: SUM is the default, and an op torch's C++
        issued (DDP, functional collectives) carries none; both count as SUM."""
        return self.reduce if self.reduce not in (None, "SUM") else None

    @property
    def signature(self) -> str:
        """What must agree across ranks at one sequence number: op, shape, dtype, root and
        reduce op. An all_to_all_single with uneven splits leaves the shape out: each rank's
        buffer is as long as its own splits say (an MoE's dispatch), and the splits are
        compared pair by pair instead (matcher.splits_mismatch)."""
        root = f" root {self.root}" if self.root is not None else ""
        reduce = f" {self.reduce_op}" if self.reduce_op else ""
        shape = "" if self.splits is not None else self.shape_text
        return f"{self.op} {shape} {self.dtype or ''}{root}{reduce}".strip()

    def where(self) -> dict[str, Any]:
        """The call as status.json gives it (a stuck collective's `calls`)."""
        return {"op": self.op, "call": self.call, "shape": self.shape, "dtype": self.dtype, "root": self.root,
                **({"reduce": self.reduce} if self.reduce else {}), "caller": self.caller}


@dataclass
class RankInfo:
    rank: int
    node: int | None = None
    host: str | None = None
    offset_ns: int = 0
    rtt_ns: int | None = None
    clock_error: str | None = None
    records: int = 0
    ops: int = 0                    # op records (B/X) seen
    ended_in: str | None = None     # where its records end: the op it never left, or its last op
    ended_at: dict | None = None    # ... as {"op": the script's call, "caller": file:line, "inside": bool, "root"}
    anysource: list[tuple[str, int]] = field(default_factory=list)  # its receives from any source: (caller, sender)


@dataclass
class Problem:
    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


@dataclass
class OpTotal:
    count: int = 0
    nbytes: int = 0
    total_ns: int = 0
    slowest_ns: int = 0
    slowest_rank: int | None = None
    unfinished: int = 0


@dataclass
class Straggler:
    pg: str
    seq: int
    op: str
    rank: int                       # the rank that arrived last
    late_ns: int                    # after the first rank arrived


@dataclass
class Lateness:
    """How often one rank arrived last at a collective every member reached, and by how much
    after the first (a straggler per rank, where `Straggler` is one per collective)."""
    collectives: int = 0            # collectives of two or more ranks it took part in
    last: int = 0                   # ... at which it arrived last
    late_ns: int = 0                # summed over those
    worst_ns: int = 0
    where: dict[tuple[str, str], int] = field(default_factory=dict)   # (call, caller) -> times last there

    def add(self, late: int, op: Op) -> None:
        self.last += 1
        self.late_ns += late
        self.worst_ns = max(self.worst_ns, late)
        key = (op.call, op.caller)
        if key in self.where or len(self.where) < 100:
            self.where[key] = self.where.get(key, 0) + 1

    @property
    def typical_ns(self) -> int:
        """Its mean lateness without its worst one (the first collective after the join
        often waits for a slow start, once)."""
        if self.last <= 1:
            return self.late_ns
        return (self.late_ns - self.worst_ns) // (self.last - 1)

    def most(self) -> tuple[str, str] | None:
        return max(self.where.items(), key=lambda kv: kv[1])[0] if self.where else None


@dataclass
class Stuck:
    """Where the ranks of one process group stopped, when some op never completed."""
    pg: str
    seq: int                        # the collective the furthest rank is in
    op: str
    waiting: list[int]              # ranks inside it that never left it
    missing: list[int]              # member ranks that never entered it
    last: dict[int, str]            # rank -> its last collective entered ("#5 all_reduce [1000]")
    mismatch: str | None = None
    culprit: int | None = None      # the rank that called something else, or never came (one)
    silent: list[int] = field(default_factory=list)   # missing ranks without a single trace record
    call: str | None = None         # the script's call the ranks inside made (all_gather_object ...)
    calls: dict[int, dict] = field(default_factory=dict)   # rank inside -> its call (Op.where)
    odd: list[int] = field(default_factory=list)   # a mismatch's odd ranks (none: no call is the most common)
    started: int = field(default=0, compare=False)   # when the first rank entered it (rank 0's clock, ns)
    as_read: dict | None = field(default=None, compare=False, repr=False)   # from status.json: written back as read

    @property
    def targets(self) -> list[int]:
        """The ranks the others wait for here: the odd ones of a mismatch, else the missing;
        none where the ranks inside called it differently with no odd one out (two ranks
        that disagree: the mismatch is the evidence, a rank not there yet may only be late)."""
        return self.odd or ([] if self.mismatch else self.missing)

    @property
    def said_op(self) -> str:
        return self.op if not self.call or self.call == self.op else f"{self.call} (its {self.op})"

    def describe(self) -> str:
        parts = []
        if self.mismatch:
            parts.append(self.mismatch)
        if self.missing:
            who = ", ".join(f"rank {r}" for r in self.missing)
            was = "; ".join(self._last_of(r) for r in self.missing)
            inside = ", ".join(map(str, self.waiting))
            verb = "ranks {} wait" if len(self.waiting) > 1 else "rank {} waits"
            parts.append(f"{verb.format(inside)} in {self.said_op} (collective #{self.seq} of {self.pg}) "
                         f"which {who} never entered ({was})" if self.waiting else
                         f"{who} never entered collective #{self.seq} of {self.pg}")
        if not parts:
            parts.append(f"rank {', '.join(map(str, self.waiting))} never left {self.said_op} "
                         f"(collective #{self.seq} of {self.pg})")
        return "; ".join(parts)

    def _last_of(self, rank: int) -> str:
        if rank in self.last:
            return f"last entered: rank {rank}: {self.last[rank]}"
        if rank in self.silent:     # not "none": its records may have died with it
            # not "dead": a rank held before its first op (a data loader, a lock) is alive
            return f"rank {rank} left no op record: it issued none, or ended before writing one"
        return f"last entered: rank {rank}: none"

    def to_dict(self) -> dict[str, Any]:
        if self.as_read is not None:
            return dict(self.as_read)
        return {"pg": self.pg, "seq": self.seq, "op": self.op, "waiting": self.waiting,
                "missing": self.missing, "last": {str(r): v for r, v in sorted(self.last.items())},
                "mismatch": self.mismatch, "rank": self.culprit, "ranks": self.targets, "no_records": self.silent,
                "call": self.call or self.op, "calls": {str(r): c for r, c in sorted(self.calls.items())},
                "text": self.describe()}

    @classmethod
    def from_dict(cls, data: Any) -> "Stuck | None":
        """From status.json, any labctl's (None: not an object); written back as read."""
        if not isinstance(data, dict):
            return None
        missing, ranks = _ints(data.get("missing")), _ints(data.get("ranks"))
        return cls(pg=str(data.get("pg", "")), seq=_opt(data.get("seq"), int) or 0, op=str(data.get("op", "")),
                   waiting=_ints(data.get("waiting")), missing=missing,
                   last={r: str(v) for r, v in _by_rank(data.get("last")).items()},
                   mismatch=_opt(data.get("mismatch"), str), culprit=_opt(data.get("rank"), int),
                   silent=_ints(data.get("no_records")), call=_opt(data.get("call"), str),
                   calls={r: c for r, c in _by_rank(data.get("calls")).items() if isinstance(c, dict)},
                   odd=ranks if ranks != missing else [], as_read=dict(data))


@dataclass(frozen=True)
class Mismatch:
    """A collective every member entered with calls that differ (status.json's
    `first_failure.collective.mismatch` and `trace.mismatch`)."""
    pg: str
    seq: int
    ranks: list[int]                # the odd ranks; every rank when none is the odd one
    rank: int | None                # the odd rank, when there is one
    op: str | None                  # the odd rank's call (the first of them)
    caller: str | None              # ... and where it made it
    differs: list[str]              # "op", "size", "shape", "dtype", "root", "reduce op"
    calls: dict[int, dict]          # rank -> its call (Op.where)
    unfinished: list[int]           # ranks that never left it
    text: str
    as_read: dict | None = field(default=None, compare=False, repr=False)   # from status.json: written back as read

    def to_dict(self) -> dict[str, Any]:
        if self.as_read is not None:
            return dict(self.as_read)
        return {"pg": self.pg, "seq": self.seq, "ranks": self.ranks, "rank": self.rank, "op": self.op,
                "caller": self.caller, "differs": self.differs,
                "calls": {str(r): c for r, c in sorted(self.calls.items())},
                "unfinished": self.unfinished, "text": self.text}

    @classmethod
    def from_dict(cls, data: Any) -> "Mismatch | None":
        """From status.json (None: not an object); what it lacks is empty, and it is
        written back as it was read."""
        if not isinstance(data, dict):
            return None
        return cls(pg=str(data.get("pg", "")), seq=_opt(data.get("seq"), int) or 0, ranks=_ints(data.get("ranks")),
                   rank=_opt(data.get("rank"), int), op=_opt(data.get("op"), str),
                   caller=_opt(data.get("caller"), str), differs=_texts(data.get("differs")),
                   calls=_by_rank(data.get("calls")), unfinished=_ints(data.get("unfinished")),
                   text=str(data.get("text", "")), as_read=dict(data))


@dataclass(frozen=True)
class Unreceived:
    """Sends from one rank to another that the other received fewer of: the last send, how
    many were sent and received, and the receiver's last receive from that sender (None:
    it never received one, so the sender may have named the wrong peer)."""
    send: Op
    sent: int
    received: int
    last_recv: Op | None = None


@dataclass(frozen=True)
class SendSite:
    """One line of the script that sent from one rank: one of its sends, and how many it
    sent to each rank from there (an exchange's shape: to every peer, or to one neighbour)."""
    send: Op
    sent: dict[int, int]


@dataclass(frozen=True)
class Hazard:
    """A call torch let pass that is almost always a bug, seen in a rank's calls (status.json's
    `trace.hazard`): a collective on a group the rank is not a member of (torch returns at
    once; the rank takes no part and its tensors stay as they were)."""
    rank: int
    op: str                         # the call the script made
    caller: str | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": [self.rank], "rank": self.rank, "op": self.op, "caller": self.caller, "text": self.text}

    @classmethod
    def from_dict(cls, data: Any) -> "Hazard | None":
        if not isinstance(data, dict) or _opt(data.get("rank"), int) is None:
            return None
        return cls(rank=data["rank"], op=str(data.get("op", "")), caller=_opt(data.get("caller"), str),
                   text=str(data.get("text", "")))


FLIGHT_RECORDER = "flight recorder"   # a Diagnosis' source: the ranks' Flight Recorder dumps (tracing off)
STACKS = "stacks"                     # ... the ranks' stacks (a call every rank must make)


@dataclass(frozen=True)
class Diagnosis:
    """Where the collectives stopped and who the others wait for: status.json's
    `first_failure.collective` (labctl/trace/matcher.py `diagnosis`, labctl/trace/fr.py,
    labctl/blame.py `setup_hang`)."""
    text: str                       # the sentence the report and the page show
    rank: int | None = None         # the culprit, when one rank is
    ranks: list[int] = field(default_factory=list)   # ... or every rank the others wait for
    op: str | None = None           # the call it made (or never made) and where
    caller: str | None = None
    mismatch: Mismatch | None = None   # a collective of differing calls some rank never left: the cause
    stuck: list[Stuck] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    p2p: list[str] = field(default_factory=list)     # unfinished p2p ops, said
    source: str | None = None       # None: the trace; FLIGHT_RECORDER; STACKS
    no_dump: list[int] = field(default_factory=list)  # FLIGHT_RECORDER: ranks that dumped nothing
    as_read: dict | None = field(default=None, compare=False, repr=False)   # from status.json: written back as read

    def to_dict(self) -> dict[str, Any]:
        """status.json's shape, the same as ever (each source its own keys)."""
        if self.as_read is not None:
            return dict(self.as_read)
        fr = self.source == FLIGHT_RECORDER
        d: dict[str, Any] = {"rank": self.rank, "ranks": self.ranks, "op": self.op}
        if not fr:
            d["caller"] = self.caller
        if self.source is not None:
            d["source"] = self.source
        if self.mismatch is not None:
            d["mismatch"] = self.mismatch.to_dict()
        d["stuck"] = [s.to_dict() for s in self.stuck]
        d["mismatches"] = self.mismatches
        if fr:
            d["no_dump"] = self.no_dump
        else:
            d["p2p"] = self.p2p
        d["text"] = self.text
        return d

    @classmethod
    def from_dict(cls, data: Any) -> "Diagnosis | None":
        """From status.json, any labctl's (None: not an object); written back as read."""
        if not isinstance(data, dict):
            return None
        stuck = data.get("stuck")
        return cls(text=str(data.get("text", "")), rank=_opt(data.get("rank"), int), ranks=_ints(data.get("ranks")),
                   op=_opt(data.get("op"), str), caller=_opt(data.get("caller"), str),
                   mismatch=Mismatch.from_dict(data.get("mismatch")),
                   stuck=[s for s in map(Stuck.from_dict, stuck if isinstance(stuck, list) else []) if s],
                   mismatches=_texts(data.get("mismatches")), p2p=_texts(data.get("p2p")),
                   source=_opt(data.get("source"), str), no_dump=_ints(data.get("no_dump")), as_read=dict(data))


P2P_KEPT = 16                       # a rank's newest p2p ops kept per peer (the pattern of an exchange)


@dataclass
class Summary:
    path: Path | None = None
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    missing_ranks: list[int] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    more_problems: int = 0
    totals: dict[tuple[str, str], OpTotal] = field(default_factory=dict)
    stragglers: list[Straggler] = field(default_factory=list)
    stuck: list[Stuck] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    stuck_p2p: list[str] = field(default_factory=list)   # "rank 1 waits in recv from rank 0 ..."
    ops: int = 0
    flows: int = 0
    unfinished: int = 0
    t0_ns: int | None = None        # the run's first op, on rank 0's clock: ts 0 in trace.json
    end_ns: int | None = None       # the last moment any rank was known alive: where unfinished ops end
    lanes: dict[int, int] = field(default_factory=dict)   # rank -> threads its ops needed
    cpp_ops: int = 0                # ops torch's C++ issued (functional collectives, DDP's Reducer)
    raised: list[str] = field(default_factory=list)   # "rank 0's broadcast at x.py:5 raised ValueError: ..."
    raised_count: int = 0
    torn: list[int] = field(default_factory=list)     # ranks whose last record was cut by their death
    mismatch_found: list[Mismatch] = field(default_factory=list)   # the first mismatches
    lateness: dict[int, Lateness] = field(default_factory=dict)  # rank -> how often it arrived last
    blocked_p2p: list[Op] = field(default_factory=list)   # blocking p2p ops never finished (the first 50)
    unmatched_sends: dict[tuple[str, int, int], "Unreceived"] = field(default_factory=dict)  # (pg, src, dst) ->
    send_sites: dict[tuple[str, int, str], SendSite] = field(default_factory=dict)  # (pg, src, caller) ->
    collective_sites: dict[tuple[int, str], int] = field(default_factory=dict)  # (rank, caller) -> collectives issued there
    group_timeouts: dict[tuple[int, str], int] = field(default_factory=dict)   # (rank, pg) -> its timeout there, ms
    p2p_calls: dict[tuple[int, str, int], list[tuple[int, str, str, str]]] = field(default_factory=dict)
    # (rank, pg, peer) -> its newest p2p ops with that peer: (p2p number, call, caller, op), P2P_KEPT of them
    calls: dict[int, list[Op]] = field(default_factory=dict)   # rank -> its calls (new_group ...), the first MAX_CALLS
    group_mismatch: "Mismatch | None" = None   # the ranks whose new_group members differed (labctl/trace/calls.py)

    @property
    def empty(self) -> bool:
        return self.ops == 0

    @property
    def cost_note(self) -> str | None:
        """Many ops issued from C++ (DTensor, functional collectives in a loop): the case
        where tracing costs more than the rest, said with its measured cost."""
        if self.cpp_ops < CPP_OPS_NOTE:
            return None
        return (f"{self.cpp_ops} ops were issued by torch's C++ (functional collectives, DTensor, DDP) and "
                f"traced at {CPP_OP_COST} (docs/trace.md, \"What it costs\"); --no-trace turns tracing off")

    def problem(self, file: str, line: int, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(file, line, text))
        else:
            self.more_problems += 1
