"""Every rank's communication on one timeline (issues 21 and 30; docs/trace.md). Standard
library only.

The ranks write marked records (workloads/_trace.py; the codec: workloads/_protocol/records.py):
an H header (the process's time origin), S call sites, B when a rank entered an op, E when
it completed, R when it raised before torch issued it, G per process group, M who the rank
is, C its clock offset against rank 0, T "alive at". They are in each rank's record files
(records/, local and compose) or its log (ranks/rank-<R>.log: Kubernetes, a rendered
compose file): `record_sources`. `merge()` reads them all at once, streamed (heapq.merge:
only ops in flight and collectives some rank has not reached yet are held), and writes:

- trace.json: Chrome trace events (Perfetto, chrome://tracing): a process per node, a
  thread per rank (tid = rank) and, for ops that overlap the rank's others (async ops,
  DDP buckets, isend/irecv), a few more threads per rank (tid = rank + lane * LANE_TID), so
  no two `X` slices of one thread partly overlap; `s`/`f` flows from each send to its
  recv; times in µs since the run's first op (`metadata.t0_unix_ns`), so ts >= 0 and no
  double loses a digit; an op that never ended is drawn to the end of the trace, marked
  `unfinished`;
- a `Summary`: per (pg, op) totals, the worst stragglers, bad records, and per process
  group where the ranks stopped (`Stuck`), which the report names at a hang or a failure.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from workloads._protocol import (CLOCK_ROUNDS, FR_MARKER, RECORD_FILE_SUFFIX, RECORDS_SUBDIR,
                                 TRACE_MARKER as MARKER)
from workloads._protocol import records
from workloads._protocol.records import MAX_INT, BadRecord

from . import atomicfile
from .tables import human_bytes, table

_MARKER_BYTES = MARKER.encode()
TRACE_FILE = "trace.json"
STRAGGLERS = 10
MAX_PROBLEMS = 20                   # bad records named one by one; the rest counted
MAX_OPEN_INSTANCES = 100_000        # collectives waiting for a rank that may never come
MAX_LINE = 1 << 20                  # a log line is read this far: no record the ranks write is longer
MAX_PENDING_OPS = 100_000           # ops begun and not yet ended that the merge holds, all ranks
MIN_PENDING_PER_RANK = 10_000       # (about 400 B each), shared out, but at least this many a rank
MAX_LANES = 16                      # threads per rank for overlapping ops; past that: async events
LANE_TID = 1_000_000                # a lane's thread id: rank + lane * LANE_TID
MAX_UNFINISHED_DRAWN = 10_000       # ops never ended drawn to the trace's end; the rest: instants
MAX_SITES = 200_000                 # call sites held per rank (the ranks renumber past 20,000)
CPP_OPS_NOTE = 10_000               # this many ops issued from C++: say what tracing them costs
CPP_OP_COST = "about 20-80 µs of CPU each"   # benchmarks/trace.py, CPU table (docs/trace.md)


def _lines(f: Any) -> Iterator[tuple[bytes, bool]]:
    """Each line of a binary file as (its first MAX_LINE bytes, whether that is all of it).
    The rest of a longer line is read past in pieces: a rank that printed gigabytes
    without a newline costs the reader no more memory than a short line."""
    while True:
        line = f.readline(MAX_LINE)
        if not line:
            return
        if len(line) < MAX_LINE or line.endswith(b"\n"):
            yield line, True
            continue
        rest = line
        while rest and not rest.endswith(b"\n"):
            rest = f.readline(MAX_LINE)
        yield line, False


class _Capped:
    """A record file read up to `size` bytes: what the rank wrote, not the zeros of its
    mapped segment past that."""

    def __init__(self, f: Any, size: int):
        self.f, self.left = f, size

    def readline(self, limit: int) -> bytes:
        if self.left <= 0:
            return b""
        line = self.f.readline(min(limit, self.left))
        self.left -= len(line)
        return line


def written_size(path: Path) -> int:
    """The bytes a rank wrote into a record file: up to its last non-zero byte (a mapped
    segment is zeros past what was written; a rank that died mid-write leaves a torn last
    line, which the readers name)."""
    chunk = 1 << 16
    with open(path, "rb") as f:
        end = f.seek(0, 2)
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            data = f.read(end - start).rstrip(b"\0")
            if data:
                return start + len(data)
            end = start
    return 0


TORN = b"\0"                         # marks a record file's last line that has no end: torn


def _source_lines(path: Path) -> Iterator[tuple[bytes, bool]]:
    """The lines of a rank log, or of a record file up to what was written. Every record
    a rank writes ends in a newline: a record file's last line without one was cut short
    by the rank's death, and is handed on with TORN at its end for the reader to name."""
    with open(path, "rb") as f:
        if path.suffix != RECORD_FILE_SUFFIX:
            yield from _lines(f)
            return
        for line, whole in _lines(_Capped(f, written_size(path))):
            yield (line + TORN if whole and not line.endswith(b"\n") else line), whole


def trim_record_files(run_path: str | Path) -> None:
    """Cut every record file of a run to what its rank wrote (their mapped segments are
    zeros past that): done once the ranks are gone, at the finish."""
    for path in (Path(run_path) / RECORDS_SUBDIR).glob(f"*{RECORD_FILE_SUFFIX}"):
        try:
            size = written_size(path)
            if size < path.stat().st_size:
                os.truncate(path, size)
        except OSError:
            continue


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
        reduce op."""
        root = f" root {self.root}" if self.root is not None else ""
        reduce = f" {self.reduce_op}" if self.reduce_op else ""
        return f"{self.op} {self.shape_text} {self.dtype or ''}{root}{reduce}".strip()

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
    ended_at: dict | None = None    # ... as {"op": the script's call, "caller": file:line, "inside": bool}


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


STRAGGLER_SHARE = 0.75              # a rank last at this share of its collectives (at least
STRAGGLER_MIN = 4                   # this many), typically this late, is the run's straggler
STRAGGLER_NS = 20_000_000


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
    started: int = 0                # when the first rank entered it (rank 0's clock, ns)

    @property
    def targets(self) -> list[int]:
        """The ranks the others wait for here: the odd ones of a mismatch, else the missing."""
        return self.odd or self.missing

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
            return f"rank {rank} left no op record: it ended or was killed before writing one"
        return f"last entered: rank {rank}: none"

    def to_dict(self) -> dict[str, Any]:
        return {"pg": self.pg, "seq": self.seq, "op": self.op, "waiting": self.waiting,
                "missing": self.missing, "last": {str(r): v for r, v in sorted(self.last.items())},
                "mismatch": self.mismatch, "rank": self.culprit, "ranks": self.targets, "no_records": self.silent,
                "call": self.call or self.op, "calls": {str(r): c for r, c in sorted(self.calls.items())},
                "text": self.describe()}


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
    mismatch_found: list[dict] = field(default_factory=list)   # the first mismatches, as status.json says them
    lateness: dict[int, Lateness] = field(default_factory=dict)  # rank -> how often it arrived last
    blocked_p2p: list[Op] = field(default_factory=list)   # blocking p2p ops never finished (the first 50)
    unmatched_sends: dict[tuple[str, int, int], str] = field(default_factory=dict)  # (pg, src, dst) -> caller

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

    def diagnosis(self) -> dict[str, Any] | None:
        """What status.json's first failure carries: the stuck collective per pg, and who
        is to blame (`rank`, or `ranks` when no one rank is), the call and its line."""
        if not self.stuck and not self.mismatches and not self.stuck_p2p:
            return None
        culprit, ranks, op, caller, lead = self.blame()
        said = [s.describe() for s in self.stuck] or self.mismatches[:1]
        left_in = self._left_in_a_mismatch()
        return {"rank": culprit, "ranks": ranks, "op": op, "caller": caller,
                **({"mismatch": left_in} if left_in else {}),
                "stuck": [s.to_dict() for s in self.stuck], "mismatches": self.mismatches[:5],
                "p2p": self.stuck_p2p[:10], "text": "; ".join([*lead, *said, *self.stuck_p2p[:4]])}

    def blame(self) -> tuple[int | None, list[int], str | None, str | None, list[str]]:
        """(culprit, ranks, op, caller, a sentence to lead with): a rank waiting to receive
        from a rank that sent to another one, which never received it, is waiting for a
        send to the wrong peer; else the stuck collectives' culprit (`_blame_stuck`); else a
        completed mismatch's odd rank; else the ranks in blocking p2p ops that never ended
        (a deadlock: all of them). A collective of differing calls some rank never left
        (`_left_in_a_mismatch`) comes before the stuck collectives: they came after it."""
        for op in self.blocked_p2p:
            if op.op not in ("recv", "irecv") or op.peer is None:
                continue
            wrong = sorted((dst, caller) for (pg, src, dst), caller in self.unmatched_sends.items()
                           if pg == op.pg and src == op.peer and dst != op.rank)
            if wrong:
                dst, caller = wrong[0]
                return op.peer, [op.peer], "send", caller, [
                    f"rank {op.peer} sent to rank {dst} at {caller}, and rank {dst} never received it, while "
                    f"rank {op.rank} waits to receive from rank {op.peer} at {op.caller} (a send to the wrong peer?)"]
        left_in = self._left_in_a_mismatch()
        if left_in:                     # a rank died or hangs inside it: what came after is its effect
            return left_in["rank"], left_in["ranks"], left_in["op"], left_in["caller"], [
                f"{left_in['text']}; rank {', '.join(map(str, left_in['unfinished']))} never left it"]
        if self.stuck:
            culprit, ranks, op, caller = _blame_stuck(self.stuck)
            earlier = self._mismatch_before(culprit)
            if earlier is not None:             # the odd call it made first is what the rest follows from
                return culprit, ranks, earlier["op"], earlier["caller"], [earlier["text"]]
            if ranks:
                return culprit, ranks, op, caller, []
        if self.mismatch_found:
            m = self.mismatch_found[0]
            return m["rank"], m["ranks"], m["op"], m["caller"], []
        blocked = [op for op in self.blocked_p2p if op.op in ("send", "recv")] or self.blocked_p2p
        ranks = sorted({op.rank for op in blocked})
        if not ranks:
            return None, [], None, None, []
        mine = next(op for op in blocked if op.rank == ranks[0])
        culprit = ranks[0] if len(ranks) == 1 else None
        return culprit, ranks, mine.call, mine.caller, []

    def _mismatch_before(self, culprit: int | None) -> dict[str, Any] | None:
        """A completed collective whose calls differed, with `culprit` its odd rank, before
        a stuck collective of the same group that the culprit never entered or never left:
        broadcast_object_list with lists of other lengths, where the odd rank then dies
        unpickling what it got and the others wait for it in the next all_reduce. The odd
        call is the cause; the stuck collective its effect."""
        if culprit is None:
            return None
        for m in self.mismatch_found:
            if m["rank"] == culprit and any(st.pg == m["pg"] and st.seq > m["seq"] and culprit in st.targets
                                            for st in self.stuck):
                return m
        return None

    def _left_in_a_mismatch(self) -> dict[str, Any] | None:
        """The first collective every member entered with calls that differ, an odd rank
        among them, and a rank that never left it (gloo's size check aborted it there, or
        it hangs there): the cause of whatever the other ranks then wait in."""
        stuck = {(st.pg, st.seq) for st in self.stuck}       # said there already
        return next((m for m in self.mismatch_found if m["unfinished"] and m["rank"] is not None
                     and (m["pg"], m["seq"]) not in stuck), None)

    def straggler(self) -> dict[str, Any] | None:
        """The rank that arrived last at most of its collectives (STRAGGLER_SHARE of at least
        STRAGGLER_MIN), typically STRAGGLER_NS or more after the first: status.json's
        `trace.straggler`. None: no rank stands out."""
        found = [(late.last, late.late_ns, rank) for rank, late in self.lateness.items()
                 if late.last >= max(STRAGGLER_MIN, STRAGGLER_SHARE * late.collectives)
                 and late.typical_ns >= STRAGGLER_NS]
        if not found:
            return None
        rank = max(found)[2]
        late = self.lateness[rank]
        call, caller = late.most() or (None, None)
        mean = late.late_ns / late.last / 1e6
        return {"rank": rank, "ranks": [rank], "op": call, "caller": caller, "last": late.last,
                "of": late.collectives, "late_ms": round(mean, 3),
                "text": f"rank {rank} arrived last at {late.last} of {late.collectives} collectives, by "
                        f"{mean:.0f} ms on average (most often in {call} at {caller})"}


# ---------------------------------------------------------------- reading one rank

class _RankReader:
    """Ops of one rank, in the order they completed; never-completed ones at the end. A
    rank's records come from its record files (one process after another, in the order
    they started: an elastic restart, a forked child) and from its log (records a rank
    sent through its log stream)."""

    def __init__(self, paths: Path | list[Path], rank: int, summary: Summary,
                 max_pending: int = MAX_PENDING_OPS):
        self.paths = [paths] if isinstance(paths, Path) else list(paths)
        self.rank, self.summary = rank, summary
        self.max_pending = max_pending              # ops begun and not yet ended, held at most
        self.info = summary.ranks.setdefault(rank, RankInfo(rank))
        self.groups: dict[str, list[int]] = {}
        self.last: dict[str, Op] = {}               # pg -> last collective entered
        self.sites: dict[int, records.Site] = {}
        self.base = 0                               # the rank's time origin (H line); 0 for old records
        self.alive = 0                              # latest time seen (rank 0's clock)
        self.last_op: Op | None = None              # the last op it began

    @property
    def path(self) -> Path:
        return self.paths[0]

    def first_start(self) -> int | None:
        """The start of this rank's first op on rank 0's clock (None: no op), reading no
        further than that op: where the trace's time 0 is."""
        base, offset = 0, 0
        for path in self.paths:
            for raw, whole in _source_lines(path):
                at = raw.find(_MARKER_BYTES)
                if at < 0 or not whole:
                    continue
                try:
                    rec = records.decode(raw[at + len(_MARKER_BYTES):])
                except BadRecord:
                    continue
                if isinstance(rec, records.Header):
                    base = rec.t0
                elif isinstance(rec, records.Clock) and rec.error is None:
                    offset = rec.offset_ns
                elif isinstance(rec, records.Begin):
                    return base + rec.t + offset
                elif isinstance(rec, records.OldOp):
                    return rec.t + offset
        return None

    def __iter__(self) -> Iterator[Op]:
        pending: OrderedDict[Any, Op] = OrderedDict()   # begun, not yet ended, oldest first
        before: dict[Any, Op | None] = {}               # a pending collective -> the pg's last before it
        let_go: int | None = None   # ops up to this id were given up on unended (MAX_PENDING_OPS)
        for source, path in enumerate(self.paths):
            name = str(path)
            self.sites = {}                             # call sites are numbered per process
            lines = enumerate(_source_lines(path), 1)
            for number, (raw, whole) in lines:
                at = raw.find(_MARKER_BYTES)
                if at < 0:
                    continue
                if TORN in raw:
                    self.summary.torn.append(self.rank)
                    self.summary.problem(name, number, f"rank {self.rank}'s last record was cut short "
                                         "(the rank died while writing it): skipped")
                    continue
                if not whole:
                    self.summary.problem(name, number, f"a line of more than {MAX_LINE >> 20} MiB "
                                         "holds a trace record: skipped")
                    continue
                try:
                    rec = records.decode(raw[at + len(_MARKER_BYTES):])
                except BadRecord as exc:
                    if str(exc).startswith("garbled"):
                        self.summary.problem(name, number, str(exc))
                        continue
                    self.info.records += 1
                    self.summary.problem(name, number, str(exc))
                    continue
                self.info.records += 1
                try:
                    if isinstance(rec, (records.Begin, records.OldOp)):
                        op, ident = self._begin(rec)
                        key = (source, ident)
                        self.info.ops += 1
                        self.last_op = op
                        if op.seq is not None:
                            before[key] = self.last.get(op.pg)
                            self.last[op.pg] = op
                        if op.end is not None:
                            before.pop(key, None)
                            yield op
                            continue
                        pending[key] = op
                        if len(pending) > self.max_pending:
                            # isends never waited on, say: holding them all would cost the
                            # merge memory without bound. The oldest is shown unfinished
                            # (not named as stuck: its end may still come).
                            old, oldest = pending.popitem(last=False)
                            before.pop(old, None)
                            if let_go is None:
                                self.summary.problem(name, number, f"more than {self.max_pending} ops of "
                                                     f"rank {self.rank} begun and not ended (async ops "
                                                     "never waited on?): the oldest are shown unfinished")
                            let_go = max(let_go or 0, old[1] if isinstance(old[1], int) else 0)
                            yield oldest
                    elif isinstance(rec, (records.End, records.OldEnd)):
                        ident = rec.ident
                        op = pending.pop((source, ident), None)
                        before.pop((source, ident), None)
                        if op is None:
                            if not (isinstance(ident, int) and let_go and ident <= let_go):
                                self.summary.problem(name, number, f"end of op {ident} that never began")
                            continue
                        op.end = max(self._time(rec.t) if isinstance(rec, records.End)
                                     else self._abs_time(rec.t), op.start)
                        if op.peer is None and rec.peer is not None:
                            op.peer = rec.peer
                        yield op
                    elif isinstance(rec, records.Raised):
                        op = pending.pop((source, rec.ident), None)
                        if op is None:
                            self.summary.problem(name, number, f"op {rec.ident} raised but never began")
                            continue
                        if op.seq is not None:      # never issued: the pg's last collective is the one before
                            previous = before.pop((source, rec.ident), None)
                            if self.last.get(op.pg) is op:
                                if previous is None:
                                    del self.last[op.pg]
                                else:
                                    self.last[op.pg] = previous
                        op.end = max(self._time(rec.t), op.start)
                        op.raised = rec.error
                        op.seq = None
                        yield op
                    else:
                        self._other(rec)
                except OverflowError as exc:
                    self.summary.problem(name, number, f"trace record without a usable {exc}")
                except BadRecord as exc:
                    self.summary.problem(name, number, str(exc))
        self.info.ended_in = _ended_in(list(pending.values()), self.last_op)
        if self.info.ended_in is not None:
            inside = bool(pending)
            op = max(pending.values(), key=lambda o: o.start) if inside else self.last_op
            self.info.ended_at = {"op": op.call, "caller": op.caller, "inside": inside}
        for op in pending.values():
            yield self._unfinished(op)

    def _time(self, t: int) -> int:
        """A record's time (ns after the process's t0) on rank 0's clock (ns)."""
        t = self.base + t + self.info.offset_ns
        if t > self.alive:
            self.alive = t
        return t

    def _abs_time(self, t: int) -> int:
        """The first recorder's absolute times, on rank 0's clock."""
        t = t + self.info.offset_ns
        self.alive = max(self.alive, t)
        return t

    def _begin(self, rec: records.Begin | records.OldOp) -> tuple[Op, Any]:
        if isinstance(rec, records.OldOp):          # the first recorder's lines: everything inline
            return Op(rank=self.rank, op=rec.op, pg=rec.pg, seq=rec.seq, p2p=rec.p2p, peer=rec.peer,
                      root=rec.root, shape=rec.shape, dtype=rec.dtype, nbytes=rec.nbytes, caller=rec.caller,
                      start=self._abs_time(rec.t), end=None), rec.ident
        site = self.sites.get(rec.site)
        if site is None:
            raise BadRecord(f"op of call site {rec.site}, which no S line described")
        start = self._time(rec.t)
        end = max(self._time(rec.end), start) if rec.end is not None else None
        return Op(rank=self.rank, op=site.op, pg=site.pg, seq=None if site.p2p else rec.seq,
                  p2p=rec.seq if site.p2p else None, peer=site.peer, root=site.root, shape=site.shape,
                  dtype=site.dtype, nbytes=site.nbytes, caller=site.caller, start=start, end=end,
                  api=site.api, via=site.via, reduce=site.reduce), rec.ident

    def _other(self, rec: records.Record) -> None:
        if isinstance(rec, records.Site):
            if len(self.sites) >= MAX_SITES:           # the rank renumbers its sites: the oldest go
                del self.sites[next(iter(self.sites))]
            self.sites[rec.ident] = rec
        elif isinstance(rec, records.Header):
            self.base = rec.t0
        elif isinstance(rec, records.Group):
            self.groups[rec.pg] = rec.ranks
        elif isinstance(rec, records.Who):
            self.info.node = rec.node
            self.info.host = rec.host
        elif isinstance(rec, records.Clock):
            self._clock(rec)
        elif isinstance(rec, records.Alive):
            self._time(rec.t)

    def _clock(self, rec: records.Clock) -> None:
        if rec.error is not None:
            self.info.clock_error = rec.error
        else:
            self.info.offset_ns, self.info.rtt_ns = rec.offset_ns, rec.rtt_ns

    def _unfinished(self, op: Op) -> Op:
        """An op that never ended: a p2p one is named (the first 50)."""
        if op.p2p is not None and len(self.summary.blocked_p2p) < 50:
            self.summary.blocked_p2p.append(op)
        if op.p2p is not None and len(self.summary.stuck_p2p) < 50:
            peer = "any rank" if op.peer is None else f"rank {op.peer}"
            way = "to" if op.op in ("send", "isend") else "from"
            where = f"(p2p #{op.p2p} of {op.pg}, at {op.caller})"
            if op.op in ("isend", "irecv"):     # it ends when wait() returns: it may have run
                said = f"rank {op.rank}'s {op.op} {way} {peer} was never waited on, or its wait never returned"
            else:
                said = f"rank {op.rank} never finished {op.op} {way} {peer}"
            self.summary.stuck_p2p.append(f"{said} {where}")
        return op


def _where_op(op: Op) -> str:
    number = f"collective #{op.seq} of {op.pg}" if op.seq is not None else f"p2p #{op.p2p} of {op.pg}"
    return f"{op.label} ({number}) at {op.caller}"


def _ended_in(unfinished: list[Op], last: Op | None) -> str | None:
    """Where a rank's records end, said for a rank that died without a traceback: the op
    it was inside (the latest begun of those it never left), else the last op it began."""
    if unfinished:
        return "in " + _where_op(max(unfinished, key=lambda o: o.start))
    if last is not None:
        return "after " + _where_op(last) if last.raised is None else None
    return None


# ---------------------------------------------------------------- one rank's ops, as it recorded them

@dataclass(frozen=True, slots=True)
class RankOp:
    """One op of one rank with its times on that rank's own clock (ns, no clock offset
    applied): for setting against times the rank itself wrote (labctl/exercise.py)."""
    op: str
    peer: int | None
    nbytes: int
    caller: str
    begin: int
    end: int | None                 # None: never completed (hang, crash, async op never waited on)


class _OwnClock(_RankReader):
    """A rank's ops with its times as the rank took them: its clock offset to rank 0
    (the C record) is not applied."""

    def _clock(self, rec: records.Clock) -> None:
        """Not applied: the rank's own clock."""


def rank_ops(paths: str | Path | list[Path]) -> list[RankOp]:
    """Every op one rank recorded (its record files and log: `record_sources`), in the order
    the rank began them, read as the merge reads them (both record formats); an op that
    raised before torch issued it is not one. Records that cannot be read are skipped
    (merge() names them)."""
    paths = [Path(p) for p in paths] if isinstance(paths, list) else [Path(paths)]
    reader = _OwnClock(paths, 0, Summary(path=paths[0] if paths else None), max_pending=MAX_INT)
    ops = [RankOp(op=o.op, peer=o.peer, nbytes=o.nbytes, caller=o.caller, begin=o.start, end=o.end)
           for o in reader if o.raised is None]
    ops.sort(key=lambda o: o.begin)
    return ops


def _flow_id(pg: str, src: int, dst: int, k: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{pg}:{src}>{dst}#{k}".encode(), digest_size=6).digest(), "big")


def _us(ns: int) -> float:
    """ns since t0 as µs: whole ns, so ts + dur lands exactly where the end is."""
    return ns / 1000.0


class _Lanes:
    """Threads for one rank's ops so that no two slices of a thread partly overlap: lane 0
    (tid = rank) first, then the lowest lane free since the op began; past MAX_LANES, None
    (the op is drawn as an async event)."""

    def __init__(self) -> None:
        self.free_at: list[int] = []                # lane -> when its last slice ends

    def place(self, start: int, end: int) -> int | None:
        for lane, free in enumerate(self.free_at):
            if free <= start:
                self.free_at[lane] = end
                return lane
        if len(self.free_at) < MAX_LANES:
            self.free_at.append(end)
            return len(self.free_at) - 1
        return None


class _Merge:
    def __init__(self, summary: Summary, out, hostnames: dict[int, str], t0: int):
        self.s, self.out, self.hostnames, self.t0 = summary, out, hostnames, t0
        self.first = True
        self.named_nodes: set[int] = set()
        self.named_threads: set[tuple[int, int]] = set()
        self.lanes: dict[int, _Lanes] = {}
        self.sent: dict[tuple[str, int, int], int] = {}      # (pg, src, dst) -> sends so far
        self.send_caller: dict[tuple[str, int, int], str] = {}   # (pg, src, dst) -> its last send's caller
        self.received: dict[tuple[str, int, int], int] = {}
        # (pg, seq) -> rank -> (start, op): collectives not every member reached yet
        self.open: dict[tuple[str, int], dict[int, tuple[int, Op]]] = {}
        self.worst: list[tuple[int, int, Straggler]] = []     # min-heap of the worst ten
        self.tiebreak = 0
        self.unfinished: list[tuple[int, int, Op]] = []       # drawn at the end; heap of the latest
        self.async_ids = 0

    def event(self, ev: dict) -> None:
        self.out.write(("" if self.first else ",\n") + json.dumps(ev, separators=(",", ":")))
        self.first = False

    def node_of(self, rank: int) -> int:
        info = self.s.ranks.get(rank)
        return info.node if info and isinstance(info.node, int) else 0

    def thread(self, rank: int, lane: int) -> int:
        """The tid of a rank's lane, named the first time."""
        node = self.node_of(rank)
        if node not in self.named_nodes:
            self.named_nodes.add(node)
            info = self.s.ranks.get(rank)
            host = self.hostnames.get(node) or (info.host if info else None) or "?"
            self.event({"ph": "M", "name": "process_name", "pid": node,
                        "args": {"name": f"node {node} ({host})"}})
            self.event({"ph": "M", "name": "process_sort_index", "pid": node, "args": {"sort_index": node}})
        tid = rank + lane * LANE_TID
        if (rank, lane) not in self.named_threads:
            self.named_threads.add((rank, lane))
            self.event({"ph": "M", "name": "thread_name", "pid": node, "tid": tid,
                        "args": {"name": f"rank {rank}" if lane == 0 else f"rank {rank} (overlapping {lane})"}})
            self.event({"ph": "M", "name": "thread_sort_index", "pid": node, "tid": tid,
                        "args": {"sort_index": rank * (MAX_LANES + 1) + lane}})
            self.s.lanes[rank] = max(self.s.lanes.get(rank, 0), lane + 1)
        return tid

    def add(self, op: Op, groups: dict[str, list[int]]) -> None:
        s = self.s
        if op.raised is not None:               # never issued: an error instant, no slice, no count
            s.raised_count += 1
            if len(s.raised) < MAX_PROBLEMS:
                s.raised.append(f"rank {op.rank}'s {op.op} at {op.caller} raised {op.raised}")
            args = self.args(op)
            args["raised"] = op.raised
            self.event({"ph": "i", "s": "t", "name": f"{op.op} raised", "cat": op.pg,
                        "pid": self.node_of(op.rank), "tid": self.thread(op.rank, 0),
                        "ts": _us(max(op.start - self.t0, 0)), "args": args})
            return
        s.ops += 1
        if op.via is not None:
            s.cpp_ops += 1
        if op.end is None:
            s.unfinished += 1
            item = (op.start, self.tiebreak, op)
            self.tiebreak += 1
            if len(self.unfinished) < MAX_UNFINISHED_DRAWN:
                heapq.heappush(self.unfinished, item)
            else:                                   # keep the latest: the op a rank hangs in is one
                self.draw_instant(heapq.heappushpop(self.unfinished, item)[2])
        else:
            self.draw(op, op.end)
        total = s.totals.setdefault((op.pg, op.op), OpTotal())
        total.count += 1
        total.nbytes += op.nbytes
        if op.end is None:
            total.unfinished += 1
        else:
            dur = op.end - op.start
            total.total_ns += dur
            if dur > total.slowest_ns:
                total.slowest_ns, total.slowest_rank = dur, op.rank
        if op.seq is not None:
            self.collective(op, groups.get(op.pg))

    def args(self, op: Op) -> dict[str, Any]:
        args: dict[str, Any] = {"rank": op.rank, "pg": op.pg, "seq": op.seq, "bytes": op.nbytes,
                                "dtype": op.dtype, "shape": op.shape, "caller": op.caller}
        if op.p2p is not None:
            args["p2p_seq"] = op.p2p
        if op.peer is not None:
            args["peer"] = op.peer
        if op.root is not None:
            args["root"] = op.root
        if op.api is not None and op.api != op.op:
            args["api"] = op.api
        if op.via is not None:
            args["via"] = op.via
        if op.reduce is not None:
            args["reduce"] = op.reduce
        return args

    def draw(self, op: Op, end: int) -> None:
        """The op's slice, on the first lane of its rank free since it began, and its end
        of a send->recv flow."""
        start = max(op.start - self.t0, 0)
        stop = max(end - self.t0, start)
        lanes = self.lanes.setdefault(op.rank, _Lanes())
        lane = lanes.place(start, stop)
        args = self.args(op)
        if op.end is None:
            args["unfinished"] = True
        node = self.node_of(op.rank)
        if lane is None:                            # more overlapping ops than lanes: an async pair
            self.async_ids += 1
            tid = self.thread(op.rank, 0)
            common = {"name": op.op, "cat": op.pg, "pid": node, "tid": tid, "id2": {"local": self.async_ids}}
            self.event({**common, "ph": "b", "ts": _us(start), "args": args})
            self.event({**common, "ph": "e", "ts": _us(stop)})
            return
        tid = self.thread(op.rank, lane)
        self.event({"ph": "X", "name": op.op, "cat": op.pg, "pid": node, "tid": tid,
                    "ts": _us(start), "dur": _us(stop - start), "args": args})
        if op.peer is not None and op.op in ("send", "isend"):
            key = (op.pg, op.rank, op.peer)
            k = self.sent[key] = self.sent.get(key, 0) + 1
            self.send_caller[key] = op.caller
            self.event({"ph": "s", "id": _flow_id(op.pg, op.rank, op.peer, k), "name": "p2p",
                        "cat": "p2p", "pid": node, "tid": tid, "ts": _us(start)})
            self.s.flows += 1
        elif op.peer is not None and op.op in ("recv", "irecv"):
            key = (op.pg, op.peer, op.rank)
            k = self.received[key] = self.received.get(key, 0) + 1
            self.event({"ph": "f", "bp": "e", "id": _flow_id(op.pg, op.peer, op.rank, k), "name": "p2p",
                        "cat": "p2p", "pid": node, "tid": tid, "ts": _us(stop)})

    def draw_instant(self, op: Op) -> None:
        """An unfinished op past MAX_UNFINISHED_DRAWN: an instant where it began."""
        args = self.args(op)
        args["unfinished"] = True
        self.event({"ph": "i", "s": "t", "name": op.op, "cat": op.pg, "pid": self.node_of(op.rank),
                    "tid": self.thread(op.rank, 0), "ts": _us(max(op.start - self.t0, 0)), "args": args})

    def finish(self, end: int) -> None:
        """Every unfinished op, to the end of the trace (earliest first: the lanes fill in order)."""
        for _, _, op in sorted(self.unfinished, key=lambda x: (x[0], x[1])):
            self.draw(op, max(end, op.start))
        self.unfinished = []

    def collective(self, op: Op, members: list[int] | None) -> None:
        key = (op.pg, op.seq)
        seen = self.open.setdefault(key, {})
        seen[op.rank] = (op.start, op)
        if members is None or not set(members) <= set(seen):
            if len(self.open) > MAX_OPEN_INSTANCES:
                self.open.pop(next(iter(self.open)))
            return
        del self.open[key]
        if len({o.signature for _, o in seen.values()}) > 1:
            calls = {r: o for r, (_, o) in seen.items()}
            self.s.mismatches.append(_mismatch_text(op.pg, op.seq, calls))
            if len(self.s.mismatch_found) < 5:
                self.s.mismatch_found.append(_mismatch_found(op.pg, op.seq, calls))
            return                      # not a straggler: they never were in one collective
        starts = sorted((t, r) for r, (t, _) in seen.items())
        late = starts[-1][0] - starts[0][0]
        if len(starts) > 1:
            for _, r in starts:
                self.s.lateness.setdefault(r, Lateness()).collectives += 1
            last = self.s.lateness[starts[-1][1]]
            last.add(late, seen[starts[-1][1]][1])
            self.tiebreak += 1
            item = (late, self.tiebreak, Straggler(op.pg, op.seq, op.op, starts[-1][1], late))
            if len(self.worst) < STRAGGLERS:
                heapq.heappush(self.worst, item)
            elif late > self.worst[0][0]:
                heapq.heapreplace(self.worst, item)


def _differs(seen: dict[int, Op]) -> list[str]:
    """What differs between the ranks' calls of one collective: the op, else the size (the
    element count) or the shape (the same count), the dtype; and the root."""
    ops = list(seen.values())
    what = []
    if len({o.op for o in ops}) > 1:
        what.append("op")
    else:
        if len({o.shape_text for o in ops}) > 1:
            counts = {None if o.shape is None else _count(o.shape) for o in ops}
            what.append("size" if len(counts) > 1 else "shape")
        if len({o.dtype for o in ops}) > 1:
            what.append("dtype")
    if all(o.root is not None for o in ops) and len({o.root for o in ops}) > 1:
        what.append("root")
    if len({o.reduce_op for o in ops}) > 1:
        what.append("reduce op")
    return what


def _count(shape: list[int]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def _groups_by_signature(seen: dict[int, Op]) -> list[tuple[str, list[int]]]:
    """Ranks grouped by what they called, the most common first, each group said by what
    tells it apart: the call and shape, with the dtype when the dtype differs and the root
    when the root does."""
    what = _differs(seen)
    said: dict[str, str] = {}
    by_signature: dict[str, list[int]] = {}
    for rank, o in sorted(seen.items()):
        by_signature.setdefault(o.signature, []).append(rank)
        text = o.label + (f" {o.dtype}" if "dtype" in what and o.dtype else "")
        text += f" with {o.reduce_op or 'SUM'}" if "reduce op" in what else ""
        said.setdefault(o.signature, text + (f" from root {o.root}" if "root" in what else ""))
    return sorted(((said[sig], ranks) for sig, ranks in by_signature.items()),
                  key=lambda kv: (-len(kv[1]), kv[1][0]))


def _odd_ranks(seen: dict[int, Op]) -> list[int]:
    """The ranks that called something else than the most of them; none when no call is
    the most common (two ranks that disagree: neither is the odd one)."""
    groups = _groups_by_signature(seen)
    if len(groups) < 2 or len(groups[0][1]) == len(groups[1][1]):
        return []
    return sorted(r for _, ranks in groups[1:] for r in ranks)


def _mismatch_text(pg: str, seq: int, seen: dict[int, Op]) -> str:
    """"rank 1 called broadcast [1000] where rank 0 called all_reduce [1000], collective #4 of
    default_pg (the op differs)": the odd ranks are the fewer. With no odd one (two ranks),
    what each called and where: "rank 0 called all_reduce [1000] at a.py:7; rank 1 called
    all_reduce [12] at a.py:7, collective #1 of default_pg (the size differs; no rank is
    the odd one out)"."""
    ordered = _groups_by_signature(seen)
    what = _differs(seen)
    differs = f"the {' and the '.join(what)} differ{'s' if len(what) == 1 else ''}" if what else ""
    if _odd_ranks(seen):
        common_label, common_ranks = ordered[0]
        odd = "; ".join(f"rank {', '.join(map(str, ranks))} called {label}" for label, ranks in ordered[1:])
        return (f"{odd} where rank {common_ranks[0]} called {common_label}, collective #{seq} of {pg}"
                + (f" ({differs})" if differs else ""))
    each = "; ".join(f"rank {', '.join(map(str, ranks))} called {label}"
                     + (f" at {seen[ranks[0]].caller}" if seen[ranks[0]].caller not in ("", "?") else "")
                     for label, ranks in ordered)
    return f"{each}, collective #{seq} of {pg} ({differs + '; ' if differs else ''}no rank is the odd one out)"


def _mismatch_found(pg: str, seq: int, seen: dict[int, Op]) -> dict[str, Any]:
    """A mismatched collective as status.json gives it: the odd ranks (every rank when none
    is), the call of the odd one and where it was made, what differs, the sentence."""
    odd = _odd_ranks(seen)
    first = seen[odd[0]] if odd else None
    return {"pg": pg, "seq": seq, "ranks": odd or sorted(seen), "rank": odd[0] if len(odd) == 1 else None,
            "op": first.call if first else None, "caller": first.caller if first else None,
            "differs": _differs(seen), "calls": {str(r): o.where() for r, o in sorted(seen.items())},
            "unfinished": sorted(r for r, o in seen.items() if o.end is None),
            "text": _mismatch_text(pg, seq, seen)}


def rank_logs(run_path: Path) -> dict[int, Path]:
    found = {}
    for path in (run_path / "ranks").glob("rank-*.log"):
        number = path.stem.split("-", 1)[1]
        if number.isdigit():
            found[int(number)] = path
    return found


def record_files(run_path: Path) -> dict[int, list[Path]]:
    """Each rank's record files (workloads/_trace.py's file sink: the local backend), in
    the order its processes started and their segments were written (the names say so)."""
    found: dict[int, list[Path]] = {}
    for path in sorted((run_path / RECORDS_SUBDIR).glob(f"rank-*{RECORD_FILE_SUFFIX}")):
        number = path.name.split(".", 1)[0].split("-", 1)[1]
        if number.isdigit():
            found.setdefault(int(number), []).append(path)
    return found


def record_sources(run_path: str | Path) -> dict[int, list[Path]]:
    """Where each rank's records are: its record files when it has any (then its log is
    its output and nothing else: a line there that looks like a record is something the
    script printed, and the log is not read again), else its log (a rank without a record
    folder sent them through its log stream: Kubernetes, a rendered compose file)."""
    run_path = Path(run_path)
    sources = record_files(run_path)
    for rank, log in rank_logs(run_path).items():
        sources.setdefault(rank, [log])
    return sources


def merge(run_path: str | Path, world: int | None = None, hostnames: dict[int, str] | None = None,
          out: str | Path | None = None) -> Summary:
    """Read every rank's trace records (streamed) and write trace.json; return what was seen."""
    run_path = Path(run_path)
    summary = Summary(path=Path(out) if out else run_path / TRACE_FILE)
    logs = record_sources(run_path)
    per_rank = max(MIN_PENDING_PER_RANK, MAX_PENDING_OPS // max(1, len(logs)))
    readers = [_RankReader(paths, rank, summary, per_rank) for rank, paths in sorted(logs.items())]
    firsts = [t for t in (r.first_start() for r in readers) if t is not None]
    t0 = min(firsts) if firsts else 0
    summary.t0_ns = t0 if firsts else None
    groups: dict[str, list[int]] = {}
    with atomicfile.atomic_open(summary.path) as f:       # cut short: no trace.json, no .tmp
        f.write('{"traceEvents":[\n')
        m = _Merge(summary, f, hostnames or {}, t0)

        def tagged(reader: _RankReader) -> Iterator[tuple[int, Op, _RankReader]]:
            for op in reader:
                yield op.start, op, reader

        for _, op, reader in heapq.merge(*(tagged(r) for r in readers), key=lambda x: x[0]):
            for pg, members in reader.groups.items():
                groups.setdefault(pg, members)
            m.add(op, groups)
        for reader in readers:
            for pg, members in reader.groups.items():
                groups.setdefault(pg, members)
        end = max([r.alive for r in readers] + [t0])
        summary.end_ns = end if firsts else None
        m.finish(end)
        summary.unmatched_sends = {key: m.send_caller[key] for key, n in m.sent.items()
                                   if n > m.received.get(key, 0)}
        summary.stragglers = [s for _, _, s in sorted(m.worst, key=lambda x: (-x[0], x[1]))]
        expected = range(world) if world is not None else sorted(logs)
        summary.missing_ranks = [r for r in expected if summary.ranks.get(r) is None
                                 or summary.ranks[r].records == 0]
        silent = [r for r in expected if summary.ranks.get(r) is None or summary.ranks[r].ops == 0]
        summary.stuck, extra = _stuck_from_readers(readers, groups, silent)
        summary.mismatches.extend(x for x in extra if x not in summary.mismatches)
        f.write("\n],\n")
        f.write('"displayTimeUnit":"ms",\n"metadata":' + json.dumps(_metadata(summary), sort_keys=True)
                + "}\n")
    return summary


def _metadata(s: Summary) -> dict[str, Any]:
    nodes: dict[str, dict] = {}
    for rank, info in sorted(s.ranks.items()):
        if info.records and isinstance(info.node, int) and str(info.node) not in nodes:
            nodes[str(info.node)] = {"first_rank": rank, "host": info.host,
                                     "clock_offset_ms": round(info.offset_ns / 1e6, 6),
                                     "rtt_ms": None if info.rtt_ns is None else round(info.rtt_ns / 1e6, 6)}
    return {"source": "labctl trace (workloads/_trace.py records, labctl/trace.py merge)",
            "time": "ts and dur in µs since t0_unix_ns (the run's first op, on rank 0's clock)",
            "t0_unix_ns": s.t0_ns,
            "end_us": None if s.end_ns is None or s.t0_ns is None else _us(s.end_ns - s.t0_ns),
            "threads": f"tid = rank + lane * {LANE_TID}: lane 0 is the rank's own, lanes 1.. hold the "
                       "ops that overlap it (async ops, DDP buckets, isend/irecv)",
            "lanes_by_rank": {str(r): n for r, n in sorted(s.lanes.items())},
            "clock": "every rank's wall clock plus its offset against rank 0, measured at init "
                     f"(NTP estimate over the store, best of {CLOCK_ROUNDS} round trips: off by at most "
                     "half its round trip, clock_rtt_ms_by_rank)",
            "clock_offsets_by_node": nodes,
            "clock_offsets_ms_by_rank": {str(r): round(i.offset_ns / 1e6, 6) for r, i in sorted(s.ranks.items())
                                         if i.records},
            "clock_rtt_ms_by_rank": {str(r): round((i.rtt_ns or 0) / 1e6, 6) for r, i in sorted(s.ranks.items())
                                     if i.records},
            "ops": s.ops, "flows": s.flows, "unfinished_ops": s.unfinished,
            "raised_ops": s.raised_count, "raised": s.raised,
            # the merge's own tables, so that no reader of trace.json recomputes them
            # (the page: labctl/html/timeline.py)
            "totals": [{"pg": pg, "op": op, "count": t.count, "bytes": t.nbytes, "unfinished": t.unfinished,
                        "total_ms": round(t.total_ns / 1e6, 3), "slowest_ms": round(t.slowest_ns / 1e6, 3),
                        "slowest_rank": t.slowest_rank} for (pg, op), t in sorted(s.totals.items())],
            "stragglers": [{"pg": x.pg, "seq": x.seq, "op": x.op, "rank": x.rank,
                            "late_ms": round(x.late_ns / 1e6, 3)} for x in s.stragglers],
            "missing_ranks": s.missing_ranks,
            "bad_records": [str(p) for p in s.problems] + ([f"... and {s.more_problems} more"]
                                                           if s.more_problems else [])}


def _stuck_from_readers(readers: list[_RankReader], groups: dict[str, list[int]], silent: list[int]
                        ) -> tuple[list[Stuck], list[str]]:
    last: dict[str, dict[int, Op]] = {}
    for reader in readers:
        for pg, op in reader.last.items():
            last.setdefault(pg, {})[reader.rank] = op
    return _stuck(last, groups, silent=silent)


def _stuck(last: dict[str, dict[int, Op]], groups: dict[str, list[int]], only_clear: bool = False,
           silent: list[int] | None = None) -> tuple[list[Stuck], list[str]]:
    """Per process group with an op some rank never completed: the furthest collective,
    who is inside it, who never entered it, and a mismatch at that sequence number.
    `only_clear`: name a group only for a missing rank or a mismatch (Flight Recorder
    entries on gloo never say whether an op completed). `silent`: ranks that wrote no op
    record at all (said so, not "last entered: none")."""
    found, mismatches = [], []
    for pg, by_rank in sorted(last.items()):
        if all(op.end is not None for op in by_rank.values()):
            continue                                # every rank left its last collective
        members = groups.get(pg) or sorted(by_rank)
        top = max(op.seq for op in by_rank.values())
        inside = {r: op for r, op in by_rank.items() if op.seq == top}
        waiting = sorted(r for r, op in inside.items() if op.end is None)
        missing = sorted(r for r in members if r not in inside)
        mismatch = None
        if len({op.signature for op in inside.values()}) > 1:
            mismatch = _mismatch_text(pg, top, inside)
            mismatches.append(mismatch)
        if (not waiting or only_clear) and not missing and not mismatch:
            continue
        odd = _odd_ranks(inside) if mismatch else []
        common = [op for r, op in sorted(inside.items()) if r not in odd]
        any_op = (common or list(inside.values()))[0]
        targets = odd or missing
        found.append(Stuck(pg=pg, seq=top, op=any_op.op, waiting=waiting, missing=missing,
                           culprit=targets[0] if len(targets) == 1 else None,
                           last={r: f"#{op.seq} {op.label}" for r, op in by_rank.items()},
                           mismatch=mismatch, silent=[r for r in missing if r in (silent or [])],
                           call=any_op.call, calls={r: op.where() for r, op in inside.items()}, odd=odd,
                           started=min(op.start for op in inside.values())))
    return found, mismatches


def _blame_stuck(stuck: list[Stuck]) -> tuple[int | None, list[int], str | None, str | None]:
    """Who the stuck collectives wait for, across process groups: the rank the most ranks
    wait for (a rank that reduced in its subgroup first, while the three others wait for it
    in the world's collective, is the one; the rank it waits for in the subgroup is not).
    Several as many: no one culprit, all of them named. With the culprit (or the first of
    them), its call (the one it made that the others did not, or the one they wait in that
    it never entered) and its line when it made the call. (culprit, ranks, op, caller)."""
    waited: dict[int, set[int]] = {}
    for st in stuck:
        for target in st.targets:
            waited.setdefault(target, set()).update(r for r in [*st.waiting, *st.calls] if r not in st.targets)
    if not waited:                      # a mismatch where no call is the most common: every rank in it
        st = next((st for st in stuck if st.calls), None)
        if st is None:
            return None, [], None, None
        ranks = sorted(st.calls)
        return None, ranks, st.calls[ranks[0]]["call"], None
    top = max(len(w) for w in waited.values())
    ranks = sorted(r for r, w in waited.items() if len(w) == top)
    culprit = ranks[0] if len(ranks) == 1 else None
    st = min((st for st in stuck if ranks[0] in st.targets), key=lambda st: st.started)
    call = st.calls.get(ranks[0])
    if call is not None:                # it called something else
        return culprit, ranks, call["call"], call["caller"]
    return culprit, ranks, st.call or st.op, None


# ---------------------------------------------------------------- Flight Recorder (tracing off)

_FR_MARKER_BYTES = FR_MARKER.encode()


def flight_recorder(run_path: str | Path, world: int | None = None) -> dict[str, Any] | None:
    """The stuck collective from the Flight Recorder entries the ranks dumped when labctl
    asked (at the deadline, with their stacks): each rank's newest collective per group
    counts as the one it is in. None: no rank dumped, or nothing to name."""
    last: dict[str, dict[int, Op]] = {}
    dumped: set[int] = set()
    for rank, paths in sorted(record_sources(Path(run_path)).items()):
        current: dict[str, Op] = {}
        final: dict[str, Op] = {}
        for path in paths:
            for raw, whole in _source_lines(path):
                at = raw.find(_FR_MARKER_BYTES)
                if at < 0 or not whole:
                    continue
                try:
                    rec = records.decode_fr(raw[at + len(_FR_MARKER_BYTES):])
                except BadRecord:
                    continue                  # a dump cut short by the stop: the last whole one counts
                if isinstance(rec, records.FrDone):
                    final, current = current, {}
                    continue
                if not isinstance(rec, records.FrEntry):
                    continue
                op = Op(rank=rank, op=rec.op, pg=rec.pg, seq=rec.seq, p2p=None, peer=None, root=None,
                        shape=rec.shape, dtype=rec.dtype, nbytes=0, caller="?", start=rec.t, end=None)
                if op.pg not in current or op.seq >= current[op.pg].seq:
                    current[op.pg] = op
        if final:
            dumped.add(rank)
        for pg, op in final.items():
            last.setdefault(pg, {})[rank] = op
    if not dumped:
        return None
    # Only ranks that dumped count: one that could not (gone, or its main thread holding the
    # GIL) must not look like a rank that never entered the collective.
    groups = {pg: (sorted(dumped) if pg == "default_pg" else sorted(by_rank))
              for pg, by_rank in last.items()}
    stuck, mismatches = _stuck(last, groups, only_clear=True)
    if not stuck:
        return None
    culprit, ranks, op, _ = _blame_stuck(stuck)
    silent = sorted(set(range(world)) - dumped) if world else []
    text = "; ".join(s.describe() for s in stuck)
    if silent:
        text += f" (no Flight Recorder dump from rank {', '.join(map(str, silent))})"
    return {"rank": culprit, "ranks": ranks, "op": op, "source": "flight recorder",
            "stuck": [s.to_dict() for s in stuck],
            "mismatches": mismatches[:5], "no_dump": silent, "text": text}


# ---------------------------------------------------------------- reading it

def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def text(summary: Summary) -> str:
    """What `labctl trace RUN` prints."""
    lines: list[str] = []
    for p in summary.problems:
        lines.append(f"warning: {p}")
    if summary.more_problems:
        lines.append(f"warning: ... and {summary.more_problems} more bad trace records")
    if summary.missing_ranks:
        lines.append("warning: no trace records from "
                     + ", ".join(f"rank {r}" for r in summary.missing_ranks))
    if summary.empty:
        lines.append("no trace records in any rank log (was the lab run with `trace: false` / --no-trace?)")
        return "\n".join(lines)
    if summary.cost_note:
        lines.append(f"note: {summary.cost_note}")
    lines += [f"{summary.ops} ops, {summary.flows} send→recv flows; timeline: {summary.path} "
              "(open it in https://ui.perfetto.dev or chrome://tracing)", "",
              "## Per process group and op", "",
              table(("pg", "op", "count", "bytes", "total ms", "slowest ms", "slowest on"),
                    ((pg, op, t.count, human_bytes(t.nbytes), _ms(t.total_ns), _ms(t.slowest_ns),
                      f"rank {t.slowest_rank}" if t.slowest_rank is not None else "")
                     for (pg, op), t in sorted(summary.totals.items())))]
    if summary.stragglers:
        lines += ["", "## Stragglers (per collective, the rank that arrived last; worst ten)", "",
                  table(("pg", "collective", "op", "last to arrive", "late by ms"),
                        ((s.pg, f"#{s.seq}", s.op, f"rank {s.rank}", _ms(s.late_ns))
                         for s in summary.stragglers))]
    late = sorted(((t.last, t.late_ns, r) for r, t in summary.lateness.items() if t.last), reverse=True)
    if late:
        straggler = summary.straggler()
        lines += ["", "## Stragglers per rank (how often each arrived last; worst ten)", ""]
        if straggler:
            lines += [f"**{straggler['text']}**", ""]
        lines.append(table(("rank", "arrived last", "of its collectives", "late by ms (mean)", "worst ms",
                            "most often at"),
                           ((f"rank {r}", n, summary.lateness[r].collectives, _ms(ns // n),
                             _ms(summary.lateness[r].worst_ns),
                             " at ".join(summary.lateness[r].most() or ()))
                            for n, ns, r in late[:STRAGGLERS])))
    if summary.stuck or summary.mismatches or summary.stuck_p2p:
        lines += ["", "## Stuck or mismatched collectives, unfinished p2p", ""]
        lead = summary.blame()[4]
        lines += [f"- {x}" for x in lead]
        lines += [f"- {s.describe()}" for s in summary.stuck]
        lines += [f"- {m}" for m in summary.mismatches if not any(m == s.mismatch for s in summary.stuck)]
        lines += [f"- {p}" for p in summary.stuck_p2p]
    if summary.raised:
        lines += ["", "## Ops that raised before torch issued them (not counted as collectives)", ""]
        lines += [f"- {r}" for r in summary.raised]
        if summary.raised_count > len(summary.raised):
            lines.append(f"- ... and {summary.raised_count - len(summary.raised)} more")
    return "\n".join(lines)


# ---------------------------------------------------------------- the report's timeline picture

TIMELINE_FILE = "trace-timeline.png"
TIMELINE_MAX_SLICES = 20_000        # a small picture: the first slices of a long trace
NO_TIMELINE = ("No timeline picture: matplotlib is not installed (plots are optional); "
               "add it with `pip install 'labctl[plot]'`.")


def _slices(trace_path: Path, limit: int) -> tuple[list[tuple[int, str, float, float]], int]:
    """(rank, op, start µs, duration µs) of the first `limit` complete slices, and how many
    there are. Streamed: merge() writes one event per line."""
    found: list[tuple[int, str, float, float]] = []
    total = 0
    with open(trace_path, "rb") as f:
        for raw, whole in _lines(f):
            if not whole or (b'"ph":"X"' not in raw and b'"ph": "X"' not in raw):
                continue
            total += 1
            if len(found) >= limit:
                continue
            try:
                ev = json.loads(raw.rstrip().rstrip(b","))
                rank = (ev.get("args") or {}).get("rank")
                rank = rank if type(rank) is int else int(ev["tid"]) % LANE_TID
                found.append((rank, str(ev["name"]), float(ev["ts"]), float(ev["dur"])))
            except (ValueError, KeyError, TypeError):
                continue            # a damaged line: the picture goes on without it
    return found, total


def write_timeline(run_path: str | Path) -> Path | None:
    """trace-timeline.png next to trace.json: ranks as rows, each op a bar colored by op,
    time in ms from the first op. None: the trace has no op. LabError: no matplotlib."""
    run_path = Path(run_path)
    source = run_path / TRACE_FILE
    if not source.is_file():
        return None
    slices, total = _slices(source, TIMELINE_MAX_SLICES)
    if not slices:
        return None
    try:
        from matplotlib.figure import Figure
    except ImportError:
        from .errors import LabError
        raise LabError(NO_TIMELINE) from None
    t0 = min(s[2] for s in slices)
    ranks = sorted({s[0] for s in slices})
    ops = sorted({s[1] for s in slices})
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
    color = {op: palette[i % len(palette)] for i, op in enumerate(ops)}
    fig = Figure(figsize=(10, 1.2 + 0.45 * len(ranks)), dpi=100)
    ax = fig.subplots()
    for op in ops:
        for rank in ranks:
            bars = [((s[2] - t0) / 1e3, max(s[3] / 1e3, 1e-3)) for s in slices if s[0] == rank and s[1] == op]
            if bars:
                ax.broken_barh(bars, (rank - 0.4, 0.8), facecolors=color[op])
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first op (ms)")
    shown = f"first {len(slices)} of {total} ops" if total > len(slices) else f"{total} ops"
    ax.set_title(f"communication timeline ({shown}; trace.json in ui.perfetto.dev has them all)",
                 fontsize=9)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=color[op], label=op) for op in ops], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    target = run_path / TIMELINE_FILE
    with atomicfile.atomic_open(target, "wb") as f:
        fig.savefig(f, format="png")
    return target
