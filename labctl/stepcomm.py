"""One step's communication, read from trace.json: which group, which op, how many bytes,
between which ranks, in the order the ranks issued them, and the process groups as a grid.

A workload marks a step (the parallelism patterns: each variant's last step,
workloads/_patterns.py `bytes_check`) with two fields of a result record: `step_window_us`,
[begin, end] in µs on the rank's wall clock, and `groups`, {the trace's name of a group:
its ranks} (trace.json names each op's group, never its ranks). The ops of each rank inside
its own window are that step's; the rank's clock offset and the trace's t0 (trace.json's
metadata) put the window on the trace's time. A collective is one row (every rank's slice
of it: the same group, the same ranks, the same number); a send is one row, from its rank
to its peer (its receive is the same message). The report and the page draw the rows as
the same views as a workload's (a table each; the groups a `Grid` on the page).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from workloads._protocol.plugin import MD, Grid, Table, Text

from .rundir import TRACE_FILE

MAX_ROWS = 200                      # rows of one step's table; the rest are counted
MAX_TAIL = 8 << 20                  # bytes read from trace.json's end for its metadata
MAX_WHOLE = 64 << 20                # a trace.json not written a line an event is read whole up to this
SENDS = frozenset(("send", "isend"))
RECVS = frozenset(("recv", "irecv", "recv_any_source"))


@dataclass(frozen=True)
class Window:
    """One rank's step of one variant, on the trace's time (µs since its t0)."""
    workload: str
    variant: str
    rank: int
    begin: float
    end: float
    groups: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class Comm:
    """One message or collective of the step: `ranks` the group's members (a send: the
    sender and its peer), `between` how the table says who took part."""
    at_ms: float
    group: str
    members: tuple[int, ...]
    op: str
    nbytes: int | None
    between: str
    seq: Any = None


def windows(results: list[dict], t0_us: float, offsets_ms: dict[str, float]) -> list[Window]:
    """Each record's step window, moved onto the trace's clock."""
    out = []
    for r in results:
        win, rank = r.get("step_window_us"), r.get("rank")
        if not (isinstance(win, list) and len(win) == 2 and all(isinstance(x, (int, float)) for x in win)
                and isinstance(rank, int) and isinstance(r.get("name"), str)):
            continue
        shift = float(offsets_ms.get(str(rank), 0.0) or 0.0) * 1000 - t0_us
        groups = {str(k): tuple(int(x) for x in v) for k, v in (r.get("groups") or {}).items()
                  if isinstance(v, list) and all(isinstance(x, int) for x in v)}
        variant = r["name"].rsplit("-bytes-per-step", 1)[0]
        out.append(Window(str(r.get("workload")), variant, rank, win[0] + shift, win[1] + shift, groups))
    return out


def _metadata(path: Path) -> dict:
    """trace.json's metadata (labctl's merge writes it last, on one line)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        f.seek(max(0, size - MAX_TAIL))
        tail = f.read()
    at = tail.rfind(b'"metadata":')
    if at < 0:
        return {}
    text = tail[at + len(b'"metadata":'):].rstrip().rstrip(b"}").rstrip()
    try:
        value = json.loads(text + b"}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _events(path: Path) -> Iterator[dict]:
    """The complete (`X`) events, a line at a time; a file in one line is read whole."""
    with path.open("rb") as f:
        first = f.readline()
        if first.strip() not in (b'{"traceEvents":[', b'{"traceEvents": ['):
            if path.stat().st_size > MAX_WHOLE:
                return
            value = json.loads(first + f.read())
            yield from (e for e in value.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X")
            return
        for line in f:
            if b'"X"' not in line[:64]:
                continue
            try:
                event = json.loads(line.rstrip().rstrip(b","))
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("ph") == "X":
                yield event


def step_comms(path: Path, results: list[dict]) -> dict[tuple[str, str], list[Comm]]:
    """(workload, variant) -> its step's communication, in order."""
    meta = _metadata(path)
    t0 = meta.get("t0_unix_ns")
    if not isinstance(t0, (int, float)):
        return {}
    found = windows(results, t0 / 1000, meta.get("clock_offsets_ms_by_rank") or {})
    if not found:
        return {}
    by_rank: dict[int, list[Window]] = {}
    for w in found:
        by_rank.setdefault(w.rank, []).append(w)
    rows: dict[tuple[str, str], dict[tuple, Comm]] = {}
    starts: dict[tuple[str, str], float] = {}
    for e in _events(path):
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        rank, ts, name = args.get("rank"), e.get("ts"), str(e.get("name"))
        if not isinstance(ts, (int, float)) or name in RECVS:
            continue
        for w in by_rank.get(rank, ()):
            if not w.begin <= ts <= w.end:
                continue
            key = (w.workload, w.variant)
            starts[key] = min(starts.get(key, ts), w.begin)
            pg = str(args.get("pg") or "?")
            members = w.groups.get(pg, ())
            if name in SENDS:
                peer = args.get("peer")
                ident: tuple = (pg, name, rank, peer, args.get("p2p_seq"), ts)
                comm = Comm(ts, pg, members, name, args.get("bytes"), f"{rank} → {peer}")
            else:
                ident = (pg, members, args.get("seq"), name)
                comm = Comm(ts, pg, members, name, args.get("bytes"),
                            ", ".join(map(str, members)) if members else f"{rank} …", args.get("seq"))
            have = rows.setdefault(key, {}).get(ident)
            if have is None or ts < have.at_ms:
                rows[key][ident] = comm
    out = {}
    for key, comms in rows.items():
        ordered = sorted(comms.values(), key=lambda c: c.at_ms)
        out[key] = [Comm(round((c.at_ms - starts[key]) / 1000, 3), c.group, c.members, c.op, c.nbytes, c.between,
                         c.seq) for c in ordered]
    return out


def columns_of(world: list[int], groups: dict[str, set[tuple[int, ...]]]) -> int:
    """How many ranks a row of the grid holds: the size of a group that splits the world into
    equal runs of consecutive ranks (a mesh's inner dimension: tp), else the whole world."""
    n = len(world)
    for members in sorted((g for gs in groups.values() for g in gs), key=len):
        k = len(members)
        if 1 < k < n and n % k == 0 and list(members) == list(range(members[0], members[0] + k)):
            return k
    return max(n, 1)


def views(run_path: str | Path, results: list[dict]) -> dict[str, list]:
    """Each workload's views of its step's communication: the groups (a grid on the page,
    a table in report.md), then a table per variant."""
    path = Path(run_path) / TRACE_FILE
    if not path.is_file():
        return {}
    found = step_comms(path, results)
    out: dict[str, list] = {}
    for workload in dict.fromkeys(w for w, _ in found):
        groups: dict[str, set[tuple[int, ...]]] = {}
        world: set[int] = set()
        for r in results:
            if r.get("workload") == workload and isinstance(r.get("groups"), dict):
                world.add(r.get("rank"))
                for name, members in r["groups"].items():
                    if isinstance(members, list):
                        groups.setdefault(name, set()).add(tuple(members))
        ranks = sorted(x for x in world if isinstance(x, int))
        cols = columns_of(ranks, groups)
        layers = [{"name": name, "groups": [list(g) for g in sorted(gs)]} for name, gs in groups.items()]
        views_: list = [
            Text("One step's communication, from trace.json: the ops each rank issued between the step's "
                 "markers (each variant's last step), in order; a collective once (its group, its ranks), a "
                 "send from its rank to its peer (its receive is the same message); bytes: the op's buffer as "
                 "traced.", id=f"{workload}-step-about"),
            Grid(f"{workload}-groups", f"{workload}: the process groups", ranks, cols, layers,
                 f"{len(ranks)} ranks, {cols} a row; each group of a name one colour."),
            Table(f"{workload}: the process groups", ("group", "ranks"),
                  [[name, "; ".join(", ".join(map(str, g)) for g in sorted(gs))] for name, gs in groups.items()],
                  id=f"{workload}-groups-table", show=MD, level=3)]
        for (w, variant), comms in found.items():
            if w != workload:
                continue
            rows = [[i + 1, f"{c.at_ms:.3f}", c.group, c.op, _bytes(c.nbytes), c.between]
                    for i, c in enumerate(comms[:MAX_ROWS])]
            more = f" ({len(comms) - MAX_ROWS} more not shown)" if len(comms) > MAX_ROWS else ""
            views_.append(Table(f"{variant}: one step's communication", ("#", "ms into the step", "group", "op",
                                "bytes", "ranks"), rows, f"{len(comms)} ops{more}.",
                                id=f"{workload}-step-{variant}", level=3))
        out[workload] = views_
    return out


def _bytes(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else ""
