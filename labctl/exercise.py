"""`labctl exercise`: write a collective yourself from send/recv, and have the lab grade it
on real ranks (docs/exercises.md).

`starter` writes the file to fill in (the function, its contract, hints: never an answer;
the reference solutions live in tests/exercises/). `check` runs the learner's file on
the lab the flags describe (any backend), under the exercise runner that every rank
runs (workloads/_exercise.py) with tracing on, and grades the run folder from three
things it holds:

- the runner's records (results.jsonl): values per call, each call's time window on its
  rank's clock, a call that passed the deadline, a function that raised;
- the trace (`_call_ops`, the one place that reads it): the ops each call made inside
  its window — bytes sent, collectives called, isend/irecv never waited on;
- the hang diagnosis (status.json, labctl/trace.py): who waits in which send/recv for whom.

How the lab ended comes before any check (an interrupted lab is not graded, the lab's
timeout or a failed rank is the grade's first line), and the run's verdict judges the
grade (labctl/verdict.py `judge`): status.json, the last line and the exit code agree.
"""
from __future__ import annotations

import ast
import bisect
import enum
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from workloads._protocol.exercises import (DEFAULT_DEADLINE_S, DEFAULT_SEED, ENV, EXERCISES, P2P_OPS, RECORD_CALL,
                                  RECORD_DEADLINE, RECORD_DONE, RECORD_LOAD, RECORD_RAISED, RECORD_THREADS,
                                  RECORD_TIME, SENDS, WORKLOAD, Call, Config, Exercise, describe_cases,
                                  least_received, traffic, worlds)
from workloads._protocol.ops import COLLECTIVE_CALLS

from . import backends, verdict
from .backends.base import BackendOptions
from .errors import Interrupted
from .outcome import INTERRUPT_EXIT, RunState, signal_name
from .record import FailedCheck, RunRecord
from .rundir import RunDir
from .spec import LabSpec, SpecError
from .tables import human_bytes, table

DEFAULT_TIMEOUT_S = 300.0           # the whole lab, unless the flags or the lab file say otherwise
MAX_FILE_BYTES = 1 << 20            # a learner's file is read (parsed) before the lab starts
MAX_NAMED = 4                       # findings of one kind named one by one


# ---------------------------------------------------------------- the catalogue

def find(name: str) -> Exercise:
    if name not in EXERCISES:
        raise SpecError(f"exercise: expected one of {', '.join(EXERCISES)}, given {name!r} "
                        "(labctl exercise list)")
    return EXERCISES[name]


def list_text() -> str:
    return table(("exercise", "you write", "checked against", "what it is"),
                 ((e.name, e.signature, e.reference, e.summary) for e in EXERCISES.values()))


def starter(name: str, path: str | None = None, force: bool = False) -> Path:
    """Write the exercise's starter file (default `<name>.py`); refuses to overwrite."""
    exercise = find(name)
    target = Path(path or f"{name}.py")
    if target.exists() and not force:
        raise SpecError(f"{target}: exists; use --force to overwrite it")
    if target.suffix != ".py":
        raise SpecError(f"{target}: expected a .py file name (example: {name}.py)")
    target.write_text(exercise.starter.read_text())
    return target


# ---------------------------------------------------------------- the learner's file, before any lab

@dataclass(frozen=True)
class Entry:
    """One exercise and the file holding its function."""
    exercise: Exercise
    file: Path


def entry(name: str, file: str) -> Entry:
    """The exercise and the learner's file, checked without importing it: it exists, is
    Python, and defines the function at its top level. SpecError (exit 2) otherwise."""
    exercise = find(name)
    path = Path(file)
    if not path.exists():
        raise SpecError(f"{file}: no such file (write a starter with: labctl exercise init {name} {file})")
    if not path.is_file():
        raise SpecError(f"{file}: not a file (expected the Python file with your {exercise.function})")
    if path.suffix != ".py":
        raise SpecError(f"{file}: expected a .py file (your {exercise.signature})")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{file}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{file}: larger than {MAX_FILE_BYTES >> 20} MiB; an exercise is a few functions")
    try:
        tree = ast.parse(raw, filename=str(path))
    except SyntaxError as exc:
        raise SpecError(f"{file}:{exc.lineno}: syntax error: {exc.msg}") from None
    except ValueError as exc:               # a NUL byte
        raise SpecError(f"{file}: not Python source ({exc})") from None
    if not _defines(tree, exercise.function):
        raise SpecError(f"{file}: no function {exercise.function}() at its top level; "
                        f"{name} needs {exercise.signature} "
                        f"(a starter: labctl exercise init {name} NEW_FILE.py)")
    return Entry(exercise, path.resolve())


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                  for t in node.targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            return True
    return False


# ---------------------------------------------------------------- the lab that runs it

@dataclass(frozen=True)
class Settings:
    deadline: float
    seed: int
    time: bool


REFUSED_FLAGS = {"script": "--script (the exercise file is the script)",
                 "workloads": "--workload (an exercise check runs your file, not workloads)"}


def lab_spec(entries: list[Entry], spec_file: str | None, overrides: dict[str, Any],
             settings: Settings) -> LabSpec:
    """The user's lab (file and flags, validated as for `labctl up`), running the first
    entry's file as its script under the exercise runner, tracing on. SpecError on a
    lab an exercise check cannot use."""
    for key, flag in REFUSED_FLAGS.items():
        if overrides.get(key):
            raise SpecError(f"{flag}: not for labctl exercise check")
    if overrides.get("trace") is False:
        raise SpecError("--no-trace: labctl exercise check reads the trace (bytes sent, collectives called)")
    if not entries:
        raise SpecError("exercise check: no exercise given")
    user = backends.load(spec_file, overrides)
    if user.world_size < 2:
        raise SpecError(f"exercise check: needs at least 2 ranks, the lab has {user.world_size} "
                        "(--nodes x --nproc-per-node; default 2 x 2)")
    if user.replicas > 1:
        raise SpecError("exercise check: --replicas must be 1 (each replica would be graded apart)")
    if user.elastic:
        raise SpecError("exercise check: not on an elastic lab (--max-restarts, --min-nodes): a restart "
                        "or a smaller world would hide a deadlock")
    script = entries[0].file
    if user.backend != "local" and any(e.file != script for e in entries):
        raise SpecError(f"exercise check: several files need the local backend (the {user.backend} "
                        "backend ships one file to its nodes)")
    config = Config(exercises=tuple((e.exercise.name, None if e.file == script else str(e.file))
                                    for e in entries),
                    deadline=settings.deadline, seed=settings.seed, time=settings.time)
    final = {**overrides, "script": str(script), "script_args": [], "trace": True,
             "env": {**user.env, ENV: config.to_json()}}
    if spec_file is None and "timeout" not in overrides:
        final["timeout"] = DEFAULT_TIMEOUT_S
    final.pop("workloads", None)
    return backends.load(spec_file, final)


def settings(deadline: float | None = None, seed: int | None = None, time: bool = True) -> Settings:
    return Settings(DEFAULT_DEADLINE_S if deadline is None else deadline,
                    DEFAULT_SEED if seed is None else seed, time)


def held_signals():
    """The signal regime `check` runs in, held by its caller until the grade is printed:
    a signal after the lab (while grading, saving, printing) is then noted, never a
    KeyboardInterrupt that would say something status.json does not (labctl/driver.py)."""
    from . import driver

    return driver.signals_raise()


def check(spec: LabSpec, entries: list[Entry], progress: Callable[[str], None] = print,
          runs_root: str = "runs", options: BackendOptions | None = None,
          signals: Any = None) -> tuple[RunDir, list["Grade"]]:
    """Run `lab_spec`'s lab to its end, grade it, and have the run's verdict judge the
    grade (labctl/verdict.py `judge`): status.json then says what `answer` says. The run
    folder and each entry's grade. `signals`: a regime from `held_signals()`."""
    from . import driver, lab

    with driver.signals_raise(signals) as held:
        run = lab.up(spec, progress=progress, runs_root=runs_root, options=options, signals=held)
        before, deferred = run.record.state, len(held.deferred)
        try:
            with held.protect("grading the exercise", "the grade short (status.json then says interrupted)"):
                grades = grade(run, entries)
                notes = tuple(f"{signal_name(s)} arrived while the exercise was being graded; it was graded "
                              "first, and the outcome is the grade's" for s in held.deferred[deferred:][:1])
                run.record = verdict.judge(run.record, _verdict_grade(grades, notes))
                _write_down(run, progress, changed=run.record.state is not before)
        except Interrupted as exc:
            progress(f"{exc.signal}: grading the exercise cut short; status.json says so")
            grades = [Grade(e.exercise, e.file, [], interrupted=exc.signal) for e in entries]
            run.record = verdict.judge(run.record, verdict.Grade(cut_by=exc.signal))
            _write_down(run, progress, changed=False)
    return run, grades


def _verdict_grade(grades: list["Grade"], notes: tuple[str, ...] = ()) -> verdict.Grade:
    """The grades as the verdict reads them: each failed check of each (the lab's own end
    is the record's already; an interrupted lab is not graded)."""
    failed: list[FailedCheck] = []
    message = ""
    for g in grades:
        if g.passed or g.interrupted:
            continue
        message = message or f"{g.exercise.name} ({g.file.name}): {g.headline()}"
        failed += [FailedCheck(WORKLOAD, f.check.value, None, f.text) for f in g.findings]
    return verdict.Grade(tuple(failed), message, notes=notes)


def _write_down(run: RunDir, progress: Callable[[str], None], changed: bool) -> None:
    """status.json with the judged record; the reports again when the grade changed the
    run's state (they were written at the finish, before the grade)."""
    try:
        run.save()
        if changed:
            from . import finish

            finish.write_reports(run, progress)
    except OSError as exc:
        raise run.storage_error(exc) from None


@dataclass(frozen=True)
class Answer:
    """How `check` ends: the last line and the exit code, from the judged record, so that
    the terminal, the exit code and status.json say one thing (README "Exit codes")."""
    passed: bool
    line: str
    code: int


def answer(run: RunDir, grades: list["Grade"]) -> Answer:
    rec = run.record
    failed = [g for g in grades if not g.passed]
    if rec.ok and not failed and grades:
        g = grades[0]
        return Answer(True, f"passed: {g.exercise.name} ({g.file.name}) on world sizes "
                            f"{', '.join(map(str, g.worlds))}", 0)
    what = f"{failed[0].exercise.name} ({failed[0].file.name}): " if failed else ""
    if rec.state is RunState.INTERRUPTED:
        sig = rec.signal or "SIGINT"
        why = failed[0].headline() if failed and failed[0].interrupted else f"interrupted ({sig})"
        return Answer(False, f"{what}{why}; run folder {run.path}", INTERRUPT_EXIT.get(sig, 130))
    why = failed[0].headline() if failed else (rec.message or rec.state.value)
    return Answer(False, f"{what}{why}; run folder {run.path}", 1)


# ---------------------------------------------------------------- grading

class Check(enum.Enum):
    VALUES = "values"
    ONLY_P2P = "only p2p"
    TRAFFIC = "traffic"
    WAITS = "waits"
    DEADLINE = "deadline"
    TIME = "time"


@dataclass
class Cell:
    ok: bool | None                 # None: not graded (time) or not run
    text: str


@dataclass
class Finding:
    check: Check
    world: int | None
    text: str                       # the line a learner reads
    short: str = ""                 # the same, without the detail: the last line of `check`


@dataclass
class Grade:
    exercise: Exercise
    file: Path
    worlds: list[int]
    cells: dict[tuple[Check, int], Cell] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    interrupted: str | None = None  # the signal that stopped the lab (or the grade): not graded

    @property
    def passed(self) -> bool:
        graded = [c for c in self.cells.values() if c.ok is not None]
        return bool(graded) and all(c.ok for c in graded) and not self.findings and not self.interrupted

    def headline(self) -> str:
        """Why it failed, in one line: a signal, what ended the lab early, else the checks
        that failed."""
        if self.interrupted:
            return f"interrupted ({self.interrupted}): not graded"
        stopped = next((f for f in self.findings if f.short), None)
        return stopped.short if stopped else "failed " + ", ".join(self.failed_checks())

    def failed_checks(self) -> list[str]:
        """'values (world 3)', ... in table order."""
        out = []
        for check in Check:
            bad = [w for w in self.worlds if (c := self.cells.get((check, w))) and c.ok is False]
            if bad:
                out.append(f"{check.value} (world {', '.join(map(str, bad))})")
        if not out and self.findings:
            out.append(self.findings[0].check.value)
        return out


@dataclass
class _Stop:
    """Why a rank ended early: a deadline, a raise, a file that would not load."""
    kind: str
    rank: int
    record: dict


def grade(run: RunDir, entries: list[Entry]) -> list[Grade]:
    """Each entry's grade, from the run folder of the lab `lab_spec` made of them. How the
    lab ended (status.json) comes first: an interrupted lab is not graded, a lab past its
    timeout or failed says so before any check."""
    largest = run.record.world_size
    all_worlds = worlds(largest) if largest else []
    if run.record.state is RunState.INTERRUPTED:
        sig = run.record.signal or "SIGINT"
        return [_interrupted(Grade(e.exercise, e.file, all_worlds, interrupted=sig), run) for e in entries]
    records = [r for r in run.iter_results(warn=lambda line: None) if r.get("workload") == WORKLOAD]
    ops, traced = _call_ops(run, [Call.from_record(r) for r in records if r.get("name") == RECORD_CALL])
    return [_grade_one(run, i, e, records, ops, traced, all_worlds) for i, e in enumerate(entries)]


def _interrupted(g: Grade, run: RunDir) -> Grade:
    rec = run.record
    why = rec.message or f"the lab was stopped by {g.interrupted}"
    g.findings.append(Finding(Check.VALUES, None, f"{why}: not graded (the calls that ran are in "
                                                  f"{run.path / 'results.jsonl'})"))
    return g


def _call_ops(run: RunDir, calls: list[Call]) -> tuple[dict[tuple[int, int, int, int], list[Any]], set[int]]:
    """The trace ops each call made, (entry, world, case, rank) -> ops: every op its
    rank began inside the call's window on its own clock; and the ranks whose log holds
    any op at all (without one, a rank's sends are unknown, not zero). The one place
    that reads the trace (labctl/trace.py's reader of rank records)."""
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
        said = _load_text(loads[0], ex)
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
        _values(g, world, here, stop)
        called = {(c.case, c.rank): ops.get((c.entry, c.world, c.case, c.rank), []) for c in here}
        _only_p2p(g, world, here, called)
        _traffic(g, world, here, called)
        _arrived(g, world, here, called, traced)
        _waits(g, world, here, called)
        g.cells[(Check.DEADLINE, world)] = Cell(True, "pass")
        g.cells[(Check.TIME, world)] = Cell(None, "")
    for r in mine:
        if r.get("name") == RECORD_TIME and (Check.TIME, r["world"]) in g.cells:
            g.cells[(Check.TIME, r["world"])] = Cell(None, _time_text(r))
    if stop is not None:
        _stopped(g, run, stop, calls)
    elif not calls and not timed_out:
        said = _lab_failure(run)
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
        said = _timeout_text(run, records)
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


def _timeout_text(run: RunDir, records: list[dict]) -> tuple[str, str]:
    """(the whole text, its short form) for a lab its timeout ended: the ranks that had
    made every call and still did not end, and the threads they left running."""
    rec = run.record
    world = rec.world_size or 0
    done = {int(r.get("rank", -1)) for r in records if r.get("name") == RECORD_DONE}
    threads = sorted((r for r in records if r.get("name") == RECORD_THREADS), key=lambda r: int(r.get("rank", 0)))
    timeout = f"the lab's timeout ({_seconds(run)})"
    if world and done >= set(range(world)):
        short = f"{timeout} came after every call had returned: {_ranks(sorted(done))} did not end"
        if not threads:
            return short + " (is something your file started still running?)", short
        first = threads[0]
        count = sum(int(r.get("count", 0)) for r in threads)
        target = f", target {first['target']}" if first.get("target") else ""
        names = ", ".join(first.get("names") or [])
        text = (f"{short}: your function left {count} thread{'s' if count != 1 else ''} running on "
                f"{_ranks([int(r.get('rank', -1)) for r in threads])} (rank {first.get('rank')}: {names}"
                f"{target}; the first left by world size {first.get('world')}, {first.get('label')}). A process "
                "does not end while a thread that is not a daemon runs: join every thread you start before "
                "you return (or start it with daemon=True)")
        return text, short + f" ({count} thread{'s' if count != 1 else ''} your function started still ran)"
    running = [r for r in range(world) if r not in done]
    short = f"{timeout} came while {_ranks(running)} had calls left"
    return short + ": give the lab more time (--timeout), or look at the stacks in the run folder", short


def _seconds(run: RunDir) -> str:
    try:
        return f"{run.spec.timeout:g} s, --timeout"
    except Exception:       # noqa: BLE001 - a damaged spec.yaml: the record's words
        return run.record.message or "--timeout"


def _stop(records: list[dict], lost_peers: bool = True) -> _Stop | None:
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
            return _Stop(kind, int(first.get("rank", -1)), first)
    return None


# ---------------------------------------------------------------- each check

def _values(g: Grade, world: int, calls: list[Call], stop: _Stop | None) -> None:
    wrong = sorted((c for c in calls if not c.ok), key=lambda c: (c.case, c.rank))
    stopped_here = stop is not None and stop.record.get("world") == world
    if not wrong:
        g.cells[(Check.VALUES, world)] = Cell(None, "stopped") if stopped_here else Cell(True, "pass")
        return
    g.cells[(Check.VALUES, world)] = Cell(False, "FAIL")
    first = wrong[0]
    cases = len({c.case for c in wrong})
    total = len({c.case for c in calls})
    text = (f"values wrong at world size {world} in {cases} of {total} cases; the first: "
            f"{first.label}, rank {first.rank}: {first.detail}")
    hint = _values_hint(g.exercise, world, wrong, calls)
    g.findings.append(Finding(Check.VALUES, world, text + (f". {hint}" if hint else "")))


def _values_hint(ex: Exercise, world: int, wrong: list[Call], calls: list[Call]) -> str:
    sizes = sorted({c.size for c in wrong})
    if "you changed" in wrong[0].detail and ex.only_p2p:
        return "Work on copies (x.clone()) of the inputs"
    if "never written" in wrong[0].detail and "tensor_list" in wrong[0].detail:
        return ("Write into the tensors of the list (copy_, recv into them): replacing a list element "
                "does not reach the caller")
    divisible_passed = any(c.ok and c.size % world == 0 for c in calls)
    if ex.name in ("ring_allreduce",) and divisible_passed and all(s % world for s in sizes):
        return (f"Every wrong case has a size that {world} does not divide ({', '.join(map(str, sizes))}): "
                f"do your chunks cover every element? torch.chunk may give fewer than {world} chunks; "
                f"torch.tensor_split(t, {world}) gives exactly {world}")
    return ""


def _sends(ops: list[Any]) -> int:
    return sum(o.nbytes for o in ops if o.op in SENDS)


def _site(caller: str) -> str:
    path, _, line = caller.rpartition(":")
    return f"{Path(path).name}:{line}" if path else caller


def _only_p2p(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    if not g.exercise.only_p2p:
        g.cells[(Check.ONLY_P2P, world)] = Cell(None, "allowed")
        return
    sites: dict[tuple[str, str], None] = {}
    for ops in called.values():
        for o in ops:
            if o.op not in P2P_OPS:
                sites[(o.op, _site(o.caller))] = None
    if not sites:
        g.cells[(Check.ONLY_P2P, world)] = Cell(True, "pass")
        return
    g.cells[(Check.ONLY_P2P, world)] = Cell(False, "FAIL")
    named = "; ".join(f"you called {op} at {site}" for op, site in list(sites)[:MAX_NAMED])
    if not any(f.check is Check.ONLY_P2P for f in g.findings):
        g.findings.append(Finding(Check.ONLY_P2P, world, f"{named}: {g.exercise.name} must be built from "
                                  "send/recv/isend/irecv only (a collective does the work for you)"))


def _traffic(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    ex = g.exercise
    if ex.name == "average_gradients":
        _gradient_traffic(g, world, calls, called)
        return
    all_sent = total = 0.0
    over: list[tuple[float, int, int, Call, float, float]] = []      # calls past what one rank needs
    for c in calls:
        t = traffic(ex.name, world, c.rank, c.size, c.itemsize)
        if t is None:
            continue
        mine = _sends(called.get((c.case, c.rank), []))
        all_sent += mine
        total += t.total / world                # every rank's record of a call carries its share
        if mine > t.rank_most + 0.5:
            over.append((mine / t.rank_most if t.rank_most else math.inf, -c.case, -c.rank, c, mine, t.rank_most))
    overall = all_sent / total if total else 0.0
    over_total = all_sent > total + 0.5
    worst = max(over, key=lambda x: x[:3]) if over else None
    shown = f"{max(overall, worst[0] if worst else 0.0):.2f}x"
    failed = over_total or worst is not None
    g.cells[(Check.TRAFFIC, world)] = Cell(not failed, f"FAIL {shown}" if failed else shown)
    if over_total:
        g.findings.append(Finding(Check.TRAFFIC, world, (
            f"traffic at world size {world}: the ranks sent {overall:.1f}x the optimum "
            f"({human_bytes(all_sent)} where {human_bytes(total)} would do over {len({c.case for c in calls})} "
            f"cases; {ex.optimum}): {_traffic_hint(ex)}")))
    elif worst is not None:
        ratio, _, _, c, mine, most = worst
        g.findings.append(Finding(Check.TRAFFIC, world, (
            f"traffic at world size {world}: rank {c.rank} sent {ratio:.1f}x the most one rank needs "
            f"in {c.label} ({human_bytes(mine)} where {human_bytes(most)} would do; {ex.optimum}): "
            f"{_traffic_hint(ex)}")))


def _traffic_hint(ex: Exercise) -> str:
    return {"ring_allreduce": "are you passing the whole tensor around the ring instead of one chunk per step?",
            "tree_broadcast": "is src sending to every rank itself? In a tree, every rank that has "
                              "the data passes it on",
            "naive_allreduce": "does a rank send more than its tensor (or rank 0 more than n-1 sums)?",
            }.get(ex.name, "do you send a block more than once, or to yourself?")


# what a learner's file may call that does the work below torch.distributed's functions
# (the trace records those): a process group's backend and its methods, functional collectives
BELOW_TORCH = {"_get_backend": "a process group's backend, below torch.distributed",
               "_functional_collectives": "torch's functional collectives",
               "_c10d_functional": "torch's functional collectives", "c10d": "torch.ops.c10d"}
COLLECTIVES = COLLECTIVE_CALLS     # the op table's: every name a script may call that moves data in a collective
ARRIVED_FACTOR = 2          # right values with under 1/2 of what a rank must receive: not by p2p


def _arrived(g: Grade, world: int, calls: list[Call], called: dict, traced: set[int]) -> None:
    """Right values need the bytes only the other ranks hold: a rank that got them with
    nothing (or far less than that) sent to it by any send the trace saw got them some
    other way — a collective below torch.distributed's functions, which the recorder
    cannot see (docs/exercises.md). A rank without any trace record is unknown, not 0."""
    if not g.exercise.only_p2p or not set(range(world)) <= traced:
        return
    if (seen := g.cells.get((Check.ONLY_P2P, world))) is not None and seen.ok is False:
        return          # a collective the trace saw did the work, and `only p2p` named it
    got: dict[tuple[int, int], float] = {}
    for (case, _), ops in called.items():
        for o in ops:
            if o.op in SENDS and o.peer is not None:
                got[(case, o.peer)] = got.get((case, o.peer), 0.0) + o.nbytes
    nothing: list[Call] = []
    little: list[tuple[Call, float, float]] = []
    for c in sorted(calls, key=lambda c: (c.case, c.rank)):
        need = least_received(g.exercise.name, world, c.rank, c.size, c.itemsize, c.root)
        if not c.ok or not need:
            continue
        mine = got.get((c.case, c.rank), 0.0)
        if mine == 0:
            nothing.append(c)
        elif mine * ARRIVED_FACTOR < need:
            little.append((c, mine, need))
    if not nothing and not little:
        return
    g.cells[(Check.ONLY_P2P, world)] = Cell(False, "FAIL")
    traffic_cell = g.cells.get((Check.TRAFFIC, world))
    if traffic_cell is not None and traffic_cell.ok:
        g.cells[(Check.TRAFFIC, world)] = Cell(False, f"FAIL {traffic_cell.text}")
    if nothing:
        ranks = sorted({c.rank for c in nothing})
        cases = len({c.case for c in nothing})
        head = "values arrived without any send you issued: a collective did the work"
        detail = (f"world size {world}: {_ranks(ranks)} got right values with 0 bytes sent to "
                  f"{'it' if len(ranks) == 1 else 'them'} in {cases} of {len({c.case for c in calls})} "
                  f"cases, e.g. {nothing[0].label}")
    else:
        c, mine, need = little[0]
        head = "values arrived with far fewer bytes than any send/recv schedule needs: a collective did the work"
        detail = (f"world size {world}: {len(little)} right call{'s' if len(little) != 1 else ''}, e.g. rank "
                  f"{c.rank} in {c.label} was "
                  f"sent {human_bytes(mine)} where its values need at least {human_bytes(need)} from the others")
    seen = _below_torch(g.file)
    text = f"{head} ({detail}{'; ' + seen if seen else ''})"
    if not any(f.check is Check.ONLY_P2P and f.text.startswith("values arrived ") for f in g.findings):
        g.findings.append(Finding(Check.ONLY_P2P, world, text + (
            ". The trace records torch.distributed's own functions only: build the exchange from "
            "send/recv/isend/irecv"), text))


def _below_torch(file: Path) -> str:
    """What the learner's source calls that could do the work unseen: `x.py:9 calls
    _get_backend (a process group's backend, ...)`, or a collective by name; "" if none."""
    try:
        tree = ast.parse(file.read_bytes()[:MAX_FILE_BYTES], filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return ""
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom)
                                                     and node.module else [])
            names = [part for n in names for part in n.split(".")]
        for name in names:
            if (name in BELOW_TORCH or name in COLLECTIVES) and name not in found:
                found[name] = getattr(node, "lineno", 0)
    if not found:
        return ""
    said = []
    for name, line in sorted(found.items(), key=lambda x: x[1])[:MAX_NAMED]:
        what = f" ({BELOW_TORCH[name]}, which the trace does not see)" if name in BELOW_TORCH else ""
        said.append(f"{file.name}:{line} calls {name}{what}")
    return "; ".join(said)


def _gradient_traffic(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    """average_gradients: bytes handed to collectives against the gradients' bytes (each
    gradient all-reduced once). p2p bytes are shown, not graded (a hand-made all-reduce
    sends 2(n-1)/n of them, give or take the chunks of very small tensors)."""
    handed = gradients = p2p = 0.0
    worst = 0.0
    for c in calls:
        ops = called.get((c.case, c.rank), [])
        mine = sum(o.nbytes for o in ops if o.op not in P2P_OPS)
        handed += mine
        gradients += c.size * c.itemsize
        p2p += _sends(ops)
        worst = max(worst, mine / max(1, c.size * c.itemsize))
    ratio = handed / gradients if gradients else 0.0
    ok = worst <= 1.0 + 1e-9
    text = f"{ratio:.2f}x" + (f", p2p {human_bytes(p2p)}" if p2p else "")
    g.cells[(Check.TRAFFIC, world)] = Cell(ok, text if ok else f"FAIL {text}")
    if not ok:
        g.findings.append(Finding(Check.TRAFFIC, world, (
            f"traffic at world size {world}: the collectives were handed {worst:.1f}x the gradients' "
            "bytes in one call: is a gradient all-reduced more than once (or the weights too)?")))


def _waits(g: Grade, world: int, calls: list[Call], called: dict) -> None:
    never = []
    for c in sorted(calls, key=lambda c: (c.case, c.rank)):
        for o in called.get((c.case, c.rank), []):
            if o.end is None and o.op in ("isend", "irecv"):
                way = "to" if o.op == "isend" else "from"
                peer = f"rank {o.peer}" if o.peer is not None else "any rank"
                never.append(f"rank {c.rank}'s {o.op} {way} {peer} at {_site(o.caller)} ({c.label})")
    if not never:
        g.cells[(Check.WAITS, world)] = Cell(True, "pass")
        return
    g.cells[(Check.WAITS, world)] = Cell(False, "FAIL")
    g.findings.append(Finding(Check.WAITS, world, (
        f"waits at world size {world}: {len(never)} isend/irecv never waited on, e.g. {'; '.join(never[:2])}: "
        "call wait() on every request before you return (until then the tensor may not have "
        "been sent or received)")))


# ---------------------------------------------------------------- a lab that stopped early

def _stopped(g: Grade, run: RunDir, stop: _Stop, calls: list[Call]) -> None:
    r = stop.record
    world = int(r.get("world", 0))
    where = f"world size {world}, {r.get('label')}" if r.get("label") else f"world size {world}"
    if stop.kind == RECORD_DEADLINE:
        g.cells[(Check.DEADLINE, world)] = Cell(False, "FAIL")
        g.findings.append(Finding(Check.DEADLINE, world, *_deadline_text(g, run, r, calls, where)))
        return
    if stop.kind == RECORD_RAISED:
        g.cells[(Check.VALUES, world)] = Cell(False, "raised")
        said = f"your function raised {r.get('exception')}{_at(r.get('where'))} on rank {stop.rank} ({where})"
        g.findings.append(Finding(Check.VALUES, world, said, said))
        return
    g.cells[(Check.VALUES, world)] = Cell(False, "stopped")
    first = run.record.first_failure
    cause = f"; first failure: {first.describe()}" if first else ""
    said = f"rank {stop.rank} lost its peers ({where}): {r.get('exception')}{cause}"
    g.findings.append(Finding(Check.VALUES, world, said, said))


def _deadline_text(g: Grade, run: RunDir, r: dict, calls: list[Call], where: str) -> tuple[str, str]:
    """(the whole text, its first sentence). Who did not return: the ranks of the world
    without a record of that call (the deadline fired on some; the others then lost them)."""
    world, case = int(r.get("world", 0)), r.get("case")
    returned = sorted({c.rank for c in calls if c.world == world and c.case == case})
    late = [rank for rank in range(world) if rank not in returned]
    seconds = r.get("seconds")
    stuck = _stuck_p2p(run, g.file.name)
    if returned:
        late_said = _ranks(late, "'s call", "' calls")
        head = (f"deadline at {where}: {late_said} did not return within {seconds:g} s"
                f"{_at(r.get('where')) if len(late) == 1 else ''}; {_ranks(returned)} had returned")
    else:
        head = f"deadline at {where}: no rank's call returned within {seconds:g} s"
    short = head + (" (a deadlock: every rank waits in a send)" if _all_send(stuck) else "")
    if stuck:
        head += ". Where they wait (the hang diagnosis): " + "; ".join(stuck)
    elif r.get("where") and not (returned and len(late) == 1):
        head += f" (rank {r.get('rank')}{_at(r.get('where'))})"
    hint = _deadline_hint(stuck)
    return head + (f". {hint}" if hint else ""), short


def _ranks(ranks: list[int], one: str = "", many: str = "") -> str:
    """'rank 2' + one, or 'ranks 0, 1, 3' + many."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}{one}"
    return f"ranks {', '.join(map(str, ranks))}{many}"


def _stuck_p2p(run: RunDir, file_name: str) -> list[str]:
    """The hang diagnosis's unfinished p2p ops in the learner's file, its paths shortened."""
    first = run.record.first_failure
    diagnosis = first.collective if first else None
    found = []
    for line in diagnosis.p2p if diagnosis is not None else []:
        short = re.sub(r"at (?:\S*/)?([^/\s]+\.py:\d+)", r"at \1", str(line))
        if f"at {file_name}:" in short:
            found.append(short)
    return sorted(found, key=lambda line: int(m.group(1)) if (m := re.match(r"rank (\d+)", line)) else -1)


def _all_send(stuck: list[str]) -> bool:
    return bool(stuck) and all("never finished send " in s for s in stuck)


def _deadline_hint(stuck: list[str]) -> str:
    if _all_send(stuck):
        return ("Every rank waits in a blocking send: dist.send returns only once its receiver has "
                "called recv (gloo), so when every rank sends first, every rank waits. Post the "
                "send with dist.isend, then recv, then wait() on the send (or let even ranks send "
                "first and odd ranks receive first)")
    if stuck and any("never finished recv " in s for s in stuck):
        return ("A rank waits in recv for a message no rank sends: check that every recv has its send "
                "(same peer, same order)")
    return ""


def _at(where: Any) -> str:
    if not isinstance(where, dict) or not where.get("file"):
        return ""
    source = f" ({where['source']})" if where.get("source") else ""
    return f" at {where['file']}:{where.get('line')}{source}"


def _load_text(r: dict, ex: Exercise) -> str:
    if r.get("missing"):
        return f"{r.get('file')}: no function {r['missing']}() ({ex.name} needs {ex.signature})"
    return f"{r.get('file')} raised {r.get('exception')} while it was imported{_at(r.get('where'))}"


def _lab_failure(run: RunDir) -> str:
    rec = run.record
    why = rec.first_failure.describe() if rec.first_failure else (rec.message or rec.state.value)
    return f"the lab {rec.state.value} before any call returned: {why}; logs in {run.path}"


def _time_text(r: dict) -> str:
    ms, ref = float(r.get("ms", 0)), float(r.get("reference_ms", 0))
    ratio = f", {ms / ref:.2f}x" if ref > 0 else ""
    return f"{ms:.1f} ms ({r.get('reference')} {ref:.1f} ms{ratio}; {human_bytes(r.get('bytes', 0))})"


# ---------------------------------------------------------------- what `check` prints

def text(grades: Iterable[Grade], run: RunDir) -> str:
    out = []
    for g in grades:
        heads = ["check"] + [f"world {w}" for w in g.worlds]
        rows = []
        for check in Check:
            cells = [g.cells.get((check, w)) for w in g.worlds]
            if all(c is None or c.text in ("", "—") for c in cells):
                continue
            rows.append([check.value] + [c.text if c else "" for c in cells])
        said = ("passed" if g.passed else f"interrupted ({g.interrupted})" if g.interrupted
                else "FAILED: " + ", ".join(g.failed_checks()))
        out += [f"## {g.exercise.name} ({g.file.name}): {said}", ""]
        if rows:
            out += [table(heads, rows), ""]
        out += [f"- {f.text}" for f in g.findings]
        if g.findings:
            out.append("")
        out += [f"Cases: {describe_cases(g.exercise.name)}.", ""]
    out.append(f"Run folder: {run.path} (trace.json: every call's sends and receives, for Perfetto)")
    return "\n".join(out)

