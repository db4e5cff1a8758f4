"""Every rank's records followed while the lab runs: what each rank has begun, is inside,
and when it was last heard of (`RankNow`), read incrementally (only the bytes appended
since the last poll) from the run folder's records/ (issue 49).

The record files are read by the trace loader's `RecordFollower` (complete lines only, a
mapped segment's NUL tail left, a new segment picked up), each rank's records built into
its ops by the merge's own `RankBuilder`, fed one record at a time: the times on rank 0's
clock, the ops it is inside, the last it began."""
from __future__ import annotations

from pathlib import Path

from workloads._protocol import TRACE_MARKER, records
from workloads._protocol.ops import STORE_OPS

from .. import logs
from ..rundir import NODES_SUBDIR, node_logs_in
from ..trace.builder import RankBuilder
from ..trace.loader import RecordFollower
from .stall import InFlight, RankNow

_MARK = TRACE_MARKER.encode()
READ_BYTES = 8 << 20                 # at most this much of one node log per poll: a backlog is read over several
POLLS = 3                            # one store call this often in a row: a rank polling
MAX_INSIDE = 10_000                  # ops begun and not ended held per rank (isends never waited on)


class _Rank:
    """One rank's builder (the merge's own, fed one record at a time) and what the watcher
    asks of it."""

    def __init__(self, rank: int, world: int):
        self.builder = RankBuilder(rank, max_pending=MAX_INSIDE)
        self.world = world
        self.latest = ""                         # its newest process
        self.streak: tuple | None = None         # the store call it repeats (op, line, key) ...
        self.streak_since = 0                    # ... since when, and how often
        self.streak_calls = 0

    def feed(self, process: str, rec: records.Record) -> None:
        if process not in self.builder.processes:
            self.latest = process               # a new process (torchrun restarted it): the old ones' ops are over
        before = self.builder.last_op
        self.builder.feed(rec, process)
        op = self.builder.last_op
        if op is not None and op is not before:
            self._count(op)

    def _count(self, op) -> None:
        """A loop that polls the store (add(key, 0) or get until a count is reached) writes
        the same call again and again: the streak of that one call, and since when."""
        same = (op.call, op.caller, op.key)
        if op.call in STORE_OPS and same == self.streak:
            self.streak_calls += 1
            return
        self.streak = same if op.call in STORE_OPS else None
        self.streak_since, self.streak_calls = op.start, 1

    def snapshot(self) -> RankNow:
        b = self.builder
        inside = [self._in_flight(op) for (process, _), op in b.pending.items() if process == self.latest]
        polling = self.streak_since if self.streak is not None and self.streak_calls >= POLLS else None
        return RankNow(b.rank, b.ops, inside, self._in_flight(b.last_op) if b.last_op else None,
                       b.alive or None, polling)

    def _in_flight(self, op) -> InFlight:
        members = len(self.builder.groups.get(op.pg) or ()) or self.world
        return InFlight(op.rank, op.op, op.call, op.pg, op.seq, op.peer, op.nbytes, op.caller, op.start, members)


class LogFollower:
    """The records a run's ranks sent through their log stream (a lab `docker compose` or
    `kubectl` started from a rendered file: no record files), read from the node logs in
    the run folder as the backend streams them there, split by rank as the finish splits
    them (logs.NodeLogReader). A rank's process is numbered by its H lines."""

    def __init__(self, run_path: Path):
        self.folder = run_path / NODES_SUBDIR
        self.offsets: dict[Path, int] = {}
        self.readers: dict[Path, logs.NodeLogReader] = {}
        self.headers: dict[int, int] = {}
        self.found: list[tuple[int, bytes]] = []
        self.bad = 0

    def poll(self):
        try:
            paths = [p for _, p in node_logs_in(self.folder) if p.is_file()]
        except OSError:
            return
        for path in paths:
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read(READ_BYTES)
            except OSError:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = start + end + 1
            reader = self.readers.get(path)
            if reader is None:
                reader = self.readers[path] = logs.NodeLogReader(write=self._rank_bytes)
            reader.feed_bytes(data[:end + 1])
            found, self.found = self.found, []
            for rank, line in found:
                at = line.find(_MARK)
                try:
                    rec = records.decode(line[at + len(_MARK):])
                except records.BadRecord:
                    self.bad += 1
                    continue
                if isinstance(rec, records.Header):
                    self.headers[rank] = self.headers.get(rank, 0) + 1
                yield rank, str(self.headers.get(rank, 0)), rec

    def _rank_bytes(self, rank: int, data: bytes) -> None:
        if _MARK in data:
            self.found.extend((rank, line) for line in data.split(b"\n") if _MARK in line)


class RankRecords:
    """Every rank of a run, followed: `poll()` reads what was appended since the last one,
    from the record files, or where a rank writes none (a lab started from a rendered
    file), from the node logs."""

    def __init__(self, run_path: Path, world: int):
        self.files = RecordFollower(Path(run_path))
        self.logs = LogFollower(Path(run_path))
        self.world = world
        self.ranks: dict[int, _Rank] = {}

    @property
    def has_files(self) -> bool:
        return bool(self.files.ranks)

    def poll(self) -> dict[int, RankNow]:
        found = list(self.files.poll())
        if not found and not self.has_files:
            found = list(self.logs.poll())
        for rank, process, rec in found:
            state = self.ranks.get(rank)
            if state is None:
                state = self.ranks[rank] = _Rank(rank, self.world)
            state.feed(process, rec)
        return {rank: state.snapshot() for rank, state in sorted(self.ranks.items())}
