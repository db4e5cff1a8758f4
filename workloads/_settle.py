"""At a rank's exit, before the interpreter finalizes: let torch's own threads finish
what they are doing while the GIL is free.

Why (torch 2.13, gloo; measured here): a work issued during a backward pass (DDP's
all-reduces, a comm hook's) holds the issuing thread's state, and that holds a Python
object (the contextvars context autograd stashes for the backward). Gloo's worker thread
drops the last reference to a work just after it completed; the decref waits for the
GIL. When the script ends right then (its last backward, `destroy_process_group()`, exit)
and the interpreter begins finalizing while that thread waits, Python ends the thread with
`pthread_exit` inside a C++ destructor and libstdc++ aborts the rank: "terminate called
without an active exception", SIGABRT, though every op completed. A core dump shows
ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork -> ~ThreadLocalState -> SafePyObject
decref -> take_gil -> pthread_exit -> std::terminate. The op mix of tests/test_trace.py
(4 ranks, DDP last) under torchrun aborted in 1 run of 25 on a loaded 2-core machine.

So the last exit handler (installed before the script runs, so it runs after every
handler the script registers) lets the GIL go and waits until none of torch's threads
(`pt_*`: gloo's workers, NCCL's watchdog) is runnable twice in a row, for at most
SETTLE_S: a thread that waited for the GIL takes it then, drops the work, and goes back to
sleep. Nothing of the program changes; a rank spends a few milliseconds more at exit.
An op still in flight at exit (never waited on) can still complete during finalization:
that is left as torch has it. Standard library only; Linux (/proc) only, else nothing.
"""
from __future__ import annotations

import atexit
import os
import threading
import time

SETTLE_S = 1.0          # at most, at exit
POLL_S = 0.002          # the GIL is free this long between two looks
QUIET_LOOKS = 2         # no torch thread runnable this many looks in a row: settled
TORCH_THREAD_PREFIX = b"pt_"

_installed = False


def torch_threads_running() -> bool:
    """Whether a thread of this process that torch started (its name begins with `pt_`)
    is running or runnable now (state R in /proc/self/task/<tid>/stat)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:                 # the thread ended meanwhile
            continue
        name_start, name_end = stat.find(b"(") + 1, stat.rfind(b")")
        if stat[name_start:name_end].startswith(TORCH_THREAD_PREFIX) and stat[name_end + 2:name_end + 3] == b"R":
            return True
    return False


def settle(limit_s: float = SETTLE_S) -> bool:
    """Let the GIL go until torch's threads are quiet (QUIET_LOOKS looks in a row), at
    most `limit_s`. True when they settled."""
    deadline = time.monotonic() + limit_s
    quiet = 0
    while quiet < QUIET_LOOKS:
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)              # releases the GIL: a thread waiting for it takes it
        quiet = 0 if torch_threads_running() else quiet + 1
    return True


def install() -> bool:
    """Register `settle` as an exit handler, once per process; call it before the script
    runs, so that it runs after the script's own exit handlers. True when registered."""
    global _installed
    if _installed or not os.path.isdir("/proc/self/task"):
        return False
    _installed = True
    owner = os.getpid()

    def at_exit() -> None:
        if os.getpid() == owner and threading.current_thread() is threading.main_thread():
            settle()

    atexit.register(at_exit)
    return True
