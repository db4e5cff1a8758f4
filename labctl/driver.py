"""The run driver: a lab's lifecycle, written once for every backend.

    start ──► poll every node ──► all ended? ──► stop what runs ──► collect ──► delete
                 │  first failure: grace period, then stop the others (unless the
                 │  lab is elastic and can go on without that node: outcome.spared)
                 │  deadline passed: stop everything (state timeout)
                 │  faults on a clock that starts when every node runs (inject, heal)
                 │  SIGINT / SIGTERM / SIGHUP: stop everything (state interrupted)

    follow (labctl collect): the same poll loop and collect step on a run started
    elsewhere, with nothing started, stopped or deleted (and no faults fired).

Whatever happens — a failing rank, the deadline, a signal, an exception in
the backend — the nodes still running are stopped, every node's log is
collected *before* anything is deleted, and the outcome is decided by one
rule (labctl.outcome.run_state). Backends only say how (labctl/backends/base.py).

Collection is part of the run. A signal during it is noted and the collection
goes on (the outcome is then the lab's own); a second one cuts it short: state
interrupted, never passed. A collection that failed or was cut short deletes
nothing (state error or interrupted): `labctl down` saves the logs later.
"""
from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from .backends.base import Backend, BackendFailure, Progress
from .errors import LabError
from .faults import Fault, NotYet
from .outcome import NodeOutcome, NodeState, RunState, run_state, signal_name, spared
from .plan import LaunchPlan
from .rundir import RunDir

FAILURE_GRACE_S = 8.0     # after the first failure, let the others notice and exit by themselves
FOLLOW_BYTES = 16 << 20   # node log bytes split per node and poll while the lab runs (live logs)
RETRY_S = 0.5             # a fault whose target is not there yet is tried again this often
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal asked labctl to stop (BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signal = signal_name(signum)


@dataclass
class RunResult:
    state: RunState
    outcomes: list[NodeOutcome]
    message: str = ""
    signal: str | None = None             # the signal that interrupted the run
    error: LabError | None = None         # the backend's error, re-raised after finalizing
    notes: list[str] = field(default_factory=list)
    kept: bool = False                    # logs not all collected: the lab was not deleted


class _Signals:
    """How a handled signal acts, by phase of the run:

    running     raises Interrupted (the lab is stopped, then collected)
    collecting  the first signal is noted and the collection goes on; a further one
                (the run's own interrupt counts) raises Interrupted: collection cut short
    cleaning    noted only (stopping the nodes, deleting the lab)
    """

    def __init__(self) -> None:
        self.raising = True
        self.collecting = False
        self.deferred: list[int] = []
        self.seen = 0                 # handled signals so far, the run's interrupt included
        self.say: Progress = lambda line: None

    def handler(self, signum, frame) -> None:
        self.seen += 1
        if self.raising:
            self.raising = False
            raise Interrupted(signum)
        if self.collecting and self.seen > 1:
            self.collecting = False
            raise Interrupted(signum)
        self.deferred.append(signum)
        if self.collecting:
            try:
                self.say(f"{signal_name(signum)}: collecting the logs first; send it again to cut "
                         "the collection short (the lab is then kept for `labctl down`)")
            except Exception:         # print reentered from a signal handler: never fatal
                pass

    @contextmanager
    def collection(self) -> Iterator[None]:
        """While the logs are collected: see the class docstring."""
        self.collecting = True
        try:
            yield
        finally:
            self.collecting = False


@contextmanager
def signals_raise() -> Iterator[_Signals]:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted while the lab runs; once cleanup
    starts (`.raising = False`) they are deferred, except a second one during the log
    collection (`.collection()`), which cuts it short."""
    state = _Signals()
    previous = {s: signal.signal(s, state.handler) for s in HANDLED_SIGNALS}
    try:
        yield state
    finally:
        state.raising = False
        state.collecting = False
        for s, h in previous.items():
            signal.signal(s, h)


def _line(outcomes: list[NodeOutcome]) -> str:
    return "  ".join(f"node-{o.index}: {o.describe()}" + (f" [{o.reason}]" if o.reason and
                     o.state in (NodeState.PENDING, NodeState.RUNNING) else "")
                     for o in outcomes)


class FaultClock:
    """The spec's faults as timed events (begin, and end for those with a duration),
    on a clock that starts when every node is running: a fault at T means T seconds
    after the last node started, whatever the backend's start-up time."""

    def __init__(self, faults: tuple[Fault, ...]):
        events = []
        for fault in faults:
            events.append((fault.at, 0, fault, "begin"))
            if fault.duration is not None:
                events.append((fault.at + fault.duration, 1, fault, "end"))
        self.events = sorted(events, key=lambda e: (e[0], e[1]))
        self.started_at: float | None = None      # clock() when every node ran
        self.active: list[Fault] = []              # begun, not yet ended
        self.waiting: list[tuple[float, Fault, str]] = []   # due, but the target is not there yet

    def start(self, now: float) -> None:
        if self.started_at is None:
            self.started_at = now

    def due(self, now: float) -> list[tuple[float, Fault, str]]:
        """Events whose time has come, those still waiting for their target first."""
        if self.started_at is None:
            return []
        out, self.waiting = self.waiting, []
        while self.events and self.started_at + self.events[0][0] <= now:
            at, _, fault, phase = self.events.pop(0)
            out.append((at, fault, phase))
        return out

    def retry(self, at: float, fault: Fault, phase: str) -> None:
        """An event whose target is not there yet: tried again at the next poll."""
        self.waiting.append((at, fault, phase))

    def next_in(self, now: float) -> float:
        """Seconds until the next event (a long time when none is scheduled yet)."""
        if self.waiting:
            return RETRY_S
        if self.started_at is None or not self.events:
            return 3600.0
        return max(0.0, self.started_at + self.events[0][0] - now)


def fire(backend: Backend, rundir: RunDir, clock_, t0: float, faults: FaultClock,
         at: float, fault: Fault, phase: str, say: Progress, note: str = "") -> None:
    """Make one fault event happen and write it down (faults.jsonl) with when it fired."""
    if phase == "end" and fault not in faults.active:
        return                        # it never began (could not be done): nothing to end
    asked = clock_()
    try:
        did, ok = (backend.inject(fault) if phase == "begin" else backend.heal(fault)), True
    except NotYet:
        faults.retry(at, fault, phase)
        return
    except Exception as exc:          # a fault that cannot be done is written down, not fatal
        did, ok = f"could not: {exc}", False
    now = clock_()                    # done: a kill through `docker exec` takes a while
    if phase == "begin" and fault.duration is not None and ok:
        faults.active.append(fault)
    elif phase == "end" and fault in faults.active:
        faults.active.remove(fault)
    record = {"fault": fault.text, "kind": fault.kind, "target": fault.target, "phase": phase,
              "planned_s": at, "fired_s": round(now - (faults.started_at or t0), 3),
              "lab_s": round(now - t0, 3), "took_s": round(now - asked, 3),
              "time": round(time.time(), 3), "did": did, "ok": ok}
    if note:
        record["note"] = note
    rundir.record_fault(record)
    say(f"[{now - t0:6.1f}s] fault {fault.text} ({phase}): {did}")


@dataclass
class _Watch:
    """What the poll loop saw last, and why it returned."""
    outcomes: list[NodeOutcome]
    deadline_passed: bool = False
    first_bad: NodeOutcome | None = None      # set when the grace after a failure ran out
    spared: set[int] = field(default_factory=set)   # nodes an elastic lab goes on without


def _watch(plan: LaunchPlan, backend: Backend, rundir: RunDir, observe, say: Progress,
           clock, t0: float, deadline: float, grace: float | None, w: _Watch,
           faults: FaultClock | None = None) -> None:
    """The one poll loop: until every node has ended, the grace after the first failure
    has run out (`grace` None: never, for runs labctl only watches), or the deadline.
    Faults fire on their clock; a node an elastic lab can lose is no failure."""
    first_failure: float | None = None
    last = ""
    nodes, fewest = plan.spec.nodes, plan.spec.fewest_nodes
    while True:
        w.outcomes = observe()
        now = clock()
        line = _line(w.outcomes)
        if line != last:
            say(f"[{now - t0:6.1f}s] {line}")
            last = line
        if all(o.state.ended for o in w.outcomes):
            return
        if faults is not None and (faults.events or faults.waiting):
            if all(o.state is not NodeState.PENDING for o in w.outcomes):
                if faults.started_at is None:
                    say(f"[{now - t0:6.1f}s] every node started: the fault clock starts")
                faults.start(now)
            for at, fault, phase in faults.due(now):
                fire(backend, rundir, clock, t0, faults, at, fault, phase, say)
        behind = False        # the log follower has more to read: no sleep before the next poll
        if backend.live_logs:
            behind = not rundir.follow_logs([n.index for n in plan.nodes], FOLLOW_BYTES)
        else:                 # a full, read-only or deleted run folder ends the lab now
            rundir.check_storage()
        can_spare = spared(w.outcomes, nodes, fewest)
        for o in w.outcomes:
            if o.index in can_spare and o.index not in w.spared:
                w.spared.add(o.index)
                say(f"node {o.index} {o.describe()}; the lab goes on without it "
                    f"(min_nodes {fewest} of {nodes})")
        bad = [o for o in w.outcomes if o.state.bad and o.index not in can_spare]
        if bad and first_failure is None and grace is not None:
            first_failure = now
            who = ", ".join(f"node {o.index} {o.describe()}" for o in bad)
            say(f"{who}; stopping the lab in {grace:g}s unless the others finish")
            w.first_bad = bad[0]
        if first_failure is not None and grace is not None and now - first_failure > grace:
            return
        if now > deadline:
            w.deadline_passed = True
            return
        if not behind:
            time.sleep(max(0.0, min(backend.poll_interval, deadline - now + 0.01,
                                    faults.next_in(clock()) if faults is not None else 3600.0)))


def _say(progress: Progress) -> Progress:
    def say(text: str) -> None:
        try:
            progress(text)
        except OSError:                   # the terminal went away (SIGHUP): keep going
            pass
    return say


def run(plan: LaunchPlan, backend: Backend, rundir: RunDir, progress: Progress,
        grace: float | None = None, clock=time.monotonic) -> RunResult:
    """Run the lab to its end on `backend`; the run folder holds every node's log afterwards."""
    grace = FAILURE_GRACE_S if grace is None else grace
    t0 = clock()
    deadline = t0 + plan.spec.timeout
    state, message, interrupted_by = RunState.PASSED, "", None
    error: LabError | None = None
    exited: dict[int, float] = {}         # node -> seconds after start when first seen ended
    w = _Watch([NodeOutcome(n.index, n.hostname) for n in plan.nodes])
    stop_reason = ""
    started = False
    say = _say(progress)
    nodes, fewest = plan.spec.nodes, plan.spec.fewest_nodes
    faults = FaultClock(plan.spec.faults)

    def observe() -> list[NodeOutcome]:
        now = round(clock() - t0, 3)
        seen = backend.poll()
        for o in seen:
            if o.state.ended and o.index not in exited:
                exited[o.index] = o.exited_s if o.exited_s is not None else now
            if o.index in exited:
                o.exited_s = exited[o.index]
        return seen

    with signals_raise() as signals:
        try:
            backend.start(plan, rundir)
            started = True
            _watch(plan, backend, rundir, observe, say, clock, t0, deadline, grace, w, faults)
            if w.first_bad is not None:
                stop_reason = f"stopped by labctl after node {w.first_bad.index} failed"
            if w.deadline_passed:
                state, message = RunState.TIMEOUT, f"deadline of {plan.spec.timeout:g}s passed"
                stop_reason = "stopped by labctl at the deadline"
                say(f"timeout: {message}; taking every rank's stack, then stopping the lab")
                for note in backend.dump_stacks(rundir):
                    say(note)
        except (Interrupted, KeyboardInterrupt) as exc:
            signame = exc.signal if isinstance(exc, Interrupted) else "SIGINT"
            state, interrupted_by = RunState.INTERRUPTED, signame
            message = f"interrupted ({signame})"
            stop_reason = f"stopped by labctl on {signame}"
            say(f"{message}: stopping the lab")
        except BackendFailure as exc:
            state, message = RunState.FAILED, str(exc)
            stop_reason = "stopped by labctl: " + str(exc)
            say(f"{exc}; stopping the lab")
        except LabError as exc:
            state, message, error = RunState.ERROR, str(exc), exc
            stop_reason = "stopped by labctl after an error"
        except Exception as exc:          # a bug or an API surprise: still a finished folder
            state = RunState.ERROR
            message = f"internal error in the {backend.name} backend: {type(exc).__name__}: {exc}"
            error = LabError(message)
            stop_reason = "stopped by labctl after an error"
        finally:
            signals.raising = False       # from here on signals wait: the cleanup completes
            for fault in list(faults.active):     # a frozen or cut-off node cannot be stopped
                fire(backend, rundir, clock, t0, faults, fault.at + (fault.duration or 0), fault,
                     "end", say, note="ended early: the lab ended")
            signals.say = say
            finished = _finish(backend, rundir, plan, started, w.outcomes, stop_reason,
                               exited, observe, say, signals, lambda: round(clock() - t0, 3))
    outcomes, notes = finished.outcomes, finished.notes
    for o in outcomes:
        if o.index in spared(outcomes, nodes, fewest) and not o.reason:
            o.reason = f"the lab went on without it, min_nodes {fewest} of {nodes}"
    state = run_state(state, outcomes, nodes, fewest)
    before = f" (before that: {message})" if message else ""
    if finished.cut_by is not None:       # never a pass: not every log was seen
        state, interrupted_by = RunState.INTERRUPTED, interrupted_by or finished.cut_by
        message = (f"interrupted ({finished.cut_by}) while collecting the logs: they are "
                   f"incomplete and the lab was kept; `labctl down {rundir.path}` saves them"
                   + before)
    elif finished.failure:
        state = RunState.ERROR
        message = (f"collecting the logs failed: {finished.failure}; nothing was deleted; "
                   f"`labctl down {rundir.path}` saves them, then removes the lab" + before)
    elif signals.deferred and interrupted_by is None:
        notes.append(f"{signal_name(signals.deferred[0])} arrived while the lab was being cleaned "
                     "up; every log was collected first, and the outcome is the lab's own")
    return RunResult(state, outcomes, message, interrupted_by, error, notes, finished.kept)


def follow(plan: LaunchPlan, backend: Backend, rundir: RunDir, progress: Progress,
           timeout: float, wait: bool = True, clock=time.monotonic) -> RunResult:
    """Watch a run that labctl did not start (kubectl, docker compose, a labctl that
    died) through `backend.attach...`, then collect every node's log into the folder.

    The same poll loop and collect step as `run`, but nothing is started, stopped or
    deleted: a failing node is only noted, and at `timeout` (or at once, `wait`
    False) the run is written down as still running. A signal ends the watching,
    not the lab; the logs are collected all the same.
    """
    t0 = clock()
    state, message, interrupted_by = RunState.PASSED, "", None
    error: LabError | None = None
    w = _Watch([NodeOutcome(n.index, n.hostname) for n in plan.nodes])
    say = _say(progress)
    running_seen: set[int] = set()
    exited: dict[int, float] = {}

    def observe() -> list[NodeOutcome]:
        """Exit times only for nodes seen ending while watched: earlier ends are unknown."""
        seen = backend.poll()
        for o in seen:
            if not o.state.ended:
                running_seen.add(o.index)
            elif o.index in running_seen and o.index not in exited:
                exited[o.index] = o.exited_s if o.exited_s is not None else round(clock() - t0, 3)
            if o.index in exited:
                o.exited_s = exited[o.index]
        return seen

    with signals_raise() as signals:
        try:
            if wait:
                _watch(plan, backend, rundir, observe, say, clock, t0, t0 + timeout, None, w)
            else:
                w.outcomes = observe()
                say(_line(w.outcomes))
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted_by = exc.signal if isinstance(exc, Interrupted) else "SIGINT"
            say(f"{interrupted_by}: no more waiting; collecting what is there (the lab goes on)")
        except BackendFailure as exc:
            state, message = RunState.FAILED, str(exc)
            say(str(exc))
        except LabError as exc:
            state, message, error = RunState.ERROR, str(exc), exc
        except Exception as exc:
            state = RunState.ERROR
            message = f"internal error in the {backend.name} backend: {type(exc).__name__}: {exc}"
            error = LabError(message)
        finally:
            signals.raising = False
            try:
                final = backend.collect(rundir)
            except Exception as exc:      # nothing was saved: say so, never pretend
                final = w.outcomes
                state, message = RunState.ERROR, f"collecting the logs failed: {exc}"
                error = error or LabError(message)
    by_index = {o.index: o for o in final}
    outcomes = [by_index.get(n.index) or NodeOutcome(n.index, n.hostname) for n in plan.nodes]
    for o in outcomes:
        if o.index in exited and o.exited_s is None:
            o.exited_s = exited[o.index]
    going = [o.index for o in outcomes if not o.state.ended]
    if going and state is RunState.PASSED:
        why = (f"{interrupted_by} stopped the waiting" if interrupted_by else
               "--no-wait" if not wait else f"not ended within --timeout {timeout:g}s")
        state = RunState.RUNNING
        message = (f"node(s) {', '.join(map(str, going))} still running ({why}): "
                   "collected what they wrote so far")
    return RunResult(run_state(state, outcomes, plan.spec.nodes, plan.spec.fewest_nodes), outcomes,
                     message, interrupted_by, error)


@dataclass
class _Finished:
    outcomes: list[NodeOutcome]
    notes: list[str]
    collected: bool = True            # every node's log is in the folder, checked
    cut_by: str | None = None         # the signal that cut the collection short
    failure: str = ""                 # why the logs could not be collected
    kept: bool = False                # nothing deleted: the lab keeps the logs not collected


def _finish(backend: Backend, rundir: RunDir, plan: LaunchPlan, started: bool,
            outcomes: list[NodeOutcome], stop_reason: str, exited: dict[int, float],
            observe, say: Progress, signals: _Signals, elapsed=lambda: None) -> _Finished:
    """Stop what still runs, collect every log, then delete: in this order, always.

    Nothing is deleted unless every log is in the folder: a collection that
    failed or was cut short by a second signal keeps the lab (`labctl down`
    saves the logs, then deletes). Backends whose logs are in the folder
    already (`live_logs`) and labs that never started are deleted regardless:
    there is nothing more to save, and nothing may be left running."""
    notes: list[str] = []
    stopped: set[int] = set()
    done = _Finished(outcomes, notes, collected=False)
    final = outcomes
    try:
        try:
            outcomes = observe()
        except Exception:
            pass
        running = [o.index for o in outcomes if not o.state.ended]
        if running:
            reason = stop_reason or "stopped by labctl"
            backend.stop(running, reason)
            stopped = set(running)
            for index in running:         # when they ended, for the report's timeline
                exited.setdefault(index, elapsed())
        with signals.collection():
            say(f"collecting the logs of {len(plan.nodes)} node(s)")
            final = backend.collect(rundir)
        done.collected = True
    except Interrupted as exc:            # a second signal during the collection
        done.cut_by = exc.signal
        notes.append(f"{exc.signal} cut the log collection short: the logs in the folder "
                     "are incomplete")
        say(notes[-1])
    except Exception as exc:
        done.failure = str(exc) if isinstance(exc, LabError) else f"{type(exc).__name__}: {exc}"
        notes.append(f"collecting the logs failed: {done.failure}")
        say(notes[-1])
    if not done.collected and started and not backend.live_logs:
        done.kept = True
        notes.append(f"nothing was deleted, so that no log is lost: `labctl down {rundir.path}` "
                     "saves every node's log, then removes the lab")
        say(notes[-1])
    else:
        try:
            removed = backend.delete()
            if removed:
                say(removed)
        except Exception as exc:
            notes.append(f"cleanup failed: {exc}; run: labctl down {rundir.path}")
            say(notes[-1])
    by_index = {o.index: o for o in final}
    result = []
    for node in plan.nodes:
        o = by_index.get(node.index) or NodeOutcome(node.index, node.hostname)
        if node.index in exited and o.exited_s is None:
            o.exited_s = exited[node.index]
        if node.index in stopped:
            o.state, o.reason = NodeState.STOPPED, stop_reason or "stopped by labctl"
        result.append(o)
    if not started:
        result = [NodeOutcome(n.index, n.hostname) for n in plan.nodes]
    done.outcomes = result
    return done
