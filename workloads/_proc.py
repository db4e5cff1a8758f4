"""What Linux's /proc says about this machine's processes: the one reader for labctl and the workloads.

Every caller scans processes that may end (or belong to another user) at any moment, so
each function here treats a process it cannot read as absent: `None`, `{}` or left out of
a scan, never an exception. Standard library only: the node guard (run by path) and the
helpers run inside containers (`python3 -m workloads._stacks`) import it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat that labctl uses."""
    pid: int
    comm: str            # may hold spaces and parentheses: parsed up to the LAST ')'
    state: str           # one letter: R running, S sleeping, T stopped, Z zombie ...
    ppid: int
    pgrp: int
    start_ticks: int     # clock ticks after boot: with the pid, names one process for good

    @property
    def zombie(self) -> bool:
        """Ended, only not reaped yet."""
        return self.state == "Z"

    def started(self) -> float | None:
        """When the process began, in epoch seconds (clock-tick steps, 10 ms)."""
        try:
            with open("/proc/uptime") as f:
                uptime = float(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return time.time() - (uptime - self.start_ticks / os.sysconf("SC_CLK_TCK"))


def parse_stat(data: bytes) -> ProcStat:
    """One /proc/<pid>/stat line. The command name sits in parentheses and may contain
    anything, ')' and spaces included: the fixed fields are those after the last ')'.
    ValueError or IndexError when `data` is not such a line."""
    close = data.rindex(b")")
    head, fields = data[:close], data[close + 2:].split()
    pid, _, comm = head.partition(b" (")
    return ProcStat(pid=int(pid), comm=comm.decode(errors="replace"), state=fields[0].decode(),
                    ppid=int(fields[1]), pgrp=int(fields[2]), start_ticks=int(fields[19]))


def _read(pid: int | str, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:          # gone (ENOENT, ESRCH), not ours (EACCES), or unreadable
        return None


def stat(pid: int | str = "self") -> ProcStat | None:
    """The process's stat, or None when it is gone or unreadable."""
    data = _read(pid, "stat")
    try:
        return parse_stat(data) if data is not None else None
    except (ValueError, IndexError):
        return None


def pids() -> list[int]:
    """Every process id on this machine right now (some may be gone by the time they are read)."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def stats() -> Iterator[ProcStat]:
    """Every process's stat, skipping those that end during the scan."""
    for pid in pids():
        st = stat(pid)
        if st is not None:
            yield st


def alive(pid: int) -> bool:
    """Whether the process exists and has not ended (a zombie has)."""
    st = stat(pid)
    return st is not None and not st.zombie


def environ(pid: int | str) -> dict[str, str]:
    """The environment the process started with; {} when gone or not ours."""
    data = _read(pid, "environ")
    env = {}
    for item in (data or b"").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def cmdline(pid: int | str) -> list[str] | None:
    """The process's argv ([] for a kernel thread or a zombie); None when gone or unreadable."""
    data = _read(pid, "cmdline")
    if data is None:
        return None
    return [part.decode(errors="replace") for part in data.split(b"\0") if part]


def descendants(root: int) -> list[int]:
    """Every live (not zombie) process below `root`: its children, theirs, and so on."""
    children: dict[int, list[int]] = {}
    for st in stats():
        if not st.zombie:
            children.setdefault(st.ppid, []).append(st.pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass(frozen=True)
class Signals:
    """A process's signal masks from /proc/<pid>/status (bit signum-1 per signal)."""
    pending: int         # SigPnd | ShdPnd: waiting for delivery (to the thread or the process)
    caught: int          # SigCgt: a handler is installed

    def is_pending(self, signum: int) -> bool:
        return bool(self.pending >> (signum - 1) & 1)

    def catches(self, signum: int) -> bool:
        return bool(self.caught >> (signum - 1) & 1)


def signals(pid: int | str) -> Signals | None:
    """The process's signal masks, or None when it is gone or unreadable."""
    data = _read(pid, "status")
    if data is None:
        return None
    masks = {}
    for line in data.decode(errors="replace").splitlines():
        name, _, value = line.partition(":")
        if name in ("SigPnd", "ShdPnd", "SigCgt"):
            try:
                masks[name] = int(value.split()[0], 16)
            except (ValueError, IndexError):
                return None
    return Signals(pending=masks.get("SigPnd", 0) | masks.get("ShdPnd", 0),
                   caught=masks.get("SigCgt", 0))
