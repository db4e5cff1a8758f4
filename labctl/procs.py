"""This machine's processes as labctl reads them (psutil): the local backend's nodes,
a run's processes by their LAB_RUN_ID, and whether a run's labctl is still alive.

Every caller scans processes that may end, or belong to another user, at any moment:
each function here treats a process it cannot read as absent (None, {}, left out of a
scan), never an exception. The ranks' side reads /proc with the standard library
(workloads/_proc.py: it runs in containers that have nothing else); the local node
guard (labctl/backends/local/nodeguard.py) uses this module too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError,
         PermissionError)


@dataclass(frozen=True)
class Identity:
    """A process for good: its pid and when it started. A pid alone may name another
    process later; with its start (in clock ticks after boot, as /proc/<pid>/stat has
    it, so that status.json keeps the field it always had) it cannot."""
    pid: int
    start_ticks: int


def _ticks(p: psutil.Process) -> int:
    return round((p.create_time() - psutil.boot_time()) * os.sysconf("SC_CLK_TCK"))


def identity(pid: int | None = None) -> Identity | None:
    """This process's (or `pid`'s) identity; None when it is gone or unreadable."""
    try:
        p = psutil.Process(pid)
        return Identity(p.pid, _ticks(p))
    except _GONE:
        return None


def still_running(who: Identity) -> bool:
    """Whether that very process still runs (not gone, not a zombie, pid not reused)."""
    try:
        p = psutil.Process(who.pid)
        return p.status() != psutil.STATUS_ZOMBIE and abs(_ticks(p) - who.start_ticks) <= 1
    except _GONE:
        return False


def alive(pid: int) -> bool:
    """Whether the process exists and has not ended (a zombie has)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False


def with_env(name: str, value: str) -> list[int]:
    """Pids of the processes (other than this one) started with `name=value` in their
    environment: a run's guards, agents and workers carry LAB_RUN_ID."""
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            if p.environ().get(name) == value:
                found.append(p.pid)
        except _GONE:
            continue
    return found


def descendants(root: int) -> list[int]:
    """Every live (not zombie) process below `root`: its children, theirs, and so on."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except _GONE:
        return []
    return [c.pid for c in children if alive(c.pid)]


def send_signal(pid: int, sig: int) -> None:
    """Send `sig` to `pid`; a process that is gone, or not ours to signal, is left alone."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def command_of(pid: int) -> str:
    """The process's command line for a report line; "?" when it is gone."""
    try:
        return " ".join(psutil.Process(pid).cmdline())[:300]
    except _GONE:
        return "?"
