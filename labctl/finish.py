"""The finish of a run folder: what labctl does once a run's logs are collected.

    split the node logs ─► the workers' error files ─► stacks ─► verdict ─► status.json
        ─► merge the trace (the stuck collective ─► verdict again) ─► report.md, report.html

Every run ends here, whichever way it went: `labctl up` and `labctl collect` after
the driver (labctl/driver.py), `labctl down` for a run whose labctl died, `labctl
preflight`. How the run ended is labctl/verdict.py's to say; this module gathers the
evidence, asks it, and writes the record and the reports down, each file whole.

The finish is protected as the log collection is: a first SIGINT/SIGTERM/SIGHUP is
noted and the folder is finished; a second one cuts the step under way short, and
status.json then says so (state interrupted, what is missing, how the lab itself
had ended). The outcome is saved before the (slow) trace merge.
"""
from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import Callable

from . import atomicfile, blame, report, stackdumps, verdict
from .driver import RunResult, Signals, safe_progress
from .errors import Interrupted, LabError
from .outcome import signal_name
from .runrecord import TraceSummary
from .trace.calls import (added_keys, aliased_outputs, deleted_keys, destroyed_at, elections, not_a_member,
                          not_contiguous, pickled_by, read_before_wait, reset_keys, set_keys, swapped_senders,
                          wrote_into_a_copy)
from .trace.model import Diagnosis
from .rundir import (PAGE_FILE, REPORT_FILE, RESULTS_FILE, TRACE_FILE, RunDir, StorageError, now,
                     storage_cause)
from .verdict import Cut, Evidence, Seen

Progress = Callable[[str], None]
FINISH = ("finishing the run folder", "it short (status.json then says what is missing)")


class FinishStep(enum.Enum):
    """The steps of the finish, in order, and what a cut at or before each leaves out."""
    SPLIT = "splitting the node logs into ranks/ and results.jsonl"
    TRACE = "merging the trace"
    REPORT = "writing the report"

    def missing(self, run: Path, written: set[str]) -> str | None:
        """What a cut at or before this step leaves out of the folder at `run`, given the
        files this finish has `written` (None: nothing; a cut may come between two files)."""
        if self is FinishStep.SPLIT:
            return f"ranks/ and {RESULTS_FILE} are incomplete (the node logs in nodes/ are whole)"
        if self is FinishStep.TRACE:
            return None if TRACE_FILE in written else \
                f"no {TRACE_FILE} (`labctl trace {run}` writes it)"
        absent = [name for name in (REPORT_FILE, PAGE_FILE) if name not in written]
        how = {REPORT_FILE: f"`labctl report {run}` prints it",
               PAGE_FILE: f"`labctl report {run} --format html` writes it"}
        return "; ".join(f"no {name} ({how[name]})" for name in absent) or None


class _Finish:
    """One run folder's finish: the steps, and what is known after each."""

    def __init__(self, run: RunDir, seen: Seen, progress: Progress,
                 reading: blame.LogReading | None = None, previous=None):
        self.run, self.seen, self.say = run, seen, progress
        self.reading, self.previous = reading, previous
        self.step: FinishStep | None = None
        self.written: set[str] = set()
        self.found: blame.Findings | None = None
        self.diagnosis: Diagnosis | None = None
        self.ended_in: dict[int, str] = {}     # rank -> where its trace records end
        self.ended_at: dict[int, dict] = {}    # ... as the op and its caller
        self.destroyed: dict[int, str] = {}    # rank -> where it last called destroy_process_group
        self.deleted: dict[str, tuple[int, str]] = {}   # store key -> (rank, caller) that deleted it
        self.added: dict[str, tuple[list[int], str]] = {}   # store key -> (ranks, caller) that added to it
        self.set_keys: dict[str, tuple[int, str]] = {}      # store key -> (rank, caller) that last set it
        self.resets: dict[str, tuple[int, str]] = {}        # store key -> (rank, caller) that reset a counter
        self.elected: dict[str, tuple[int, str]] = {}       # store key -> (rank, caller) that won its compare_set
        self.timeouts: dict[tuple[int, str], int] = {}      # (rank, pg) -> the group's timeout there, ms
        self.pickled: dict[int, set[str]] = {}              # rank -> the classes its object collectives sent

    def evidence(self, **more) -> Evidence:
        spec = self.run.spec
        return Evidence(self.seen, spec.nodes, spec.fewest_nodes, bool(spec.workloads),
                        list(self.run.record.faults), self.found, self.diagnosis,
                        ended_in=self.ended_in, ended_at=self.ended_at, destroyed=self.destroyed,
                        deleted=self.deleted, added=self.added, set_keys=self.set_keys, resets=self.resets,
                        elected=self.elected, timeouts=self.timeouts, pickled=self.pickled, previous=self.previous,
                        **more)

    def decide(self, **more) -> None:
        self.run.record = verdict.decide(self.run.record, self.evidence(**more), str(self.run.path))

    def at(self, step: FinishStep) -> None:
        self.step = step
        self.say(f"finishing the run folder: {step.value}")

    def steps(self) -> None:
        run, rec = self.run, self.run.record
        t0 = time.monotonic()
        self.at(FinishStep.SPLIT)
        indices = [o.index for o in self.seen.outcomes]
        self.reading = self.reading or blame.LogReading.of(run, indices)
        self.found = found = self.reading.finish()
        ignored = self.reading.split.ignored
        if ignored.count:                       # result lines out of the lab's bounds: left out, named
            rec.ignored_results = ignored
            rec.notes.append(f"results: {ignored.summary()}")
        for index in indices:                   # the workers' error files, where they are here
            log_dir = run.torchrun_logs(index)
            files, notes = blame.read_error_files(log_dir, index)
            found.add_error_files(files)
            rec.notes.extend(notes)
            _drop_tee_copies(log_dir)
        for rank in range(rec.world_size):      # a silent rank still has its (empty) log
            if not run.rank_log(rank).exists():
                run.rank_log(rank).touch()
        run.write_stacks(found.stacks)
        self.decide()
        rec = run.record
        rec.stacks = {r: stackdumps.where_stuck(lines) for r, lines in sorted(found.stacks.items())}
        rec.finished = now()
        traced = run.spec.trace
        if traced:                              # the outcome is down before the (slow) merge
            run.save()
            self.at(FinishStep.TRACE)
        self.diagnosis = self.merge_trace(traced, failed=not rec.ok)
        if self.diagnosis is not None or self.ended_in:   # the stuck/mismatched collective, a rank's last op
            self.decide()
        _confirm_live(run.record)
        run.record.finalize_seconds = round(time.monotonic() - t0, 3)
        run.release_reserve()
        run.save()
        self.write_reports()

    def merge_trace(self, traced: bool, failed: bool) -> Diagnosis | None:
        """trace.json from the rank logs when the lab recorded ops (labctl/trace.py); the
        stuck or mismatched collective when the run failed, from the trace or from the
        Flight Recorder ring the ranks dumped at a hang. A merge problem is a note, never
        a lost run."""
        from . import trace

        run = self.run
        trace.trim_record_files(run.path)       # the ranks are gone: their files' unwritten tails go
        try:
            if not traced:
                return trace.flight_recorder(run.path, run.record.world_size) if failed else None
            summary = trace.merge(run.path, world=run.record.world_size, hostnames=run.hostnames)
            self.written.add(TRACE_FILE)
        except Exception as exc:                # noqa: BLE001 - the run's results matter more
            run.record.notes.append(f"trace: merge failed: {exc}")
            return None
        straggler = trace.straggler(summary)
        mismatch = summary.group_mismatch or (summary.mismatch_found[0] if summary.mismatch_found else None)
        hazards = [h for h in (not_a_member(summary.calls), read_before_wait(summary.calls),
                               aliased_outputs(summary.calls), wrote_into_a_copy(summary.calls),
                               not_contiguous(summary.calls),
                               swapped_senders(summary.calls, summary.ranks))
                   if h is not None]
        run.record.trace = TraceSummary(TRACE_FILE, summary.ops, summary.missing_ranks,
                                        len(summary.problems) + summary.more_problems, straggler, mismatch,
                                        hazards[0] if hazards else None)
        run.record.notes.extend(f"trace: {h.text}" for h in hazards)
        if summary.cost_note:
            run.record.notes.append(f"trace: {summary.cost_note}")
        bad = len(summary.problems) + summary.more_problems
        if bad:                                 # counted in status.json; said where people read
            first = summary.problems[0] if summary.problems else None
            where = f" (the first: {Path(first.file).name}:{first.line}: {first.text})" if first else ""
            run.record.notes.append(f"trace: {bad:,} trace record(s) could not be used and were left out of the "
                                    f"timeline{where}; `labctl trace {run.path}` lists them")
        if straggler:
            run.record.notes.append(f"trace: {straggler['text']} (`labctl trace` has every rank's)")
        if mismatch and run.record.ok:
            what = ("the ranks created a group with other members, and the run still passed"
                    if "members" in mismatch.differs else "a collective completed although its ranks' calls differed")
            run.record.notes.append(f"trace: {what}: {mismatch.text}")
        if not run.record.ok:
            self.ended_in = {r: i.ended_in for r, i in summary.ranks.items() if i.ended_in}
            self.ended_at = {r: i.ended_at for r, i in summary.ranks.items() if i.ended_at}
            self.destroyed = destroyed_at(summary.calls)
            self.deleted = deleted_keys(summary.calls)
            self.added = added_keys(summary.calls)
            self.set_keys = set_keys(summary.calls)
            self.resets = reset_keys(summary.calls)
            self.elected = elections(summary.calls)
            self.timeouts = summary.group_timeouts
            self.pickled = pickled_by(summary.calls)
        if summary.raised_count:
            first = summary.raised[0] if summary.raised else ""
            run.record.notes.append(f"trace: {summary.raised_count} op(s) raised before torch issued them "
                                    f"and are not counted as collectives ({first}; `labctl trace` lists them)")
        if not failed:
            return None
        # the trace names the stuck op; when it cannot (no rank left an op record), the
        # Flight Recorder entries the ranks dumped may
        return trace.diagnosis(summary) or trace.flight_recorder(run.path, run.record.world_size)

    def write_reports(self) -> None:
        """report.md, report.html (the page) and whatever files the run's workloads add
        (bench plots); each file whole or absent. The page is made from what the folder
        holds, whatever the outcome; if it cannot be made, that is a note, never a lost run."""
        self.at(FinishStep.REPORT)
        write_reports(self.run, self.say, self.written)

    def cut(self, signal: str) -> None:
        """A second signal cut the step under way short: the record says so, and what is
        missing. Never raises; leaves no temporary file (every writer here is atomic)."""
        step = self.step or FinishStep.REPORT
        order = list(FinishStep)
        traced = _traced(self.run)
        missing = tuple(m for s in order[order.index(step):]
                        if (s is not FinishStep.TRACE or traced) and (m := s.missing(self.run.path, self.written)))
        self.say(f"{signal}: {step.value} cut short; status.json says what is missing")
        if self.reading is not None and self.found is None:
            self.reading.close()
        if step is FinishStep.SPLIT:
            self.found = None                   # what was read so far is not the whole
        self.decide(cut=Cut(signal, step.value, missing))
        self.run.record.finished = now()
        _save_anyway(self.run)

    def damaged(self, why: str) -> None:
        """The run folder failed (full, read-only, gone): status.json says so where it
        can still be written, nothing split or added; never raises."""
        if self.reading is not None:
            self.reading.close()
        self.found = None
        self.decide(storage_failure=why)
        self.run.record.finished = now()
        _save_anyway(self.run)


def _confirm_live(rec) -> None:
    """The live diagnosis (labctl/live/), checked against the final one: the same culprit,
    op and line confirm it; anything else is said as the correction."""
    live, first = rec.live, rec.first_failure
    if live is None or live.resumed_at is not None:
        return
    if first is None:
        live.verdict = "found no failure (corrected)"
        return
    rank, ranks, op, caller = first.answer()
    same = (rank, sorted(ranks), op, caller) == (live.rank, sorted(live.ranks), live.op, live.caller)
    live.verdict = "confirmed" if same else f"corrected it: {first.describe()}"


def write_down(run: RunDir, result: RunResult, progress: Progress, signals: Signals) -> None:
    """The finish of a run the driver ran (`labctl up`) or watched (`labctl collect`)."""
    rec = run.record
    rec.notes.extend(result.notes)
    rec.logs_uncollected = result.kept      # `labctl down` must save the logs before deleting
    finish(run, result.seen, progress, signals, result.reading,
           damaged=str(result.error) if isinstance(result.error, StorageError) else "",
           raise_cut=False)


def finish(run: RunDir, seen: Seen, progress: Progress, signals: Signals | None = None,
           reading: blame.LogReading | None = None, previous=None, damaged: str = "",
           raise_cut: bool = True) -> None:
    """Finish `run` from what was `seen`, protected by `signals` (see the module
    docstring). `reading`: the log reading the driver began (live logs). `previous`: a
    state that stands (a run whose labctl could not collect every log, finished by
    `labctl down`). `damaged`: the run folder failed already. Raises StorageError when
    the folder fails now, LabError when it cannot be finished, and (`raise_cut`)
    Interrupted once the cut-short record is written."""
    signals = signals or Signals.deferring()
    progress = signals.say = safe_progress(progress)
    job = _Finish(run, seen, progress, reading, previous)
    if damaged:
        job.damaged(damaged)
        return
    before = len(signals.deferred)
    with signals.protect(*FINISH):
        try:
            job.steps()
        except Interrupted as exc:
            job.cut(exc.signal)
            if raise_cut:
                raise
            return
        except OSError as exc:              # the disk filled, or went read-only, at the very end
            error = run.storage_error(exc)
            job.damaged(str(error))
            raise error from None
        except Exception as exc:            # a damaged log must not leave the folder at "running"
            job.damaged(f"finalizing the run folder failed: {exc}")
            raise LabError(f"finalizing {run.path} failed: {exc}") from None
    if len(signals.deferred) > before:
        sig = signal_name(signals.deferred[before])
        run.record.notes.append(f"{sig} arrived while the run folder was being finished; it was "
                                "finished first, and the outcome is the lab's own")
        try:
            run.save()
        except OSError as exc:
            raise run.storage_error(exc) from None


def write_reports(run: RunDir, progress: Progress, written: set[str] | None = None) -> None:
    """report.md, report.html and the workloads' files (plots), each written whole."""
    written = set() if written is None else written
    for path in report.write_files(run, progress):
        progress(f"plot: {path}")
    if write_page(run, progress) is not None:
        written.add(PAGE_FILE)
    try:
        atomicfile.write_text(run.report_path, report.markdown(run))
    except OSError as exc:
        raise run.storage_error(exc) from None
    written.add(REPORT_FILE)


def write_page(run: RunDir, progress: Progress) -> Path | None:
    """<run>/report.html (labctl/html); None, with a note, when it could not be made or
    written: the page never changes how the run ended (report.md still decides that)."""
    from . import html

    try:
        return html.write(run.path)
    except OSError as exc:              # a nearly full disk that still takes report.md
        progress(f"note: report.html could not be written: {storage_cause(exc)}")
    except Exception as exc:            # noqa: BLE001 - a page is never worth the run
        progress(f"note: report.html could not be written: {type(exc).__name__}: {exc}")
    return None


def _save_anyway(run: RunDir) -> None:
    run.release_reserve()
    try:
        run.save()
    except OSError:
        pass


def _traced(run: RunDir) -> bool:
    try:
        return bool(run.spec.trace)
    except Exception:       # noqa: BLE001 - a damaged spec.yaml: say nothing of a trace
        return False


def _drop_tee_copies(log_dir: Path) -> None:
    """torchrun's --tee also writes each worker's stdout and stderr under its --log-dir;
    the node log and ranks/ hold the same bytes, so once the run is read the copies go
    (a chatty lab would otherwise keep its output twice). The error files stay."""
    for copy in log_dir.glob("*/attempt_*/*/std*.log"):
        try:
            copy.unlink()
        except OSError:
            pass
