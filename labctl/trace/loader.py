"""Reading the ranks' record sources (labctl/trace/): where each rank's records are
(`record_sources`: its record files in records/, else its log), and their lines, read
no further than the rank wrote (a mapped segment is NUL bytes past that; a line cut by the
rank's death is marked TORN). Standard library only."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

from workloads._protocol import RECORD_FILE_SUFFIX, RECORD_SEGMENT_BYTES, RECORDS_SUBDIR, TRACE_MARKER
from workloads._protocol import records
from workloads._protocol.records import BadRecord

from ..runnames import RANKS_SUBDIR, rank_logs_in
from .model import MAX_PROBLEMS, Problem

_MARKER_BYTES = TRACE_MARKER.encode()
MAX_LINE = 1 << 20                  # a log line is read this far: no record the ranks write is longer
READ_CHUNK = 1 << 20                # bytes read at a time


def file_lines(f: Any) -> Iterator[tuple[bytes, bool]]:
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


class Unreadable(bytes):
    """What SourceTail hands on, as its one line, for a source it will not read: why (its
    text). decode_line makes it an UNREADABLE BadLine, so that every reader names it as it
    names a bad record, and none hangs on it or fails the whole trace."""


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def open_source(path: Path) -> tuple[BinaryIO | None, str | None]:
    """(the file, None), or (None, why it is not read): a record source must be a regular
    file, and a record file no larger than a segment (RECORD_SEGMENT_BYTES: the recorder
    writes no larger one; a 20 GB sparse file took `labctl trace` over 120 s). Opened
    without blocking and checked on the open file: a FIFO named rank-0.*.rec hung the trace,
    and one put in its place between a check and an open would too. None, None: gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None, None
    why = None
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        why = f"{kind}, not a record source: not read"
    elif Path(path).suffix == RECORD_FILE_SUFFIX and st.st_size > RECORD_SEGMENT_BYTES:
        why = (f"{st.st_size:,} bytes, larger than a record segment ({RECORD_SEGMENT_BYTES >> 20} MiB): "
               "not the recorder's, not read")
    if why is not None:
        os.close(fd)
        return None, why
    return os.fdopen(fd, "rb"), None


def written_size(path: Path) -> int:
    """The bytes a rank wrote into a record file: up to its last non-zero byte (a mapped
    segment is zeros past what was written; a rank that died mid-write leaves a torn last
    line, which the readers name)."""
    chunk = 1 << 16
    f, _ = open_source(path)
    if f is None:                        # gone, or no record file (a FIFO, a 20 GB file): nothing written
        return 0
    with f:
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


def process_of(path: Path) -> str:
    """The process that wrote a record source: "<t0>.<pid>" of a record file's name
    (rank-<R>.<t0>.<pid>.<segment>.rec: every segment of one process has it, and its call
    sites run on from one segment into the next); any other source (a rank log) is its own."""
    parts = path.name.split(".")
    if path.suffix == RECORD_FILE_SUFFIX and len(parts) == 5:
        return f"{parts[1]}.{parts[2]}"
    return str(path)


def segment_of(path: Path) -> int:
    """A record file's segment number (0: the process's first, and any other source)."""
    parts = path.name.split(".")
    return int(parts[3]) if path.suffix == RECORD_FILE_SUFFIX and len(parts) == 5 and parts[3].isdigit() else 0


class SourceTail:
    """One record source read on from where the last read stopped: the one line reader of
    the trace (the merge's one-shot read and the live follower). `lines()` hands on each
    complete line appended since, as (line number, its first MAX_LINE bytes, whether that is
    all of it). A record file ends at its first NUL byte (a mapped segment's unwritten tail,
    which the rank may fill later); a line without its newline yet is held, not handed on,
    until it is complete; `final`: nothing more will come, so a record file's last line
    without a newline was cut short by the rank's death and is handed on with TORN at its
    end. Only the bytes appended since the last read are read (a byte offset is kept)."""

    def __init__(self, path: Path):
        self.path = path
        self.records = path.suffix == RECORD_FILE_SUFFIX     # NUL-padded, and a torn last line is named
        self.offset = 0                     # bytes read so far
        self.number = 0                     # lines handed on so far
        self.partial = b""                  # the start of a line not yet ended
        self.skipping = False               # past MAX_LINE of a line: the rest of it is read past
        self.later = False                  # a later segment of its process exists (the follower)
        self.refused = False                # not a source to read (open_source): said once

    def lines(self, final: bool = False) -> Iterator[tuple[int, bytes, bool]]:
        if self.refused:
            return
        f, why = open_source(self.path)
        if why is not None:
            self.refused = True
            self.number += 1
            yield self.number, Unreadable(why.encode()), True
            return
        if f is None:
            return
        with f:
            f.seek(self.offset)
            while True:
                chunk = f.read(READ_CHUNK)
                if not chunk:
                    break
                nul = chunk.find(b"\0") if self.records else -1
                if nul >= 0:
                    chunk = chunk[:nul]
                self.offset += len(chunk)
                yield from self._split(chunk)
                if nul >= 0:
                    break
        if final and self.partial:
            self.number += 1
            line, self.partial = self.partial, b""
            yield self.number, line + TORN if self.records else line, True

    def _split(self, data: bytes) -> Iterator[tuple[int, bytes, bool]]:
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                if not self.skipping:
                    self.partial += data[start:]
                    if len(self.partial) >= MAX_LINE:       # cut: its first MAX_LINE bytes
                        self.number += 1
                        yield self.number, self.partial[:MAX_LINE], False
                        self.partial, self.skipping = b"", True
                return
            piece = data[start:end + 1]
            start = end + 1
            if self.skipping:               # the end of a line already handed on cut
                self.skipping = False
                continue
            line = self.partial + piece if self.partial else piece
            self.partial = b""
            self.number += 1
            if len(line) > MAX_LINE:
                yield self.number, line[:MAX_LINE], False
            else:
                yield self.number, line, True


def source_lines(path: Path) -> Iterator[tuple[bytes, bool]]:
    """The lines of a rank log, or of a record file up to what was written. Every record
    a rank writes ends in a newline: a record file's last line without one was cut short
    by the rank's death, and is handed on with TORN at its end for the reader to name."""
    for _, line, whole in SourceTail(path).lines(final=True):
        yield line, whole


@dataclass(frozen=True, slots=True)
class BadLine:
    """A marked line that is no usable record."""
    kind: str                           # TORN_LINE, LONG_LINE, GARBLED, BAD (a record, unusable), UNREADABLE (a source)
    text: str

    @property
    def counted(self) -> bool:
        """A record its rank wrote whole (the rank wrote records), though it cannot be used."""
        return self.kind == BAD


TORN_LINE, LONG_LINE, GARBLED, BAD, UNREADABLE = "torn", "long", "garbled", "bad", "unreadable"


def decode_line(raw: bytes, whole: bool) -> records.Record | BadLine | None:
    """A line as a trace record (the codec's `decode`); None: no trace record is on it."""
    if type(raw) is Unreadable:
        return BadLine(UNREADABLE, raw.decode(errors="replace"))
    at = raw.find(_MARKER_BYTES)
    if at < 0:
        return None
    if TORN in raw:
        return BadLine(TORN_LINE, "the last record was cut short (the rank died while writing it)")
    if not whole:
        return BadLine(LONG_LINE, f"a line of more than {MAX_LINE >> 20} MiB holds a trace record: skipped")
    try:
        return records.decode(raw[at + len(_MARKER_BYTES):])
    except BadRecord as exc:
        return BadLine(GARBLED if str(exc).startswith("garbled") else BAD, str(exc))


def trim_record_files(run_path: str | Path) -> None:
    """Cut every record file of a run to what its rank wrote (their mapped segments are
    zeros past that): done once the ranks are gone, at the finish."""
    for path in (Path(run_path) / RECORDS_SUBDIR).glob(f"*{RECORD_FILE_SUFFIX}"):
        try:
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_size > RECORD_SEGMENT_BYTES:
                continue                # no record file of the recorder's (the readers name it)
            size = written_size(path)
            if size < st.st_size:
                os.truncate(path, size)
        except OSError:
            continue



def rank_logs(run_path: Path) -> dict[int, Path]:
    return dict(rank_logs_in(run_path / RANKS_SUBDIR))


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



# ---------------------------------------------------------------- following records as they are written

@dataclass(frozen=True, slots=True)
class Followed:
    """One record a follower read: the process that wrote it ("<t0>.<pid>": its call sites
    and time origin are that process's) and the record, decoded."""
    process: str
    record: records.Record


class RankFollower:
    """One rank's record files (records/rank-<R>.*.rec) followed while the rank writes
    them: each `poll()` returns the records of the complete lines appended since the last
    poll, in order (files in name order: a process's segments one after another), reading
    only the new bytes. A new segment file is picked up; a segment of a process that has
    gone on to a later one is read once more, then no more. Lines that are no usable record
    are `problems` (the first MAX_PROBLEMS; `more_problems` counts the rest), never raised."""

    def __init__(self, folder: str | Path, rank: int):
        self.folder = Path(folder)
        self.rank = rank
        self.tails: dict[Path, SourceTail] = {}
        self.done: set[Path] = set()            # segments no longer read
        self.problems: list[Problem] = []
        self.more_problems = 0

    def poll(self, paths: list[Path] | None = None) -> list[Followed]:
        """The records appended since the last poll. `paths`: this rank's record files as
        the caller listed them (RecordFollower lists the folder once for every rank);
        None: the folder is listed here."""
        if paths is None:
            try:
                paths = sorted(self.folder.glob(f"rank-{self.rank}.*{RECORD_FILE_SUFFIX}"))
            except OSError:
                paths = []
        for path in paths:
            if path not in self.tails:
                self.tails[path] = SourceTail(path)
        latest: dict[str, int] = {}
        for path in self.tails:
            process = process_of(path)
            latest[process] = max(latest.get(process, 0), segment_of(path))
        found: list[Followed] = []
        for path in sorted(self.tails):
            if path in self.done:
                continue
            tail, process = self.tails[path], process_of(path)
            if segment_of(path) < latest[process]:
                if tail.later:                  # read once since the next segment appeared: done
                    self.done.add(path)
                    continue
                tail.later = True
            for number, raw, whole in tail.lines():
                item = decode_line(raw, whole)
                if isinstance(item, BadLine):
                    self._problem(str(path), number, item.text)
                elif item is not None:
                    found.append(Followed(process, item))
        return found

    def _problem(self, file: str, line: int, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(file, line, text))
        else:
            self.more_problems += 1


class RecordFollower:
    """Every rank's record files of a run followed (a RankFollower per rank, the folder
    listed once per poll): `poll()` returns (rank, process, record) of what was appended
    since the last one, rank by rank."""

    def __init__(self, run_path: str | Path):
        self.folder = Path(run_path) / RECORDS_SUBDIR
        self.ranks: dict[int, RankFollower] = {}

    def poll(self) -> list[tuple[int, str, records.Record]]:
        by_rank: dict[int, list[Path]] = {}
        try:
            names = sorted(e.name for e in os.scandir(self.folder) if e.name.endswith(RECORD_FILE_SUFFIX))
        except OSError:
            names = []
        for name in names:
            number = name.split(".", 1)[0].split("-", 1)[-1]
            if name.startswith("rank-") and number.isdigit():
                by_rank.setdefault(int(number), []).append(self.folder / name)
        found = []
        for rank, paths in sorted(by_rank.items()):
            follower = self.ranks.get(rank)
            if follower is None:
                follower = self.ranks[rank] = RankFollower(self.folder, rank)
            found += [(rank, f.process, f.record) for f in follower.poll(paths)]
        return found

    @property
    def problems(self) -> list[Problem]:
        return [p for _, f in sorted(self.ranks.items()) for p in f.problems]
