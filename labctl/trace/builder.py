"""One rank's records -> its ops (labctl/trace/): the rank's Begin/End/Raised records
matched into `Op`s with their times on rank 0's clock, in the order they completed, and
what the rank was last seen doing (the ops it never left, its last collective per process
group). Standard library only."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from workloads._protocol import records
from workloads._protocol.ops import BLOCKING_P2P, ONE_PEER_P2P, SENDS
from workloads._protocol.records import MAX_INT, BadRecord

from .loader import TORN_LINE, BadLine, source_lines, SourceTail, decode_line, process_of
from .model import Op, RankInfo, Summary

MAX_ANYSOURCE = 1_000                # receives from any source kept per rank (their senders)
MAX_PENDING_OPS = 100_000           # ops begun and not yet ended that the merge holds, all ranks
MAX_SITES = 200_000                 # call sites held per rank (the ranks renumber past 20,000)


class _Process:
    """One process of a rank: its call sites and time origin (the H line). A process's
    segment files are one stream: its sites run on from one into the next."""
    __slots__ = ("sites", "base")

    def __init__(self) -> None:
        self.sites: dict[int, records.Site] = {}
        self.base = 0                               # its time origin (H line); 0 for old records


class RankBuilder:
    """One rank's ops built from its records, fed one at a time (`feed`): the merge's
    one-shot read of a finished rank (`RankReader`) and the live watcher's follower
    (labctl/trace/loader.py RankFollower) both drive it. Between records it says what the
    rank is doing: `inside` (ops begun and not ended, with their start times), `last_op`
    (the last op it began), `last` (per process group, the last collective it entered),
    `ops` (op records seen), `alive` (the latest time it was seen alive); times in ns on
    rank 0's clock. Problems go to `summary` (the merge's; a new one when none is given)."""

    def __init__(self, rank: int, summary: Summary | None = None, max_pending: int = MAX_PENDING_OPS):
        self.rank = rank
        self.summary = summary if summary is not None else Summary()
        self.max_pending = max_pending              # ops begun and not yet ended, held at most
        self.info = self.summary.ranks.setdefault(rank, RankInfo(rank))
        self.groups: dict[str, list[int]] = {}
        self.timeouts: dict[str, int] = {}     # pg -> its timeout on this rank, ms (where the G line says)
        self.last: dict[str, Op] = {}               # pg -> last collective entered
        self.processes: dict[str, _Process] = {}
        self.alive = 0                              # latest time seen (rank 0's clock)
        self.last_op: Op | None = None              # the last op it began
        self.pending: OrderedDict[Any, Op] = OrderedDict()   # (process, op id) -> begun, not yet ended
        self._before: dict[Any, Op | None] = {}     # a pending collective -> the pg's last before it
        self._let_go: int | None = None             # ops up to this id were given up on unended

    @property
    def inside(self) -> list[Op]:
        """The ops begun and not ended, oldest first (each with its `start`)."""
        return list(self.pending.values())

    @property
    def ops(self) -> int:
        return self.info.ops

    def feed(self, rec: records.Record, process: str = "", file: str = "", line: int = 0) -> Op | None:
        """One record of `process` (its call sites and time origin are that process's); the
        op it completed (or gave up on: past `max_pending` ops begun and not ended, the
        oldest), else None. `file`, `line`: where it was read, for the problems said."""
        p = self.processes.get(process)
        if p is None:
            base = next(reversed(self.processes.values())).base if self.processes else 0
            p = self.processes[process] = _Process()
            p.base = base                           # a source without its own H line: the one before's
        self.info.records += 1
        try:
            if isinstance(rec, (records.Begin, records.OldOp)):
                return self._began(p, rec, process, file, line)
            if isinstance(rec, (records.End, records.OldEnd)):
                return self._ended(p, rec, process, file, line)
            if isinstance(rec, records.Raised):
                return self._raised(p, rec, process, file, line)
            self._other(p, rec)
        except OverflowError as exc:
            self.summary.problem(file, line, f"trace record without a usable {exc}")
        except BadRecord as exc:
            self.summary.problem(file, line, str(exc))
        return None

    def bad(self, item: BadLine, file: str = "", line: int = 0) -> None:
        """A line that is no usable record (loader.decode_line), said as a problem."""
        if item.kind == TORN_LINE:
            self.summary.torn.append(self.rank)
            self.summary.problem(file, line, f"rank {self.rank}'s last record was cut short "
                                 "(the rank died while writing it): skipped")
            return
        if item.counted:
            self.info.records += 1
        self.summary.problem(file, line, item.text)

    def finish(self) -> list[Op]:
        """The rank's records are over: where they end (`info.ended_in`, `ended_at`), and
        every op never ended, as unfinished."""
        pending = self.pending
        self.info.ended_in = _ended_in(list(pending.values()), self.last_op)
        if self.info.ended_in is not None:
            inside = bool(pending)
            op = max(pending.values(), key=lambda o: o.start) if inside else self.last_op
            self.info.ended_at = {"op": op.call, "caller": op.caller, "inside": inside, "root": op.root,
                                 "key": op.key, "pg": op.pg}
        ops = [self._unfinished(op) for op in pending.values()]
        self.pending = OrderedDict()
        self._before = {}
        return ops

    def _began(self, p: _Process, rec: records.Begin | records.OldOp, process: str, file: str,
               line: int) -> Op | None:
        op, ident = self._begin(p, rec)
        key = (process, ident)
        self.info.ops += 1
        self.last_op = op
        if op.seq is not None:
            self._before[key] = self.last.get(op.pg)
            self.last[op.pg] = op
        if op.end is not None:
            self._before.pop(key, None)
            return op
        self.pending[key] = op
        if len(self.pending) <= self.max_pending:
            return None
        # isends never waited on, say: holding them all would cost the merge memory without
        # bound. The oldest is shown unfinished (not named as stuck: its end may still come).
        old, oldest = self.pending.popitem(last=False)
        self._before.pop(old, None)
        if self._let_go is None:
            self.summary.problem(file, line, f"more than {self.max_pending} ops of rank {self.rank} begun and "
                                 "not ended (async ops never waited on?): the oldest are shown unfinished")
        self._let_go = max(self._let_go or 0, old[1] if isinstance(old[1], int) else 0)
        return oldest

    def _ended(self, p: _Process, rec: records.End | records.OldEnd, process: str, file: str,
               line: int) -> Op | None:
        ident = rec.ident
        op = self.pending.pop((process, ident), None)
        self._before.pop((process, ident), None)
        if op is None:
            if not (isinstance(ident, int) and self._let_go and ident <= self._let_go):
                self.summary.problem(file, line, f"end of op {ident} that never began")
            return None
        op.end = max(self._time(p, rec.t) if isinstance(rec, records.End) else self._abs_time(rec.t), op.start)
        if op.peer is None and rec.peer is not None:
            op.peer = rec.peer
            if len(self.info.anysource) < MAX_ANYSOURCE:
                self.info.anysource.append((op.caller, rec.peer))
        return op

    def _raised(self, p: _Process, rec: records.Raised, process: str, file: str, line: int) -> Op | None:
        op = self.pending.pop((process, rec.ident), None)
        if op is None:
            self.summary.problem(file, line, f"op {rec.ident} raised but never began")
            return None
        if op.seq is not None:      # never issued: the pg's last collective is the one before
            previous = self._before.pop((process, rec.ident), None)
            if self.last.get(op.pg) is op:
                if previous is None:
                    del self.last[op.pg]
                else:
                    self.last[op.pg] = previous
        op.end = max(self._time(p, rec.t), op.start)
        op.raised = rec.error
        op.seq = None
        return op

    def _time(self, p: _Process, t: int) -> int:
        """A record's time (ns after the process's t0) on rank 0's clock (ns)."""
        t = p.base + t + self.info.offset_ns
        if t > self.alive:
            self.alive = t
        return t

    def _abs_time(self, t: int) -> int:
        """The first recorder's absolute times, on rank 0's clock."""
        t = t + self.info.offset_ns
        self.alive = max(self.alive, t)
        return t

    def _begin(self, p: _Process, rec: records.Begin | records.OldOp) -> tuple[Op, Any]:
        if isinstance(rec, records.OldOp):          # the first recorder's lines: the site inline
            return _op_at(self.rank, rec.site, rec.seq, rec.p2p, self._abs_time(rec.t), None), rec.ident
        site = p.sites.get(rec.site)
        if site is None:
            raise BadRecord(f"op of call site {rec.site}, which no S line described")
        start = self._time(p, rec.t)
        end = max(self._time(p, rec.end), start) if rec.end is not None else None
        seq = None if site.p2p or site.call else rec.seq
        return _op_at(self.rank, site, seq, rec.seq if site.p2p else None, start, end), rec.ident

    def _other(self, p: _Process, rec: records.Record) -> None:
        if isinstance(rec, records.Site):
            if len(p.sites) >= MAX_SITES:              # the rank renumbers its sites: the oldest go
                del p.sites[next(iter(p.sites))]
            p.sites[rec.ident] = rec
        elif isinstance(rec, records.Header):
            p.base = rec.t0
        elif isinstance(rec, records.Group):
            self.groups[rec.pg] = rec.ranks
            if rec.timeout_ms is not None:
                self.timeouts[rec.pg] = rec.timeout_ms
        elif isinstance(rec, records.Who):
            self.info.node = rec.node
            self.info.host = rec.host
        elif isinstance(rec, records.Clock):
            self._clock(rec)
        elif isinstance(rec, records.Alive):
            self._time(p, rec.t)

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
            way = "to" if op.op in SENDS else "from"
            where = f"(p2p #{op.p2p} of {op.pg}, at {op.caller})"
            if op.op in ONE_PEER_P2P - BLOCKING_P2P:     # isend, irecv: it ends when wait() returns: it may have run
                said = f"rank {op.rank}'s {op.op} {way} {peer} was never waited on, or its wait never returned"
            else:
                said = f"rank {op.rank} never finished {op.op} {way} {peer}"
            self.summary.stuck_p2p.append(f"{said} {where}")
        return op


def _op_at(rank: int, site: records.Site, seq: int | None, p2p: int | None, start: int,
           end: int | None) -> Op:
    """One op of `rank` at call site `site`: its number in its group (`seq`, `p2p`) and times."""
    return Op(rank=rank, op=site.op, pg=site.pg, seq=seq, p2p=p2p, peer=site.peer, root=site.root,
              shape=site.shape, dtype=site.dtype, nbytes=site.nbytes, caller=site.caller, start=start, end=end,
              api=site.api, via=site.via, reduce=site.reduce, members=site.members, key=site.key,
              splits=site.splits)


class RankReader(RankBuilder):
    """Ops of one rank, in the order they completed; never-completed ones at the end. A
    rank's records come from its record files (one process after another, in the order
    they started: an elastic restart, a forked child; a process's segments one stream) and
    from its log (records a rank sent through its log stream)."""

    def __init__(self, paths: Path | list[Path], rank: int, summary: Summary,
                 max_pending: int = MAX_PENDING_OPS):
        super().__init__(rank, summary, max_pending)
        self.paths = [paths] if isinstance(paths, Path) else list(paths)

    @property
    def path(self) -> Path:
        return self.paths[0]

    def first_start(self) -> int | None:
        """The start of this rank's first op on rank 0's clock (None: no op), reading no
        further than that op: where the trace's time 0 is."""
        base, offset = 0, 0
        for path in self.paths:
            for raw, whole in source_lines(path):
                rec = decode_line(raw, whole)
                if rec is None or isinstance(rec, BadLine):
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
        for path in self.paths:
            name, process = str(path), self._process(path)
            for number, raw, whole in SourceTail(path).lines(final=True):
                rec = decode_line(raw, whole)
                if rec is None:
                    continue
                if isinstance(rec, BadLine):
                    self.bad(rec, name, number)
                    continue
                op = self.feed(rec, process, name, number)
                if op is not None:
                    yield op
        yield from self.finish()

    def _process(self, path: Path) -> str:
        return process_of(path)                     # a process's segments are one stream


def _where_op(op: Op) -> str:
    if op.is_call:
        return f"{op.op}{f' {op.key!r}' if op.key is not None else ''} at {op.caller}"
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
    applied): for setting against times the rank itself wrote (labctl/exercise_grade.py)."""
    op: str
    peer: int | None
    nbytes: int
    caller: str
    begin: int
    end: int | None                 # None: never completed (hang, crash, async op never waited on)


class _OwnClock(RankReader):
    """A rank's ops with its times as the rank took them: its clock offset to rank 0
    (the C record) is not applied."""

    def _clock(self, rec: records.Clock) -> None:
        """Not applied: the rank's own clock."""


def rank_ops(paths: str | Path | list[Path]) -> list[RankOp]:
    """Every op one rank recorded (its record files and log: `record_sources`), in the order
    the rank began them, read as the merge reads them (both record formats); an op that
    raised before torch issued it is not one, nor a call (new_group, a store read). Records that cannot be read are skipped
    (merge() names them)."""
    paths = [Path(p) for p in paths] if isinstance(paths, list) else [Path(paths)]
    reader = _OwnClock(paths, 0, Summary(path=paths[0] if paths else None), max_pending=MAX_INT)
    ops = [RankOp(op=o.op, peer=o.peer, nbytes=o.nbytes, caller=o.caller, begin=o.start, end=o.end)
           for o in reader if o.raised is None and not o.is_call]
    ops.sort(key=lambda o: o.begin)
    return ops

