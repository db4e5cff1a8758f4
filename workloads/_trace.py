"""Per-rank communication recorder (issue 21): every collective and p2p op of every
process group, as marked lines in the log stream.

`install()` (called by the workloads runner and by `workloads._script` before the
user's code runs, only when LAB_TRACE=1) wraps torch.distributed's collective and
p2p functions. Each op writes two lines to stdout (buffered, see FLUSH_S):

    @@labctl-trace {"k":"B","i":7,"op":"all_reduce","pg":"default_pg","seq":4,...,"t":<ns>}
    @@labctl-trace {"k":"E","i":7,"t":<ns>}

B when the rank enters the op (written *before* it, so a rank that hangs or dies in
it has said which op it was in), E when the op completed (async ops: when `wait()`
returned). Times are this rank's wall clock (time.time_ns). A "G" line names each
process group (name, global ranks) the first time it is used, an "M" line says who
this rank is, a "C" line its clock offset against rank 0 measured right after
init_process_group (NTP-style, over the original send/recv, not recorded).

Why the log stream: it is the one channel every backend collects (local files,
`docker compose logs`, `kubectl logs`), and lines written before a crash survive it
(lines wait at most FLUSH_S in memory; a rank SIGKILLed loses those). Memory per rank is
bounded by MAX_PENDING lines waiting plus the ops in flight (async works not yet waited).
Nothing is wrapped when tracing is off.

Fields and where they come from: op = the torch.distributed function called; pg =
"default_pg" for the world group, else the group's description/name; seq = this
recorder's per-group count of collectives (1, 2, ...; p2p ops count apart in
`p2p`), the same order torch's Flight Recorder numbers `collective_seq_id`;
peer = the other global rank of a p2p op (recv from any source: the sender, known
at the end), root = src/dst of rooted collectives; shape/dtype/bytes from the
op's input tensor(s); caller = the first frame outside torch and this module.
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
from typing import Any

from ._protocol import CLOCK_ROUNDS, FR_MARKER, TRACE_MARKER as MARKER
from ._protocol import Env

FR_BUFFER = "2000"                  # TORCH_FR_BUFFER_SIZE unless the user set it (torch's default size)
FR_KEEP = 8                         # newest entries per process group written at a dump

_installed = False
_local = threading.local()
_groups: dict[int, str] = {}               # id(pg) -> name (G line written)
_torch_dir = ""
_here = os.path.abspath(__file__)

# op -> (index and keyword of the tensor that says the op's size, kind, peer/root keyword and index)
_P2P = {"send": "dst", "recv": "src", "isend": "dst", "irecv": "src"}
_COLLECTIVES: dict[str, tuple[int, str, str | None, int | None]] = {
    "all_reduce": (0, "tensor", None, None),
    "broadcast": (0, "tensor", "src", 1),
    "reduce": (0, "tensor", "dst", 1),
    "all_gather": (1, "tensor", None, None),
    "all_gather_into_tensor": (1, "input_tensor", None, None),
    "reduce_scatter": (0, "output", None, None),
    "reduce_scatter_tensor": (1, "input", None, None),
    "all_to_all": (1, "input_tensor_list", None, None),
    "all_to_all_single": (1, "input", None, None),
    "gather": (0, "tensor", "dst", 2),
    "scatter": (0, "tensor", "src", 2),
    "barrier": (-1, "", None, None),
    "monitored_barrier": (-1, "", None, None),
    # torch's own C++ ops that DDP calls through torch.distributed (see _install_ddp)
    "_broadcast_coalesced": (1, "tensors", "src", 3),
    "_verify_params_across_processes": (-1, "", None, None),
}
_GROUP_INDEX = {"all_reduce": 2, "broadcast": 2, "reduce": 3, "all_gather": 2,
                "all_gather_into_tensor": 2, "reduce_scatter": 3, "reduce_scatter_tensor": 3,
                "all_to_all": 2, "all_to_all_single": 4, "gather": 3, "scatter": 3, "barrier": 0,
                "monitored_barrier": 0, "send": 2, "recv": 2, "isend": 2, "irecv": 2,
                "_broadcast_coalesced": 0, "_verify_params_across_processes": 0}


def enabled() -> bool:
    return os.environ.get(Env.TRACE, "") not in ("", "0", "false", "False")


# What an op does before and after it is kept to a few attribute reads and one deque
# append of a tuple: right after a large op the CPU's caches hold the tensor, not the
# interpreter's data, and every Python step then costs ~10x its warm time (measured: the
# old recorder, which built each JSON line in the op's thread, cost ~50 µs per 1 MiB
# all_reduce with 2 ranks on 2 cores, 7 µs warm). The lines are put together later, by a
# daemon thread that writes everything pending every FLUSH_S (one write and one flush: a
# flush per op cost more than the rest). The B line of an op a rank hangs in still
# reaches the log within FLUSH_S, because gloo's (and NCCL's) wait releases the GIL. Also
# flushed: when MAX_PENDING records wait (by the op's own thread: memory stays bounded,
# nothing is dropped), when an op raises, at a Flight Recorder dump, at exit.
FLUSH_S = 0.15
MAX_PENDING = 4096                  # records; a B record is a tuple of ~8 small objects, its line ~200-400 bytes
_pending: "collections.deque[Any]" = collections.deque()
_flush_lock = threading.RLock()      # reentrant: the SIGTERM handler may interrupt a flush
_flusher_started = False
_flusher_ended = False               # at exit: a record made later (another exit handler's op) is written at once


def flush() -> None:
    """Write every pending record, in order, with one write and one flush."""
    with _flush_lock:
        n = len(_pending)
        if not n:
            return
        pop = _pending.popleft
        text = "".join([_line(pop()) for _ in range(n)])
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except (OSError, ValueError, RuntimeError):
            pass                    # stdout closed (or a reentrant write): tracing must never break the rank


def _flusher(stop: threading.Event) -> None:
    while not stop.wait(FLUSH_S):   # releases the GIL while it waits
        flush()


def _start_flusher() -> None:
    global _flusher_started
    if not _flusher_started:
        _flusher_started = True
        stop = threading.Event()
        thread = threading.Thread(target=_flusher, args=(stop,), name="labctl-trace-flush", daemon=True)
        atexit.register(_end_flusher, thread, stop)
        os.register_at_fork(after_in_child=_forked)
        thread.start()


def _end_flusher(thread: threading.Thread, stop: threading.Event) -> None:
    """At exit, before the interpreter finalizes: end the flusher thread, then write what
    is pending. A daemon thread that wakes once finalization began is ended by
    pthread_exit wherever it stands; measured on compose 2x1 (gloo, torch 2.13): 3 runs in
    24 aborted at exit with "terminate called without an active exception", 0 in 45 after."""
    global _flusher_ended
    stop.set()
    thread.join(timeout=2 * FLUSH_S + 1)      # at once when it has ended (a forked child's copy)
    _flusher_ended = True
    flush()


def _forked() -> None:
    """A forked child has no flusher thread: its lines go out at once, not the parent's."""
    global _flusher_started
    _pending.clear()
    _flusher_started = False


def _push(item: Any) -> None:
    _pending.append(item)
    if not _flusher_started:
        _start_flusher()
    if len(_pending) >= MAX_PENDING or _flusher_ended:
        flush()


def _write(record: dict[str, Any]) -> None:
    _push(json.dumps(record, separators=(",", ":")))


def _line(item: Any) -> str:
    """One pending record as its marked line: a str is a line already; a B record is
    (id, head, seq, dtype, shape, bytes, where, file, line, t); an E record (id, t, extra)."""
    if type(item) is str:
        return MARKER + item + "\n"
    if len(item) == 3:
        ident, t, extra = item
        more = "".join(f',"{k}":{int(v)}' for k, v in extra.items()) if extra else ""
        return f'{MARKER}{{"k":"E","i":{ident},"t":{t}{more}}}\n'
    ident, head, seq, dtype, shape, nbytes, where, path, lineno, t = item
    if dtype is None:
        sizes = f',"bytes":{nbytes}'
    else:
        sizes = f',"shape":{_shape_json(shape)},"dtype":{_dtype_json(dtype)},"bytes":{nbytes}'
    return f'{MARKER}{{"k":"B","i":{ident}{head}{seq}{sizes}{where},"caller":{_caller_json(path, lineno)},"t":{t}}}\n'


_callers: dict[tuple[str, int], str] = {}    # (file, line) -> its JSON string: one per call site
_dtypes: dict[Any, str] = {}
_shapes: dict[tuple, str] = {}


def _caller_json(path: str | None, lineno: int) -> str:
    if path is None:
        return '"?"'
    key = (path, lineno)
    text = _callers.get(key)
    if text is None:
        text = _callers[key] = json.dumps(f"{path}:{lineno}")
    return text


def _dtype_json(dtype: Any) -> str:
    text = _dtypes.get(dtype)
    if text is None:
        name = str(dtype)
        text = _dtypes[dtype] = json.dumps(name[6:] if name.startswith("torch.") else name)
    return text


def _shape_json(shape: Any) -> str:
    dims = tuple(shape)
    text = _shapes.get(dims)
    if text is None:
        text = _shapes[dims] = "[" + ",".join(str(int(x)) for x in dims) + "]"
    return text


_skip: dict[Any, bool] = {}                  # code object -> inside torch or this module


def _caller() -> tuple[str | None, int]:
    """The first frame outside torch and this module: (file, line)."""
    frame = sys._getframe(3)
    while frame is not None:
        code = frame.f_code
        skip = _skip.get(code)
        if skip is None:
            name = code.co_filename
            skip = _skip[code] = name.startswith(_torch_dir) or name == _here
        if not skip:
            return code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None, 0


def _tensors(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [v for v in value if hasattr(v, "element_size")]
    return [value] if hasattr(value, "element_size") else []


def _world_group(dist: Any) -> Any:
    """The world group or None; c10d's own `_world` when there is one (torch's
    is_initialized + _get_default_group cost ~1 µs per op: five property calls)."""
    world = getattr(dist.distributed_c10d, "_world", None)
    if world is not None:
        return getattr(world, "default_pg", None)
    return dist.distributed_c10d._get_default_group() if dist.is_initialized() else None


def _group_name(dist: Any, pg: Any, world: Any) -> str:
    """default_pg, the group's description, or pg<its c10d name>; a G line the first time."""
    name = _groups.get(id(pg))
    if name is None:
        if pg is world:
            name = "default_pg"
        else:
            desc = getattr(pg, "group_desc", "") or ""
            name = desc if desc and desc != "undefined" else f"pg{getattr(pg, 'group_name', id(pg))}"
        ranks = dist.get_process_group_ranks(pg)        # raises for a group this rank is not in
        _groups[id(pg)] = name
        _write({"k": "G", "pg": name, "ranks": ranks})
    return name


def _arg(args: tuple, kwargs: dict, index: int | None, key: str | None) -> Any:
    if key and key in kwargs:
        return kwargs[key]
    if index is not None and 0 <= index < len(args):
        return args[index]
    return None


_ids = itertools.count(1)
_counters: dict[tuple[str, bool], Any] = {}      # (pg name, p2p) -> itertools.count: next() is atomic
# (op, id(group)) -> (the B line's fixed start, the group's counter, the group: kept so
# that its id is not reused while it is cached)
_routes: dict[tuple[str, int], tuple[str, Any, Any]] = {}


def _route(dist: Any, op: str, group: Any) -> tuple[str, Any, Any] | None:
    """How an op on `group` (None: the world) is recorded; None: it is not (no process
    group yet, or this rank is not in the group: torch says so itself)."""
    world = _world_group(dist)
    if world is None:
        return None
    pg = world if group is None else group
    route = _routes.get((op, id(pg)))
    if route is None:
        try:
            name = _group_name(dist, pg, world)
        except Exception:          # noqa: BLE001 - not a member, not a group
            return None
        p2p = op in _P2P
        counter = _counters.setdefault((name, p2p), itertools.count(1))
        head = f',"op":"{op}","pg":{json.dumps(name)},"{"p2p" if p2p else "seq"}":'
        route = _routes[(op, id(pg))] = (head, counter, pg)
    return route


def _group_of(op: str, args: tuple, kwargs: dict) -> Any:
    group = _arg(args, kwargs, _GROUP_INDEX.get(op), "group")
    return group if group is None or hasattr(group, "rank") else None


def _begin(dist: Any, op: str, args: tuple, kwargs: dict, entered: int = 0,
           route: tuple | None = None, group: Any = None) -> int | None:
    """Push the op's B record (`entered`: the time the rank entered it, else now); its id,
    or None when the op is not recorded. Only what must be read now is read now (ids,
    the tensor's dtype, shape and bytes, the caller's file and line); the line is put
    together by the flusher."""
    if route is None:                   # else the caller resolved the group and its route
        group = _group_of(op, args, kwargs)
        route = _route(dist, op, group)
        if route is None:
            return None
    head, counter, _ = route
    seq = next(counter)
    ident = next(_ids)
    p2p = op in _P2P
    if p2p:
        tensor_index, tensor_key, peer_key, peer_index = 0, "tensor", _P2P[op], 1
    else:
        tensor_index, tensor_key, peer_key, peer_index = _COLLECTIVES[op]
    dtype = shape = None
    nbytes = 0
    if tensor_index >= 0:
        value = _arg(args, kwargs, tensor_index, tensor_key)
        if hasattr(value, "element_size"):
            dtype, shape, nbytes = value.dtype, value.shape, value.nbytes
        else:
            tensors = _tensors(value)
            if tensors:
                dtype, shape, nbytes = tensors[0].dtype, tensors[0].shape, sum(t.nbytes for t in tensors)
    where = ""
    if peer_key:
        peer = _arg(args, kwargs, peer_index, peer_key)
        if peer is None:
            local = _arg(args, kwargs, None, "group_" + peer_key)
            if local is not None and group is not None:
                peer = dist.get_global_rank(group, local)
        if peer is not None:
            where = f',"{"peer" if p2p else "root"}":{int(peer)}'
    path, lineno = _caller()
    _push((ident, head, seq, dtype, shape, nbytes, where, path, lineno, entered or time.time_ns()))
    return ident


def _end(ident: int, extra: dict[str, Any] | None = None) -> None:
    _push((ident, time.time_ns(), extra))


class TracedWork:
    """The Work an async op returned; `wait()` ends the op's slice. Everything else
    is the real Work's."""

    def __init__(self, work: Any, ident: int):
        self._work, self._ident, self._done = work, ident, False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self._work.wait(*args, **kwargs)
        except BaseException:
            flush()
            raise
        self._finish()
        return result

    def is_completed(self) -> bool:
        done = self._work.is_completed()
        if done:
            self._finish()
        return done

    def get_future(self) -> Any:
        """The real Work's future, chained so that the op's slice ends when it completes
        (a DDP comm hook never calls wait(); the callback runs on the backend's thread)."""
        def done(future: Any) -> Any:
            self._finish()
            return future.value()

        return self._work.get_future().then(done)

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            _end(self._ident)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _wrap(dist: Any, op: str, original: Any) -> Any:
    """The recording wrapper of one op: the B record (time: when the rank entered), the
    op as called, the E record (or a TracedWork for an async op's handle)."""
    time_ns = time.time_ns

    def traced(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "depth", 0):
            return original(*args, **kwargs)
        entered = time_ns()
        group = _group_of(op, args, kwargs)
        route = _route(dist, op, group)
        ident = _begin(dist, op, args, kwargs, entered, route, group) if route is not None else None
        _local.depth = 1
        try:
            result = original(*args, **kwargs)
        except BaseException:
            flush()                 # the B line of the op that failed, before the rank ends
            raise
        finally:
            _local.depth = 0
        if ident is None:
            return result
        if result is not None and hasattr(result, "wait") and not isinstance(result, int):
            return TracedWork(result, ident)
        extra = None
        if op == "recv" and isinstance(result, int) and _arg(args, kwargs, 1, "src") is None \
                and kwargs.get("group_src") is None:
            extra = {"peer": result}        # recv from any source: the sender, known now
        _end(ident, extra)
        return result

    traced.__wrapped__ = original
    traced.__name__ = original.__name__
    traced.__doc__ = original.__doc__
    return traced


def _wrap_batch(dist: Any, original: Any) -> Any:
    """batch_isend_irecv: one isend/irecv record per P2POp, each ended by its work's wait()."""
    def traced(p2p_op_list: list) -> Any:
        if getattr(_local, "depth", 0):
            return original(p2p_op_list)
        records = []
        for p in p2p_op_list:
            fn = getattr(p.op, "__wrapped__", p.op)
            name = "isend" if fn is _originals.get("isend") else "irecv"
            records.append(_begin(dist, name, (p.tensor, p.peer, p.group), {}))
        _local.depth = 1
        try:
            works = original(p2p_op_list)
        finally:
            _local.depth = 0
        if not works:
            for r in records:
                if r is not None:
                    _end(r)
            return works
        if len(works) != len(records):         # coalesced into one work (nccl): ends them all
            return [_MultiWork(w, [r for r in records if r is not None]) for w in works]
        return [TracedWork(w, r) if r is not None else w for w, r in zip(works, records)]

    traced.__wrapped__ = original
    return traced


class _MultiWork(TracedWork):
    def __init__(self, work: Any, idents: list[int]):
        super().__init__(work, 0)
        self._idents = idents

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            for i in self._idents:
                _end(i)


_originals: dict[str, Any] = {}


def _measure_clock(dist: Any) -> None:
    """Offset of this rank's wall clock against rank 0's (NTP estimate, best of a few
    round trips over the original send/recv, never recorded): rank 0's time minus the
    midpoint of the round trip."""
    import torch

    send, recv = _originals["send"], _originals["recv"]
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    buf = torch.zeros(1, dtype=torch.float64, device=device)
    if rank == 0:
        for peer in range(1, world):
            for _ in range(CLOCK_ROUNDS):
                recv(buf, src=peer)
                buf.fill_(time.time_ns() / 1e9)
                send(buf, dst=peer)
        _write({"k": "C", "offset_ns": 0, "rtt_ns": 0})
        return
    best = None
    for _ in range(CLOCK_ROUNDS):
        t0 = time.time_ns()
        send(buf, dst=0)
        recv(buf, src=0)
        t1 = float(buf.item()) * 1e9
        t2 = time.time_ns()
        sample = (t2 - t0, t1 - (t0 + t2) / 2)
        best = sample if best is None or sample[0] < best[0] else best
    _write({"k": "C", "offset_ns": int(best[1]), "rtt_ns": int(best[0])})


def _wrap_init(dist: Any, original: Any) -> Any:
    def traced(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _write({"k": "M", "rank": dist.get_rank(), "world": dist.get_world_size(),
                "node": int(os.environ.get("GROUP_RANK") or os.environ.get("NODE_RANK") or 0),
                "local_rank": int(os.environ.get("LOCAL_RANK") or 0),
                "host": socket.gethostname(), "pid": os.getpid()})
        _local.depth = 1            # send() calls isend() inside: not recorded either
        try:
            _measure_clock(dist)
        except Exception as exc:    # noqa: BLE001 - the lab goes on without an offset
            _write({"k": "C", "error": str(exc)[:200]})
        finally:
            _local.depth = 0
        return result

    traced.__wrapped__ = original
    return traced


def install() -> bool:
    """Wrap torch.distributed's ops when LAB_TRACE says so (idempotent). True: installed."""
    global _installed, _torch_dir
    if _installed or not enabled():
        return _installed
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    if not dist.is_available():
        return False
    _torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    for op in list(_P2P) + list(_COLLECTIVES):
        original = getattr(c10d, op, None) or getattr(dist, op, None)
        if original is None:
            continue
        _originals[op] = original
        traced = _wrap(dist, op, original)
        setattr(c10d, op, traced)
        if getattr(dist, op, None) is original:
            setattr(dist, op, traced)
    batch = getattr(c10d, "batch_isend_irecv", None)
    if batch is not None:
        traced = _wrap_batch(dist, batch)
        setattr(c10d, "batch_isend_irecv", traced)
        setattr(dist, "batch_isend_irecv", traced)
    init = c10d.init_process_group
    traced_init = _wrap_init(dist, init)
    c10d.init_process_group = traced_init
    dist.init_process_group = traced_init
    _install_ddp()
    _installed = True
    return True


def _install_ddp() -> None:
    """DDP all-reduces gradients in C++ (its Reducer), past torch.distributed's functions.
    With tracing on, a DDP module the user gave no comm hook gets torch's own
    `default_hooks.allreduce_hook` at its first forward: the same all-reduce per bucket
    (divide by the world size, sum; DDP's built-in one sums, then divides: the last bits
    of a gradient may differ), issued through dist.all_reduce and so recorded, caller
    the line that called backward(). A hook the user registers is left alone (its
    torch.distributed calls are recorded as any)."""
    try:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel
    except Exception:              # noqa: BLE001 - no DDP in this torch: nothing to record
        return
    ddp = DistributedDataParallel
    register, builtin, forward = ddp.register_comm_hook, ddp._register_builtin_comm_hook, ddp.forward

    def register_comm_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._labctl_hooked = True
        return register(self, *args, **kwargs)

    def register_builtin_comm_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._labctl_hooked = True
        return builtin(self, *args, **kwargs)

    def traced_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_labctl_hooked", False):
            self._labctl_hooked = True
            try:
                register(self, self.process_group, default_hooks.allreduce_hook)
            except Exception:      # noqa: BLE001 - DDP refused: its built-in all-reduce, unrecorded
                pass
        return forward(self, *args, **kwargs)

    for name, fn, original in (("register_comm_hook", register_comm_hook, register),
                               ("_register_builtin_comm_hook", register_builtin_comm_hook, builtin),
                               ("forward", traced_forward, forward)):
        fn.__wrapped__, fn.__name__, fn.__doc__ = original, original.__name__, original.__doc__
        setattr(ddp, name, fn)


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
        fd = os.open(path, os.O_RDWR)       # O_RDWR: never EOF; close-on-exec (PEP 446)
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
_dump_owner = os.getpid()


def ended_badly(exc: BaseException) -> bool:
    """An exception that ends a rank as a failure (not `sys.exit(0)`)."""
    return not (isinstance(exc, SystemExit) and exc.code in (None, 0))


def dump_at_the_end() -> None:
    """A rank that ends abnormally (an exception of its own; a SIGTERM from torchrun or
    labctl because another rank failed) writes its pending trace lines and its Flight
    Recorder entries, once: the report then names the collective each rank was in and
    who never entered it, tracing on or off, before any deadline."""
    if os.getpid() != _dump_owner or not _last_dump.acquire(blocking=False):
        return                          # a forked child (a DataLoader worker) is no rank
    try:
        flush()
        dump_flight_recorder()
    except BaseException as exc:        # noqa: BLE001 - the rank is ending anyway
        try:
            _emit_fr({"error": str(exc)[:200] or type(exc).__name__})
        except BaseException:           # noqa: BLE001 - e.g. a reentrant write from the handler
            pass


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
    read_fd, write_fd = os.pipe()
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
            flush()                         # the trace lines first, if tracing is on
            dump_flight_recorder()
        except BaseException as exc:        # noqa: BLE001 - a failed dump must not end the thread
            _emit_fr({"error": str(exc)[:200] or type(exc).__name__})


def _emit_fr(record: dict[str, Any]) -> None:
    try:
        sys.stdout.write(FR_MARKER + json.dumps(record, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError, RuntimeError):     # RuntimeError: a reentrant write (SIGTERM handler)
        pass


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
