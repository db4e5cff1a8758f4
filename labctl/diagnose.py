"""`labctl diagnose PATH` (issue 50): who is to blame, the call and its line, from torch's own
Flight Recorder dumps of a job that never ran in the lab (labctl/trace/frdump.py reads
them, labctl/trace/frdiag.py runs the lab's matcher on them), or from a lab run folder:
the run's own diagnosis, recomputed as its finish made it, and its torch dumps if it
holds any. Read only: nothing in the folder is written."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from workloads._protocol import Env

from .errors import LabError, Refused
from .rundir import RECORDS_SUBDIR, STATUS_FILE, TRACE_FILE
from .trace.frdiag import Reading, read
from .trace.frdump import BadDump, load

DUMP_FOLDERS = ("fr",)              # where a run folder's torch dumps are (LAB_FR_DUMP_DIR=<run>/fr)


def dumps_reading(path: str | Path) -> Reading:
    """The dumps at `path` read and matched; Refused (one line, exit 2) for what is none."""
    try:
        return read(load(path))
    except BadDump as exc:
        raise Refused(str(exc)) from None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def dumps_text(path: str | Path, r: Reading) -> str:
    """Who, what, where, the group and the sentence, as the lab's report says them."""
    d = r.diagnosis
    kinds = sorted({x.kind for x in r.dumps})
    frames = any(x.has_frames for x in r.dumps)
    backends = sorted({x.backend for x in r.dumps if x.entries})
    lines = [f"torch Flight Recorder dumps in {path}: rank {_ranks([x.rank for x in r.dumps])} "
             f"({'/'.join(backends) or 'no entries'}, version {r.dumps[0].version}, "
             f"{'/'.join(kinds)}, {'with' if frames else 'no'} stack traces; "
             f"{sum(len(x.entries) for x in r.dumps)} entries)"]
    if r.no_dump:
        lines.append(f"no dump from rank {_ranks(r.no_dump)}")
    if d is None:
        lines.append("nothing stuck: no collective that some rank never entered, no calls that differ")
        return "\n".join(lines) + "\n"
    who = f"rank {d.rank}" if d.rank is not None else \
        f"ranks {_ranks(d.ranks)} (no one rank: each of them)" if d.ranks else "not known"
    line = r.line or ("not in the dumps (dumped without stack traces)" if not frames else "not known")
    if r.line and d.caller in (None, "?"):
        line += f" (where it is instead: {r.instead.label}, #{r.instead.seq} of {r.instead.pg})" \
            if r.instead is not None and r.line == r.instead.caller else \
            " (where the others wait: the call it never made)"
    lines += [f"culprit: {who}", f"op: {d.op or 'not known'}", f"line: {line}"]
    if r.stuck is not None:
        lines.append(f"group: {r.stuck.pg}, collective #{r.stuck.seq}")
    lines.append(f"why: {d.text}")
    return "\n".join(lines) + "\n"


def dumps_json(path: str | Path, r: Reading) -> dict[str, Any]:
    d = r.diagnosis
    return {"path": str(path), "ranks": [x.rank for x in r.dumps], "no_dump": r.no_dump,
            "kind": sorted({x.kind for x in r.dumps}), "backend": sorted({x.backend for x in r.dumps}),
            "stack_traces": any(x.has_frames for x in r.dumps),
            "rank": d.rank if d else None, "culprits": (d.ranks or ([d.rank] if d.rank is not None else []))
            if d else [], "op": d.op if d else None, "line": r.line,
            "group": r.stuck.pg if r.stuck else None, "seq": r.stuck.seq if r.stuck else None,
            "text": d.text if d else "", "diagnosis": d.to_dict() if d else None}


def run_dumps(run: Path) -> Path | None:
    """The torch dumps a run folder holds: the folder its LAB_FR_DUMP_DIR named, where that
    is inside the run folder, else <run>/fr."""
    try:
        from .rundir import RunDir
        named = RunDir.open(run).spec.env.get(Env.FR_DUMP_DIR)
    except Exception:               # noqa: BLE001 - a damaged spec: the usual place only
        named = None
    places = ([Path(named)] if named else []) + [run / name for name in DUMP_FOLDERS]
    for place in places:
        try:
            inside = place.resolve().is_relative_to(run.resolve())
        except OSError:
            continue
        if inside and place.is_dir() and any(p.is_file() and not p.name.startswith(".") for p in place.iterdir()):
            return place
    return None


def run_text(run: Path) -> str:
    """A run folder: how it ended and its own diagnosis, recomputed from the folder as its
    finish made it (the trace merged into a scratch file, else the Flight Recorder records
    the ranks dumped), then its torch dumps', if any."""
    from . import trace
    from .commands import open_run

    try:
        r, note = open_run(str(run))
    except ValueError as exc:               # a status.json that is no run record
        raise Refused(f"{run}: {exc}") from None
    rec = r.record
    lines = [f"run {rec.run_id}: {rec.state.value}{': ' + rec.message if rec.message else ''}"]
    if note:
        lines.append(f"note: {note}")
    first = rec.first_failure
    if first is not None and (first.rank is not None or first.ranks):
        who = f"rank {first.rank}" if first.rank is not None else f"ranks {_ranks(first.ranks or [])}"
        lines.append(f"first failure (status.json): {who}" + (f", {first.op}" if first.op else "")
                     + (f" at {first.caller}" if first.caller else ""))
    made = None
    try:
        traced = r.spec.trace
    except (OSError, ValueError, LabError):     # no spec.yaml (a copied folder): its records tell
        traced = (r.path / RECORDS_SUBDIR).is_dir() or r.ranks_dir.is_dir()
    if not rec.ok:
        with tempfile.TemporaryDirectory(prefix="labctl-diagnose-") as scratch:
            if traced:
                summary = trace.merge(r.path, world=rec.world_size, hostnames=r.hostnames,
                                      out=Path(scratch) / TRACE_FILE)
                made = trace.diagnosis(summary)
            made = made or trace.flight_recorder(r.path, rec.world_size)
    if made is not None:
        who = f"rank {made.rank}" if made.rank is not None else f"ranks {_ranks(made.ranks)}" if made.ranks \
            else "not known"
        lines += [f"the lab's diagnosis: culprit {who}, op {made.op or '?'}, line {made.caller or '?'}",
                  f"why: {made.text}"]
    elif not rec.ok:
        lines.append("the lab's diagnosis: no stuck or mismatched collective in its records")
    dumps = run_dumps(r.path)
    text = "\n".join(lines) + "\n"
    if dumps is not None:
        text += "\n" + dumps_text(dumps, dumps_reading(dumps))
    return text


def diagnose(path: str, fmt: str = "text") -> str:
    """What `labctl diagnose PATH` prints: a run folder's (status.json) or the dumps'."""
    p = Path(path)
    if (p / STATUS_FILE).is_file():
        if fmt == "json":
            dumps = run_dumps(p)
            if dumps is None:
                raise Refused(f"{p}: a run folder without torch Flight Recorder dumps (--format json says "
                              "what dumps show; `labctl diagnose` alone prints the run's own diagnosis)")
            return json.dumps(dumps_json(dumps, dumps_reading(dumps)), indent=1) + "\n"
        return run_text(p)
    reading = dumps_reading(p)
    return json.dumps(dumps_json(p, reading), indent=1) + "\n" if fmt == "json" else dumps_text(p, reading)
