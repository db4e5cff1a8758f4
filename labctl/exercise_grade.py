"""Grade a finished exercise lab from its run folder (docs/exercises.md): how the lab
ended first (an interrupted lab is not graded; the lab's timeout or a failed rank is the
grade's first line), then each world size's calls through the checks
(labctl/exercise_checks.py), from three things the folder holds:

- the runner's records (results.jsonl): values per call, each call's time window on its
  rank's clock and the store's methods it used, a call that passed the deadline, a
  function that raised;
- the trace (`call_ops`, the one place that reads it): the ops each call made inside its
  window — bytes sent, collectives called, isend/irecv never waited on, their order;
- the hang diagnosis (status.json, labctl/trace/): who waits in which send/recv for whom.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads._protocol.exercises import (RECORD_CALL, RECORD_DEADLINE, RECORD_LOAD, RECORD_RAISED,
                                           RECORD_TIME, WORKLOAD, Call, Exercise, worlds)

from . import exercise_checks as checks
from . import exercise_text as words
from .exercise_checks import Cell, Check, Finding, Grade
from .outcome import RunState
from .rundir import RunDir


@dataclass(frozen=True)
class Entry:
    """One exercise and the learner's file holding its function (labctl/exercise.py
    `entry` checks the file before any lab)."""
    exercise: Exercise
    file: Path


@dataclass
class Stop:
    """Why a rank ended early: a deadline, a raise, a file that would not load."""
    kind: str
    rank: int
    record: dict


def grade(run: RunDir, entries: list[Entry]) -> list[Grade]:
    """Each entry's grade, from the run folder of the lab made of them. How the lab ended (status.json) comes first: an interrupted lab
    is not graded, a lab past its timeout or failed says so before any check."""
    largest = run.record.world_size
    all_worlds = worlds(largest) if largest else []
    if run.record.state is RunState.INTERRUPTED:
        sig = run.record.signal or "SIGINT"
        return [_interrupted(Grade(e.exercise, e.file, all_worlds, interrupted=sig), run) for e in entries]
    records = [r for r in run.iter_results(warn=lambda line: None) if r.get("workload") == WORKLOAD]
    ops, traced = call_ops(run, [Call.from_record(r) for r in records if r.get("name") == RECORD_CALL])
    return [_grade_one(run, i, e, records, ops, traced, all_worlds) for i, e in enumerate(entries)]


def _interrupted(g: Grade, run: RunDir) -> Grade:
    rec = run.record
    why = rec.message or f"the lab was stopped by {g.interrupted}"
    g.findings.append(Finding(Check.VALUES, None, f"{why}: not graded (the calls that ran are in "
                                                  f"{run.results_path})"))
    return g


def call_ops(run: RunDir, calls: list[Call]) -> tuple[dict[tuple[int, int, int, int], list[Any]], set[int]]:
    """The trace ops each call made, (entry, world, case, rank) -> ops: every op its
    rank began inside the call's window on its own clock; and the ranks whose log holds
    any op at all (without one, a rank's sends are unknown, not zero). The one place
    that reads the trace (labctl/trace's reader of rank records)."""
    from . import trace

    windows: dict[int, list[Call]] = {}
    for c in calls:
        windows.setdefault(c.rank, []).append(c)
    found: dict[tuple[int, int, int, int], list[Any]] = {}
    traced: set[int] = set()
    sources = trace.record_sources(run.path)
    for rank, mine in windows.items():
        ops = trace.rank_ops(sources.get(rank, []))
        if ops:
            traced.add(rank)
        starts = [o.begin for o in ops]
        for c in mine:
            lo, hi = bisect.bisect_left(starts, c.begin_ns), bisect.bisect_right(starts, c.end_ns)
            found[(c.entry, c.world, c.case, rank)] = ops[lo:hi]
    return found, traced


def _grade_one(run: RunDir, index: int, e: Entry, records: list[dict], ops: dict, traced: set[int],
               all_worlds: list[int]) -> Grade:
    ex = e.exercise
    g = Grade(ex, e.file, all_worlds)
    mine = [r for r in records if r.get("entry") == index]
    loads = [r for r in mine if r.get("name") == RECORD_LOAD]
    if loads:
        said = words.load_text(loads[0], ex)
        g.findings.append(Finding(Check.VALUES, None, said, said))
        return g
    calls = [Call.from_record(r) for r in mine if r.get("name") == RECORD_CALL]
    timed_out = run.record.state is RunState.TIMEOUT
    stop = _stop(mine, lost_peers=not timed_out)      # at the timeout, a lost peer is labctl's stop
    for world in all_worlds:
        here = [c for c in calls if c.world == world]
        if not here:
            for check in Check:
                g.cells[(check, world)] = Cell(None, "—")
            continue
        checks.values(g, world, here, stop is not None and stop.record.get("world") == world)
        called = {(c.case, c.rank): ops.get((c.entry, c.world, c.case, c.rank), []) for c in here}
        checks.only_p2p(g, world, here, called)
        checks.store(g, world, here)
        checks.traffic_check(g, world, here, called)
        checks.arrived(g, world, here, called, traced)
        checks.schedule(g, world, here, called)
        checks.waits(g, world, here, called)
        g.cells[(Check.DEADLINE, world)] = Cell(True, "pass")
        g.cells[(Check.TIME, world)] = Cell(None, "")
    for r in mine:
        if r.get("name") == RECORD_TIME and (Check.TIME, r["world"]) in g.cells:
            g.cells[(Check.TIME, r["world"])] = Cell(None, words.time_text(r))
    if stop is not None:
        _stopped(g, run, stop, calls)
    elif not calls and not timed_out:
        said = words.lab_failure(run)
        g.findings.append(Finding(Check.VALUES, None, said, said))
    stop_world = stop.record.get("world") if stop else None
    later = [w for w in all_worlds if w != stop_world and not any(c.world == w for c in calls)]
    if later and (calls or stop):
        why = (f" (the lab stopped at world size {stop_world})" if stop
               else " (the lab's timeout came first)" if timed_out else "")
        g.findings.append(Finding(Check.VALUES, None, f"world size {', '.join(map(str, later))}: not run{why}"))
    _lab_end(g, run, records)
    return g


def _lab_end(g: Grade, run: RunDir, records: list[dict]) -> None:
    """How the lab ended decides before any check: the lab's timeout (a rank that did not
    end: often a thread the function left running), a failed rank or a broken backend
    that no record of the runner explains. Put first: it is the grade's headline."""
    rec = run.record
    if rec.state is RunState.PASSED:
        return
    if rec.state is RunState.TIMEOUT:
        said = words.timeout_text(run, records)
        g.findings.insert(0, Finding(Check.DEADLINE, None, said[0], said[1]))
        return
    explained = (any(r.get("ok") is False for r in records)
                 or any(c.workload == WORKLOAD for c in rec.failed_checks))
    if rec.state is not RunState.ERROR and explained:
        return          # a runner's record (wrong values, a raise, a deadline) or a grade says why
    why = rec.message or (rec.first_failure.describe() if rec.first_failure else rec.state.value)
    said = (f"the lab {rec.state.value} although no call failed a check: {why}" if not g.findings
            else f"the lab ended in {rec.state.value}: {why}")
    g.findings.insert(0, Finding(Check.VALUES, None, said, said))


def _stop(records: list[dict], lost_peers: bool = True) -> Stop | None:
    """The first reason a rank ended early: the earliest call (largest world first) that
    raised in the learner's code or passed the deadline (at the same call a raise first:
    the others may have waited for the rank that raised), else (`lost_peers`) an error of the
    communication (a peer went away, e.g. killed)."""
    own = [(RECORD_RAISED, r) for r in records if r.get("name") == RECORD_RAISED
           and not r.get("comm") and not r.get("in_runner")]
    late = [(RECORD_DEADLINE, r) for r in records if r.get("name") == RECORD_DEADLINE]
    comm = [("comm", r) for r in records if r.get("name") == RECORD_RAISED] if lost_peers else []

    def order(item: tuple[str, dict]) -> tuple:
        kind, r = item
        return (-int(r.get("world", 0)), int(r.get("case", 0)), kind != RECORD_RAISED, int(r.get("rank", 0)))

    for found in (own + late, comm):
        if found:
            kind, first = min(found, key=order)
            return Stop(kind, int(first.get("rank", -1)), first)
    return None


def _stopped(g: Grade, run: RunDir, stop: Stop, calls: list[Call]) -> None:
    r = stop.record
    world = int(r.get("world", 0))
    where = words.stopped_where(r)
    if stop.kind == RECORD_DEADLINE:
        g.cells[(Check.DEADLINE, world)] = Cell(False, "FAIL")
        g.findings.append(Finding(Check.DEADLINE, world, *words.deadline_text(g, run, r, calls, where)))
        return
    if stop.kind == RECORD_RAISED:
        g.cells[(Check.VALUES, world)] = Cell(False, "raised")
        said = f"your function raised {r.get('exception')}{checks.at(r.get('where'))} on rank {stop.rank} ({where})"
        hint = words.raised_hint(str(r.get("exception", "")), g.exercise)
        g.findings.append(Finding(Check.VALUES, world, said + (f". {hint}" if hint else ""), said))
        return
    g.cells[(Check.VALUES, world)] = Cell(False, "stopped")
    first = run.record.first_failure
    cause = f"; first failure: {first.describe()}" if first else ""
    said = f"rank {stop.rank} lost its peers ({where}): {r.get('exception')}{cause}"
    g.findings.append(Finding(Check.VALUES, world, said, said))
