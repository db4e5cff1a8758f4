"""How SIGINT, SIGTERM and SIGHUP act on labctl while a lab runs, by phase: they stop the
lab while it runs, wait while it is cleaned up, and a second one cuts a protected phase
(the log collection, the run folder's finish) short. The driver (labctl/driver.py) runs
its lifecycle under one regime; lab.py and exercise.py hold one from the start of a run
to its report."""
from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import Interrupted
from .outcome import signal_name

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Signals:
    """How a handled signal acts, by phase of the run:

    running     raises Interrupted (the lab is stopped, then collected)
    protected   (collecting the logs, finishing the run folder) the first signal is
                noted and the work goes on; a further one (the run's own interrupt
                counts) raises Interrupted: that work is cut short
    cleaning    noted only (stopping the nodes, deleting the lab, between phases)
    """

    def __init__(self) -> None:
        self.raising = True
        self.protecting: tuple[str, str] | None = None   # (what is done, what a cut means)
        self.deferred: list[int] = []
        self.seen = 0                 # handled signals so far, the run's interrupt included
        self.say: Callable[[str], None] = lambda line: None

    def handler(self, signum, frame) -> None:
        self.seen += 1
        if self.raising:
            self.raising = False
            raise Interrupted(signum)
        if self.protecting is not None and self.seen > 1:
            self.protecting = None
            raise Interrupted(signum)
        self.deferred.append(signum)
        if self.protecting is not None:
            what, cut = self.protecting
            try:
                self.say(f"{signal_name(signum)}: {what} first; send it again to cut {cut}")
            except Exception:         # print reentered from a signal handler: never fatal
                pass

    @classmethod
    def deferring(cls) -> "Signals":
        """A regime for a caller that installed no handler (its signals act as Python's
        defaults): never raises by itself."""
        state = cls()
        state.raising = False
        return state

    @contextmanager
    def protect(self, what: str, cut: str) -> Iterator[None]:
        """While `what` is done ("collecting the logs"; `cut`: what a second signal
        cuts short, and what that means): see the class docstring."""
        self.protecting = (what, cut)
        try:
            yield
        finally:
            self.protecting = None

    def collection(self):
        return self.protect("collecting the logs", "the collection short (the lab is then kept "
                                                   "for `labctl down`)")


@contextmanager
def signals_raise(state: "Signals | None" = None) -> Iterator[Signals]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted while the lab runs; once cleanup
    starts (`.raising = False`) they are deferred, except a second one during a
    protected phase (`.protect()`: the log collection, the run folder's finish), which
    cuts it short. Given `state` (a regime its caller installed), nothing is installed."""
    if state is not None:
        yield state
        return
    state = Signals()
    previous = {s: signal.signal(s, state.handler) for s in HANDLED_SIGNALS}
    try:
        yield state
    finally:
        state.raising = False
        state.protecting = None
        for s, h in previous.items():
            signal.signal(s, h)
