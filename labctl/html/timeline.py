"""trace.json read by Chrome trace event semantics into the page's compact timeline.

Not tied to labctl's own merge layout (labctl/trace.py), so a reworked trace still
draws: `X` complete slices, `B`/`E` pairs per thread, async `b`/`e` (and legacy
`S`/`F`) on a track of their own beside the rank's, `n`/`i`/`I` instants, `s`/`t`/`f`
flows, `M` names of processes (nodes) and threads (ranks); `ts`/`dur` in µs. A lane
is one (pid, tid) thread, or one async track; its rank is the events' `args.rank`,
else a thread named "rank N", else the tid.

Streamed when the file holds one event per line (labctl's merge writes it so): a cut
short file still gives every whole event before the cut, and says where it was cut.
A file in one line is parsed whole when it is smaller than WHOLE_FILE_LIMIT.

The page gets columns, not objects (about 60 bytes a slice): MAX_SLICES slices at
full detail; past that, slices are counted per lane and op exactly and drawn as
AGG_BINS bins per lane (busy time and the op that filled most of each bin).
"""
from __future__ import annotations

import json
import math
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..trace import STRAGGLERS
from workloads._protocol.ops import CALLS

MAX_SLICES = 300_000
AGG_BINS = 2_000
WHOLE_FILE_LIMIT = 256 << 20
MAX_LINE = 1 << 20
MAX_INSTANTS = 10_000
MAX_FLOWS = 50_000
# A time past these is damage, not a trace: µs since the epoch are about 1.8e15, a run
# lasts hours. `ts: 1e308` drew the whole timeline as NaN (1e308 - 0 overflows the page's
# pixel arithmetic); such an event is skipped and counted.
MAX_TS_US = 1e17                  # about 3,000 years after the epoch
MAX_DUR_US = 1e15                 # about 31 years
# args that have their own column; the rest of an event's args go to `extra` as JSON
_COLUMNS = frozenset(("rank", "pg", "seq", "p2p_seq", "bytes", "dtype", "shape", "caller", "peer", "root",
                      "unfinished"))
_RANK_NAME = re.compile(r"rank\s*(\d+)")
_NODE_NAME = re.compile(r"node\s*(\d+)")


@dataclass
class _Lane:
    key: tuple
    pid: Any
    tid: Any
    track: str                       # "" for the thread itself, "async" for its async events
    rank: int | None = None


@dataclass
class Timeline:
    """What the page's timeline section holds (see `to_dict`)."""
    lanes: list[_Lane] = field(default_factory=list)
    lane_of: dict[tuple, int] = field(default_factory=dict)
    process_names: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple, str] = field(default_factory=dict)
    strings: list[str] = field(default_factory=list)
    string_ids: dict[str, int] = field(default_factory=dict)
    tensor_ids: dict[tuple, int] = field(default_factory=dict)
    cols: dict[str, list] = field(default_factory=lambda: {k: [] for k in (
        "lane", "name", "ts", "dur", "cat", "seq", "p2p", "bytes", "peer", "root", "shape",
        "caller", "unfinished", "extra")})
    counts: dict[tuple[int, str], int] = field(default_factory=dict)
    beyond: tuple = field(default_factory=lambda: (array("i"), array("i"), array("d"), array("d")))
    instants: list[list] = field(default_factory=list)
    flows: list[list] = field(default_factory=list)
    flow_starts: dict[Any, list] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    events: int = 0
    metadata: dict = field(default_factory=dict)
    open_b: dict[tuple, list] = field(default_factory=dict)
    open_async: dict[tuple, list] = field(default_factory=dict)
    dropped_instants: int = 0
    dropped_flows: int = 0
    bad_times: int = 0                # events whose ts or dur is not finite or absurd: skipped
    bad_example: str = ""

    # ---- building ----------------------------------------------------------
    def sid(self, text: Any) -> int:
        """Index of `text` in the shared string table (-1 for None)."""
        if text is None:
            return -1
        text = text if isinstance(text, str) else json.dumps(text, separators=(",", ":"))
        i = self.string_ids.get(text)
        if i is None:
            i = self.string_ids[text] = len(self.strings)
            self.strings.append(text)
        return i

    def lane(self, pid: Any, tid: Any, track: str = "") -> int:
        key = (_hashable(pid), _hashable(tid), track)
        i = self.lane_of.get(key)
        if i is None:
            i = self.lane_of[key] = len(self.lanes)
            self.lanes.append(_Lane(key, pid, tid, track))
        return i

    def add_slice(self, lane: int, name: str, ts: float, dur: float, cat: Any, args: Any,
                  unfinished: bool = False) -> None:
        args = args if isinstance(args, dict) else {}
        info = self.lanes[lane]
        if info.rank is None and isinstance(args.get("rank"), int):
            info.rank = args["rank"]
        unfinished = unfinished or bool(args.get("unfinished"))
        self.counts[(lane, name)] = self.counts.get((lane, name), 0) + 1
        if len(self.cols["ts"]) >= MAX_SLICES:
            ids, names, starts, durs = self.beyond
            ids.append(lane)
            names.append(self.sid(name))
            starts.append(ts)
            durs.append(max(dur, 0.0))
            return
        c = self.cols
        c["lane"].append(lane)
        c["name"].append(self.sid(name))
        c["ts"].append(ts)
        c["dur"].append(max(dur, 0.0))
        c["cat"].append(self.sid(cat if isinstance(cat, str) else args.get("pg")))
        c["seq"].append(_int(args.get("seq")))
        c["p2p"].append(_int(args.get("p2p_seq")))
        c["bytes"].append(_int(args.get("bytes")))
        c["peer"].append(_int(args.get("peer")))
        c["root"].append(_int(args.get("root")))
        c["shape"].append(self.tensor_id(args.get("dtype"), args.get("shape")))
        c["caller"].append(self.sid(args.get("caller")))
        c["unfinished"].append(1 if unfinished else 0)
        if _COLUMNS.issuperset(args):
            c["extra"].append(-1)
        else:
            rest = {k: v for k, v in args.items() if k not in _COLUMNS}
            c["extra"].append(self.sid(json.dumps(rest, sort_keys=True, default=str)))

    def tensor_id(self, dtype: Any, shape: Any) -> int:
        """"float32[1000]" as a string id, cached by (dtype, shape): most ops repeat one."""
        if shape is None and dtype is None:
            return -1
        key = (dtype if isinstance(dtype, str) else repr(dtype),
               tuple(shape) if isinstance(shape, list) and all(isinstance(x, int) for x in shape) else repr(shape))
        found = self.tensor_ids.get(key)
        if found is None:
            text = f"{dtype or ''}{json.dumps(shape, separators=(',', ':')) if shape is not None else ''}"
            found = self.tensor_ids[key] = self.sid(text)
        return found

    def event(self, ev: Any) -> None:
        if not isinstance(ev, dict):
            return
        self.events += 1
        ph = ev.get("ph")
        pid, tid = ev.get("pid", 0), ev.get("tid", 0)
        name = str(ev.get("name", "?"))
        ts = _num(ev.get("ts"))
        if ph != "M" and not (_sane(ev.get("ts"), MAX_TS_US) and _sane(ev.get("dur"), MAX_DUR_US)):
            self.bad_times += 1
            self.bad_example = self.bad_example or f"{name} with ts {ev.get('ts')!r:.30}, dur {ev.get('dur')!r:.30}"
            return
        if ph == "M":
            args = ev.get("args") or {}
            if name == "process_name":
                self.process_names[_hashable(pid)] = str(args.get("name", pid))
            elif name == "thread_name":
                self.thread_names[(_hashable(pid), _hashable(tid))] = str(args.get("name", tid))
            return
        if ts is None:
            return
        if ph == "X":
            self.add_slice(self.lane(pid, tid), name, ts, _num(ev.get("dur")) or 0.0, ev.get("cat"),
                           ev.get("args"))
        elif ph == "B":
            self.open_b.setdefault((_hashable(pid), _hashable(tid)), []).append(ev)
        elif ph == "E":
            stack = self.open_b.get((_hashable(pid), _hashable(tid)))
            if stack:
                begin = stack.pop()
                args = {**(begin.get("args") or {}), **(ev.get("args") or {})}
                self.add_slice(self.lane(pid, tid), str(begin.get("name", name)), _num(begin["ts"]),
                               ts - _num(begin["ts"]), begin.get("cat"), args)
        elif ph in ("b", "S"):
            key = (ev.get("cat"), _hashable(ev.get("id", ev.get("id2"))), _hashable(pid), name)
            self.open_async.setdefault(key, []).append(ev)
        elif ph in ("e", "F"):
            key = (ev.get("cat"), _hashable(ev.get("id", ev.get("id2"))), _hashable(pid), name)
            stack = self.open_async.get(key)
            if stack:
                begin = stack.pop()
                args = {**(begin.get("args") or {}), **(ev.get("args") or {})}
                self.add_slice(self.lane(begin.get("pid", 0), begin.get("tid", 0), "async"), name,
                               _num(begin["ts"]), ts - _num(begin["ts"]), begin.get("cat"), args)
        elif ph in ("n", "i", "I", "R"):
            if len(self.instants) < MAX_INSTANTS:
                track = "async" if ph == "n" else ""
                self.instants.append([self.lane(pid, tid, track), ts, self.sid(name)])
            else:
                self.dropped_instants += 1
        elif ph in ("s", "t", "f"):
            ident = (ev.get("cat"), _hashable(ev.get("id", ev.get("bind_id"))))
            if ph == "s":
                self.flow_starts[ident] = [self.lane(pid, tid), ts]
            else:
                start = self.flow_starts.pop(ident, None) if ph == "f" else self.flow_starts.get(ident)
                if start is None:
                    return
                if len(self.flows) < MAX_FLOWS:
                    self.flows.append([start[0], start[1], self.lane(pid, tid), ts])
                else:
                    self.dropped_flows += 1

    def finish(self) -> None:
        """Begun and never ended (B without E, b without e): unfinished, up to the trace's end."""
        if self.bad_times:
            self.problems.append(f"trace.json: {self.bad_times} event(s) with a time that is not finite or "
                                 f"past {MAX_TS_US:.0e} µs skipped (e.g. {self.bad_example})")
        end = self.end_ts()
        for (pid, tid), stack in self.open_b.items():
            for begin in stack:
                self.add_slice(self.lane(pid, tid), str(begin.get("name", "?")), _num(begin["ts"]),
                               max(0.0, end - _num(begin["ts"])), begin.get("cat"), begin.get("args"), True)
        for key, stack in self.open_async.items():
            for begin in stack:
                self.add_slice(self.lane(begin.get("pid", 0), begin.get("tid", 0), "async"),
                               str(begin.get("name", "?")), _num(begin["ts"]), max(0.0, end - _num(begin["ts"])),
                               begin.get("cat"), begin.get("args"), True)
        self.open_b, self.open_async = {}, {}
        for lane in self.lanes:
            if lane.rank is None:
                name = self.thread_names.get((lane.key[0], lane.key[1]), "")
                found = _RANK_NAME.search(name)
                lane.rank = int(found.group(1)) if found else (lane.tid if isinstance(lane.tid, int) else None)

    def rank_nodes(self) -> dict[int, int]:
        """rank -> node, from lanes whose process is named "node N" (labctl's merge names them)."""
        found = {}
        for lane in self.lanes:
            match = _NODE_NAME.search(self.process_names.get(lane.key[0], ""))
            if match and isinstance(lane.rank, int):
                found.setdefault(lane.rank, int(match.group(1)))
        return found

    def end_ts(self) -> float:
        ts, dur = self.cols["ts"], self.cols["dur"]
        end = max((t + d for t, d in zip(ts, dur)), default=0.0)
        _, _, starts, durs = self.beyond
        end = max(end, max((t + d for t, d in zip(starts, durs)), default=0.0))
        for begin in [b for s in self.open_b.values() for b in s] + [b for s in self.open_async.values() for b in s]:
            end = max(end, _num(begin.get("ts")) or 0.0)
        return end

    # ---- what the page gets ------------------------------------------------------
    @property
    def slices(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        c = self.cols
        _, _, starts, durs = self.beyond
        t0 = min(min(c["ts"], default=float("inf")), min(starts, default=float("inf")))
        t0 = 0.0 if t0 == float("inf") else t0
        lanes = []
        for i, lane in enumerate(self.lanes):
            pid_key = lane.key[0]
            node_name = self.process_names.get(pid_key, f"process {lane.pid}")
            found = _NODE_NAME.search(node_name)
            thread = self.thread_names.get((lane.key[0], lane.key[1]))
            label = thread or (f"rank {lane.rank}" if lane.rank is not None else f"thread {lane.tid}")
            lanes.append({"id": i, "pid": lane.pid, "tid": lane.tid, "track": lane.track,
                          "rank": lane.rank, "name": label + (" async" if lane.track else ""),
                          "group": node_name, "node": int(found.group(1)) if found else None})
        order = sorted(range(len(lanes)), key=lambda i: (_sort_key(lanes[i]["pid"]),
                                                         lanes[i]["rank"] if lanes[i]["rank"] is not None else 1 << 30,
                                                         _sort_key(lanes[i]["tid"]), lanes[i]["track"]))
        columns = {k: v for k, v in c.items()}
        columns["ts"] = [round(t - t0, 3) for t in c["ts"]]
        columns["dur"] = [round(d, 3) for d in c["dur"]]
        counts: dict[str, dict[str, int]] = {}
        for (lane, name), n in self.counts.items():
            counts.setdefault(str(lane), {})[name] = n
        # calls (new_group, destroy_process_group, a store read) are drawn beside the ops
        # but are no op of a group: the per-op totals count none of them
        calls: dict[str, int] = {}
        for (_, name), n in self.counts.items():
            if name in CALLS:
                calls[name] = calls.get(name, 0) + n
        out = {
            "t0_us": t0, "end_us": round(self.end_ts() - t0, 3) if self.slices else 0.0,
            "lanes": lanes, "lane_order": order, "strings": self.strings, "slices": columns,
            "detailed": len(c["ts"]), "total": self.slices, "counts": counts,
            "calls": sum(calls.values()), "call_names": sorted(set(calls)),
            "flows": [[a, round(ta - t0, 3), b, round(tb - t0, 3)] for a, ta, b, tb in self.flows],
            "instants": [[lane, round(t - t0, 3), s] for lane, t, s in self.instants],
            "aggregate": self._aggregate(t0) if starts else None,
            "dropped": {"instants": self.dropped_instants, "flows": self.dropped_flows},
            "metadata": {k: v for k, v in self.metadata.items() if k in (
                "clock", "clock_offsets_by_node", "ops", "flows", "unfinished_ops", "missing_ranks",
                "bad_records")},
        }
        return out

    def _aggregate(self, t0: float) -> dict[str, Any]:
        """The slices past MAX_SLICES as AGG_BINS bins per lane: busy µs per bin and the op
        that filled most of it (its string id)."""
        ids, names, starts, durs = self.beyond
        end = self.end_ts()
        width = max((end - t0) / AGG_BINS, 1e-3)
        busy: dict[int, dict[int, float]] = {}
        top: dict[tuple[int, int], dict[int, float]] = {}
        for lane, name, ts, dur in zip(ids, names, starts, durs):
            first = int((ts - t0) / width)
            last = min(AGG_BINS - 1, int((ts + dur - t0) / width))
            for b in range(max(first, 0), max(first, last) + 1):
                lo, hi = max(ts, t0 + b * width), min(ts + dur, t0 + (b + 1) * width)
                part = max(hi - lo, width * 0.01)
                busy.setdefault(lane, {})[b] = busy.get(lane, {}).get(b, 0.0) + part
                by_op = top.setdefault((lane, b), {})
                by_op[name] = by_op.get(name, 0.0) + part
        lanes = {}
        for lane, bins in busy.items():
            lanes[str(lane)] = [[b, round(min(v, width), 3), max(top[(lane, b)].items(), key=lambda kv: kv[1])[0]]
                                for b, v in sorted(bins.items())]
        return {"bin_us": round(width, 3), "bins": AGG_BINS, "slices": len(starts), "lanes": lanes}


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _sort_key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sane(value: Any, most: float) -> bool:
    """A time field absent, or a finite number of at most `most` µs in size."""
    if value is None:
        return True
    number = _num(value)
    return number is None or (math.isfinite(number) and abs(number) <= most)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else -1


_LINE_LAYOUT_FIRST = (b'{"traceEvents":[', b"[")


def _line_layout(path: Path) -> bool:
    """Whether the file is written one event per line (labctl's merge: `{"traceEvents":[`
    alone on the first line, or `[` for the array form)."""
    with open(path, "rb") as f:
        first = f.readline(256)
    return first.strip() in _LINE_LAYOUT_FIRST


def _events_by_line(path: Path, timeline: Timeline) -> Iterator[Any]:
    """Each event of a trace written one event per line; the file's own lines (`],`,
    `"displayTimeUnit":"ms",`, `"metadata":{...}}`) are read for what they hold. A garbled
    line among others is named and skipped; a garbled last line means the file was cut."""
    with open(path, "rb") as f:
        number = 0
        last_bad: tuple[int, bytes] | None = None
        ended = False                   # the events' array was closed
        head, tail = b"", []            # the first line, and the lines from the array's end on:
        while True:                     # together they must be a whole JSON value
            raw = f.readline(MAX_LINE)
            if not raw:
                break
            number += 1
            if not raw.endswith(b"\n") and len(raw) >= MAX_LINE:
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(MAX_LINE)
                timeline.problems.append(f"trace.json:{number}: a line of more than 1 MiB: skipped")
                continue
            line = raw.strip().rstrip(b",")
            if number == 1:
                head = raw.strip()
            elif (ended or line == b"]") and len(tail) < 64:
                tail.append(raw.strip())
            if number == 1 or not line or line in (b"[", b"]", b"{", b"}"):
                ended = ended or line in (b"]", b"}")
                continue
            if line.startswith(b'"'):       # "displayTimeUnit":"ms", "metadata":{...}}
                ended = True
                if line.startswith(b'"metadata":'):
                    timeline.metadata = _loads_object(line[len(b'"metadata":'):]) or {}
                continue
            if last_bad is not None:        # a bad line followed by more: damage, not a cut
                timeline.problems.append(f"trace.json:{last_bad[0]}: a garbled event was skipped: "
                                         + last_bad[1][:80].decode(errors="replace"))
                last_bad = None
            try:
                ev = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                last_bad = (number, line)
                continue
            yield ev
        if last_bad is not None or not ended:
            at = last_bad[0] if last_bad else number
            timeline.problems.append(f"trace.json is cut short at line {at}: the events after it are "
                                     "missing (the timeline shows what came before)")
        elif not _whole_end(head, tail):
            # every event is there, but not the file's end: its metadata (missing ranks,
            # the clock) is lost or partial, and so may be whatever came after
            timeline.problems.append(f"trace.json is cut short at line {number}, after its events: "
                                     "its end (the metadata: missing ranks, clock offsets) is missing")


def _whole_end(head: bytes, tail: list[bytes]) -> bool:
    """Whether the file's first line and its lines from the events' end on make one JSON
    value (its events left out): a file cut after its events, or in its metadata, does not."""
    try:
        json.loads(head + b"\n" + b"\n".join(tail))
        return True
    except (ValueError, RecursionError):
        return False


def _loads_object(text: bytes) -> dict | None:
    """`{...}` or `{...}}` (the closing brace of the whole file on the same line); None
    when neither reads (a line cut short)."""
    for candidate in (text, text[:-1]):
        try:
            value = json.loads(candidate)
            return value if isinstance(value, dict) else {}
        except (ValueError, RecursionError):
            continue
    return None


def read(path: Path) -> Timeline:
    """The timeline of one trace.json; never raises for a damaged file (see `problems`)."""
    timeline = Timeline()
    try:
        if _line_layout(path):
            for ev in _events_by_line(path, timeline):
                timeline.event(ev)
        elif path.stat().st_size > WHOLE_FILE_LIMIT:
            timeline.problems.append(f"trace.json is not one event per line and larger than "
                                     f"{WHOLE_FILE_LIMIT >> 20} MiB: not drawn")
        else:
            try:
                whole = json.loads(path.read_bytes())
            except (ValueError, RecursionError) as exc:
                timeline.problems.append(f"trace.json is unreadable ({str(exc)[:120]}): no timeline")
                whole = []
            events = whole.get("traceEvents") if isinstance(whole, dict) else whole
            if isinstance(whole, dict) and isinstance(whole.get("metadata"), dict):
                timeline.metadata = whole["metadata"]
            for ev in events if isinstance(events, list) else []:
                timeline.event(ev)
    except OSError as exc:
        timeline.problems.append(f"trace.json could not be read: {exc.strerror or exc}")
    timeline.finish()
    return timeline


def _merged(t: Timeline, key: str, fields: dict[str, Any]) -> list[dict[str, Any]] | None:
    """labctl's merge's own table `key` from trace.json's metadata (totals, stragglers),
    each row checked against `fields` (name -> a type check); None when the file has none
    (a trace.json labctl did not write) or a row is not of that shape."""
    rows = t.metadata.get(key) if isinstance(t.metadata, dict) else None
    if not isinstance(rows, list) or len(rows) > 100_000:
        return None
    for row in rows:
        if not isinstance(row, dict) or any(not ok(row.get(name)) for name, ok in fields.items()):
            return None
    return [{name: row.get(name) for name in fields} for row in rows]


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_count(v: Any) -> bool:
    return type(v) is int and 0 <= v < 1 << 62


def _is_ms(v: Any) -> bool:
    return type(v) in (int, float) and 0 <= v < 1e12


def _is_rank(v: Any) -> bool:
    return v is None or _is_count(v)


_TOTALS = {"pg": _is_str, "op": _is_str, "count": _is_count, "bytes": _is_count, "unfinished": _is_count,
           "total_ms": _is_ms, "slowest_ms": _is_ms, "slowest_rank": _is_rank}
_STRAGGLERS = {"pg": _is_str, "seq": _is_count, "op": _is_str, "rank": _is_count, "late_ms": _is_ms}


def totals(t: Timeline) -> list[dict[str, Any]]:
    """Per (process group, op): count, bytes, total and slowest ms and where. labctl's merge
    wrote them into trace.json (what `labctl trace` prints): taken as they are, each with
    the page's slice of its slowest op to point at; a trace.json of another writer: counted
    from the slices the page holds."""
    merged = _merged(t, "totals", _TOTALS)
    if merged is not None:
        return _pointed_totals(t, merged)
    c = t.cols
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for i in range(len(c["ts"])):
        pg = t.strings[c["cat"][i]] if c["cat"][i] >= 0 else ""
        op = t.strings[c["name"][i]]
        if op in CALLS:                 # no op of a group: drawn, not counted (as labctl's merge)
            continue
        row = by.setdefault((pg, op), {"pg": pg, "op": op, "count": 0, "unfinished": 0, "bytes": 0,
                                       "total_ms": 0.0, "slowest_ms": 0.0, "slowest_rank": None,
                                       "slowest_slice": None})
        row["count"] += 1
        row["bytes"] += max(c["bytes"][i], 0)
        if c["unfinished"][i]:
            row["unfinished"] += 1
            continue
        dur = c["dur"][i] / 1000.0
        row["total_ms"] += dur
        if dur >= row["slowest_ms"]:
            row["slowest_ms"], row["slowest_rank"], row["slowest_slice"] = dur, t.lanes[c["lane"][i]].rank, i
    ids, names, _, durs = t.beyond
    for lane, name, dur in zip(ids, names, durs):
        op = t.strings[name]
        if op in CALLS:
            continue
        row = by.setdefault(("", op), {"pg": "", "op": op, "count": 0, "unfinished": 0, "bytes": 0,
                                       "total_ms": 0.0, "slowest_ms": 0.0, "slowest_rank": None,
                                       "slowest_slice": None})
        row["count"] += 1
        row["total_ms"] += dur / 1000.0
    for row in by.values():
        row["total_ms"], row["slowest_ms"] = round(row["total_ms"], 3), round(row["slowest_ms"], 3)
    return [by[k] for k in sorted(by)]


def _pointed_totals(t: Timeline, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The merge's totals, each with the page's slice of its slowest op (that op's rank, pg
    and name, the longest such slice the page holds)."""
    c = t.cols
    want = {(r["pg"], r["op"], r["slowest_rank"]): r for r in rows if r["slowest_rank"] is not None}
    best: dict[tuple, tuple[int, int]] = {}
    for i in range(len(c["ts"])):
        if c["unfinished"][i]:
            continue
        key = (t.strings[c["cat"][i]] if c["cat"][i] >= 0 else "", t.strings[c["name"][i]], t.lanes[c["lane"][i]].rank)
        if key in want and c["dur"][i] >= best.get(key, (-1, -1))[0]:
            best[key] = (c["dur"][i], i)
    for r in rows:
        found = best.get((r["pg"], r["op"], r["slowest_rank"]))
        r["slowest_slice"] = found[1] if found else None
    return rows


def stragglers(t: Timeline) -> list[dict[str, Any]]:
    """For each collective instance (process group, seq) that two or more ranks entered with
    the same op, the rank that entered last and how long after the first; the worst ten,
    with the page's slice ids so the table can point at them. labctl's merge wrote them
    into trace.json: taken as they are; a trace.json of another writer: found here."""
    merged = _merged(t, "stragglers", _STRAGGLERS)
    if merged is not None:
        c = t.cols
        by_instance: dict[tuple[str, int], list[int]] = {}
        for i in range(len(c["ts"])):
            if c["seq"][i] >= 0 and c["p2p"][i] < 0 and t.lanes[c["lane"][i]].track == "":
                pg = t.strings[c["cat"][i]] if c["cat"][i] >= 0 else ""
                by_instance.setdefault((pg, c["seq"][i]), []).append(i)
        for s in merged:
            s["slices"] = sorted(by_instance.get((s["pg"], s["seq"]), []), key=lambda i: c["ts"][i])
        return merged[:STRAGGLERS]
    c = t.cols
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(len(c["ts"])):
        if c["seq"][i] >= 0 and c["p2p"][i] < 0 and t.lanes[c["lane"][i]].track == "":
            groups.setdefault((c["cat"][i], c["seq"][i]), []).append(i)
    found = []
    for (cat, seq), ids in groups.items():
        if len(ids) < 2 or len({(c["name"][i], c["shape"][i]) for i in ids}) > 1:
            continue
        first = min(ids, key=lambda i: c["ts"][i])
        last = max(ids, key=lambda i: c["ts"][i])
        late = c["ts"][last] - c["ts"][first]
        found.append({"pg": t.strings[cat] if cat >= 0 else "", "seq": seq, "op": t.strings[c["name"][last]],
                      "rank": t.lanes[c["lane"][last]].rank, "late_ms": round(late / 1000.0, 3),
                      "slices": sorted(ids, key=lambda i: c["ts"][i])})
    found.sort(key=lambda s: -s["late_ms"])
    return found[:STRAGGLERS]
