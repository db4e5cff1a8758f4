"""The run driver: a lab's lifecycle, written once for every backend.

    submit ──► describe every node ──► all ended? ──► stop what runs ──► stream ──► delete
                 │  first failure: grace period, then stop the others (unless the
                 │  lab is elastic and can go on without that node: outcome.spared)
                 │  deadline passed: stop everything (state timeout)
                 │  faults on a clock that starts when every node runs (BeginFault, EndFault)
                 │  SIGINT / SIGTERM / SIGHUP: stop everything (state interrupted)

    follow (labctl collect): the same poll loop and stream step on a run started
    elsewhere, with nothing started, stopped or deleted (and no faults fired).

Whatever happens — a failing rank, the deadline, a signal, an exception in
the backend — the nodes still running are stopped and every node's log is
collected *before* anything is deleted. The driver says what it saw (`Seen`:
why the lifecycle ended, the node outcomes, how the collection went);
labctl/verdict.py decides from that how the run ended. Backends only say how
(labctl/backends/base.py: submit, describe, stream, signal, delete); what they say the
run record must hold (`BackendState`) the driver writes into it (`keep_state`).

One Session object per run holds the loop's state; its methods are the steps
(observe, watch, fire, finish). `run` and `follow` share it, the poll loop and
one classification of what ends a lifecycle early (`classify`). The signal regime it
runs under is labctl/signals.py's; the faults' clock is labctl/faults.py's `FaultClock`.

Collection is part of the run. A signal during it is noted and the collection
goes on (the outcome is then the lab's own); a second one cuts it short: state
interrupted, never passed. A collection that failed or was cut short deletes
nothing (state error or interrupted): `labctl down` saves the logs later.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, TypeVar

from .backends.base import (Backend, BackendFailure, BackendState, BeginFault, EndFault,
                            Progress, Stop, TakeStacks)
from .errors import Interrupted, LabError
from .faults import Fault, FaultClock, NotYet
from .blame import LogReading
from .outcome import NodeOutcome, NodeState, signal_name, spared
from .plan import LaunchPlan
from .runrecord import FiredFault
from .rundir import RunDir
from .signals import Signals, signals_raise
from .verdict import Collection, Ending, Seen

FAILURE_GRACE_S = 8.0     # after the first failure, let the others notice and exit by themselves
FOLLOW_BYTES = 16 << 20   # node log bytes split per node and poll while the lab runs (live logs)
_T = TypeVar("_T")


class LiveWatch(Protocol):
    """What the loop asks of the live watcher (labctl/live/watcher.py, a layer above)."""
    def poll(self, outcomes: list[NodeOutcome]) -> bool: ...
    def close(self) -> None: ...


@dataclass
class RunResult:
    """What the driver saw of a run (`seen`, which labctl/verdict.py decides from) and
    what the caller must do with it: the error to re-raise once the folder is finished,
    the notes, whether the lab was kept, and the log reading under way (live logs)."""
    seen: Seen
    error: LabError | None = None         # the backend's error, re-raised after finalizing
    notes: list[str] = field(default_factory=list)
    kept: bool = False                    # logs not all collected: the lab was not deleted
    reading: LogReading | None = None     # live logs: the split the finish goes on with

    @property
    def outcomes(self) -> list[NodeOutcome]:
        return self.seen.outcomes


def keep_state(rundir: RunDir, state: BackendState, save: bool = False) -> None:
    """Write what a backend said the run record must hold into the record (the record's
    fields, so status.json keeps its shape); `save`: and write status.json now, when
    there is anything to write (a labctl that dies afterwards leaves it said)."""
    rec = rundir.record
    if state.notes is not None:
        rec.backend_state = state.notes
    if state.rank_logs_by_guards is not None:
        rec.rank_logs_by_guards = state.rank_logs_by_guards
    if state.leftovers is not None:
        rec.leftovers = list(state.leftovers)
    if save and state != BackendState():
        rundir.save()


def _line(outcomes: list[NodeOutcome]) -> str:
    return "  ".join(f"node-{o.index}: {o.describe()}" + (f" [{o.reason}]" if o.reason and
                     o.state in (NodeState.PENDING, NodeState.RUNNING) else "")
                     for o in outcomes)


def safe_progress(progress: Progress) -> Progress:
    """`progress` that never raises when the terminal went away (SIGHUP, a closed pipe)."""
    def say(text: str) -> None:
        try:
            progress(text)
        except OSError:                   # the terminal went away (SIGHUP): keep going
            pass
    return say


@dataclass
class _Stop:
    """What an exception out of the lifecycle becomes: one classification for run and follow."""
    ending: Ending
    message: str
    stop_reason: str                      # the reason the stopped nodes get (run only)
    signal: str | None = None             # Interrupted / KeyboardInterrupt: the signal's name
    error: LabError | None = None         # re-raised by lab.py after the folder is finalized


def classify(exc: BaseException, backend_name: str) -> _Stop:
    """Interrupted (a signal) / BackendFailure (the lab failed) / LabError (including
    StorageError: re-raised after finalizing) / anything else (a bug or an API surprise:
    an error, still a finished folder)."""
    if isinstance(exc, (Interrupted, KeyboardInterrupt)):
        sig = exc.signal if isinstance(exc, Interrupted) else "SIGINT"
        return _Stop(Ending.SIGNAL, f"interrupted ({sig})", f"stopped by labctl on {sig}",
                     signal=sig)
    if isinstance(exc, BackendFailure):
        return _Stop(Ending.BACKEND_FAILURE, str(exc), "stopped by labctl: " + str(exc))
    if isinstance(exc, LabError):
        return _Stop(Ending.ERROR, str(exc), "stopped by labctl after an error", error=exc)
    message = f"internal error in the {backend_name} backend: {type(exc).__name__}: {exc}"
    return _Stop(Ending.ERROR, message, "stopped by labctl after an error",
                 error=LabError(message))


@dataclass
class _Finished:
    outcomes: list[NodeOutcome]
    notes: list[str]
    collected: bool = True            # every node's log is in the folder, checked
    cut_by: str | None = None         # the signal that cut the collection short
    failure: str = ""                 # why the logs could not be collected
    kept: bool = False                # nothing deleted: the lab keeps the logs not collected


class Session:
    """One run's lifecycle and the state that lives through it: `run` drives a lab
    started here (submit, stop, stream, delete, faults); `follow` only watches and
    collects a lab started elsewhere (`started_here` False)."""

    def __init__(self, plan: LaunchPlan, backend: Backend, rundir: RunDir, progress: Progress,
                 clock=time.monotonic, started_here: bool = True, signals: Signals | None = None):
        self.plan, self.backend, self.rundir, self.clock = plan, backend, rundir, clock
        self.say = safe_progress(progress)
        self.t0 = clock()
        self.started_here = started_here
        self.started = False                      # backend.submit returned
        self.outcomes = [NodeOutcome(n.index, n.hostname) for n in plan.nodes]   # last seen
        self.exited: dict[int, float] = {}        # node -> seconds after t0 when first seen ended
        # a node's exit time is known only if it was seen running: every node of a lab
        # started here, only those seen running while watched for a lab started elsewhere
        self.running_seen: set[int] = {n.index for n in plan.nodes} if started_here else set()
        self.faults = FaultClock(plan.spec.faults if started_here else ())
        self.ending, self.message = Ending.ALL_ENDED, ""
        self.interrupted_by: str | None = None
        self.error: LabError | None = None
        self.stop_reason = ""                     # the reason the nodes labctl stops get
        self.deadline_passed = False
        self.first_bad: NodeOutcome | None = None  # the first failure, once noticed
        self.spared: set[int] = set()              # nodes an elastic lab goes on without
        self.reading: LogReading | None = None     # live logs: split as they grow
        self.signals = signals or Signals()
        self.own_signals = signals is None        # else the caller installed them and keeps them
        self.fault_notes: list[str] = []          # faults that never fired, and why (status.json notes)
        self.live: LiveWatch | None = None         # the live watcher (labctl/live/), where there is one
        self.hang_named = False                   # it named a hang and the lab must end (on_hang stop)

    def elapsed(self) -> float:
        return round(self.clock() - self.t0, 3)

    def observe(self, within: float = 0.0) -> list[NodeOutcome]:
        """Every node now (after a pause of at most `within`), with the time each was
        first seen ended."""
        view = self.backend.describe(within)
        now = self.elapsed()
        seen = list(view.outcomes)
        for o in seen:
            if not o.state.ended:
                self.running_seen.add(o.index)
            elif o.index in self.running_seen and o.index not in self.exited:
                self.exited[o.index] = o.exited_s if o.exited_s is not None else now
            if o.index in self.exited:
                o.exited_s = self.exited[o.index]
        return seen

    # -- the lifecycle, shared by run and follow ---------------------------------------

    def guarded(self, body: Callable[[], None], cleanup: Callable[[], _T]) -> _T:
        """`body` with the handled signals raising, any exception classified once
        (`classify`), then `cleanup` with signals deferred, whatever happened."""
        with signals_raise(None if self.own_signals else self.signals) as self.signals:
            try:
                body()
            except (Interrupted, KeyboardInterrupt, Exception) as exc:
                self.stopped_by(classify(exc, self.backend.name))
            finally:
                self.signals.raising = False      # from here on signals wait: cleanup completes
                self.signals.say = self.say
                done = cleanup()
        return done

    def stopped_by(self, stop: _Stop) -> None:
        """Write down why the lifecycle ended early. A signal stops a lab started here;
        for a lab watched only, it ends the watching, not the lab."""
        if stop.signal is not None and not self.started_here:
            self.interrupted_by = stop.signal
            self.say(f"{stop.signal}: no more waiting; collecting what is there (the lab goes on)")
            return
        self.ending, self.message, self.error = stop.ending, stop.message, stop.error
        self.interrupted_by = stop.signal
        self.stop_reason = stop.stop_reason
        if stop.signal is not None:
            self.say(f"{stop.message}: stopping the lab")
            self.stacks_before_stop()
        elif stop.ending is Ending.BACKEND_FAILURE:       # the lab failed
            self.say(f"{stop.message}; stopping the lab" if self.started_here else stop.message)

    def stacks_before_stop(self) -> None:
        """Ctrl-C on a lab that still runs (a hang, most often): every rank's stack first, as
        at the deadline, so that the report says where each one was. A second signal
        waits for it (seconds), then the lab is stopped and its folder finished."""
        if not self.started or all(o.state.ended for o in self.outcomes):
            return
        self.signals.raising = False
        self.say("taking every rank's stack first (where each one was when stopped)")
        try:
            for note in self.backend.signal(TakeStacks(self.rundir)):
                self.say(note)
        except Exception as exc:          # noqa: BLE001 - the stop goes on without them
            self.say(f"could not take the stacks: {exc}")

    def watch(self, deadline: float, grace: float | None) -> None:
        """The one poll loop: until every node has ended, the grace after the first failure
        has run out (`grace` None: never, for runs labctl only watches), or the deadline.
        Faults fire on their clock; a node an elastic lab can lose is no failure."""
        first_failure: float | None = None
        last = ""
        pause = 0.0
        while True:
            self.outcomes = self.observe(pause)
            now = self.clock()
            line = _line(self.outcomes)
            if line != last:
                self.say(f"[{now - self.t0:6.1f}s] {line}")
                last = line
            if all(o.state.ended for o in self.outcomes):
                return
            self.fire_due(now)
            behind = self.keep_logs()
            if self.live is not None and self.live.poll(self.outcomes):
                self.hang_named = True
                return
            bad = self.failed()
            if bad and first_failure is None and grace is not None:
                first_failure = now
                who = ", ".join(f"node {o.index} {o.describe()}" for o in bad)
                self.say(f"{who}; stopping the lab in {grace:g}s unless the others finish")
                self.first_bad = bad[0]
            if first_failure is not None and grace is not None and now - first_failure > grace:
                return
            if now > deadline:
                self.deadline_passed = True
                return
            # the log follower has more to read: look again now
            pause = 0.0 if behind else max(0.0, min(self.backend.poll_interval,
                                                    deadline - now + 0.01,
                                                    self.faults.next_in(self.clock())))

    def keep_logs(self) -> bool:
        """Split the node logs written so far (backends with live logs), else check the
        run folder (a full, read-only or deleted one raises StorageError: the lab ends
        now). False when the log follower is behind."""
        if self.backend.live_logs:
            self.rundir.check_storage()
            if self.reading is None:
                self.reading = LogReading.of(self.rundir, [n.index for n in self.plan.nodes])
            try:
                return not self.reading.advance(FOLLOW_BYTES)
            except OSError as exc:
                raise self.rundir.storage_error(exc) from None
        self.rundir.check_storage()
        return False

    def failed(self) -> list[NodeOutcome]:
        """The nodes that failed and that the lab cannot go on without (noting, once
        each, those an elastic lab spares)."""
        nodes, fewest = self.plan.spec.nodes, self.plan.spec.fewest_nodes
        can_spare = spared(self.outcomes, nodes, fewest)
        for o in self.outcomes:
            if o.index in can_spare and o.index not in self.spared:
                self.spared.add(o.index)
                self.say(f"node {o.index} {o.describe()}; the lab goes on without it "
                         f"(min_nodes {fewest} of {nodes})")
        return [o for o in self.outcomes if o.state.bad and o.index not in can_spare]

    # -- faults ------------------------------------------------------------------------

    def fire_due(self, now: float) -> None:
        """Start the fault clock once every node runs; fire the events due."""
        faults = self.faults
        if not (faults.events or faults.waiting):
            return
        if faults.started_at is None and all(o.state is not NodeState.PENDING for o in self.outcomes):
            spec = self.plan.spec
            if spec.fault_clock != "join":
                self.say(f"[{now - self.t0:6.1f}s] every node started: the fault clock starts")
                faults.start(now)
            else:
                ranks = spec.world_size * spec.replicas
                joined = self.backend.describe(joins=True).joined
                if joined is None:
                    raise LabError(f"the {self.backend.name} backend cannot hear the ranks join")
                if joined >= ranks:
                    self.say(f"[{now - self.t0:6.1f}s] every rank joined ({joined} of {ranks}): "
                             "the fault clock starts")
                    faults.start(now)
        for at, fault, phase in faults.due(now):
            self.fire(at, fault, phase)

    def fire(self, at: float, fault: Fault, phase: str, note: str = "") -> None:
        """Make one fault event happen and write it down (faults.jsonl) with when it fired."""
        faults, t0 = self.faults, self.t0
        if phase == "end" and fault not in faults.active:
            return                        # it never began (could not be done): nothing to end
        asked = self.clock()
        try:
            did, ok = "; ".join(self.backend.signal(BeginFault(fault) if phase == "begin"
                                                    else EndFault(fault))), True
        except NotYet:
            faults.retry(at, fault, phase)
            return
        except Exception as exc:          # a fault that cannot be done is written down, not fatal
            did, ok = f"could not: {exc}", False
        now = self.clock()                # done: a kill through `docker exec` takes a while
        if phase == "begin" and fault.duration is not None and ok:
            faults.active.append(fault)
        elif phase == "end" and fault in faults.active:
            faults.active.remove(fault)
        fired = FiredFault(fault.text, fault.kind, fault.target, phase, did,
                           lab_s=round(now - t0, 3), ok=ok, planned_s=at,
                           clock=self.plan.spec.fault_clock,
                           fired_s=round(now - (faults.started_at or t0), 3),
                           took_s=round(now - asked, 3), time=round(time.time(), 3),
                           note=note or None)
        self.rundir.record_fault(fired)
        self.say(f"[{now - t0:6.1f}s] fault {fault.text} ({phase}): {did}")

    def end_faults(self) -> None:
        """End the faults still active: a frozen or cut-off node cannot be stopped. Say, in
        a note each (status.json, the report), which faults never fired and why: the lab
        ended before their time, their target never came, or the clock never started."""
        faults, spec = self.faults, self.plan.spec
        if faults.started_at is None and faults.events and spec.fault_clock == "join":
            never = ", ".join(sorted({e[2].text for e in faults.events}))
            self.say(f"the fault clock never started (fault_clock: join): not every rank said it "
                     f"joined its process group; not fired: {never}")
        self.fault_notes += self.unfired()
        for note in self.fault_notes:
            self.say(f"note: {note}")
        for fault in list(self.faults.active):
            self.fire(fault.at + (fault.duration or 0), fault, "end",
                      note="ended early: the lab ended")

    def unfired(self) -> list[str]:
        """One line per fault whose begin never fired (a fault used to go silently)."""
        faults, now = self.faults, self.clock()
        lab_s = now - self.t0
        notes = []
        for at, fault, phase in faults.waiting:
            if phase == "begin":
                notes.append(f"fault {fault.text} never fired: it was due at {at:g} s, but its target "
                             f"never appeared (the lab ended at {lab_s:.1f} s)")
        for at, _, fault, phase in faults.events:
            if phase != "begin":
                continue
            if faults.started_at is None:
                why = ("not every rank said it joined its process group" if self.plan.spec.fault_clock == "join"
                       else "not every node started")
                notes.append(f"fault {fault.text} never fired: the fault clock never started ({why}; "
                             f"the lab ended at {lab_s:.1f} s)")
            else:
                clock = now - faults.started_at
                notes.append(f"fault {fault.text} never fired: it was scheduled at {at:g} s on the fault "
                             f"clock, and the lab ended at {clock:.1f} s on it ({lab_s:.1f} s after labctl "
                             "started the lab)")
        return notes

    # -- run: a lab started here -------------------------------------------------------

    def run(self, grace: float) -> RunResult:
        deadline = self.t0 + self.plan.spec.timeout

        def body() -> None:
            self.backend.on_state = lambda said: keep_state(self.rundir, said, save=True)
            try:
                state = self.backend.submit(self.plan, self.rundir)
            except BaseException:         # what it said before it failed is written down too
                keep_state(self.rundir, self.backend.for_record)
                raise
            try:
                keep_state(self.rundir, state, save=True)
            except OSError as exc:        # the run folder failed under us: say which and why
                raise self.rundir.storage_error(exc) from None
            self.started = True
            if self.plan.spec.debug_server is not None:
                where = self.backend.debug_server_at(self.plan)
                if where:
                    self.say(f"debug server: {where} (rank 0 serves it once every rank joined)")
            self.watch(deadline, grace)
            if self.first_bad is not None:
                self.ending = Ending.NODE_FAILED
                self.stop_reason = f"stopped by labctl after node {self.first_bad.index} failed"
            if self.hang_named:
                self.ending = Ending.HANG
                self.message = "hang named live (on_hang: stop)"
                self.stop_reason = "stopped by labctl: a hang, named live (on_hang: stop)"
                self.say("stopping the lab: the hang above (on_hang: stop)")
            if self.deadline_passed:
                self.ending = Ending.DEADLINE
                self.message = f"deadline of {self.plan.spec.timeout:g}s passed"
                self.stop_reason = "stopped by labctl at the deadline"
                self.say(f"timeout: {self.message}; taking every rank's stack, then stopping the lab")
                for note in self.backend.signal(TakeStacks(self.rundir)):
                    self.say(note)

        def cleanup() -> _Finished:
            if self.live is not None:
                self.live.close()
            self.end_faults()
            return self.finish()

        return self.run_result(self.guarded(body, cleanup))

    def finish(self) -> _Finished:
        """Stop what still runs, collect every log, then delete: in this order, always.

        Nothing is deleted unless every log is in the folder: a collection that
        failed or was cut short by a second signal keeps the lab (`labctl down`
        saves the logs, then deletes). Backends whose logs are in the folder
        already (`live_logs`) and labs that never started are deleted regardless:
        there is nothing more to save, and nothing may be left running."""
        backend, say, notes = self.backend, self.say, []
        stop_reason = self.stop_reason or "stopped by labctl"
        stopped: set[int] = set()
        done = _Finished(self.outcomes, notes, collected=False)
        final = outcomes = self.outcomes
        try:
            if not (self.started and all(o.state.ended for o in outcomes)):
                try:                          # an ended node stays ended: no need to ask again
                    outcomes = self.observe()
                except Exception:
                    pass
            running = [o.index for o in outcomes if not o.state.ended]
            if running:
                backend.signal(Stop(tuple(running), stop_reason))
                stopped = set(running)
                for index in running:         # when they ended, for the report's timeline
                    self.exited.setdefault(index, self.elapsed())
            with self.signals.collection():
                say(f"collecting the logs of {len(self.plan.nodes)} node(s)")
                final = backend.stream(self.rundir)
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
        if not done.collected and self.started and not backend.live_logs:
            done.kept = True
            notes.append(f"nothing was deleted, so that no log is lost: `labctl down "
                         f"{self.rundir.path}` saves every node's log, then removes the lab")
            say(notes[-1])
        else:
            try:
                removed = backend.delete()
                if removed:
                    say(removed)
            except Exception as exc:
                notes.append(f"cleanup failed: {exc}; run: labctl down {self.rundir.path}")
                say(notes[-1])
        keep_state(self.rundir, backend.for_record)    # what the stream and the delete added (leftovers)
        if not self.started:
            done.outcomes = [NodeOutcome(n.index, n.hostname) for n in self.plan.nodes]
            return done
        done.outcomes = self.final_outcomes(final)
        for o in done.outcomes:
            if o.index in stopped:
                o.state, o.reason = NodeState.STOPPED, stop_reason
        return done

    def final_outcomes(self, final: list[NodeOutcome]) -> list[NodeOutcome]:
        """One outcome per planned node, in plan order, with the exit times seen."""
        by_index = {o.index: o for o in final}
        result = []
        for node in self.plan.nodes:
            o = by_index.get(node.index) or NodeOutcome(node.index, node.hostname)
            if node.index in self.exited and o.exited_s is None:
                o.exited_s = self.exited[node.index]
            result.append(o)
        return result

    def run_result(self, finished: _Finished) -> RunResult:
        """What was seen, with how the cleanup went (the state is verdict.decide's)."""
        notes = self.fault_notes + finished.notes
        collection = (Collection.CUT if finished.cut_by is not None else
                      Collection.FAILED if finished.failure else Collection.COLLECTED)
        if collection is Collection.COLLECTED and self.signals.deferred and self.interrupted_by is None:
            notes.append(f"{signal_name(self.signals.deferred[0])} arrived while the lab was being "
                         "cleaned up; every log was collected first, and the outcome is the lab's own")
        seen = Seen(self.ending, finished.outcomes, self.message, self.interrupted_by, collection,
                    finished.failure, finished.cut_by)
        return RunResult(seen, self.error, notes, finished.kept, self.reading)

    # -- follow: a lab started elsewhere -----------------------------------------------

    def follow(self, timeout: float, wait: bool) -> RunResult:
        def body() -> None:
            if wait:
                self.watch(self.t0 + timeout, None)
            else:
                self.outcomes = self.observe()
                self.say(_line(self.outcomes))

        failure = ""

        def cleanup() -> list[NodeOutcome]:
            nonlocal failure
            if self.live is not None:
                self.live.close()
            try:
                return self.backend.stream(self.rundir)
            except Exception as exc:      # nothing was saved: say so, never pretend
                failure = str(exc)
                self.error = self.error or LabError(f"collecting the logs failed: {exc}")
                return self.outcomes

        outcomes = self.final_outcomes(self.guarded(body, cleanup))
        going = [o.index for o in outcomes if not o.state.ended]
        why = (f"{self.interrupted_by} stopped the waiting" if self.interrupted_by else
               "--no-wait" if not wait else f"not ended within --timeout {timeout:g}s")
        ending = self.ending if self.ending is not Ending.ALL_ENDED else Ending.WATCHED
        seen = Seen(ending, outcomes, self.message, self.interrupted_by,
                    Collection.FAILED if failure else Collection.COLLECTED, failure,
                    still_running=going, why_still_running=why)
        return RunResult(seen, self.error)


def run(plan: LaunchPlan, backend: Backend, rundir: RunDir, progress: Progress,
        grace: float | None = None, clock=time.monotonic, signals: Signals | None = None,
        live: "LiveWatch | None" = None) -> RunResult:
    """Run the lab to its end on `backend`; the run folder holds every node's log afterwards.
    `signals`: a regime the caller installed (`signals_raise()`) and keeps after the run
    (lab.py protects the run folder's finish with it), else one for the run alone. `live`:
    the live watcher, polled from the loop (labctl/live/)."""
    session = Session(plan, backend, rundir, progress, clock, signals=signals)
    session.live = live
    return session.run(FAILURE_GRACE_S if grace is None else grace)


def follow(plan: LaunchPlan, backend: Backend, rundir: RunDir, progress: Progress,
           timeout: float, wait: bool = True, clock=time.monotonic,
           signals: Signals | None = None, live: LiveWatch | None = None) -> RunResult:
    """Watch a run that labctl did not start (kubectl, docker compose, a labctl that
    died) through `backend.attach`, then stream every node's log into the folder.

    The same poll loop and collect step as `run`, but nothing is started, stopped or
    deleted: a failing node is only noted, and at `timeout` (or at once, `wait`
    False) the run is written down as still running. A signal ends the watching,
    not the lab; the logs are collected all the same.
    """
    session = Session(plan, backend, rundir, progress, clock, started_here=False, signals=signals)
    session.live = live                   # its on_hang is report: a lab started elsewhere is never stopped
    return session.follow(timeout, wait)
