"""Live diagnosis (issue 49): a hang named while the lab hangs, and the per-rank progress
view, from the ranks' records as they are written.

    window.py    how long an op may wait: the floor, or a multiple of its expected time
    stall.py     when the lab has stopped making progress (pure)
    ranks.py     every rank's records followed: what each has begun, is inside, last said
    view.py      the progress view (a block on a terminal, a line now and then in a log)
    diagnose.py  the stacks, then the finish's own diagnosis on copies under live/
    watcher.py   the loop's step: poll, show, find a stall, say it, re-arm on progress
"""
from __future__ import annotations

import sys
from typing import Callable

from ..backends.base import Backend
from ..rundir import RunDir
from .view import View
from .watcher import FOLLOWED, Watcher


def watcher_for(run: RunDir, backend: Backend, say: Callable[[str], None], show: bool = True,
                started_at: float | None = None, owner: bool = True,
                elsewhere: bool = False) -> Watcher | None:
    """The live watcher of `run`, or None with a line that says why there is none. `owner`:
    this labctl writes the folder's status.json (`labctl up`, `labctl collect`); else it
    watches another's lab (`labctl watch RUN`: live/watch-<pid>/, never a stop).
    `elsewhere`: a lab started outside labctl (`collect`): never stopped, and its records
    come through its log stream, which the watcher brings into the folder as it goes."""
    spec = run.spec
    if not spec.trace:
        say("live: tracing is off (--no-trace): no records to follow, so no hang is named before "
            "the deadline")
        return None
    if backend.name not in FOLLOWED:
        say(f"live: the {backend.name} backend's records reach labctl only with the logs at the end: "
            "no hang is named before the deadline")     # k8s: reading pod logs mid-run is not done yet
        return None
    view = View(sys.stderr) if show else None
    on_hang = spec.on_hang if owner and not elsewhere else "report"
    return Watcher(run, backend, spec.stall_window, on_hang, spec.links, spec.dist_backend, say, view,
                   started_at=started_at, owner=owner, stream_logs=elsewhere and not backend.live_logs)
