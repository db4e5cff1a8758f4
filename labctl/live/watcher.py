"""The live watcher: follows every rank's records while the lab runs, shows the progress
view, and names a hang while it hangs (issue 49; docs/diagnosis.md, "Live diagnosis").

    poll ──► records since the last poll (labctl/live/ranks.py) ──► the view
      └─► a stall? (labctl/live/stall.py) ──► every rank's stacks once ──► the finish's
          diagnosis on copies (labctl/live/diagnose.py) ──► said at once: the terminal,
          status.json's `live` ──► on_hang stop: the driver ends the lab as a hang
      └─► progress again after a stall: "resumed", and the watcher re-arms

The driver calls `poll` from its loop (labctl up); `labctl watch` calls it from its own.
Nothing here stops, signals or slows a rank, except one stack signal (SIGRTMIN+6) per stack look (faulthandler
writes the stacks and the rank goes on).
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable

from workloads._protocol import one_line

from .. import atomicfile
from ..backends.base import Backend
from ..links import Links
from ..outcome import NodeOutcome
from ..runrecord import LiveDiagnosis
from ..rundir import RunDir
from ..rundir import LIVE_SUBDIR, WATCH_FILE
from .diagnose import diagnose, stacks_now, take_stacks
from .ranks import RankRecords
from .stall import NS, InFlight, Kind, Stall, find, judge_stacks
from .view import View
from .window import Window

POLL_S = 0.5                         # records are read this often
STREAM_S = 2.0                       # a lab started elsewhere: its logs are brought in this often
PROBE_BACKOFF = 2.0                  # nothing moves: the next stack look comes this many times later
SETUP_CALLS = frozenset({"init_process_group", "new_group", "new_subgroups", "split_group",
                         "init_device_mesh", "_store_based_barrier"})

BORROW_WAIT_S = 15.0                 # labctl watch waits this long for the running labctl's own answer
FOLLOWED = ("local", "compose")   # backends whose ranks write record files into the run folder as they go

Say = Callable[[str], None]


class Watcher:
    def __init__(self, run: RunDir, backend: Backend | None, floor_s: float, on_hang: str,
                 links: Links | None, dist_backend: str | None, say: Say, view: View | None = None,
                 started_at: float | None = None, clock: Callable[[], float] = time.time,
                 owner: bool = True, stream_logs: bool = False):
        self.run, self.backend, self.on_hang, self.say = run, backend, on_hang, say
        self.owner = owner                         # else `labctl watch`: never writes status.json
        self.stream_logs = stream_logs             # the records come through the log stream
        self.next_stream = 0.0
        self.view = view
        self.clock = clock
        self.window = Window.of(floor_s, links, dist_backend)
        self.records = RankRecords(run.path, run.record.world_size)
        self.started_s = started_at if started_at is not None else clock()
        self.next_poll = 0.0
        self.stalled: Stall | None = None          # the stall said, until progress comes back
        self.said: LiveDiagnosis | None = None
        self.probe_at: float | None = None         # when nothing moves: the next stack look
        self.probe_gap = floor_s
        self.moved_at_ops = -1
        self.folder = run.path / LIVE_SUBDIR / ("" if owner else f"watch-{os.getpid()}")

    def poll(self, outcomes: list[NodeOutcome]) -> bool:
        """One look, at most every POLL_S; True when the lab must now end as a hang
        (on_hang stop, a hang just named)."""
        now = self.clock()
        if now < self.next_poll:
            return False
        self.next_poll = now + POLL_S
        if self.stream_logs and now >= self.next_stream and self.backend is not None:
            self.next_stream = now + STREAM_S
            try:                         # the node logs so far, into the folder (the records in them)
                self.backend.stream(self.run)
            except Exception as exc:     # noqa: BLE001 - the next look tries again
                self.say(f"note: live: the logs could not be read yet: {one_line(str(exc))}")
        ranks = self.records.poll()
        now_ns = int(now * NS)
        if self.view is not None:
            self.view.show(ranks, now_ns, now, now - self.started_s)
        total = sum(r.ops for r in ranks.values()) + sum(len(r.inside) for r in ranks.values())
        if self.stalled is not None:
            if self._moved(ranks, total):
                self._resumed(now)
            return False
        found = find(ranks, now_ns, self.window.floor_s, self._window_for, int(self.started_s * NS),
                     self.run.record.world_size)
        if found is None:
            self.probe_at, self.probe_gap = None, self.window.floor_s
            return False
        reason = self._probe(now) if found.kind is Kind.STILL else \
            self._polled(ranks, now_ns) if found.kind is Kind.POLL else self._reason(found, ranks, now_ns)
        if reason is None:
            return False
        self.stalled, self.moved_at_ops = found, total
        self.said = self._diagnose(outcomes, found, reason)
        return self.on_hang == "stop"

    # ---- rules --------------------------------------------------------------------
    def _window_for(self, op: InFlight) -> float:
        return self.window.for_op(op.op, op.nbytes, op.members)

    def _reason(self, found: Stall, ranks: dict, now_ns: int) -> str:
        op = found.op
        inside = sorted(r.rank for r in ranks.values() if any(
            o.pg == op.pg and o.seq == op.seq and o.op == op.op for o in r.inside)) if op.seq is not None \
            else [op.rank]
        who = f"rank{'s' if len(inside) > 1 else ''} {', '.join(map(str, inside))}"
        return (f"{who} waited in {op.label} ({op.pg}) for {(now_ns - op.start_ns) / NS:.0f} s, past "
                f"its stall window of {found.window_s:.0f} s")

    def _polled(self, ranks: dict, now_ns: int) -> str:
        calls = sorted({f"{r.last.call} at {r.last.caller}" for r in ranks.values() if r.last is not None})
        since = max(r.polling_ns for r in ranks.values())
        return (f"every rank has repeated one store call and nothing else for {(now_ns - since) / NS:.0f} s "
                f"({'; '.join(calls)}): a count nobody left can complete")

    def _probe(self, now: float) -> str | None:
        """Nothing moves: look at the stacks (with a growing gap between looks, so a long
        compute phase costs a few looks); a stall when they say so."""
        if self.backend is None or (self.probe_at is not None and now < self.probe_at):
            return None
        take_stacks(self.run, self.backend)
        where = stacks_now(self.run)
        said = judge_stacks(where, self.run.record.world_size, SETUP_CALLS)
        self.probe_at = now + self.probe_gap
        self.probe_gap *= PROBE_BACKOFF
        return said

    def _moved(self, ranks: dict, total: int) -> bool:
        if self.stalled.kind is Kind.STILL:
            return total != self.moved_at_ops
        if self.stalled.kind is Kind.POLL:
            return any(r.polling_ns is None or r.polling_ns > self.stalled.since_ns for r in ranks.values())
        op = self.stalled.op
        still = ranks.get(op.rank)
        return still is None or all(o.start_ns != op.start_ns for o in still.inside)

    # ---- saying it ----------------------------------------------------------------
    def _borrowed(self, found: Stall) -> LiveDiagnosis | None:
        """`labctl watch` beside a `labctl up` that watches its own lab: that labctl's answer
        (status.json's `live`), so that the ranks are not asked for their stacks twice at
        once (two dumps at once interleave in a log). None when it says nothing in time."""
        end = self.clock() + BORROW_WAIT_S
        while self.clock() < end:
            try:
                live = RunDir.open(self.run.path).record.live
            except Exception:            # noqa: BLE001 - status.json mid-write: look again
                live = None
            if live is not None and live.since >= found.since_ns / NS - self.window.floor_s:
                return live
            time.sleep(POLL_S)
        return None

    def _diagnose(self, outcomes: list[NodeOutcome], found: Stall, reason: str) -> LiveDiagnosis:
        if not self.owner and self.run.record.backend in FOLLOWED:
            borrowed = self._borrowed(found)
            if borrowed is not None:
                self._say(borrowed)
                self._record(borrowed)
                return borrowed
        if self.backend is not None and found.kind is Kind.OP:
            try:
                take_stacks(self.run, self.backend)
            except Exception as exc:     # noqa: BLE001 - the records alone still say something
                self.say(f"note: live: could not take the stacks: {one_line(str(exc))}")
        try:
            said = diagnose(self.run, outcomes, found.since_ns, reason, self.folder)
        except Exception as exc:         # noqa: BLE001 - a watcher never sinks the lab
            said = LiveDiagnosis(made_at=self.clock(), since=found.since_ns / NS, reason=reason,
                                 text=f"{reason} (the diagnosis failed: {one_line(str(exc))})")
        self._say(said)
        self._record(said)
        return said

    def _say(self, d: LiveDiagnosis) -> None:
        lines = [f"HANG (live, {d.after_s:.1f} s after it began): {d.text}", f"  why: {d.reason}"]
        for line in d.waiting[:4]:
            lines.append(f"  waiting: {line}")
        for rank, w in sorted(d.where.items(), key=lambda kv: int(kv[0]))[:16]:
            if w.get("file"):
                call = f" in {w['call']}" if w.get("call") else ""
                lines.append(f"  rank {rank} is at {w['file']}:{w['line']}{call}")
        then = ("stopping the lab (--on-hang stop)" if self.on_hang == "stop" else
                f"the ranks are kept as they are until the deadline or Ctrl-C (attach a debugger; "
                f"`labctl stacks {self.run.path}`)")
        lines.append(f"  {then}")
        text = "\n".join(lines)
        if self.view is not None:
            self.view.say(text)
        else:
            for line in lines:
                self.say(line)

    def _record(self, d: LiveDiagnosis) -> None:
        try:
            if self.owner:
                self.run.record.live = d
                self.run.save()
            else:                        # another labctl owns status.json
                atomicfile.write_text(self.folder / WATCH_FILE, json.dumps(d.to_dict(), indent=2) + "\n")
        except OSError:                  # the storage guard says it at the next poll
            pass

    def _resumed(self, now: float) -> None:
        d = self.said
        waited = now - (d.since if d else now)
        line = f"live: progress again after {waited:.0f} s: the stall above ended"
        if self.view is not None:
            self.view.say(line)
        else:
            self.say(line)
        if d is not None:
            d.resumed_at = now
            self._record(d)
        self.stalled = None
        self.probe_at, self.probe_gap = None, self.window.floor_s

    def close(self) -> None:
        if self.view is not None:
            self.view.clear()
