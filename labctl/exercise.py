"""`labctl exercise`: write a collective (or a parallelism pattern's exchange) yourself,
and have the lab grade it on real ranks (docs/exercises.md). This module is the command's
face: the catalogue, the learner's file checked before any lab, the lab that runs it, and
how `check` ends.

`starter` writes the file to fill in (the function, its contract, hints: never an answer;
the reference solutions live in tests/exercises/). `check` runs the learner's file on
the lab the flags describe (any backend), under the exercise runner that every rank
runs (workloads/_exercise.py) with tracing on; labctl/exercise_grade.py grades the run
folder (the checks: labctl/exercise_checks.py; the words: labctl/exercise_text.py), and
the run's verdict judges the grade (labctl/verdict.py `judge`): status.json, the last
line and the exit code agree.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from workloads._protocol.exercises import DEFAULT_DEADLINE_S, DEFAULT_SEED, ENV, EXERCISES, WORKLOAD, Config, Exercise

from . import backends, verdict
from .backends.base import BackendOptions
from .errors import Interrupted
from .exercise_checks import MAX_FILE_BYTES, Check, Grade
from .exercise_grade import Entry, grade
from .exercise_text import text
from .outcome import INTERRUPT_EXIT, RunState, signal_name
from .runrecord import FailedCheck
from .rundir import RunDir
from .spec import LabSpec, SpecError
from .tables import table

__all__ = ["Answer", "Check", "Entry", "Grade", "Settings", "answer", "check", "entry", "find", "grade",
           "held_signals", "lab_spec", "list_text", "settings", "starter", "text", "MAX_FILE_BYTES"]

DEFAULT_TIMEOUT_S = 300.0           # the whole lab, unless the flags or the lab file say otherwise


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
    KeyboardInterrupt that would say something status.json does not (labctl/signals.py)."""
    from .signals import signals_raise

    return signals_raise()


def check(spec: LabSpec, entries: list[Entry], progress: Callable[[str], None] = print,
          runs_root: str = "runs", options: BackendOptions | None = None,
          signals: Any = None) -> tuple[RunDir, list[Grade]]:
    """Run `lab_spec`'s lab to its end, grade it, and have the run's verdict judge the
    grade (labctl/verdict.py `judge`): status.json then says what `answer` says. The run
    folder and each entry's grade. `signals`: a regime from `held_signals()`."""
    from . import lab
    from .signals import signals_raise

    with signals_raise(signals) as held:
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


def _verdict_grade(grades: list[Grade], notes: tuple[str, ...] = ()) -> verdict.Grade:
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


def answer(run: RunDir, grades: list[Grade]) -> Answer:
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
