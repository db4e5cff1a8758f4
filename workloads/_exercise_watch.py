"""What the exercise runner watches around each call of the learner's function
(workloads/_exercise.py, docs/exercises.md): the deadline (a watchdog thread that ends a
rank whose call does not return), the store (every method of torch's Store called while
the call runs: values that travel through the lab's key-value store are not sent), and
where in the learner's file a rank is (the line a record names).

The learner's code runs in this process: what it is handed (torch.distributed, the
store, this module) it can reach around. The watches see what an honest file does; they
do not stand guard against a file set on deceiving them (docs/exercises.md, "What the
grade cannot see").
"""
from __future__ import annotations

import contextlib
import linecache
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

from . import _common
from ._protocol.exercises import RECORD_DEADLINE, STORE_METHODS, WORKLOAD, StoreUse

EXIT_DEADLINE = 3
# torch.distributed's own group set-up, which talks to the store itself (a store-based
# barrier): a learner's new_group inside a call is not a value sent through the store
TORCH_SETUP = frozenset({"_store_based_barrier", "init_process_group", "new_group", "new_subgroups",
                         "new_subgroups_by_enumeration", "split_group", "_new_process_group_helper",
                         "init_device_mesh"})


# ---------------------------------------------------------------- the deadline

class Watchdog:
    """Ends this rank when a call does not return within its deadline: records where the
    main thread is, writes out its record, exits EXIT_DEADLINE. A thread, because the main
    thread may be blocked in a send that nothing in this process can interrupt."""

    def __init__(self, files: set[str]):
        self.files = files
        self.cond = threading.Condition()
        self.until: float | None = None
        self.what: dict[str, Any] = {}
        self.main = threading.main_thread().ident
        threading.Thread(target=self._watch, name="labctl-exercise-deadline", daemon=True).start()

    @contextlib.contextmanager
    def armed(self, seconds: float, what: dict[str, Any]) -> Iterator[None]:
        with self.cond:
            self.until, self.what = time.monotonic() + seconds, {**what, "seconds": seconds}
            self.cond.notify()
        try:
            yield
        finally:
            with self.cond:
                self.until = None
                self.cond.notify()

    def _watch(self) -> None:
        with self.cond:
            while True:
                if self.until is None:
                    self.cond.wait()
                    continue
                left = self.until - time.monotonic()
                if left > 0:
                    self.cond.wait(left)
                    continue
                self._fire()

    def _fire(self) -> None:
        frame = sys._current_frames().get(self.main)
        rank = int(os.environ.get("RANK", "-1"))
        try:
            _common.emit({"workload": WORKLOAD, "name": RECORD_DEADLINE, "rank": rank, "ok": False,
                          **self.what, "where": where_in_frame(frame, self.files)})
            sys.stderr.write(f"labctl exercise: rank {rank}: the call did not return within "
                             f"{self.what.get('seconds')} s; ending this rank\n")
            sys.stderr.flush()
        finally:
            os._exit(EXIT_DEADLINE)


# ---------------------------------------------------------------- the store

class StoreWatch:
    """Every data method of torch's Store (set, get, add, compare_set, multi_get ...: the
    class the default store, a PrefixStore and a TCPStore client made from the lab's
    MASTER_ADDR all inherit them from), replaced while a call runs by one that counts the
    call and notes its first line in the learner's file, then calls torch's own. Issue 52
    item 7: a file that put each rank's tensor into the store and summed what it read back,
    beside a decoy ring of exactly the optimal bytes, passed every check.

    The recorder (workloads/_trace/calls.py) wraps get and wait to record the script's own
    store reads; inside a call this watch calls the method it wraps (torch's), so the
    recorder does not take this module's line for the script's: inside a call the watch's
    count is the record of the store."""

    def __init__(self, files: set[str]):
        import torch

        self.files = files
        self.store_class = torch._C._distributed_c10d.Store
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.where: dict[str, Any] | None = None

    @contextlib.contextmanager
    def watching(self) -> Iterator[Callable[[], StoreUse | None]]:
        """The store's methods counted while the block runs; yields what reads the count."""
        self.counts, self.where = {}, None
        installed: dict[str, Any] = {}
        for name in STORE_METHODS:
            current = self.store_class.__dict__.get(name)
            if current is None:
                continue
            torch_own = getattr(current, "__wrapped__", current)   # below the recorder's wrapper
            try:
                setattr(self.store_class, name, self._counting(name, torch_own))
            except (TypeError, AttributeError):     # a torch whose Store takes no attribute
                continue
            installed[name] = current
        try:
            yield self.used
        finally:
            for name, current in installed.items():
                setattr(self.store_class, name, current)

    def used(self) -> StoreUse | None:
        with self.lock:
            if not self.counts:
                return None
            return StoreUse(tuple(sorted(self.counts.items())), self.where)

    def _counting(self, name: str, torch_own: Any) -> Any:
        watch = self

        def counted(store: Any, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            if not _in_torch_setup(frame):
                with watch.lock:
                    watch.counts[name] = watch.counts.get(name, 0) + 1
                    if watch.where is None:
                        watch.where = where_in_frame(frame, watch.files)
            return torch_own(store, *args, **kwargs)

        counted.__name__ = counted.__qualname__ = name
        counted.__doc__ = getattr(torch_own, "__doc__", None)
        return counted


def _in_torch_setup(frame: Any) -> bool:
    torch_dir = os.sep + "torch" + os.sep + "distributed" + os.sep
    while frame is not None:
        code = frame.f_code
        if code.co_name in TORCH_SETUP and torch_dir in code.co_filename:
            return True
        frame = frame.f_back
    return False


# ---------------------------------------------------------------- where in the learner's file

def _source(path: str, line: int) -> str:
    return linecache.getline(path, line).strip()


def where(frames: list[tuple[str, int]], files: set[str]) -> dict[str, Any] | None:
    """The innermost frame in the learner's files, else the innermost outside torch and
    this package: file (base name), line and its source."""
    here = os.path.dirname(os.path.abspath(__file__))
    pick = next(((p, n) for p, n in frames if p in files), None)
    if pick is None:
        pick = next(((p, n) for p, n in frames if "torch" not in p.split(os.sep) and not p.startswith(here)),
                    None)
    if pick is None:
        return None
    path, line = pick
    return {"file": os.path.basename(path), "line": line, "source": _source(path, line)}


def where_in(tb: Any, files: set[str]) -> dict[str, Any] | None:
    frames = []
    while tb is not None:
        frames.append((os.path.abspath(tb.tb_frame.f_code.co_filename), tb.tb_lineno))
        tb = tb.tb_next
    return where(frames[::-1], files)


def where_in_frame(frame: Any, files: set[str]) -> dict[str, Any] | None:
    frames = []
    while frame is not None:
        frames.append((os.path.abspath(frame.f_code.co_filename), frame.f_lineno))
        frame = frame.f_back
    return where(frames, files)
