"""The words of `labctl exercise check` (docs/exercises.md, "What check prints"): the
table of each grade, and the sentences for a lab that stopped early — a deadline (who
waits in which send for whom, from the hang diagnosis), a raise, a file that would not
load, the lab's timeout with the threads left running. Each is a string from the run's
records; which cell fails is labctl/exercise_grade.py's to decide.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from workloads._protocol.exercises import RECORD_DONE, RECORD_THREADS, Call, Exercise, describe_cases

from .exercise_checks import Check, Grade, at, ranks_text
from .rundir import RunDir
from .tables import human_bytes, table


# ---------------------------------------------------------------- a lab that stopped early

def deadline_text(g: Grade, run: RunDir, r: dict, calls: list[Call], where: str) -> tuple[str, str]:
    """(the whole text, its first sentence). Who did not return: the ranks of the world
    without a record of that call (the deadline fired on some; the others then lost them)."""
    world, case = int(r.get("world", 0)), r.get("case")
    returned = sorted({c.rank for c in calls if c.world == world and c.case == case})
    late = [rank for rank in range(world) if rank not in returned]
    seconds = r.get("seconds")
    stuck = stuck_p2p(run, g.file.name)
    if returned:
        late_said = ranks_text(late, "'s call", "' calls")
        head = (f"deadline at {where}: {late_said} did not return within {seconds:g} s"
                f"{at(r.get('where')) if len(late) == 1 else ''}; {ranks_text(returned)} had returned")
    else:
        head = f"deadline at {where}: no rank's call returned within {seconds:g} s"
    short = head + (" (a deadlock: every rank waits in a send)" if _all_send(stuck) else "")
    if stuck:
        head += ". Where they wait (the hang diagnosis): " + "; ".join(stuck)
    elif r.get("where") and not (returned and len(late) == 1):
        head += f" (rank {r.get('rank')}{at(r.get('where'))})"
    hint = _deadline_hint(stuck)
    return head + (f". {hint}" if hint else ""), short


def stuck_p2p(run: RunDir, file_name: str) -> list[str]:
    """The hang diagnosis's unfinished p2p ops in the learner's file, its paths shortened,
    and the world's group said as the default group (the grader makes a new one per world
    size: the trace names them default_pg@2, @3 ...; to the learner each is the default)."""
    first = run.record.first_failure
    diagnosis = first.collective if first else None
    found = []
    for line in diagnosis.p2p if diagnosis is not None else []:
        short = re.sub(r"at (?:\S*/)?([^/\s]+\.py:\d+)", r"at \1", str(line))
        short = re.sub(r"\bdefault_pg@\d+\b", "default_pg", short)
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


def raised_hint(exception: str, ex: Exercise) -> str:
    """What a raise in the learner's function most often means, or ""."""
    if exception.startswith("NotImplementedError"):
        return (f"That is the starter's placeholder: write your {ex.signature} in its place (the file's "
                "docstring holds the contract and the hints)")
    if "has to be contiguous" in exception or "must be contiguous" in exception:   # gloo's, torch's words
        return ("send/recv need contiguous tensors: a slice across columns (out[:, a:b]) is a strided view; "
                "receive into a contiguous buffer, then copy_ it into place")
    return ""


def timeout_text(run: RunDir, records: list[dict]) -> tuple[str, str]:
    """(the whole text, its short form) for a lab its timeout ended: the ranks that had
    made every call and still did not end, and the threads they left running."""
    rec = run.record
    world = rec.world_size or 0
    done = {int(r.get("rank", -1)) for r in records if r.get("name") == RECORD_DONE}
    threads = sorted((r for r in records if r.get("name") == RECORD_THREADS), key=lambda r: int(r.get("rank", 0)))
    timeout = f"the lab's timeout ({_seconds(run)})"
    if world and done >= set(range(world)):
        short = f"{timeout} came after every call had returned: {ranks_text(sorted(done))} did not end"
        if not threads:
            return short + " (is something your file started still running?)", short
        first = threads[0]
        count = sum(int(r.get("count", 0)) for r in threads)
        target = f", target {first['target']}" if first.get("target") else ""
        names = ", ".join(first.get("names") or [])
        text = (f"{short}: your function left {count} thread{'s' if count != 1 else ''} running on "
                f"{ranks_text([int(r.get('rank', -1)) for r in threads])} (rank {first.get('rank')}: {names}"
                f"{target}; the first left by world size {first.get('world')}, {first.get('label')}). A process "
                "does not end while a thread that is not a daemon runs: join every thread you start before "
                "you return (or start it with daemon=True)")
        return text, short + f" ({count} thread{'s' if count != 1 else ''} your function started still ran)"
    running = [r for r in range(world) if r not in done]
    short = f"{timeout} came while {ranks_text(running)} had calls left"
    return short + ": give the lab more time (--timeout), or look at the stacks in the run folder", short


def _seconds(run: RunDir) -> str:
    try:
        return f"{run.spec.timeout:g} s, --timeout"
    except Exception:       # noqa: BLE001 - a damaged spec.yaml: the record's words
        return run.record.message or "--timeout"


def load_text(r: dict, ex: Exercise) -> str:
    if r.get("missing"):
        return f"{r.get('file')}: no function {r['missing']}() ({ex.name} needs {ex.signature})"
    return f"{r.get('file')} raised {r.get('exception')} while it was imported{at(r.get('where'))}"


def lab_failure(run: RunDir) -> str:
    rec = run.record
    why = rec.first_failure.describe() if rec.first_failure else (rec.message or rec.state.value)
    return f"the lab {rec.state.value} before any call returned: {why}; logs in {run.path}"


def time_text(r: dict) -> str:
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


def stopped_where(r: dict[str, Any]) -> str:
    """'world size 4, int64 arange, 1 element' from a stop record."""
    world = int(r.get("world", 0))
    return f"world size {world}, {r.get('label')}" if r.get("label") else f"world size {world}"
