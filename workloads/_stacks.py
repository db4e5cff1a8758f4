"""Every rank's Python stack on demand: a signal (SIGNAL, SIGRTMIN+6) makes a rank print
all its threads.

`install()` registers faulthandler for SIGNAL (all threads, to stderr). The
handler is C code: it prints even while the main thread is blocked inside a
collective (gloo or NCCL waiting in C++), which a Python signal handler could
not. The workloads runner installs it, and so does `workloads._script`, the
wrapper labctl starts a user's `--script` through, so a script that knows
nothing of labctl can be asked too.

`signal_ranks(run_id)` is the asking side: SIGNAL to every process of the run
that has RANK in its environment *and* catches SIGNAL (its default action is to
terminate: a subprocess a rank exec'd must not get it). Once those
signals were delivered, each rank that runs the Flight Recorder dump thread of
workloads/_trace/fr.py gets a byte on its request FIFO (`fr_request_path`) and prints its
newest Flight Recorder entries: the stacks first, then the entries, never both at once
(faulthandler's C handler walking a thread that runs Python can crash). labctl
calls it locally; on compose it runs inside each container:
`python3 -m workloads._stacks <run id>`. `kill_rank(run_id, rank)` finds a rank
the same way for the kill-rank fault (`python3 -m workloads._stacks kill-rank
<run id> <rank>` in a container). Standard library only.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import time

from . import _proc
from ._protocol import Env

# A real-time signal, not SIGUSR1: schedulers send SIGUSR1 (Slurm's preemption notice) and
# scripts handle it themselves (a requeue handler on rank 0 only). On SIGUSR1 the lab's
# handler kept a rank alive that the signal kills without it, and asking a rank that
# installed its own handler for its stack ran that handler (a preemption it never got).
if hasattr(signal, "SIGRTMIN"):
    SIGNAL, SIGNAL_NAME = int(signal.SIGRTMIN) + 6, "SIGRTMIN+6"
else:                       # no real-time signals (macOS)
    SIGNAL, SIGNAL_NAME = int(signal.SIGUSR1), "SIGUSR1"
DELIVERY_WAIT_S = 2.0       # for the signal to reach every rank before its Flight Recorder is asked
AFTER_STACKS_S = 0.2        # faulthandler writes a dump in well under a millisecond


def fr_request_path(pid: int) -> str:
    """The FIFO whose byte asks process `pid` for its Flight Recorder (workloads/_trace/fr.py)."""
    return os.path.join(tempfile.gettempdir(), f"labctl-fr-{os.getuid()}", str(pid))


def ask_flight_recorder(pid: int) -> bool:
    """One byte on the rank's request FIFO; False: no dump thread listens (none installed,
    the process is gone, or the path is a stale FIFO of an earlier process)."""
    try:
        fd = os.open(fr_request_path(pid), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:                 # ENOENT: no FIFO; ENXIO: nobody reads it
        return False
    try:
        os.write(fd, b"d")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _pending(pid: int, signum: int) -> bool:
    """Whether `signum` still waits to be delivered to the process (shared or main thread)."""
    masks = _proc.signals(pid)
    return masks is not None and masks.is_pending(signum)


def install() -> None:
    try:
        faulthandler.register(SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError, RuntimeError):
        pass            # no such signal here (Windows), or stderr has no file descriptor


def _catches(pid: int, signum: int) -> bool:
    masks = _proc.signals(pid)
    return masks is not None and masks.catches(signum)


def _rank_processes(run_id: str | None) -> list[tuple[int, str]]:
    """(pid, RANK) of each rank's own process: the topmost process with RANK in its
    environment. A rank's children inherit its environment and its SIGNAL handler (a
    forked DataLoader worker): asked too, they would print their stacks into the rank's
    log, and the rank's own stack would be read as theirs."""
    found: dict[int, tuple[int, str]] = {}          # pid -> (its parent, RANK)
    for st in _proc.stats():
        if st.pid == os.getpid():
            continue
        env = _proc.environ(st.pid)
        if "RANK" in env and (not run_id or env.get(Env.RUN_ID) == run_id):
            found[st.pid] = (st.ppid, env["RANK"])
    return sorted((pid, rank) for pid, (parent, rank) in found.items() if parent not in found)


def signal_ranks(run_id: str | None = None) -> list[tuple[int, int]]:
    """(pid, rank) of every rank process of the run that was asked for its stack."""
    asked = []
    for pid, rank in _rank_processes(run_id):
        if not _catches(pid, SIGNAL):
            continue
        try:
            os.kill(pid, SIGNAL)
            asked.append((pid, int(rank) if rank.isdigit() else -1))
        except (ProcessLookupError, PermissionError):
            continue
    # The Flight Recorder only once every stack is out: the dump thread runs Python, and
    # faulthandler's handler must not walk a thread that does.
    deadline = time.monotonic() + DELIVERY_WAIT_S
    while any(_pending(pid, SIGNAL) for pid, _ in asked) and time.monotonic() < deadline:
        time.sleep(0.02)
    if asked:
        time.sleep(AFTER_STACKS_S)
    for pid, _ in asked:
        ask_flight_recorder(pid)
    return asked


def kill_rank(run_id: str, rank: int) -> list[int]:
    """SIGKILL the worker with RANK=`rank` of the run: the topmost process with that
    RANK (its children inherit it). Returns the pids killed (none: not running yet)."""
    top = [pid for pid, found in _rank_processes(run_id) if found == str(rank)]
    for pid in top:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return top


if __name__ == "__main__":
    if sys.argv[1:2] == ["kill-rank"]:           # prints the pids killed; exit 3: none found
        killed = kill_rank(sys.argv[2], int(sys.argv[3]))
        print(" ".join(map(str, killed)))
        sys.exit(0 if killed else 3)
    found = signal_ranks(sys.argv[1] if len(sys.argv) > 1 else None)
    print(" ".join(f"{rank}:{pid}" for pid, rank in sorted(found, key=lambda x: x[1])))
