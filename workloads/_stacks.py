"""Every rank's Python stack on demand: SIGUSR1 makes a rank print all its threads.

`install()` registers faulthandler for SIGUSR1 (all threads, to stderr). The
handler is C code: it prints even while the main thread is blocked inside a
collective (gloo or NCCL waiting in C++), which a Python signal handler could
not. The workloads runner installs it, and so does `workloads._script`, the
wrapper labctl starts a user's `--script` through, so a script that knows
nothing of labctl can be asked too.

`signal_ranks(run_id)` is the asking side: SIGUSR1 to every process of the run
that has RANK in its environment *and* catches SIGUSR1 (the default action of
SIGUSR1 is to terminate: a subprocess a rank exec'd must not get it). A rank whose
main thread blocks SIGUSR2 runs the dump thread of workloads/_trace.py: it gets
SIGUSR2 instead, and that thread prints the stacks, then its Flight Recorder entries. labctl
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

SIGNAL = signal.SIGUSR1
FR_SIGNAL = signal.SIGUSR2             # workloads/_trace.py: dump the Flight Recorder ring


def install() -> None:
    try:
        faulthandler.register(SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError, RuntimeError):
        pass            # no SIGUSR1 here (Windows), or stderr has no file descriptor


def _signal_mask_has(pid: int, mask: str, signum: int) -> bool:
    """Whether `signum` is in the process's (main thread's) /proc status mask
    `mask` ("SigCgt": caught, "SigBlk": blocked)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(mask + ":"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _catches(pid: int, signum: int) -> bool:
    return _signal_mask_has(pid, "SigCgt", signum)


def _blocks(pid: int, signum: int) -> bool:
    """Whether the process's main thread blocks `signum` (a sigwait thread takes it)."""
    return _signal_mask_has(pid, "SigBlk", signum)


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return {}
    env = {}
    for item in items:
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def signal_ranks(run_id: str | None = None) -> list[tuple[int, int]]:
    """(pid, rank) of every rank process of the run that was asked for its stack."""
    asked = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        env = _environ(pid)
        if "RANK" not in env or (run_id and env.get("LAB_RUN_ID") != run_id):
            continue
        if not _catches(pid, SIGNAL):
            continue
        try:
            # A rank with the dump thread of workloads/_trace.py gets only its signal: that
            # thread prints the stacks and then the Flight Recorder. Both signals at once
            # would let faulthandler's C handler walk a thread that is running Python (SIGSEGV).
            os.kill(pid, FR_SIGNAL if _blocks(pid, FR_SIGNAL) else SIGNAL)
            asked.append((pid, int(env["RANK"]) if env["RANK"].isdigit() else -1))
        except (ProcessLookupError, PermissionError):
            continue
    return asked


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def kill_rank(run_id: str, rank: int) -> list[int]:
    """SIGKILL the worker with RANK=`rank` of the run: the topmost process with that
    RANK (its children inherit it). Returns the pids killed (none: not running yet)."""
    mine = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            env = _environ(int(entry))
            if env.get("RANK") == str(rank) and env.get("LAB_RUN_ID") == run_id:
                mine.add(int(entry))
    top = sorted(p for p in mine if _parent(p) not in mine)
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
