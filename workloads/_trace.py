"""Per-rank communication recorder (issues 21 and 30): every op that torch issues on a
process group, recorded where torch issues it, as marked lines in the log stream.

Where it records. Every collective and p2p op of every ProcessGroup, on every backend,
runs through one of torch's c10d dispatcher ops (`torch.ops.c10d.allreduce_`, `send`,
...): ProcessGroup's C++ methods call them. They are reached two ways, and each op is
recorded where it enters (docs/trace.md, "How it records", has the measurements):

1. From Python, through ProcessGroup's methods (`group.allreduce(...)`): every
   torch.distributed function (all_reduce, isend, batch_isend_irecv, all_gather_object,
   FSDP2's all_gather_single ...) and a script calling a group's methods itself ends there.
   The methods are replaced on the class by a lean recording wrapper (a few µs per op),
   which enters the op with autograd's dispatch key excluded for that call only, so that
   (2) does not see it a second time.
2. From C++: DDP's Reducer (a gradient bucket's all-reduce, the unused-parameter map's),
   DDP's `_broadcast_coalesced` and `_verify_params_across_processes`, functional
   collectives (`torch.distributed._functional_collectives`), DTensor. A Python kernel at
   the c10d ops' Autograd key (they have none there: torch's autograd fallback runs)
   records the op and redispatches below autograd: the same C++ kernel, on the same
   tensors. About 20 µs per op; a few ops per training step take this path.

Nothing a script can see is replaced: its functions, hooks and Work objects are torch's
own (a DDP comm hook, `isinstance(work, dist.Work)`, `pickle.dumps(dist.all_reduce)` work
as untraced), and not a bit of what is computed changes. Completion: when `wait()`
returns, `is_completed()` first says True, or the future from `get_future()` completes
(Work's methods, replaced on the class: they end the op's record and call torch's own);
an op issued from C++ ends when its future completes (DDP's buckets), a functional
collective's when its output is waited on (a callback on its future would take the GIL
from the script on gloo's thread, twice per op).

Every record is written when it happens, an op's B line before torch is called, into a
channel the recorder owns: a memory-mapped record file when labctl reads a folder the rank
writes in (LAB_TRACE_DIR), else the log stream through a descriptor taken before the script
runs ("where the records go: a sink" below). The lines are the codec's
(workloads/_protocol/records.py; docs/trace.md lists every field):
    {"k":"H","v":2,"t0":<ns>,"pid":..}     header: times below are ns after t0
    {"k":"M",...} who the rank is; {"k":"G",...} a process group; {"k":"C",...} clock offset
    {"k":"S","s":3,"op":"all_reduce","pg":"default_pg","kind":"c",...}   a call site
    B <id> <site> <seq> <t>               op <id> entered at t
    E <id> <t> [<peer>]                   op <id> completed at t
    {"k":"R","i":<id>,"t":<ns>,"error":..}   op <id> raised before torch issued it
    {"k":"T","t":<ns>}                      the rank was alive then (at a dump, at exit)
"""
from __future__ import annotations

import atexit
import collections
import itertools
import json
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any

from ._protocol import CLOCK_ROUNDS, Env, records

FR_BUFFER = "2000"                  # TORCH_FR_BUFFER_SIZE unless the user set it (torch's default size)
FR_KEEP = 8                         # newest entries per process group written at a dump
CLOCK_WAIT_S = 60                   # the clock exchange's bound, in all: ranks that never come are gone without
RECORD_VERSION = records.VERSION
PIPE_CHUNK = 4096                   # PIPE_BUF: a write this long to a pipe is never split

_installed = False
_here = os.path.abspath(__file__)
_t0 = time.time_ns()                # record times are ns after this (the H line)


def enabled() -> bool:
    return os.environ.get(Env.TRACE, "") not in ("", "0", "false", "False")


# ---------------------------------------------------------------- where the records go: a sink
#
# Every marked line this module writes (trace records, Flight Recorder entries, T lines)
# goes to one sink per process, as bytes, at the moment the record is made: an op's B line
# before torch is called (write-ahead), its E line when it completes.
#
# _FileSink (LAB_TRACE_DIR set: labctl reads that folder itself, the local backend): the
#   lines go into a file mapped into memory (MAP_SHARED). Writing one is a copy into
#   memory, no system call; the kernel keeps the pages when the process dies however it
#   dies (SIGKILL, SIGABRT, os._exit, the OOM killer), so nothing that was issued is lost.
#   The file's descriptor is closed as soon as it is mapped: a script that closes or reuses
#   descriptors (os.closerange) cannot touch the mapping. No thread.
# _StreamSink (no such folder: containers, whose log stream is all labctl gets): each line
#   is written to the log stream when it is made, by the op's thread (a system call: once
#   it returns the line is in the pipe or file behind the stream, which outlives the
#   process), through a descriptor duplicated from stdout that is checked before every
#   write (the same file it was: a script that closed it and opened its own file under the
#   number gets nothing). No thread.
#
# Segment files: rank-<RANK>.<t0>.<pid>.<n>.rec, SEGMENT bytes each (sparse until
# written); labctl reads them in name order (labctl/trace.py: record_sources) and trims
# their unwritten tail at the finish.

SEGMENT = 8 << 20
MAX_SITES = 20_000                  # call sites remembered; past that they are numbered afresh
_BEGIN, _END, _END_FROM = records.BEGIN, records.END, records.END_FROM    # the codec's op lines
_MARKER = records.TRACE             # their prefix (the C fast path writes the same lines)


PARK_FD = 1000                      # the recorder's own descriptors are moved at or above this


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
    takes the lock (any Python)."""
    __slots__ = ("folder", "stem", "mm", "pos", "segment", "lock", "failed")

    def __init__(self, folder: str):
        self.folder = folder
        rank = os.environ.get("RANK", "")
        who = f"rank-{int(rank)}" if rank.isdigit() else "proc"
        self.stem = os.path.join(folder, f"{who}.{_t0:019d}.{os.getpid()}")
        self.segment = 0
        self.lock = threading.RLock()   # reentrant: a signal handler may write amid a write
        self.failed = False
        self.mm: Any = self._open(0)
        self.pos = 0

    def _open(self, segment: int) -> Any:
        import mmap
        os.makedirs(self.folder, exist_ok=True)
        fd = os.open(f"{self.stem}.{segment:04d}.rec", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, SEGMENT)
            return mmap.mmap(fd, SEGMENT, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)                # the mapping outlives it: nothing a script can close

    def write(self, data: bytes) -> None:
        with self.lock:
            pos = self.pos
            end = pos + len(data)
            if end > SEGMENT:
                self._next(data)
                return
            self.pos = end              # reserved before it is filled: a reentrant write goes after
            self.mm[pos:end] = data

    def _next(self, data: bytes) -> None:
        """`data` does not fit: into a new segment (under the lock)."""
        with self.lock:
            n = len(data)
            pos = self.pos
            if pos + n <= SEGMENT:      # another thread moved on to a new segment meanwhile
                self.pos = pos + n
                self.mm[pos:pos + n] = data
                return
            if self.failed or n > SEGMENT:
                return                  # no record is this long
            # The number is claimed before the file is made: a signal handler that writes
            # while this thread is in _open (a call: handlers run there) claims the next one
            # (it was the same number, whose O_EXCL open then failed and ended the tracing)
            self.segment = segment = self.segment + 1
            try:
                mm = self._open(segment)
            except OSError:             # disk full, folder gone: the rank goes on untraced
                self.failed = True
                return
            if self.segment != segment:  # a handler moved on to a later segment meanwhile:
                mm[0:n] = data          # this one holds this record alone (read before it)
                return
            # These two stores run with nothing between them: no call, where another thread
            # or a signal handler could come in, and no deallocation either: the old
            # mapping is freed only after both (its munmap runs without the GIL: a thread
            # that wrote then took the old `pos` into the new mapping, and a later record
            # overwrote half of it).
            old = self.mm
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
    0.6-0.75 µs of a 0.9 µs write (timeit), twice per op. A segment change still locks."""
    __slots__ = ()

    def write(self, data: bytes) -> None:
        n = len(data)
        pos = self.pos
        end = pos + n
        if end > SEGMENT:
            self._next(data)
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

    def __init__(self) -> None:
        self.lock = threading.RLock()   # reentrant: a signal handler may write amid a reopen
        self.fd, self.identity = None, None
        for source in (1, 2):
            try:
                fd = _park(os.dup(source))      # not inheritable (PEP 446): no child gets it
            except OSError:
                continue
            self.fd, self.identity = fd, _channel_identity(fd)
            break

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


_sink: Any = None
_sink_lock = threading.Lock()


def _new_sink() -> Any:
    """The process's sink, made on its first line (a forked child makes its own)."""
    global _sink
    with _sink_lock:
        if _sink is None:
            folder = os.environ.get(Env.TRACE_DIR)
            sink: Any = None
            if folder:
                try:
                    sink = (_GilFileSink if _gil_writes_are_atomic() else _FileSink)(folder)
                except OSError:
                    sink = None
            sink = sink or _StreamSink()
            sink.write(records.HEADER % (RECORD_VERSION, _t0, os.getpid()))
            _sink = sink
    return _sink


def _out(data: bytes) -> None:
    """Write marked lines (bytes, each ending in a newline) to this process's sink."""
    (_sink or _new_sink()).write(data)


def open_channel() -> None:
    """Make this process's sink now, before the user's code runs: a stream sink's
    descriptor is duplicated from stdout while it is still the log stream (what a script
    later does to sys.stdout, or to fd 1, does not reach it)."""
    if _sink is None:
        _new_sink()


def _write(record: dict[str, Any]) -> None:
    _out(records.trace_line(record))


def _end(ident: int, when: int) -> None:
    """Op `ident` completed at `when` (time_ns)."""
    (_sink or _new_sink()).write(_END % (ident, when - _t0))


def _end_from(ident: int, when: int, peer: int | None) -> None:
    """A recv from any source completed: its sender with it."""
    if peer is None:
        _end(ident, when)
    else:
        (_sink or _new_sink()).write(_END_FROM % (ident, when - _t0, peer))


def _raised(ident: int, route: Any, seq: int, exc: BaseException) -> None:
    """Op `ident` raised before it was issued (an invalid root, a closed group): an R line
    with the exception, and its number handed back (torch's own count does not count it:
    the next op of the group gets the same number, as in Flight Recorder)."""
    count = route.count
    if count.issued == seq:             # no other op of the group was numbered since
        count.counter = itertools.count(seq)
        count.issued = seq - 1
    text = f"{type(exc).__name__}: {exc}"[:300]
    _write({"k": "R", "i": ident, "t": time.time_ns() - _t0, "error": text})


def tick() -> None:
    """A T line (this rank was alive now: at a dump, at exit) when tracing is on. The
    merge draws an op that never ended up to the last moment any rank was known alive."""
    if _installed:
        _write({"k": "T", "t": time.time_ns() - _t0})


def _at_exit() -> None:
    """The last T line, after the ends of works without a future that completed."""
    if _sink is None or os.getpid() != _owner:
        return                          # a forked child that recorded nothing writes nothing
    _poll()
    tick()


_owner = os.getpid()


def _forked() -> None:
    """A forked child starts with no recorder state of its parent: no sink (it would write
    into the parent's file), no call sites (its file describes its own), no works."""
    global _sink, _sink_lock, _t0, _owner, _sites_generation
    _sink, _sink_lock = None, threading.Lock()
    _t0, _owner = time.time_ns(), os.getpid()
    _sites.clear()
    _sites_generation += 1
    _waiting.clear()
    _polled.clear()
    _outputs.clear()


# ---------------------------------------------------------------- call sites

_sites: dict[tuple, int] = {}        # what repeats between ops of one call site -> its number
_sites_generation = 0                # one more at every _sites.clear() (the C fast path's site caches)
_site_ids = itertools.count(1)


def _site(route: Any, dtype: Any, shape: Any, nbytes: Any, where: Any, code: Any, lasti: int,
          name: Any, api: Any, reduce: Any = None) -> int:
    """The number of a call site, with its S line the first time it is seen. `reduce`: a
    reducing op's ReduceOp.RedOpType (SUM, MAX ...), None for the rest."""
    key = (route.rid, id(code), lasti, shape, dtype, nbytes, where, name, api, reduce)   # id: a code object's hash is not cached
    site = _sites.get(key)
    if site is not None:
        return site
    if len(_sites) >= MAX_SITES:
        global _sites_generation
        _sites.clear()
        _sites_generation += 1
    site = _sites[key] = next(_site_ids)
    if api in _ONE_OP_APIS:
        name = api                      # send() posts an isend and waits; all_gather_into_tensor calls all_gather_single
    if nbytes is None:
        nbytes = dtype.itemsize * _numel(shape)
    record: dict[str, Any] = {"k": "S", "s": site, "op": name or route.op, "pg": route.pg,
                              "kind": "p" if route.p2p else "c", "bytes": int(nbytes)}
    if dtype is not None:
        record["dtype"] = _dtype_name(dtype)
        record["shape"] = [int(x) for x in shape]
    if where is not None:
        record["peer" if route.p2p else "root"] = int(where)
    if reduce is not None:
        record["reduce"] = getattr(reduce, "name", str(reduce))
    record["caller"] = f"{code.co_filename}:{_line_of(code, lasti)}" if code is not None else "?"
    if api:
        record["api"] = api
    if route.via_cpp:
        record["via"] = "c++"
    _write(record)
    return site


def _begin(ident: int, route: Any, seq: int, dtype: Any, shape: Any, nbytes: Any, where: Any,
           code: Any, lasti: int, name: Any, api: Any, entered: int) -> None:
    """Op `ident`'s B line, written before torch is called: a rank that hangs or dies in
    the op has said which op it was in."""
    site = _site(route, dtype, shape, nbytes, where, code, lasti, name, api)
    (_sink or _new_sink()).write(_BEGIN % (ident, site, seq, entered - _t0))


def _numel(shape: Any) -> int:
    n = 1
    for x in shape:
        n *= int(x)
    return n


_line_tables: dict[Any, list] = {}


def _line_of(code: Any, lasti: int) -> int:
    """The source line of instruction offset `lasti` in `code` (co_lines, once per code)."""
    table = _line_tables.get(code)
    if table is None:
        table = _line_tables[code] = [(start, end, line) for start, end, line in code.co_lines()]
    for start, end, line in table:
        if start <= lasti < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


def _dtype_name(dtype: Any) -> str:
    name = str(dtype)
    return name[6:] if name.startswith("torch.") else name


# ---------------------------------------------------------------- process groups and call sites

class _Route:
    """How ops of one kind on one process group are recorded: the group's name in the
    trace, its counter (collectives and p2p ops are numbered apart, per group), its global
    ranks (a group rank -> the global rank). Routes are found by the group's id; `group` is
    a weak reference (a script's destroyed group is freed as untraced), checked on every
    use, so a new group that reuses a freed one's id gets a route of its own."""
    __slots__ = ("rid", "op", "pg", "p2p", "count", "ranks", "group", "via_cpp")

    def __init__(self, rid: int, op: str, pg: str, p2p: bool, count: "_Count", ranks: list[int],
                 group: Any, via_cpp: bool):
        self.rid, self.op, self.pg, self.p2p, self.count = rid, op, pg, p2p, count
        self.ranks, self.group, self.via_cpp = ranks, _ref(group), via_cpp


class _Count:
    """A group's collective (or p2p) numbers: `counter` hands them out (next() is atomic),
    `issued` is the last one handed out, so that an op that raised before it was issued
    gives its number back (the next op gets it, as in torch's own count)."""
    __slots__ = ("counter", "issued")

    def __init__(self) -> None:
        self.counter, self.issued = itertools.count(1), 0

    def next(self) -> int:
        seq = self.issued = next(self.counter)         # (the ProcessGroup wrapper does this inline)
        return seq


def _ref(obj: Any) -> Any:
    """A weak reference, or (an object that takes none) a callable that returns it."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


_route_ids = itertools.count(1)
_routes: dict[tuple[str, int, bool], _Route] = {}
_counters: dict[tuple[str, bool], _Count] = {}   # (pg name, p2p) -> its numbers
_groups: dict[int, tuple[Any, str, list[int]]] = {}  # id(group) -> (its ref, name, global ranks); G line written
_P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_p2p_ops"})
# torch.distributed functions that issue exactly one op: the op is named after the one the
# script called (else after the innermost public function on the way: all_gather for
# all_gather_object's, isend for batch_isend_irecv's)
_ONE_OP_APIS = frozenset({
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single",
    "gather", "scatter", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv",
    "all_reduce_coalesced", "all_gather_coalesced"})


def _route(op: str, group: Any, via_cpp: bool) -> _Route | None:
    """The route of `op` on `group`; None when it cannot be recorded (no process group
    known to torch.distributed yet, a group this rank is not in)."""
    route = _routes.get((op, id(group), via_cpp))
    if route is not None and route.group() is group:
        return route
    named = _groups.get(id(group))
    if named is None or named[0]() is not group:
        try:
            named = _name_group(group)
        except Exception:          # noqa: BLE001 - not a group torch.distributed knows
            return None
    _, name, ranks = named
    p2p = op in _P2P_OPS
    count = _counters.get((name, p2p))
    if count is None:
        count = _counters[(name, p2p)] = _Count()
    route = _routes[(op, id(group), via_cpp)] = _Route(next(_route_ids), op, name, p2p, count, ranks,
                                                       group, via_cpp)
    return route


def _name_group(group: Any) -> tuple[Any, str, list[int]]:
    """default_pg, the group's description, or pg<its c10d name> (Flight Recorder's
    numbering); a G line the first time."""
    import torch.distributed as dist

    c10d = dist.distributed_c10d
    world = getattr(getattr(c10d, "_world", None), "default_pg", None)
    if group is world:
        name = "default_pg"
    else:
        desc = getattr(group, "group_desc", "") or ""
        name = desc if desc and desc != "undefined" else f"pg{getattr(group, 'group_name', id(group))}"
    ranks = [int(r) for r in dist.get_process_group_ranks(group)]
    named = _groups[id(group)] = (_ref(group), name, ranks)
    _write({"k": "G", "pg": name, "ranks": ranks})
    return named


_torch_dir = ""
_c10d_file = ""
_USER, _PLAIN = 1, 0
# Both keyed by id(code): a code object's hash is not cached, and hashes its constants,
# nested functions' code included (6.9 µs for workloads/bench.py's module: every op of a
# loop at a script's top level paid it). The codes are kept in _codes, so no id is reused.
_frames: dict[int, Any] = {}         # id(code) -> _USER, _PLAIN, or the torch.distributed function's name
_names: dict[int, Any] = {}          # id(code of the direct caller) -> the op's name (isend ...) or None
_codes: list[Any] = []               # every code in either: alive, so that their ids stay theirs
_WRAPPERS = frozenset({"wrapper", "_wrapper", "inner", "decorator", "decorate_context", "_fn"})
_PUBLIC: frozenset[str] = frozenset()


_STDLIB = os.path.dirname(os.__file__) + os.sep


def _shim(path: str) -> bool:
    """The standard library's or typing_extensions' code (a `@deprecated` wrapper around a
    torch function): not the script's line."""
    if path.startswith(_STDLIB) and "-packages" + os.sep not in path:
        return True
    return path.endswith(os.sep + "typing_extensions.py")


def _classify(code: Any) -> Any:
    path = code.co_filename
    if path == _here or _shim(path) or path.startswith("<frozen"):
        kind = _PLAIN
    elif not path.startswith(_torch_dir):
        kind = _USER
    elif os.sep + "distributed" + os.sep in path and code.co_name[:1].isalpha() \
            and code.co_name not in _WRAPPERS:
        kind = code.co_name             # a public torch.distributed function (all_gather_object ...)
    else:
        kind = _PLAIN
    _frames[id(code)] = kind
    _codes.append(code)
    return kind


def _where(frame: Any) -> tuple[Any, int, str | None]:
    """(code, instruction offset) of the first frame outside torch and this module (the
    script's or the workload's call), and the outermost public torch.distributed function
    on the way (all_gather_object for the all_gather it makes; None when called directly).
    The offset, not the line: `f_lineno` scans the code's line table, 17 µs at the end of a
    3,000-line module; the site's S line, written once, has the line (`_line_of`)."""
    api = None
    get = _frames.get
    while frame is not None:
        code = frame.f_code
        kind = get(id(code))
        if kind is None:
            kind = _classify(code)
        if kind is _USER:
            return code, frame.f_lasti, api
        if kind is not _PLAIN:
            api = kind
        frame = frame.f_back
    return None, 0, api


def _op_name(code: Any) -> str | None:
    """The name the direct caller gives the op: the torch.distributed function that called
    the group's method (isend and send both call `group.send`), else None."""
    name = _names.get(id(code), False)
    if name is False:
        _codes.append(code)
        name = _names[id(code)] = code.co_name if code.co_filename == _c10d_file \
            and code.co_name in _PUBLIC else None
    return name


def _tensor_info(value: Any) -> tuple[Any, Any, int | None]:
    """(dtype, shape, bytes) of an op's input: a tensor, or a list (of lists) of them:
    the first tensor's dtype and shape, every tensor's bytes. Bytes None: one tensor's,
    worked out from dtype and shape when the site's S line is written."""
    if isinstance(value, _tensor_class):
        return value.dtype, value.shape, None
    if type(value) is list and len(value) == 1 and isinstance(value[0], _tensor_class):
        return value[0].dtype, value[0].shape, None          # group.allreduce([tensor], opts)
    if isinstance(value, (list, tuple)):
        flat = []
        for v in value:
            if isinstance(v, (list, tuple)):
                flat.extend(v)
            else:
                flat.append(v)
        tensors = [v for v in flat if isinstance(v, _tensor_class)]
        if tensors:
            return tensors[0].dtype, tensors[0].shape, sum(t.nbytes for t in tensors)
    return None, None, 0


_ids = itertools.count(1)
_local = threading.local()


# ---------------------------------------------------------------- 1. ops issued from Python

# ProcessGroup's methods that issue an op: name in the trace, index and keyword of the
# input whose size is recorded, kind of the int that follows (peer or root; group rank).
# A method that is not here (one a later torch adds) is not wrapped: its op still reaches
# the Autograd kernel and is recorded there (2.), at that path's cost.
PG_METHODS: dict[str, tuple[str, int, str | None]] = {
    "allreduce": ("all_reduce", 0, None),
    "allreduce_coalesced": ("all_reduce_coalesced", 0, None),
    "broadcast": ("broadcast", 0, "root"),
    "reduce": ("reduce", 0, "root"),
    "allgather": ("all_gather", 1, None),
    "_allgather_base": ("all_gather_into_tensor", 1, None),
    "all_gather_single": ("all_gather_into_tensor", 1, None),
    "allgather_coalesced": ("all_gather_coalesced", 1, None),
    "allgather_into_tensor_coalesced": ("all_gather_into_tensor_coalesced", 1, None),
    "all_gather_single_coalesced": ("all_gather_into_tensor_coalesced", 1, None),
    "reduce_scatter": ("reduce_scatter", 1, None),
    "_reduce_scatter_base": ("reduce_scatter_tensor", 1, None),
    "reduce_scatter_single": ("reduce_scatter_tensor", 1, None),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor_coalesced", 1, None),
    "reduce_scatter_single_coalesced": ("reduce_scatter_tensor_coalesced", 1, None),
    "alltoall": ("all_to_all", 1, None),
    "alltoall_base": ("all_to_all_single", 1, None),
    "all_to_all_single": ("all_to_all_single", 1, None),
    "gather": ("gather", 1, "root"),
    "scatter": ("scatter", 0, "root"),       # what each rank receives: the root alone has inputs
    "barrier": ("barrier", -1, None),
    "monitored_barrier": ("monitored_barrier", -1, None),
    "send": ("send", 0, "peer"),
    "recv": ("recv", 0, "peer"),
    "recv_anysource": ("recv", 0, None),
}
_excluded = None                      # torch._C._dispatch_tls_is_dispatch_key_excluded
_exclude = None                       # torch._C._dispatch_tls_set_dispatch_key_excluded
_AUTOGRAD = None                      # DispatchKey.AutogradFunctionality


def _where_int(args: tuple, kwargs: dict, kind: str | None) -> int | None:
    """A root (broadcast/reduce/gather/scatter: opts.rootRank or the int argument) or a
    peer (send/recv: the int argument), as a group rank."""
    if kind == "peer":
        value = args[1] if len(args) > 1 else kwargs.get("dstRank", kwargs.get("srcRank"))
        return value if type(value) is int else None
    for value in args[1:]:
        root = getattr(value, "rootRank", None)
        if root is not None:
            return int(root)
        if type(value) is int:
            return value
    root = kwargs.get("root")
    if root is None and "opts" in kwargs:
        root = getattr(kwargs["opts"], "rootRank", None)
    return int(root) if root is not None else None


# The methods that reduce: their options' reduce op (SUM, MAX ...) must agree across
# ranks, and gloo does not check it (a rank that takes the MAX where the others SUM
# completes, with other values: the zoo's reduce_op_mismatch).
_REDUCING = frozenset({"allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "_reduce_scatter_base",
                       "reduce_scatter_single", "reduce_scatter_tensor_coalesced",
                       "reduce_scatter_single_coalesced"})


def _reduce_op(args: tuple, kwargs: dict) -> Any:
    """The ReduceOp.RedOpType of a reducing method's call (its options' reduceOp, or a
    ReduceOp given directly); None when it cannot be read."""
    opts = args[1] if len(args) > 1 else kwargs.get("opts", kwargs.get("op"))
    red = getattr(opts, "reduceOp", opts)
    red = getattr(red, "op", red)
    return red if type(red) is _red_op_type else None


def _wrap_method(method: str, original: Any, op: str, index: int, kind: str | None) -> Any:
    """The recording wrapper of one ProcessGroup method. Every step is inline and cheap:
    it runs once per op, right after the last op left the caches cold (docs/trace.md,
    "What it costs")."""
    time_ns = time.time_ns
    getframe = sys._getframe
    waiting, ids, names, polled, sites_get, begin_line = _waiting, _ids, _names, _polled, _sites.get, _BEGIN
    tensor_class = _tensor_class
    anysource = method == "recv_anysource"
    returns_work = method != "monitored_barrier"
    reducing = method in _REDUCING
    routes: dict[int, _Route] = {}          # id(group) -> route

    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        entered = time_ns()
        route = routes.get(id(self))
        if route is None or route.group() is not self:
            route = _route(op, self, False)
            if route is None:               # a group torch.distributed does not know: not recorded
                return original(self, *args, **kwargs)
            routes[id(self)] = route
        grad = False
        if index >= 0:
            value = args[index] if len(args) > index else _input_kwarg(method, kwargs)
            first = value[0] if type(value) is list and len(value) == 1 else value
            if isinstance(first, tensor_class):
                dtype, shape, nbytes, grad = first.dtype, first.shape, None, first.requires_grad
            else:
                dtype, shape, nbytes = _tensor_info(value)
                grad = value is not None and _needs_grad(value)
        else:
            value, dtype, shape, nbytes = None, None, None, 0
        where = _where_int(args, kwargs, kind) if kind else None
        if where is not None and 0 <= where < len(route.ranks):
            where = route.ranks[where]
        reduce = _reduce_op(args, kwargs) if reducing else None
        caller = getframe(1)
        name = names.get(id(caller.f_code), False)
        if name is False:
            name = _op_name(caller.f_code)
        code, lasti, api = _where(caller)
        ident = next(ids)
        count = route.count
        seq = count.issued = next(count.counter)
        if polled:
            _poll()                         # works without a future that completed meanwhile
        # _begin, inline (the op's path: every call counts twice in a ping-pong of p2p ops)
        site = sites_get((route.rid, id(code), lasti, shape, dtype, nbytes, where, name, api, reduce))
        if site is None:
            site = _site(route, dtype, shape, nbytes, where, code, lasti, name, api, reduce)
        (_sink or _new_sink()).write(begin_line % (ident, site, seq, entered - _t0))
        if grad and _is_grad_enabled():
            _warn_on_backprop(value, f"c10d::{method}")
        excluded = _excluded(_AUTOGRAD)
        if not excluded:
            _exclude(_AUTOGRAD, True)
        try:
            work = original(self, *args, **kwargs)
        except BaseException as exc:
            _raised(ident, route, seq, exc)     # raised, not issued: not a collective of the group
            raise
        finally:
            if not excluded:
                _exclude(_AUTOGRAD, False)
        if _coalescing and getattr(_local, "coalescing", None) is not None:
            _local.coalescing.append(ident)       # ends with the work _end_coalescing returns
        elif not returns_work or work is None:
            _end(ident, time_ns())
        else:
            waiting[id(work)] = (weakref.ref(work), ident, route if anysource else None)
            if len(waiting) > _sweep_at:
                _sweep_waiting()            # works never waited on, freed since
        return work

    wrapper = traced
    if _fast is not None:               # the same steps in C for the common call; the rest here
        wrapper = _fast.Traced(original, traced, routes, index, kind, returns_work, anysource, reducing)
    wrapper.__name__, wrapper.__qualname__ = original.__name__, getattr(original, "__qualname__", original.__name__)
    wrapper.__doc__, wrapper.__wrapped__ = original.__doc__, original
    return wrapper


_INPUT_KEYS = {"allgather": "input_tensors", "_allgather_base": "input", "all_gather_single": "input",
               "reduce_scatter": "input_tensors", "_reduce_scatter_base": "inputTensor",
               "reduce_scatter_single": "inputTensor", "alltoall": "input", "alltoall_base": "input",
               "all_to_all_single": "input", "gather": "input_tensors", "scatter": "output_tensors"}


def _input_kwarg(method: str, kwargs: dict) -> Any:
    key = _INPUT_KEYS.get(method)
    if key is not None:
        return kwargs.get(key)
    return kwargs.get("tensors", kwargs.get("tensor"))


_tensor_class: Any = ()               # torch.Tensor, once installed
_red_op_type: Any = ()                # torch.distributed.ReduceOp.RedOpType, once installed
_is_grad_enabled: Any = None          # torch.is_grad_enabled, once installed
_coalescing = 0                       # groups between _start_coalescing and _end_coalescing


def _needs_grad(value: Any) -> bool:
    if type(value) is list:
        for v in value:
            if v.requires_grad if isinstance(v, _tensor_class) else _needs_grad(v):
                return True
        return False
    return getattr(value, "requires_grad", False) is True


def _warn_on_backprop(value: Any, op: str) -> None:
    """What torch's autograd fallback does for a c10d op on a tensor that requires grad
    (the op is entered below autograd when traced): warn when backward reaches it."""
    import warnings

    def warn(grad: Any) -> None:
        warnings.warn(f"{op}: an autograd kernel was not registered to the Autograd key(s) but we are "
                      "trying to backprop through it. This may lead to silently incorrect behavior.",
                      UserWarning, stacklevel=2)

    tensors = value if isinstance(value, (list, tuple)) else [value]
    for t in tensors:
        if isinstance(t, (list, tuple)):
            _warn_on_backprop(t, op)
        elif getattr(t, "requires_grad", False):
            t.register_hook(warn)


def _start_coalescing(original: Any) -> Any:
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _coalescing
        result = original(self, *args, **kwargs)
        _local.coalescing = []
        _coalescing += 1
        return result

    traced.__name__, traced.__doc__, traced.__wrapped__ = original.__name__, original.__doc__, original
    return traced


def _end_coalescing(original: Any) -> Any:
    """The ops issued between _start_coalescing and here end when this work does."""
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _coalescing
        idents = getattr(_local, "coalescing", None) or []
        if getattr(_local, "coalescing", None) is not None:
            _local.coalescing = None
            _coalescing = max(0, _coalescing - 1)
        work = original(self, *args, **kwargs)
        if idents:
            if work is None:
                now = time.time_ns()
                for ident in idents:
                    _end(ident, now)
            else:
                _waiting[id(work)] = (weakref.ref(work), tuple(idents), None)
        return work

    traced.__name__, traced.__doc__, traced.__wrapped__ = original.__name__, original.__doc__, original
    return traced


# ---------------------------------------------------------------- completion (Work's methods)

# id(work) -> (weak reference to it, op id or ids, route of a recv from any source). Weak:
# a work nobody waits on is freed as untraced (its tensors with it); entries whose work is
# gone are swept when the table has grown to twice what was left at the last sweep.
_waiting: dict[int, tuple[Any, Any, Any]] = {}
SWEEP_AT = 4096
_sweep_at = SWEEP_AT


def _sweep_waiting() -> None:
    global _sweep_at
    for key, entry in list(_waiting.items()):
        if entry[0]() is None:
            _waiting.pop(key, None)
    _sweep_at = max(SWEEP_AT, 2 * len(_waiting))


def _ended(work: Any) -> None:
    entry = _waiting.pop(id(work), None)
    if entry is None:
        return
    ref, idents, anysource = entry
    if ref() is not work:               # a freed work's id, reused
        return
    now = time.time_ns()
    if type(idents) is int:
        if anysource is None:
            _end(idents, now)
        else:
            try:
                source = work._source_rank()
                peer = anysource.ranks[source] if 0 <= source < len(anysource.ranks) else source
            except Exception:          # noqa: BLE001 - the end matters more than the sender
                peer = None
            _end_from(idents, now, peer)
    else:
        for ident in idents:
            _end(ident, now)


def _wrap_wait(original: Any) -> Any:
    waiting, end_line, time_ns = _waiting, _END, time.time_ns

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if waiting:
            entry = waiting.get(id(self))
            if entry is not None and type(entry[1]) is int and entry[2] is None and entry[0]() is self:
                del waiting[id(self)]               # the common case, inline: one op, its end now
                (_sink or _new_sink()).write(end_line % (entry[1], time_ns() - _t0))
            elif entry is not None:
                _ended(self)
        return result

    wrapper = wait if _fast is None else _fast.Wait(original, wait)
    wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = original.__name__, original.__doc__, original
    return wrapper


def _wrap_is_completed(original: Any) -> Any:
    def is_completed(self: Any) -> Any:
        done = original(self)
        if done and _waiting:
            _ended(self)
        return done

    is_completed.__name__, is_completed.__doc__ = original.__name__, original.__doc__
    is_completed.__wrapped__ = original
    return is_completed


def _wrap_get_future(original: Any) -> Any:
    """The work's own future; the op ends when it completes (a DDP comm hook returns it
    and never waits; the callback runs on the backend's thread)."""
    def get_future(self: Any) -> Any:
        future = original(self)
        entry = _waiting.pop(id(self), None) if _waiting else None
        if entry is not None and entry[0]() is self:
            idents = entry[1] if type(entry[1]) is tuple else (entry[1],)

            def done(_: Any) -> None:          # the work itself may be gone by then
                now = time.time_ns()
                for ident in idents:
                    _end(ident, now)
            try:
                future.add_done_callback(done)
            except Exception:          # noqa: BLE001 - the future is the script's; tracing must not break it
                _waiting[id(self)] = entry
        return future

    get_future.__name__, get_future.__doc__, get_future.__wrapped__ = original.__name__, original.__doc__, original
    return get_future


# ---------------------------------------------------------------- 2. ops issued from C++

# c10d op -> the name in the trace (the rest: the op's name without its trailing "_")
OP_NAMES = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce_coalesced",
            "allgather": "all_gather", "_allgather_base": "all_gather_into_tensor",
            "allgather_coalesced": "all_gather_coalesced",
            "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
            "_reduce_scatter_base": "reduce_scatter_tensor", "alltoall": "all_to_all",
            "alltoall_base": "all_to_all_single", "recv_any_source": "recv"}
_libraries: dict[str, Any] = {}      # torch.library.Library per namespace (kept alive: they hold the kernels)


def c10d_ops() -> dict[str, Any]:
    """Every c10d dispatcher op that takes a ProcessGroup, from torch's own registry
    (name -> OpOverload): the ops every ProcessGroup method, on every backend, ends in."""
    return {name: op for name, op in _ops("c10d", "CPU").items()
            if any("ProcessGroup" in str(a.type) for a in op._schema.arguments)}


def functional_ops() -> dict[str, Any]:
    """Every functional collective op (`torch.ops._c10d_functional`), from torch's registry."""
    return _ops("_c10d_functional", "CompositeExplicitAutograd")


def _ops(namespace: str, key: str) -> dict[str, Any]:
    import torch

    found = {}
    for full in sorted(torch._C._dispatch_get_registrations_for_dispatch_key(key)):
        if not full.startswith(namespace + "::"):
            continue
        name, _, overload = full[len(namespace) + 2:].partition(".")
        try:
            found[full[len(namespace) + 2:]] = getattr(getattr(getattr(torch.ops, namespace), name),
                                                       overload or "default")
        except (AttributeError, RuntimeError):
            continue
    return found


class _Shape:
    """Where an op's group, input and peer/root are among its schema's arguments."""
    __slots__ = ("name", "group", "input", "where", "where_kind")

    def __init__(self, op: Any, name: str, group_arg: str):
        args = op._schema.arguments
        names = [a.name for a in args]
        self.name = name
        self.group = next(i for i, a in enumerate(args) if group_arg == a.name or group_arg in str(a.type))
        tensors = [i for i, a in enumerate(args) if "Tensor" in str(a.type) and not a.kwarg_only]
        inputs = [i for i in tensors if "input" in names[i]]
        self.input = inputs[0] if inputs else (tensors[0] if tensors else -1)
        if name in ("barrier", "monitored_barrier"):
            self.input = -1                 # a placeholder tensor, not data
        elif name == "scatter":
            self.input = 0                  # what each rank receives: the root alone has inputs
        self.where, self.where_kind = None, None
        for key, kind in (("dst", "peer"), ("src", "peer"), ("root_rank", "root")):
            if key in names:
                self.where, self.where_kind = names.index(key), kind
        if self.where_kind == "peer" and name == "broadcast":
            self.where_kind = "root"


def _c10d_kernel(full_name: str, op: Any) -> Any:
    """The Autograd-key kernel of one c10d op (torch has none there: its autograd fallback
    runs): record the op, run it below autograd, end the record when its work's future
    completes (or at once when it returns no work: it has completed)."""
    import torch

    base = full_name.rstrip("_")
    shape = _Shape(op, OP_NAMES.get(base, base), "ProcessGroup")
    after = torch._C._after_autograd_keyset
    redispatch = op._handle.redispatch_boxed
    unbox_group = torch._C._distributed_c10d.ProcessGroup.unbox
    work_class = torch._C._distributed_c10d.Work
    get_future = work_class.__dict__["get_future"]
    get_future = getattr(get_future, "__wrapped__", get_future)     # torch's own
    script_object = torch.ScriptObject

    def kernel(keyset: Any, *args: Any) -> Any:
        try:
            recorded = _record_cpp(shape, args, unbox_group(args[shape.group]), _caller_frame())
        except Exception:          # noqa: BLE001 - recording must never stop the op
            recorded = None
        try:
            out = redispatch(keyset & after, *args)
        except BaseException as exc:
            if recorded is not None:
                _raised(*recorded, exc)
            raise
        if recorded is not None:
            ident = recorded[0]
            work = out[-1] if isinstance(out, tuple) and out else out
            issued = getattr(_local, "issued", None)        # a functional collective's (see there)
            if isinstance(work, script_object):
                work = work_class.unbox(work)
                future = None
                if issued is None:
                    try:
                        future = get_future(work)
                    except Exception:          # noqa: BLE001 - gloo's send/recv, reduce_scatter: no future
                        future = None
                if future is None:
                    # ends when its output is waited on (a functional collective: a callback
                    # on its future would run on gloo's thread while the script runs, and take
                    # the GIL from it twice per op: +115 µs of the main thread's CPU per op),
                    # or when a later op or the exit finds it completed
                    _polled[ident] = work
                    if len(_polled) > MAX_POLLED:
                        _polled.popitem(last=False)
                else:
                    future.add_done_callback(lambda _, i=ident: _end(i, time.time_ns()))
            else:
                _end(ident, time.time_ns())                 # returned nothing: it has completed
            if issued is not None:
                issued.append(ident)
        return out

    kernel.__name__ = f"labctl_trace_{base}"
    return kernel


def _functional_kernel(full_name: str, original: Any) -> Any:
    """The backend-key kernel (CPU, CUDA) of one functional collective, around torch's own
    (`original`). torch reaches it through its autograd fallback, which excludes autograd's
    dispatch keys, so the c10d op torch's kernel issues would pass (2)'s kernel by: this
    lets autograd's key back in for that call only, and the c10d op is recorded there, as
    every other (with its work's future for the end). Autograd still sees the functional
    op exactly as before: this runs below it."""
    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        excluded = _excluded(_AUTOGRAD)
        if excluded:
            _exclude(_AUTOGRAD, False)
        _local.issued = issued = []
        try:
            out = original.call_boxed(keyset, *args, **kwargs)
        finally:
            _local.issued = None
            if excluded:
                _exclude(_AUTOGRAD, True)
        polled = [i for i in issued if i in _polled]
        if polled:                          # no future: the op ends when its output is waited on
            for t in (out if isinstance(out, (list, tuple)) else [out]):
                cdata = getattr(t, "_cdata", None)
                if cdata is not None:
                    _outputs[cdata] = polled
            while len(_outputs) > MAX_POLLED:
                _outputs.popitem(last=False)
        return out

    kernel.__name__ = f"labctl_trace_{full_name.split('.')[0]}"
    return kernel


# output tensor (its TensorImpl's address) -> ids of the ops (without a future) it comes from
_outputs: "collections.OrderedDict[int, list]" = collections.OrderedDict()


def _wait_tensor_kernel(op: Any) -> Any:
    """wait_tensor at BackendSelect (the last key before torch's own kernel; every way of
    waiting reaches it: `wait_tensor`, `.wait()`, and an AsyncCollectiveTensor used in
    arithmetic, whose __torch_dispatch__ runs below ADInplaceOrView), redispatched so that
    torch's blocking wait runs with the GIL released as before: ends the ops its tensor
    came from that have no future to say so."""
    import torch

    after = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    redispatch = op._handle.redispatch_boxed

    def kernel(keyset: Any, *args: Any) -> Any:
        out = redispatch(keyset & after, *args)
        if _outputs:
            try:
                idents = _outputs.pop(args[0]._cdata, None)
            except Exception:          # noqa: BLE001 - never stop the wait
                idents = None
            for ident in idents or ():
                if _polled.pop(ident, None) is not None:
                    _end(ident, time.time_ns())
        return out

    return kernel


# op id -> its Work, for works that have no future (gloo's send/recv, reduce_scatter_tensor):
# asked `is_completed()` when the rank's next op enters, and at exit
_polled: "collections.OrderedDict[int, Any]" = collections.OrderedDict()
MAX_POLLED = 10_000
_is_completed: Any = None             # torch's own Work.is_completed


def _poll() -> None:
    for ident, work in list(_polled.items()):
        try:
            done = _is_completed(work)
        except Exception:          # noqa: BLE001 - a failed work: it never completed
            done = None
        if done is None or done:
            _polled.pop(ident, None)
            if done:
                _end(ident, time.time_ns())


def _caller_frame() -> Any:
    """The innermost Python frame below the kernel's caller (None: a thread with no
    Python frame, e.g. CUDA's autograd threads)."""
    try:
        return sys._getframe(2)
    except ValueError:
        return None


def _record_cpp(shape: _Shape, args: tuple, group: Any, frame: Any) -> tuple[int, _Route, int] | None:
    entered = time.time_ns()
    value = args[shape.input] if shape.input >= 0 else None
    if value is not None:
        first = value
        while isinstance(first, (list, tuple)) and first:
            first = first[0]
        if getattr(getattr(first, "device", None), "type", None) == "meta" or \
                type(first).__name__ == "FakeTensor":
            return None                   # tracing a program (torch.compile), not running it
    route = _route(shape.name, group, True)
    if route is None:
        return None
    dtype, shape_, nbytes = _tensor_info(value) if value is not None else (None, None, 0)
    where = args[shape.where] if shape.where is not None else None
    if type(where) is int and 0 <= where < len(route.ranks):
        where = route.ranks[where]
    elif type(where) is not int:
        where = None
    code, lasti, api = _where(frame)
    ident = next(_ids)
    seq = route.count.next()
    if _polled:
        _poll()
    _begin(ident, route, seq, dtype, shape_, nbytes, where, code, lasti, None, api, entered)
    return ident, route, seq


# ---------------------------------------------------------------- who the rank is, its clock

_inits = itertools.count(1)


def init_process_group(*args: Any, **kwargs: Any) -> Any:
    """torch's init_process_group, then an M line (who this rank is) and a C line (its
    clock against rank 0's). A module-level function: `pickle` finds it by its name."""
    result = _original_init(*args, **kwargs)
    try:
        _after_init()
    except Exception as exc:        # noqa: BLE001 - the lab goes on without the rank's details
        _write({"k": "C", "error": str(exc)[:200]})
    return result


_original_init: Any = None


def _after_init() -> None:
    import torch.distributed as dist

    _write({"k": "M", "rank": dist.get_rank(), "world": dist.get_world_size(),
            "node": int(os.environ.get("GROUP_RANK") or os.environ.get("NODE_RANK") or 0),
            "local_rank": int(os.environ.get("LOCAL_RANK") or 0), "backend": str(dist.get_backend()),
            "host": socket.gethostname(), "pid": os.getpid(), "t": time.time_ns() - _t0})
    try:
        _measure_clock(dist)
    except Exception as exc:        # noqa: BLE001 - the lab goes on without an offset
        _write({"k": "C", "error": str(exc)[:200]})


def _measure_clock(dist: Any) -> None:
    """Offset of this rank's wall clock against rank 0's, over the store (no collective,
    no p2p op: nothing in the trace or Flight Recorder, no NCCL communicator): an NTP
    estimate, best of CLOCK_ROUNDS round trips, rank 0's time minus the midpoint of the
    round trip. Each rank pushes its pings onto one queue in the store and rank 0 answers
    them in the order they arrive, so no rank waits for another's turn; every wait is
    bounded, and a rank that never comes costs rank 0 one bounded wait in all."""
    from datetime import timedelta

    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        _write({"k": "C", "offset_ns": 0, "rtt_ns": 0})
        return
    # No restart count in the prefix: an agent that restarts its workers for another node's
    # sake keeps TORCHELASTIC_RESTART_COUNT at 0 (pytorch#135712), so ranks of one attempt
    # would disagree and wait CLOCK_WAIT_S on keys nobody answers. Elastic labs get a fresh
    # store per attempt (TORCH_DISABLE_SHARE_RDZV_TCP_STORE, labctl/plan.py): nothing stale.
    store = dist.PrefixStore(f"labctl-clock/{next(_inits)}/",
                             dist.distributed_c10d._get_default_store())
    patience = timedelta(seconds=CLOCK_WAIT_S)
    if rank == 0:
        _answer_clock(store, world)
        _write({"k": "C", "offset_ns": 0, "rtt_ns": 0})
        return
    best = None
    for i in range(CLOCK_ROUNDS):
        t0 = time.time_ns()
        store.queue_push("ping", f"{rank}/{i}")
        store.wait([f"{rank}/{i}/pong"], patience)
        t1 = int(store.get(f"{rank}/{i}/pong"))
        t2 = time.time_ns()
        sample = (t2 - t0, t1 - (t0 + t2) / 2)
        best = sample if best is None or sample[0] < best[0] else best
    _write({"k": "C", "offset_ns": int(best[1]), "rtt_ns": int(best[0])})


def _answer_clock(store: Any, world: int) -> None:
    """Rank 0: stamp every ping as it comes off the queue, until every rank's rounds are
    answered or CLOCK_WAIT_S has passed in all."""
    from datetime import timedelta

    queue = store.clone()               # its own connection: a blocking pop holds it
    deadline = time.monotonic() + CLOCK_WAIT_S
    for _ in range((world - 1) * CLOCK_ROUNDS):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        queue.set_timeout(timedelta(seconds=left))
        try:
            ping = queue.queue_pop("ping", True)
        except Exception:          # noqa: BLE001 - the ranks that never came: go on without them
            return
        now = time.time_ns()
        queue.set(f"{ping.decode(errors='replace')}/pong", str(now))


# ---------------------------------------------------------------- installing it

def install() -> bool:
    """Record every op torch issues on a process group, when LAB_TRACE says so
    (idempotent). True: installed."""
    global _installed, _torch_dir, _c10d_file, _PUBLIC, _excluded, _exclude, _AUTOGRAD
    global _original_init, _tensor_class, _is_grad_enabled, _is_completed, _red_op_type
    if _installed or not enabled():
        return _installed
    open_channel()
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return False
    c10d = dist.distributed_c10d
    C = torch._C
    _torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    _c10d_file = os.path.abspath(c10d.__file__)
    _PUBLIC = frozenset(n for n in getattr(c10d, "__all__", ()) if not n[0].isupper())
    _excluded, _exclude = C._dispatch_tls_is_dispatch_key_excluded, C._dispatch_tls_set_dispatch_key_excluded
    _AUTOGRAD = C.DispatchKey.AutogradFunctionality
    _tensor_class, _is_grad_enabled = torch.Tensor, torch.is_grad_enabled
    _red_op_type = C._distributed_c10d.ReduceOp.RedOpType

    _load_fast()
    group_class = C._distributed_c10d.ProcessGroup
    for method, (op, index, kind) in PG_METHODS.items():
        original = group_class.__dict__.get(method)
        if original is not None:
            setattr(group_class, method, _wrap_method(method, original, op, index, kind))
    for method, wrap in (("_start_coalescing", _start_coalescing), ("_end_coalescing", _end_coalescing)):
        original = group_class.__dict__.get(method)
        if original is not None:
            setattr(group_class, method, wrap(original))
    work_class = C._distributed_c10d.Work
    _is_completed = work_class.__dict__["is_completed"]
    for method, wrap in (("wait", _wrap_wait), ("is_completed", _wrap_is_completed),
                         ("get_future", _wrap_get_future)):
        original = work_class.__dict__.get(method)
        if original is not None:
            setattr(work_class, method, wrap(original))

    _install_kernels(torch)

    _original_init = c10d.init_process_group
    init_process_group.__doc__ = _original_init.__doc__
    init_process_group.__wrapped__ = _original_init
    c10d.init_process_group = dist.init_process_group = init_process_group
    _installed = True
    atexit.register(_at_exit)
    return True


_fast: Any = None                     # workloads._tracefast, when built and not turned off


def _load_fast() -> None:
    """The C fast path of the two hot wrappers (workloads/_tracefast.c), bound to this
    module's tables; None where it was not built or LAB_TRACE_FAST=0 (the Python wrappers
    then take every call: the same records)."""
    global _fast
    if os.environ.get("LAB_TRACE_FAST", "1") == "0":
        return
    try:
        import torch
        from . import _tracefast
        _tracefast.configure(globals())
        # c10's own functions for the dispatch-key toggles, where they agree with torch's
        _tracefast.use_c10(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"), int(_AUTOGRAD))
    except Exception:                  # noqa: BLE001 - not built, another Python: the Python wrappers
        return
    _fast = _tracefast


def _install_kernels(torch: Any) -> None:
    """(2): a kernel at the Autograd key of every c10d op, and one around torch's own at the
    backend keys of every functional collective."""
    c10d = _libraries["c10d"] = torch.library.Library("c10d", "IMPL")
    for full_name, op in c10d_ops().items():
        c10d.impl(full_name, _c10d_kernel(full_name, op), "Autograd", with_keyset=True)
    functional = _libraries["_c10d_functional"] = torch.library.Library("_c10d_functional", "IMPL")
    computed = torch._C._dispatch_get_computed_kernel_for_dispatch_key
    for full_name, op in functional_ops().items():
        if full_name == "wait_tensor":
            functional.impl(full_name, _wait_tensor_kernel(op), "BackendSelect", with_keyset=True)
        if full_name.split(".")[0] in ("wait_tensor", "_wrap_tensor_autograd"):
            continue                        # they issue nothing
        for key in ("CPU", "CUDA"):
            try:
                original = computed(f"_c10d_functional::{full_name}", key)
            except RuntimeError:
                continue
            functional.impl(full_name, _functional_kernel(full_name, original), key, with_keyset=True)


# ---------------------------------------------------------------- Flight Recorder, tracing on or off

def install_flight_recorder() -> bool:
    """Leave torch's Flight Recorder ring on (TORCH_FR_BUFFER_SIZE, read when the first
    process group is made) and start a daemon thread that prints the ring's newest entries,
    as FR_MARKER lines, whenever a byte arrives on this process's request FIFO
    (workloads/_stacks.fr_request_path; `_stacks.signal_ranks` writes it after the stacks).

    Why a FIFO and not a signal: a Python signal handler runs only once the main thread is
    back in Python, never while it is blocked in a collective; a sigwait thread needs the
    signal blocked in *every* other thread, but torch's import starts a native thread before
    this runs (that thread took SIGUSR2 and its default action killed the rank), and every
    subprocess a rank starts would inherit the blocked mask. The FIFO involves no signal and
    no mask; the thread's read releases the GIL, and so does gloo's wait, so it answers
    during a hang. True: the dump thread runs."""
    open_channel()
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FR_BUFFER)
    if os.environ.get("TORCH_FR_BUFFER_SIZE") == "0" or not hasattr(os, "mkfifo"):
        return False
    from . import _stacks

    path = _stacks.fr_request_path(os.getpid())
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        _prune(os.path.dirname(path))
        try:
            os.unlink(path)                 # an earlier process's, with this pid
        except FileNotFoundError:
            pass
        os.mkfifo(path, 0o600)
        fd = _park(os.open(path, os.O_RDWR))    # O_RDWR: never EOF; close-on-exec (PEP 446)
    except OSError:
        return False
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:            # not a forked child's atexit
            try:
                os.unlink(path)
            except OSError:
                pass

    def forget_in_child() -> None:          # a forked child has no dump thread: no FIFO fd
        try:
            os.close(fd)
        except OSError:
            pass

    atexit.register(remove)
    os.register_at_fork(after_in_child=forget_in_child)
    threading.Thread(target=_fr_waiter, args=(fd,), name="labctl-fr-dump", daemon=True).start()
    _dump_on_sigterm()
    return True


_last_dump = threading.Lock()
_dump_done = threading.Event()
_dump_thread: int | None = None     # the thread writing the dump, while it does
_dump_owner = os.getpid()
DUMP_WAIT_S = 10.0                  # a second caller waits this long for the first one's dump


def ended_badly(exc: BaseException) -> bool:
    """An exception that ends a rank as a failure (not `sys.exit(0)`)."""
    return not (isinstance(exc, SystemExit) and exc.code in (None, 0))


def dump_at_the_end() -> None:
    """A rank that ends abnormally (an exception of its own; a SIGTERM from torchrun or
    labctl because another rank failed) writes its pending trace lines and its Flight
    Recorder entries, once: the report then names the collective each rank was in and
    who never entered it, tracing on or off, before any deadline."""
    global _dump_thread
    if os.getpid() != _dump_owner:
        return                          # a forked child (a DataLoader worker) is no rank
    if not _last_dump.acquire(blocking=False):
        # A SIGTERM reaches both the main thread's handler and the wakeup-fd thread: the
        # one that came second waits for the first one's dump before it lets the process
        # die (else a rank sleeping in Python could die with its dump half written).
        if _dump_thread != threading.get_ident():
            _dump_done.wait(DUMP_WAIT_S)
        return
    _dump_thread = threading.get_ident()
    try:
        tick()                          # a T line (every record is written already)
        dump_flight_recorder()
    except BaseException as exc:        # noqa: BLE001 - the rank is ending anyway
        try:
            _emit_fr({"error": str(exc)[:200] or type(exc).__name__})
        except BaseException:           # noqa: BLE001 - e.g. a reentrant write from the handler
            pass
    finally:
        _dump_thread = None
        _dump_done.set()


def _dump_on_sigterm() -> None:
    """SIGTERM: dump (dump_at_the_end), then die of SIGTERM as before. A Python handler
    runs only once the main thread is back in Python, never while it waits in a
    collective, so the handler's C part also writes the signal's number to a wakeup pipe
    (signal.set_wakeup_fd) that a daemon thread reads. Left alone: a process that
    already handles SIGTERM or uses a wakeup fd (asyncio)."""
    import signal

    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    read_fd, write_fd = (_park(fd) for fd in os.pipe())
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return

    def on_sigterm(signum: int, frame: Any) -> None:          # the main thread, in Python
        dump_at_the_end()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def waiter() -> None:                                     # the main thread blocked in C
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if bytes([signal.SIGTERM]) in data:
                dump_at_the_end()
                _die_of(signal.SIGTERM)

    def forget_in_child() -> None:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:          # forked from another thread: the child cannot reset it
            pass

    global _dump_owner
    _dump_owner = os.getpid()
    signal.signal(signal.SIGTERM, on_sigterm)
    os.register_at_fork(after_in_child=forget_in_child)
    threading.Thread(target=waiter, name="labctl-sigterm-dump", daemon=True).start()


def _die_of(signum: int) -> None:
    """End the process by `signum`'s default action, as if no handler had been installed
    (torchrun and labctl read a death by SIGTERM). Python's signal.signal works only in
    the main thread: libc's signal() resets the handler from any."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.signal.argtypes, libc.signal.restype = (ctypes.c_int, ctypes.c_void_p), ctypes.c_void_p
        libc.signal(signum, 0)                                # SIG_DFL
        os.kill(os.getpid(), signum)
    finally:
        os._exit(128 + signum)                                # not reached unless the kill failed


def _prune(folder: str) -> None:
    """FIFOs of processes that are gone (a SIGKILLed rank runs no atexit)."""
    for name in os.listdir(folder):
        if name.isdigit():
            try:
                os.kill(int(name), 0)
            except ProcessLookupError:
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
            except OSError:
                pass


def _fr_waiter(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 64):         # one dump for every burst of requests
                continue
        except OSError:
            return
        try:
            tick()                          # the trace lines first (and a T line), if tracing is on
            dump_flight_recorder()
        except BaseException as exc:        # noqa: BLE001 - a failed dump must not end the thread
            _emit_fr({"error": str(exc)[:200] or type(exc).__name__})


def _emit_fr(record: dict[str, Any]) -> None:
    _out(records.fr_line(record))


def _fr_pg(entry: dict) -> str:
    """The same pg names as the recorder's: default_pg, a description, or pg<name>."""
    name, desc = (list(entry.get("process_group") or ["?", ""]) + [""])[:2]
    return desc if desc and desc != "undefined" else f"pg{name}"


def dump_flight_recorder() -> int:
    """FR_MARKER lines with this rank's newest collectives per process group (op, seq,
    shape, dtype, time created); with LAB_FR_DUMP_DIR also torch's own pickle dump
    (<dir>/rank_<R>, what `torchfrtrace` reads). Returns the entries written."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return 0
    c10d = torch._C._distributed_c10d
    rank = dist.get_rank()
    data = json.loads(c10d._dump_fr_trace_json(True, False))     # no C++ stacks: slow to symbolize
    per_pg: dict[str, list[dict]] = {}
    for entry in data.get("entries") or []:
        if not entry.get("is_p2p"):
            per_pg.setdefault(_fr_pg(entry), []).append(entry)
    written = 0
    for pg, entries in per_pg.items():
        for e in entries[-FR_KEEP:]:
            sizes, dtypes = e.get("input_sizes") or [], e.get("input_dtypes") or []
            _emit_fr({"rank": rank, "pg": pg, "seq": e.get("collective_seq_id"),
                      "op": str(e.get("profiling_name", "?")).split(":")[-1],
                      "shape": sizes[0] if sizes else [], "dtype": dtypes[0] if dtypes else None,
                      "t": e.get("time_created_ns")})
            written += 1
    _emit_fr({"rank": rank, "done": written})
    folder = os.environ.get(Env.FR_DUMP_DIR)
    if folder:
        os.makedirs(folder, exist_ok=True)
        # torchfrtrace reads every file whose name holds the prefix ("rank_"): a dump
        # cut short by SIGKILL must leave nothing it would take for a rank's dump
        partial = os.path.join(folder, f".partial-{os.getpid()}")
        with open(partial, "wb") as f:
            f.write(_with_pg_config(dist, c10d._dump_fr_trace(True, False)))
        os.replace(partial, os.path.join(folder, f"rank_{rank}"))
    return written


def _with_pg_config(dist: Any, raw: bytes) -> bytes:
    """gloo leaves the dump's pg_config nameless ({"": ...}); torchfrtrace looks groups up
    by name and stops with a KeyError. Fill it in from torch.distributed's own table."""
    import pickle

    dump = pickle.loads(raw)
    config = dump.get("pg_config") or {}
    if config and all(v.get("name") for v in config.values()):
        return raw
    c10d = dist.distributed_c10d
    default = c10d._get_default_group()
    fixed = {}
    for pg, name in list(c10d._world.pg_names.items()):
        try:
            ranks = dist.get_process_group_ranks(pg)
        except Exception:          # noqa: BLE001 - a group this rank is not in
            continue
        desc = "default_pg" if pg is default else (getattr(pg, "group_desc", "") or "undefined")
        fixed[str(name)] = {"name": str(name), "desc": desc, "ranks": str(ranks)}
    dump["pg_config"] = fixed or config
    return pickle.dumps(dump)


os.register_at_fork(after_in_child=_forked)     # a forked child starts with no recorder state
