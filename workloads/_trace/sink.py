"""Where the records go: one sink per process, and the process's recorder state.

Every marked line the recorder writes (trace records, Flight Recorder entries, T lines)
goes to one sink per process, as bytes, at the moment the record is made: an op's B line
before torch is called (write-ahead), its E line when it completes.

_FileSink (LAB_TRACE_DIR set: labctl reads that folder itself, the local backend): the
  lines go into a file mapped into memory (MAP_SHARED). Writing one is a copy into
  memory, no system call; the kernel keeps the pages when the process dies however it
  dies (SIGKILL, SIGABRT, os._exit, the OOM killer), so nothing that was issued is lost.
  The file's descriptor is closed as soon as it is mapped: a script that closes or reuses
  descriptors (os.closerange) cannot touch the mapping. No thread.
_StreamSink (no such folder: containers, whose log stream is all labctl gets): each line
  is written to the log stream when it is made, by the op's thread (a system call: once
  it returns the line is in the pipe or file behind the stream, which outlives the
  process), through a descriptor duplicated from stdout that is checked before every
  write (the same file it was: a script that closed it and opened its own file under the
  number gets nothing). No thread.

Segment files: rank-<RANK>.<t0>.<pid>.<n>.rec, SEGMENT bytes each (sparse until
written); labctl reads them in name order (labctl/trace.py: record_sources) and trims
their unwritten tail at the finish.

Every line is the codec's (workloads/_protocol/records.py): `write` takes a typed record.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from .._protocol import RECORD_SEGMENT_BYTES, Env, records

SEGMENT = RECORD_SEGMENT_BYTES
RESERVE = 1 << 20                    # disk reserved ahead of the writes in a segment (a full disk: no SIGBUS)
PIPE_CHUNK = 4096                   # PIPE_BUF: a write this long to a pipe is never split
PARK_FD = 1000                      # the recorder's own descriptors are moved at or above this
RECORDER = "python"                 # the header's name of the recorder that wrote the file


class _Process:
    """This process's recorder state, one object that every part of the recorder reads
    (`proc`): its sink (made on its first line), the time origin of its records, the
    process that owns them (a forked child starts afresh: `_forked`), the recorder's cost
    per op as measured at start-up (for the header) and whether ops are traced."""
    __slots__ = ("sink", "lock", "t0", "owner", "cost_ns", "traced")

    def __init__(self) -> None:
        self.sink: Any = None
        self.lock = threading.Lock()
        self.t0 = time.time_ns()        # record times are ns after this (the H line)
        self.owner = os.getpid()
        self.cost_ns: int | None = None
        self.traced = False


proc = _Process()


def _park(fd: int) -> int:
    """`fd` moved to a high number (close-on-exec, as before): a script that closes
    descriptors (os.closerange(3, 256)) leaves it alone, and a number it closed is not the
    next one its open() takes, so nothing of the recorder's can land in its files."""
    try:
        import fcntl
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        floor = PARK_FD if soft < 0 else min(PARK_FD, soft // 2)
        if fd >= floor:
            return fd
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)
    except (OSError, ValueError, ImportError):
        return fd
    os.close(fd)
    return high


def _channel_identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class _FileSink:
    """Lines into memory-mapped segment files in `folder`; durable at once. Every write
    takes the lock (any Python).

    A mapped page that the disk has no block for kills the process with SIGBUS when it is
    written (a full disk: the rank died of it before the lab's storage guard stopped the
    lab). So blocks are reserved ahead of the writes, RESERVE bytes at a time
    (posix_fallocate, by the file's path: its descriptor is closed once mapped), and a
    write past the reserved bytes first reserves more; when that fails the rank's tracing
    ends there, said in one line on its stderr, and the rank goes on."""
    __slots__ = ("folder", "stem", "mm", "pos", "segment", "lock", "failed", "reserved")

    def __init__(self, folder: str):
        self.folder = folder
        rank = os.environ.get("RANK", "")
        who = f"rank-{int(rank)}" if rank.isdigit() else "proc"
        self.stem = os.path.join(folder, f"{who}.{proc.t0:019d}.{os.getpid()}")
        self.segment = 0
        self.lock = threading.RLock()   # reentrant: a signal handler may write amid a write
        self.failed = False
        self.reserved = min(RESERVE, SEGMENT)   # bytes of the segment with blocks on disk (never past SEGMENT)
        self.mm: Any = self._open(0)
        self.pos = 0

    @classmethod
    def in_memory(cls, size: int) -> "_FileSink":
        """The same writes into an anonymous mapping of `size` bytes that no file keeps
        (the start-up measurement of the recorder's cost, `cost.py`)."""
        import mmap

        sink = cls.__new__(cls)
        sink.folder, sink.stem, sink.segment, sink.failed, sink.pos = "", "", 0, True, 0
        sink.reserved = size
        sink.lock = threading.RLock()
        sink.mm = mmap.mmap(-1, size)
        return sink

    def close(self) -> None:
        self.mm.close()

    def _path(self, segment: int) -> str:
        return f"{self.stem}.{segment:04d}.rec"

    def _open(self, segment: int) -> Any:
        """A new segment file, mapped, its first RESERVE bytes on disk (OSError: none)."""
        import mmap
        os.makedirs(self.folder, exist_ok=True)
        path = self._path(segment)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, SEGMENT)
            try:
                os.posix_fallocate(fd, 0, min(RESERVE, SEGMENT))
            except OSError:
                os.unlink(path)             # no block for its first records: not a record file
                raise
            return mmap.mmap(fd, SEGMENT, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)                # the mapping outlives it: nothing a script can close

    def write(self, data: bytes) -> None:
        with self.lock:
            pos = self.pos
            end = pos + len(data)
            if end > self.reserved:
                self._grow(data)
                return
            self.pos = end              # reserved before it is filled: a reentrant write goes after
            self.mm[pos:end] = data

    def _grow(self, data: bytes) -> None:
        """`data` goes past the bytes reserved on disk: reserve more (under the lock), or go
        on to a new segment, then write it; tracing ends when the disk has no more. The
        position is read again after the reserving call: a lock-free writer (or a signal
        handler, on this thread) may have written meanwhile, and the steps from reading it
        to copying hold no call."""
        with self.lock:
            n = len(data)
            while True:
                pos = self.pos
                end = pos + n
                if end <= self.reserved:
                    self.pos = end
                    self.mm[pos:end] = data
                    return
                if end > SEGMENT:
                    self._next(data)
                    return
                if self.failed:
                    return
                segment, start = self.segment, self.reserved
                upto = min(SEGMENT, max(end, start + RESERVE))
                try:
                    self._reserve(segment, start, upto)
                except OSError as exc:
                    self._end(exc)
                    return
                if self.segment == segment and self.reserved == start:   # (not moved on meanwhile)
                    self.reserved = upto

    def _reserve(self, segment: int, start: int, upto: int) -> None:
        """Blocks on disk for bytes [start, upto) of a segment (OSError: the disk has none)."""
        fd = os.open(self._path(segment), os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            os.posix_fallocate(fd, start, upto - start)
        finally:
            os.close(fd)

    def _end(self, exc: OSError) -> None:
        """The record file cannot grow (a full disk, its folder gone): this rank's tracing ends
        here, said once on its stderr (its log: labctl's report quotes it), and it goes on."""
        self.failed = True
        self.reserved = min(self.reserved, self.pos)    # nothing more goes in, not even a short record
        rank = os.environ.get("RANK", "?")
        note = (f"labctl: rank {rank}: its trace ends here: its record file cannot grow "
                f"({exc.strerror or exc}); the ops after this are not traced\n")
        try:
            os.write(2, note.encode(errors="replace"))
        except OSError:
            pass

    def _next(self, data: bytes) -> None:
        """`data` does not fit: into a new segment (under the lock)."""
        with self.lock:
            n = len(data)
            pos = self.pos
            if pos + n <= min(SEGMENT, self.reserved):   # another thread moved on to a new segment meanwhile
                self.pos = pos + n
                self.mm[pos:pos + n] = data
                return
            if self.failed or n > SEGMENT:
                return                  # no record is this long
            # The number is claimed before the file is made: a signal handler that writes
            # while this thread is in _open (a call: handlers run there) claims the next one
            # (it was the same number, whose O_EXCL open then failed and ended the tracing)
            self.segment = segment = self.segment + 1
            first = min(RESERVE, SEGMENT)
            try:
                mm = self._open(segment)
                if n > first:           # a record longer than what a segment starts with
                    self._reserve(segment, first, n)
                    first = n
            except OSError as exc:      # disk full, folder gone: the rank goes on untraced
                self._end(exc)
                return
            if self.segment != segment:  # a handler moved on to a later segment meanwhile:
                mm[0:n] = data          # this one holds this record alone (read before it)
                return
            # `reserved` goes down to the new segment's first: a lock-free writer that read
            # the old `pos` then finds itself past it and comes here for the lock. Then these
            # two stores run with nothing between them: no call, where another thread or a
            # signal handler could come in, and no deallocation either: the old mapping is
            # freed only after both (its munmap runs without the GIL: a thread that wrote
            # then took the old `pos` into the new mapping, and a later record overwrote
            # half of it).
            old = self.mm
            self.reserved = first
            self.mm = mm
            self.pos = n
            mm[0:n] = data
            del old


class _GilFileSink(_FileSink):
    """The same file, written without the lock where CPython's GIL makes the few steps of
    a write one step for every other thread and signal handler: from 3.11 the interpreter
    switches threads and runs signal handlers only at a call, a function's start or a
    backward jump, and reserving the bytes (`pos`, `pos + n`, `self.pos = end`) and copying
    them into the mapping (`mm[pos:end] = data`, in C) has none of those. The lock cost
    0.6-0.75 µs of a 0.9 µs write (timeit), twice per op. Reserving disk and a segment
    change still lock."""
    __slots__ = ()

    def write(self, data: bytes) -> None:
        n = len(data)
        pos = self.pos
        end = pos + n
        if end > self.reserved:
            self._grow(data)
            return
        self.pos = end
        self.mm[pos:end] = data


def _gil_writes_are_atomic() -> bool:
    """CPython 3.11 or later with its GIL on (not a free-threaded build)."""
    gil = getattr(sys, "_is_gil_enabled", None)
    return sys.implementation.name == "cpython" and sys.version_info >= (3, 11) and (gil is None or gil())


class _StreamSink:
    """Lines to the log stream, each written by the op's own thread when it is made (an
    op's B line before torch is called): once os.write returns, the line is in the pipe or
    the file behind the stream, which outlives the process however it dies (SIGKILL,
    SIGABRT, os._exit). No thread, nothing waits in memory. A write costs a system call
    and an fstat (the descriptor is still the stream): 2-3 µs, paid where the log stream
    is all labctl gets (Kubernetes pods, rendered files)."""
    __slots__ = ("fd", "identity", "lock")

    def __init__(self, sources: tuple[int, ...] = (1, 2)) -> None:
        self.lock = threading.RLock()   # reentrant: a signal handler may write amid a reopen
        self.fd, self.identity = None, None
        for source in sources:
            try:
                fd = _park(os.dup(source))      # not inheritable (PEP 446): no child gets it
            except OSError:
                continue
            self.fd, self.identity = fd, _channel_identity(fd)
            break

    @classmethod
    def to_nowhere(cls) -> "_StreamSink":
        """The same writes into /dev/null (the start-up measurement, `cost.py`)."""
        sink = cls.__new__(cls)
        sink.lock = threading.RLock()
        sink.fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        sink.identity = _channel_identity(sink.fd)
        return sink

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def write(self, data: bytes) -> None:
        self._emit(data)

    def _emit(self, data: bytes) -> None:
        """Whole lines, in pieces of at most PIPE_CHUNK bytes cut at line ends (a pipe
        writes those in one piece: a print from another thread cannot land inside one),
        to the descriptor only while it is still the file it was duplicated from."""
        if self.fd is None or _channel_identity(self.fd) != self.identity:
            with self.lock:
                if not self._reopen():
                    return
        try:
            while data:
                if len(data) <= PIPE_CHUNK:
                    piece, data = data, b""
                else:
                    cut = data.rfind(b"\n", 0, PIPE_CHUNK) + 1 or PIPE_CHUNK
                    piece, data = data[:cut], data[cut:]
                while piece:
                    piece = piece[os.write(self.fd, piece):]
        except (OSError, ValueError):
            pass

    def _reopen(self) -> bool:
        """The script closed (or reused) the descriptor: take stdout or stderr again if
        either is still the stream it was, else stay silent (never write into its files)."""
        self.fd = None
        for source in (1, 2):
            if self.identity is not None and _channel_identity(source) == self.identity:
                try:
                    self.fd = _park(os.dup(source))
                    return True
                except OSError:
                    continue
        return False


def _file_sink_class() -> type:
    return _GilFileSink if _gil_writes_are_atomic() else _FileSink


def scratch() -> Any:
    """A sink of the kind this process writes to (`_new_sink`) whose lines go nowhere:
    what the start-up measurement writes into (close() it after)."""
    if os.environ.get(Env.TRACE_DIR):
        return _file_sink_class().in_memory(1 << 20)
    return _StreamSink.to_nowhere()


def _new_sink() -> Any:
    """The process's sink, made on its first line (a forked child makes its own), with
    the H line first."""
    with proc.lock:
        if proc.sink is None:
            folder = os.environ.get(Env.TRACE_DIR)
            sink: Any = None
            if folder:
                try:
                    sink = _file_sink_class()(folder)
                except OSError:
                    sink = None
            sink = sink or _StreamSink()
            sink.write(records.encode(records.Header(proc.t0, os.getpid(), records.VERSION, RECORDER,
                                                     proc.cost_ns)))
            proc.sink = sink
    return proc.sink


def out(data: bytes) -> None:
    """Write marked lines (bytes, each ending in a newline) to this process's sink."""
    (proc.sink or _new_sink()).write(data)


def open_channel() -> None:
    """Make this process's sink now, before the user's code runs: a stream sink's
    descriptor is duplicated from stdout while it is still the log stream (what a script
    later does to sys.stdout, or to fd 1, does not reach it)."""
    if proc.sink is None:
        _new_sink()


def write(record: Any) -> None:
    """One record: a typed one (records.Site, records.Group ...), through the codec's
    encoder; a dict is written as the JSON trace record it is (tests write those)."""
    out(records.trace_line(record) if type(record) is dict else records.encode(record))


def end(ident: int, when: int) -> None:
    """Op `ident` completed at `when` (time_ns)."""
    (proc.sink or _new_sink()).write(records.END % (ident, when - proc.t0))


def end_from(ident: int, when: int, peer: int | None) -> None:
    """A recv from any source completed: its sender with it."""
    if peer is None:
        end(ident, when)
    else:
        (proc.sink or _new_sink()).write(records.END_FROM % (ident, when - proc.t0, peer))


def tick() -> None:
    """A T line (this rank was alive now: at a dump, at exit) when tracing is on. The
    merge draws an op that never ended up to the last moment any rank was known alive."""
    if proc.traced:
        write(records.Alive(time.time_ns() - proc.t0))


def _forked() -> None:
    """A forked child starts with no sink of its parent's (it would write into the
    parent's file) and a time origin of its own."""
    proc.sink, proc.lock = None, threading.Lock()
    proc.t0, proc.owner = time.time_ns(), os.getpid()


os.register_at_fork(after_in_child=_forked)
