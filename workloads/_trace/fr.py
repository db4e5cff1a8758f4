"""torch's Flight Recorder, tracing on or off: its ring left on, its newest entries written
as FR records when labctl asks (a FIFO) and when a rank ends badly (an exception, a
SIGTERM), and torch's own pickle dump for `torchfrtrace`."""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from typing import Any

from .._protocol import SIGTERM_STACKS_MARKER, Env, records
from .sink import _park, open_channel, out, tick

FR_BUFFER = "2000"                  # TORCH_FR_BUFFER_SIZE unless the user set it (torch's default size)
FR_KEEP = 8                         # newest entries per process group written at a dump


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
    from .._stacks import fr_request_path

    path = fr_request_path(os.getpid())
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
HANDLER_GRACE_S = 1.0               # how long SIGTERM's thread lets the main thread's handler come first


def ended_badly(exc: BaseException) -> bool:
    """An exception that ends a rank as a failure (not `sys.exit(0)`)."""
    return not (isinstance(exc, SystemExit) and exc.code in (None, 0))


def dump_at_the_end(stacks: bool = False) -> None:
    """A rank that ends abnormally (an exception of its own; a SIGTERM from torchrun or
    labctl because another rank failed) writes its pending trace lines and its Flight
    Recorder entries, once: the report then names the collective each rank was in and
    who never entered it, tracing on or off, before any deadline. `stacks` (a SIGTERM that
    found the main thread in Python): first where every thread was (faulthandler's dump on
    stderr, as the stack signal writes it), so that a rank stopped outside any op
    (computing, still preparing data while the others timed out waiting for it) is placed
    at its line. Not from the thread that answers a SIGTERM while the main thread is
    blocked in C: that dump's current thread would be its own, not the main one, and
    would replace the stacks labctl took at a deadline."""
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
        if stacks:
            _stacks_to_stderr()
        tick()                          # a T line (every record is written already)
        dump_flight_recorder()
    except BaseException as exc:        # noqa: BLE001 - the rank is ending anyway
        try:
            out(records.encode(records.FrError(str(exc)[:200] or type(exc).__name__)))
        except BaseException:           # noqa: BLE001 - e.g. a reentrant write from the handler
            pass
    finally:
        _dump_thread = None
        _dump_done.set()


def _stacks_to_stderr() -> None:
    try:
        import faulthandler

        os.write(sys.__stderr__.fileno(), (SIGTERM_STACKS_MARKER + "\n").encode())
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
    except (AttributeError, ValueError, OSError, RuntimeError):
        pass                            # no stderr to write to: the rank ends without it


def _dump_on_sigterm() -> None:
    """SIGTERM: dump (dump_at_the_end), then die of SIGTERM as before. A Python handler
    runs only once the main thread is back in Python, never while it waits in a
    collective, so the handler's C part also writes the signal's number to a wakeup pipe
    (signal.set_wakeup_fd) that a daemon thread reads. Left alone: a process that
    already handles SIGTERM or uses a wakeup fd (asyncio). A script that installs its own
    SIGTERM handler afterwards (a preemption checkpoint) owns the signal, as untraced: the
    thread then leaves it to that handler, and this handler, called by a script's handler
    that chains to the one it replaced, dumps and returns (untraced, that one was SIG_DFL)."""
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

    handled = threading.Event()

    def on_sigterm(signum: int, frame: Any) -> None:          # the main thread, in Python
        handled.set()
        dump_at_the_end(stacks=True)
        if signal.getsignal(signal.SIGTERM) is not on_sigterm:
            return                                            # chained from the script's own
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def waiter() -> None:                                     # the main thread blocked in C
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if bytes([signal.SIGTERM]) in data and signal.getsignal(signal.SIGTERM) is on_sigterm:
                # a main thread in Python (or an interruptible wait: sleep) runs the handler
                # within this grace, and dumps with its stacks; one blocked in C (an op: its
                # record says where) never does, and this thread dumps without them
                handled.wait(HANDLER_GRACE_S)
                dump_at_the_end()
                _die_of(signal.SIGTERM)

    def forget_in_child() -> None:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:          # forked from another thread: the child cannot reset it
            pass
        # a forked child (a Pool or DataLoader worker) is no rank: SIGTERM kills it at once,
        # as untraced, even wedged in C where no Python handler would ever run (a Pool's
        # terminate() then joins it for ever)
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            _default(signal.SIGTERM)

    global _dump_owner
    _dump_owner = os.getpid()
    signal.signal(signal.SIGTERM, on_sigterm)
    os.register_at_fork(after_in_child=forget_in_child)
    threading.Thread(target=waiter, name="labctl-sigterm-dump", daemon=True).start()


def _default(signum: int) -> None:
    """`signum`'s default action back, from any thread: Python's signal.signal works only
    in the main thread, libc's signal() in any."""
    import signal

    try:
        signal.signal(signum, signal.SIG_DFL)
        return
    except ValueError:
        pass
    import ctypes

    libc = ctypes.CDLL(None)
    libc.signal.argtypes, libc.signal.restype = (ctypes.c_int, ctypes.c_void_p), ctypes.c_void_p
    libc.signal(signum, 0)                                    # SIG_DFL


def _die_of(signum: int) -> None:
    """End the process by `signum`'s default action, as if no handler had been installed
    (torchrun and labctl read a death by SIGTERM)."""
    try:
        _default(signum)
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
            out(records.encode(records.FrError(str(exc)[:200] or type(exc).__name__)))


def _fr_pg(entry: dict) -> str:
    """The same pg names as the recorder's: default_pg, a description, or pg<name>."""
    name, desc = (list(entry.get("process_group") or ["?", ""]) + [""])[:2]
    return desc if desc and desc != "undefined" else f"pg{name}"


def dump_flight_recorder() -> int:
    """FR_MARKER lines with this rank's newest collectives per process group (op, seq,
    shape, dtype, time created); with LAB_FR_DUMP_DIR also torch's own pickle dump
    (<dir>/rank_<R>, what `torchfrtrace` reads). Returns the entries written."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return 0                        # not imported, or the main thread is still importing it: a
                                        # second thread's import of torch.distributed then ran
                                        # beside it ("'torch._C' is not a package", then SIGSEGV)
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
            out(records.encode(records.FrEntry(
                rank=rank, pg=pg, seq=e.get("collective_seq_id"), op=str(e.get("profiling_name", "?")).split(":")[-1],
                shape=sizes[0] if sizes else [], dtype=dtypes[0] if dtypes else None, t=e.get("time_created_ns"))))
            written += 1
    out(records.encode(records.FrDone(rank, written)))
    folder = os.environ.get(Env.FR_DUMP_DIR)
    if folder:
        os.makedirs(folder, exist_ok=True)
        _write_dump(folder, rank, _with_pg_config(dist, c10d._dump_fr_trace(True, False)))
        if os.environ.get(Env.FR_DUMP_STACKS) == "1":
            # then with stack traces, over it: the first symbolizing imports ~800 modules
            # (1-11 s here), and a rank stopped meanwhile keeps the dump without them
            _write_dump(folder, rank, _with_pg_config(dist, c10d._dump_fr_trace(True, True)))
    return written


def _write_dump(folder: str, rank: int, data: bytes) -> None:
    """<folder>/rank_<R>, whole or not at all: torchfrtrace reads every file whose name
    holds the prefix ("rank_"), so a dump cut short by SIGKILL must leave nothing it
    would take for a rank's dump."""
    partial = os.path.join(folder, f".partial-{os.getpid()}")
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, os.path.join(folder, f"rank_{rank}"))


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
