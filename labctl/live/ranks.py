"""Every rank's records followed while the lab runs: what each rank has begun, is inside,
and when it was last heard of (`RankNow`), read incrementally (only the bytes appended
since the last poll) from the run folder's records/ (issue 49).

The lines are read by `RecordFollower` (complete lines only, a mapped segment's NUL tail
left, a new segment file picked up), decoded by the one codec (workloads/_protocol/records.py). Times are put on rank 0's clock as the merge puts
them (the H line's origin plus the C line's offset)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workloads._protocol import records

from workloads._protocol import RECORD_FILE_SUFFIX, RECORDS_SUBDIR, TRACE_MARKER

from .. import logs
from .stall import InFlight, RankNow

_MARK = TRACE_MARKER.encode()
READ_BYTES = 8 << 20                 # at most this much of one file per poll: a backlog is read over several


class RecordFollower:
    """Every record file of a run followed: each `poll()` yields (rank, process, record) of
    the complete lines appended since the last one (a mapped segment's NUL tail and a
    line still being written are left for later; a new file is picked up)."""

    def __init__(self, run_path: Path):
        self.folder = run_path / RECORDS_SUBDIR
        self.offsets: dict[Path, int] = {}
        self.bad = 0

    def poll(self):
        try:
            paths = sorted(p for p in self.folder.glob(f"rank-*{RECORD_FILE_SUFFIX}") if p.is_file())
        except OSError:
            return
        for path in paths:
            parts = path.name.split(".")
            try:
                rank = int(parts[0].split("-", 1)[1])
            except (IndexError, ValueError):
                continue
            process = ".".join(parts[1:3])          # t0 and pid: one process, however many segments
            for line in self._new_lines(path):
                at = line.find(_MARK)
                if at < 0:
                    continue
                try:
                    yield rank, process, records.decode(line[at + len(_MARK):])
                except records.BadRecord:
                    self.bad += 1

    def _new_lines(self, path: Path) -> list[bytes]:
        start = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(READ_BYTES)
        except OSError:
            return []
        nul = data.find(b"\0")
        if nul >= 0:
            data = data[:nul]
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offsets[path] = start + end + 1
        return data[:end].split(b"\n")

MAX_INSIDE = 10_000                  # ops begun and not ended held per rank (isends never waited on)


@dataclass
class _Process:
    """One process's sites and open ops (a rank restarted by torchrun is a new process)."""
    base: int = 0
    sites: dict[int, records.Site] = field(default_factory=dict)
    open: dict[int, InFlight] = field(default_factory=dict)


class _Rank:
    def __init__(self, rank: int, world: int):
        self.now = RankNow(rank)
        self.world = world
        self.offset = 0
        self.groups: dict[str, int] = {}
        self.processes: dict[str, _Process] = {}

    def feed(self, process: str, rec: records.Record) -> None:
        p = self.processes.get(process)
        if p is None:                   # a new process of this rank (torchrun restarted it, a fork):
            for old in self.processes.values():   # what the old ones were inside is over
                old.open.clear()
            p = self.processes[process] = _Process()
        if isinstance(rec, records.Header):
            p.base = rec.t0
        elif isinstance(rec, records.Clock):
            if rec.error is None:
                self.offset = rec.offset_ns
        elif isinstance(rec, records.Group):
            self.groups[rec.pg] = len(rec.ranks)
        elif isinstance(rec, records.Site):
            p.sites[rec.ident] = rec
        elif isinstance(rec, records.Begin):
            site = p.sites.get(rec.site)
            self._heard(p, rec.t)
            if site is None:
                return
            self.now.ops += 1
            op = InFlight(self.now.rank, site.op, site.api if site.api and site.api != site.op else site.op,
                          site.pg, None if site.p2p else rec.seq, site.peer, site.nbytes, site.caller,
                          p.base + rec.t + self.offset, self.groups.get(site.pg, self.world))
            self.now.last = op
            if rec.end is None and len(p.open) < MAX_INSIDE:
                p.open[rec.ident] = op
        elif isinstance(rec, (records.End, records.Raised)):
            p.open.pop(rec.ident, None)
            self._heard(p, rec.t)
        elif isinstance(rec, records.Alive):
            self._heard(p, rec.t)

    def _heard(self, p: _Process, t: int) -> None:
        when = p.base + t + self.offset
        if self.now.seen_ns is None or when > self.now.seen_ns:
            self.now.seen_ns = when

    def snapshot(self) -> RankNow:
        self.now.inside = [op for p in self.processes.values() for op in p.open.values()]
        return self.now


class LogFollower:
    """The records a run's ranks sent through their log stream (a lab `docker compose` or
    `kubectl` started from a rendered file: no record files), read from the node logs in
    the run folder as the backend streams them there, split by rank as the finish splits
    them (logs.NodeLogReader). A rank's process is numbered by its H lines."""

    def __init__(self, run_path: Path):
        self.folder = run_path / "nodes"
        self.offsets: dict[Path, int] = {}
        self.readers: dict[Path, logs.NodeLogReader] = {}
        self.headers: dict[int, int] = {}
        self.found: list[tuple[int, bytes]] = []
        self.bad = 0

    def poll(self):
        try:
            paths = sorted(p for p in self.folder.glob("node-*.log") if p.is_file())
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
        return bool(self.files.offsets)

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
