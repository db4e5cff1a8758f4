"""A checker of the Chrome trace event format's rules that viewers rely on (a test helper):
every trace.json the tests produce goes through `check`.

Rules (Chrome's "Trace Event Format" document; what Perfetto's JSON importer needs to
draw a slice where it was):
- a JSON object with a `traceEvents` list, every number finite (no Infinity/NaN);
- every timed event has `ts` >= 0 (and an `X` slice `dur` >= 0);
- the `X` slices of one thread (pid, tid) nest: two that overlap, one holds the other
  (Perfetto draws partly overlapping slices of a thread wrong);
- every flow event (`s`, `t`, `f`) lies inside an `X` slice of its own thread, since a
  flow binds to the slice that encloses it; every flow id has one start, at most one end;
- async events (`b`/`e`) pair up per (cat, id), the end not before the beginning;
- metadata events (`M`) name a process or thread.
Times are compared in whole ns, as Perfetto stores them.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def _ns(value: Any) -> int:
    return round(float(value) * 1000)


def _finite(name: str) -> float:
    raise ValueError(f"non-finite number {name} in the trace")


def check(path: str | Path) -> list[str]:
    """Every broken rule, one line each (empty: the trace is fine)."""
    problems: list[str] = []
    try:
        data = json.loads(Path(path).read_text(), parse_constant=_finite)
    except ValueError as exc:
        return [f"not JSON: {exc}"]
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        return ["no traceEvents list"]
    slices: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    flows: list[tuple[int, dict]] = []
    asyncs: dict[tuple, list[tuple[str, int]]] = defaultdict(list)
    for i, ev in enumerate(events):
        ph = ev.get("ph")
        if ph == "M":
            if ev.get("name") not in ("process_name", "process_sort_index", "thread_name", "thread_sort_index"):
                problems.append(f"event {i}: unknown metadata {ev.get('name')!r}")
            continue
        if not isinstance(ev.get("ts"), (int, float)) or ev["ts"] < 0:
            problems.append(f"event {i} ({ph} {ev.get('name')}): ts {ev.get('ts')!r} is not a number >= 0")
            continue
        where = (ev.get("pid"), ev.get("tid"))
        if ph == "X":
            if not isinstance(ev.get("dur"), (int, float)) or ev["dur"] < 0:
                problems.append(f"event {i} ({ev.get('name')}): dur {ev.get('dur')!r} is not a number >= 0")
                continue
            start = _ns(ev["ts"])
            slices[where].append((start, start + _ns(ev["dur"]), i))
        elif ph in ("s", "t", "f"):
            flows.append((i, ev))
        elif ph in ("b", "e"):
            key = (ev.get("cat"), json.dumps(ev.get("id", ev.get("id2")), sort_keys=True))
            asyncs[key].append((ph, _ns(ev["ts"])))
        elif ph not in ("i", "I", "C"):
            problems.append(f"event {i}: phase {ph!r} not checked by this checker")
    for where, spans in slices.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[int, int, int]] = []
        for start, end, i in spans:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(f"thread {where}: slice {i} [{start}, {end}] ns partly overlaps slice "
                                f"{stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}] ns")
                continue
            stack.append((start, end, i))
    ends: dict[Any, int] = defaultdict(int)
    starts: dict[Any, int] = defaultdict(int)
    for i, ev in flows:
        ts = _ns(ev["ts"])
        spans = slices.get((ev.get("pid"), ev.get("tid")), [])
        if not any(start <= ts <= end for start, end, _ in spans):
            problems.append(f"flow event {i} ({ev['ph']} id {ev.get('id')}) at {ts} ns is inside no slice of "
                            f"thread {(ev.get('pid'), ev.get('tid'))}")
        if ev["ph"] == "s":
            starts[ev.get("id")] += 1
        elif ev["ph"] == "f":
            ends[ev.get("id")] += 1
    for flow_id in set(starts) | set(ends):
        if starts[flow_id] != 1 or ends[flow_id] > 1:
            problems.append(f"flow id {flow_id}: {starts[flow_id]} starts, {ends[flow_id]} ends")
    for key, marks in asyncs.items():
        begins = [t for ph, t in marks if ph == "b"]
        finishes = [t for ph, t in marks if ph == "e"]
        if len(begins) != len(finishes) or (begins and finishes and min(finishes) < min(begins)):
            problems.append(f"async {key}: {len(begins)} begins and {len(finishes)} ends out of order")
    return problems
