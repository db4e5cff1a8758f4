"""torch's debug server inside the lab (`debug_server: true`, `labctl up --debug-server`).

With LAB_DEBUG_SERVER (the frontend's port) set, `install()` wraps init_process_group:
once it returns, every rank calls `torch.distributed.debug.start_debug_server`. Every rank
then runs torch's worker server (its stacks, Flight Recorder, wait counters over HTTP)
and global rank 0 forks torch's HTTP frontend on that port, which asks every rank's worker
server for each page, and (with LAB_DEBUG_SERVER_DIR) writes the periodic dumps there every
LAB_DEBUG_SERVER_INTERVAL seconds (docs/diagnosis.md, "torch's debug server").

What the lab adds around torch's call, each so that the lab's own diagnosis stays right:
- the store: torch's frontend meets in a TCPStore at MASTER_ADDR:MASTER_PORT; the
  process group's own TCPStore is used when there is one (tcp:// init joins at the port
  after MASTER_PORT), so the variables are set to it for the call and in the frontend;
- each rank's worker server is registered by an address the frontend reaches: loopback
  when node 0 is on loopback (local), else the host's full name (Kubernetes pods reach
  each other as `<pod>.<service>`, not by the short hostname torch registers);
- the frontend process logs and prints into `frontend.log` in the dump folder, not into
  rank 0's output (torch logs a traceback there each time a dump fails, the Flight
  Recorder's on gloo, and a frontend whose port is taken dies with one: the lab would
  read it as rank 0's error); it ignores the stack signal (`labctl stacks`
  asks the ranks; the frontend is not one) and dies with rank 0 (PR_SET_PDEATHSIG);
- missing dependencies (Jinja2, tabulate, aiohttp or requests) or a failed start: one
  `labctl: debug server ...` line on rank 0's stderr, and the lab goes on.
Standard library only until torch is called.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import socket
import sys
from typing import Any

from . import _stacks
from ._protocol import Env, debug_server_missing

# Dumps torch's frontend writes (its default set is stacks, fr_trace and
# torchcomms_health_check; torchcomms is not in the lab's images). The Flight Recorder's
# (fr_trace) only off gloo: there its tables fail with a KeyError every time.
DUMPS = frozenset({"stacks", "tcpstore", "wait_counters"})
FRONTEND_LOG = "frontend.log"
_started = False
_forking = False
_parent = 0
_frontend_out: str | None = None     # the frontend's stdout and stderr: frontend.log


def enabled() -> bool:
    return bool(os.environ.get(Env.DEBUG_SERVER))


def _say(text: str) -> None:
    sys.stderr.write(f"labctl: debug server {text}\n")
    sys.stderr.flush()


def install() -> bool:
    """Start the debug server after init_process_group when LAB_DEBUG_SERVER says so.
    True: installed."""
    if not enabled():
        return False
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d
    except ImportError:
        return False
    original = distributed_c10d.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        joined = original(*args, **kwargs)
        start()
        return joined

    dist.init_process_group = distributed_c10d.init_process_group = init_process_group
    return True


def _tcp_store(dist: Any) -> tuple[str, int] | None:
    """(host, port) of the TCPStore the default process group joined through, if it did."""
    store = dist.distributed_c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if isinstance(store, dist.TCPStore):
        return store.host, store.port
    return None


def _worker_host() -> str:
    master = os.environ.get("MASTER_ADDR", "")
    if master in ("localhost", "::1") or master.startswith("127."):
        return "127.0.0.1"
    return socket.getfqdn()


def start() -> None:
    """torch's start_debug_server on this rank, once per process; never raises."""
    global _started
    if _started:
        return
    _started = True
    rank = os.environ.get("RANK", "0")
    try:
        import torch.distributed as dist

        missing = debug_server_missing()
        if missing:
            if rank == "0":
                _say(f"not started: this Python lacks {', '.join(missing)} (torch's frontend "
                     "needs them; the lab's images have them; pip install 'labctl[debug]')")
            return
        _start(dist, rank)
    except Exception as exc:            # noqa: BLE001 - the lab goes on without it
        _say(f"not started on rank {rank}: {type(exc).__name__}: "
             f"{' '.join(str(exc).split())[:300]}")


def _start(dist: Any, rank: str) -> None:
    from torch.distributed import debug
    from torch.distributed.debug import _store

    global _forking, _parent, _frontend_out
    port = int(os.environ[Env.DEBUG_SERVER])
    interval = float(os.environ.get(Env.DEBUG_SERVER_INTERVAL) or 60)
    folder = os.environ.get(Env.DEBUG_SERVER_DIR) or None
    store = _tcp_store(dist)
    rank = str(dist.get_rank())         # what torch reads (RANK), set below
    env = {"RANK": rank, "WORLD_SIZE": str(dist.get_world_size())}
    if store is not None:
        env.update(MASTER_ADDR=store[0], MASTER_PORT=str(store[1]))
    elif not os.environ.get("MASTER_ADDR"):
        raise RuntimeError("no TCPStore to meet in (init_method file without torchrun)")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)              # the frontend (forked below) keeps them
    try:
        if rank == "0" and folder:
            os.makedirs(folder, exist_ok=True)
            _frontend_out = os.path.join(folder, FRONTEND_LOG)
        _frontend_logging(_frontend_out)
        _forking, _parent = True, os.getpid()
        try:
            debug.start_debug_server(port=port, start_method="fork", dump_dir=folder,
                                     dump_interval=interval, enabled_dumps=_dumps(dist))
        finally:
            _forking = False
        atexit.register(_stop)
        # torch registered http://<short hostname>:<port>: say where the frontend reaches it
        client = _store.tcpstore_client()
        address = client.get(f"rank{env['RANK']}").decode()
        worker_port = address.rsplit(":", 1)[1]
        client.set(f"rank{env['RANK']}", f"http://{_worker_host()}:{worker_port}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if rank == "0":
        where = f"; dumps every {interval:g} s into {folder}" if folder else ""
        _say(f"started: rank 0 serves it on port {port}{where}")


def _dumps(dist: Any) -> set[str]:
    import torch

    nccl = "nccl" in str(dist.get_backend()).lower() and torch.cuda.is_available()
    return set(DUMPS) | ({"fr_trace"} if nccl else set())


def _stop() -> None:
    """At exit: the frontend stopped, the worker server shut down (torch's own
    stop_debug_server wants both, and ranks other than 0 have no frontend)."""
    try:
        from torch.distributed import debug

        proc, debug._DEBUG_SERVER_PROC = debug._DEBUG_SERVER_PROC, None
        if proc is not None:
            proc.terminate()
            proc.join(5)
        server, debug._WORKER_SERVER = debug._WORKER_SERVER, None
        if server is not None:
            server.shutdown()
    except Exception:               # noqa: BLE001 - exiting anyway
        pass


def _frontend_logging(path: str | None) -> None:
    """torch.distributed.debug's log into `path` (frontend.log) or nowhere, never into the
    rank's stderr: the frontend is forked, and keeps this."""
    logger = logging.getLogger("torch.distributed.debug")
    logger.propagate = False
    if path:
        handler: logging.Handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler = logging.NullHandler()
    logger.addHandler(handler)


def _in_frontend() -> None:
    """In the forked frontend: not a rank to `labctl stacks`, gone with rank 0, and what
    it prints (a traceback if its port is taken) in frontend.log, not in rank 0's log."""
    if not _forking:
        return
    if _frontend_out:
        try:
            fd = os.open(_frontend_out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        except OSError:
            pass
    try:
        import faulthandler
        faulthandler.unregister(_stacks.SIGNAL)
        signal.signal(_stacks.SIGNAL, signal.SIG_IGN)
    except (AttributeError, ValueError, OSError, RuntimeError):
        pass
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)         # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != _parent:          # rank 0 died before the line above
        os._exit(0)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_frontend)
