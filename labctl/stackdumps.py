"""A rank's faulthandler dumps (workloads/_stacks.py prints them on SIGRTMIN+6, at the
deadline, on Ctrl-C): the last one a rank printed (`StackTracker`, fed by the node-log
split, labctl/logs.py), a dump as its threads (`dump_threads`), and where the rank stood
(`where_stuck`: its innermost frame of the user's or a workload's code, by the one rule of
labctl/tracebacks.py, and the torch.distributed call it is in).
"""
from __future__ import annotations

import re
from typing import Iterable

from workloads._protocol import SIGTERM_STACKS_MARKER

from .trace.branches import loop_around
from .tracebacks import DIST_WRAPPERS, own_frame, without_rank_prefix

_STACK_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
_STACK_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+) in (.+)$')
MAX_STACK_LINES = 500


class StackTracker:
    """The last faulthandler dump (all threads) one rank printed when asked (workloads/_stacks.py:
    at a deadline, `labctl stacks`), and the last it printed on its own when stopped
    (SIGTERM_STACKS_MARKER before it: workloads/_trace/fr.py). `best`: the asked one where
    there is one (a rank stopped after a deadline is in its teardown by then), else the other."""

    def __init__(self, rank: int | None = None) -> None:
        self.rank = rank                        # the stream's rank: only its own torch prefix is cut
        self.capturing: list[str] | None = None
        self.threads: set[str] = set()          # the thread ids of the dump being read
        self.last: list[str] | None = None
        self.earlier: list[str] | None = None   # the asked dump before `last`
        self.at_sigterm: list[str] | None = None
        self._marked = False                    # the next dump follows the SIGTERM marker
        self._reading_marked = False            # ... and the one being read did

    @property
    def best(self) -> list[str] | None:
        return self.last or self.at_sigterm

    def feed(self, line: str) -> None:
        text = without_rank_prefix(line, self.rank)
        if text.startswith(SIGTERM_STACKS_MARKER):
            self.close()
            self._marked = True
            return
        if self.capturing is not None and text.startswith("@@labctl-"):
            return      # a marker line (stdout: the trace flusher, results) amid a dump on stderr
        if _STACK_HEADER.match(text):
            thread = text.split(" (", 1)[0].split()[-1]
            if self.capturing is not None and thread in self.threads:
                self.close()            # the next dump, glued to this one: a thread seen twice
            if self.capturing is None:
                self.capturing, self.threads = [], set()
                self._reading_marked, self._marked = self._marked, False
            self.threads.add(thread)
            if len(self.capturing) < MAX_STACK_LINES:
                self.capturing.append(text)
            return
        if self.capturing is not None and (not text.strip() or _STACK_FRAME.match(text)
                                           or text.strip().startswith("<")):
            if len(self.capturing) < MAX_STACK_LINES:
                self.capturing.append(text)
            return
        self.close()

    def close(self) -> None:
        if self.capturing:
            while self.capturing and not self.capturing[-1].strip():
                self.capturing.pop()
            if self._reading_marked:
                self.at_sigterm = self.capturing
            else:
                self.earlier, self.last = self.last, self.capturing
        self.capturing = None

    def spinning(self) -> int | None:
        """The first line of the loop this rank spins in: its dumps (the last two asked, the
        one at SIGTERM) have its own innermost frame in one function, in no torch.distributed
        call, at two lines or more of one loop (a power iteration whose NaN never converges).
        None: not seen so."""
        seen = [where_stuck(d) for d in (self.earlier, self.last, self.at_sigterm) if d]
        if len(seen) < 2 or any(not w or w.get("call") for w in seen) \
                or len({(w["file"], w["function"]) for w in seen}) != 1 or len({w["line"] for w in seen}) < 2:
            return None
        return loop_around(seen[0]["file"], sorted({w["line"] for w in seen}))


def dump_threads(dump: Iterable[str]) -> list[tuple[str, list[str]]]:
    """A faulthandler dump (StackTracker's, or stacks/rank-<r>.txt) as its threads, in the
    order it has them: each thread's header line (`Current thread 0x... (most recent call
    first):`, `Thread 0x...`) and the lines under it; lines before the first header are
    no thread's."""
    threads: list[tuple[str, list[str]]] = []
    for line in dump:
        if line.startswith(("Current thread", "Thread ")):
            threads.append((line, []))
        elif threads:
            threads[-1][1].append(line)
    return threads


def where_stuck(dump: list[str]) -> dict:
    """From a faulthandler dump: the innermost frame in the user's or workload's code and
    the torch.distributed call it is in (barrier, all_reduce, recv ...), per the busiest
    thread: one in a torch.distributed call, else the main thread (the one that runs the
    script's module code), else the first with a frame of its own."""
    threads = [[(m.group(1), int(m.group(2)), m.group(3).strip())
                for m in map(_STACK_FRAME.match, lines) if m] for _, lines in dump_threads(dump)]

    def own(frame) -> bool:
        return own_frame(frame[0])

    best: dict = {}
    rank = (False, False)
    for frames in threads:                       # most recent call first
        mine = next((i for i, f in enumerate(frames) if own(f)), None)
        if mine is None:
            continue
        call = None
        for file, _, func in reversed(frames[:mine]):   # from the user's frame inward
            if "torch/distributed/" in file and func not in DIST_WRAPPERS:
                call = func
                break
        file, line, func = frames[mine]
        found = {"file": file, "line": line, "function": func, "call": call}
        main = any(f[2] == "<module>" and own(f) for f in frames)
        if not best or (bool(call), main) > rank:
            best, rank = found, (bool(call), main)
    return best
