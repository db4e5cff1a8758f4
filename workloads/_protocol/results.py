"""The workloads' result and join records (`@@labctl-result`, `@@labctl-joined`): how a
rank writes them (workloads/_common.py) and how labctl reads them back (labctl/logs.py,
labctl/rundir.py), each known field checked against the lab's bounds once. The trace's
op records are records.py's; this is the other family of marked lines. Standard library
only.

A rank may print any `@@labctl-result` line: a script's own, a typo, a forgery. The
report, the page and the grader read the known fields below as the workloads write them;
one record with another type there (`"group": 5`, a `"seconds": "abc"`, an `"ok": "no"`
that would count as passed) once stopped the whole page or report.md. A bad record costs
itself, never the rest: `result_damage` says in a few words what is wrong with one.
Fields not named here are the workloads' own and are passed on as they are.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from . import DATA, JOINED_MARKER, RESULT_MARKER, algorithms
from .records import MAX_HELD_DEPTH, MAX_INT, MAX_WORLD, BadRecord


def result_line(record: dict[str, Any], default: Any = None) -> str:
    """One result record as its marked line (no newline); `default` makes a value JSON."""
    return RESULT_MARKER + json.dumps(record, sort_keys=True, default=default)


def joined_line(rank: int | None, pid: int) -> str:
    """This rank's process group is up (the join fault clock's line; no newline)."""
    return JOINED_MARKER + json.dumps({"rank": rank, "pid": pid})


def decode_result(payload: str) -> dict[str, Any]:
    """The JSON object behind RESULT_MARKER (its fields are checked by result_damage)."""
    try:
        record = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise BadRecord(f"a garbled result line ({str(exc)[:200]})") from None
    if not isinstance(record, dict):
        raise BadRecord("a garbled result line (not a JSON object)")
    return record


def decode_joined(payload: bytes | str) -> tuple[int | None, int | None]:
    """(rank, pid) of a join line's payload; BadRecord when it is not one."""
    try:
        said = json.loads(payload)
    except (ValueError, RecursionError):
        raise BadRecord("a garbled join line") from None
    if not isinstance(said, dict):
        raise BadRecord("a join line that is not a JSON object")
    rank, pid = said.get("rank"), said.get("pid")
    return (rank if _rank(rank) else None, pid if _is_int(pid) and pid > 0 else None)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _rank(v: Any) -> bool:
    return _is_int(v) and 0 <= v < MAX_WORLD


def _count(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _opt(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _ints(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(x) for x in v)


def _numbers(v: Any) -> bool:
    """A loss curve: numbers, a step that had none as null."""
    return isinstance(v, list) and all(x is None or _is_number(x) for x in v)


def held(v: Any, depth: int = 0) -> bool:
    """What a rank held (`workloads._common.held`): None, a tensor's {shape, dtype, numel,
    values} or a list's {len, list}."""
    if v is None:
        return True
    if not isinstance(v, dict) or depth > MAX_HELD_DEPTH:
        return False
    if "list" in v:
        return isinstance(v["list"], list) and _opt(_count)(v.get("len")) \
            and all(held(x, depth + 1) for x in v["list"])
    return isinstance(v.get("values"), list) \
        and all(_is_number(x) or isinstance(x, bool) for x in v["values"]) \
        and _opt(_ints)(v.get("shape")) and _opt(_count)(v.get("numel")) \
        and _opt(lambda d: isinstance(d, str))(v.get("dtype"))


# ---- the bounds of what a lab can measure: a number a result names is inside them, so that
# nothing labctl computes from results grows with a number a script printed (a bench row's
# "world_size": 10^9 once took `labctl up` to 23 GB writing the report; docs/limits.md)
MAX_TOTAL_NODES = 4_096             # nodes in the largest lab, replicas' included (labctl/limits.py reads it)
MAX_NPROC = 1_024                   # processes on one node (MAX_NPROC_PER_NODE)
MAX_MESSAGE_BYTES = 1 << 40         # 1 TiB: the largest message a result names (`labctl predict --size`'s bound)
MAX_MICROSECONDS = 10 ** 15         # 10^9 s, the longest lab (`timeout`'s bound), in µs
MAX_WALL_US = 10 ** 18              # a wall-clock time in µs since 1970 (year 33,000)
MIN_RATE_BPS = 125                  # bytes/s: 1 kbit/s, the slowest link a lab can be given
MAX_RATE_BPS = 125 * 10 ** 12       # bytes/s: 1 Pbit/s, faster than any link
MAX_COUNT = 10 ** 9                 # iterations, steps, rounds: a count a lab could reach
MAX_ITEMS = MAX_WORLD               # entries in one list of a result (a series, a lab's ranks)
MAX_NESTING = 32                    # lists and objects within each other: a real record goes to ~20
MAX_MICROBATCHES = 4_096            # a pipeline's microbatches per step, stages a rank holds: a
MAX_STAGES_PER_RANK = 64            # step of more is no lab's (labctl predict replays M v N messages)

Want = tuple  # (check(value) -> bool, what the value should be): one field's type and bounds


def _whole(lo: int, hi: int) -> Want:
    return (lambda v: _is_int(v) and lo <= v <= hi, f"a whole number from {lo:,} to {hi:,}")


def _real(lo: float, hi: float, what: str = "", above: bool = False) -> Want:
    """A finite number in [lo, hi] (`above`: > lo). Ints are compared as they are: a
    4,000-digit one is no float (math.isfinite raised OverflowError on it)."""
    def check(v: Any) -> bool:
        if not (_is_int(v) or (isinstance(v, float) and math.isfinite(v))):
            return False
        return (lo < v if above else lo <= v) and v <= hi
    return (check, what or f"a finite number from {lo:g} to {hi:g}" + (" (not 0)" if above and lo == 0 else ""))


def _any_real() -> Want:
    """A number that is shown, never computed with: a float (NaN is a real loss), or an int a
    float can hold."""
    return (lambda v: isinstance(v, float) or (_is_int(v) and abs(v) <= 1 << 63), "a number")


def _nullable(want: Want) -> Want:
    return (lambda v: v is None or want[0](v), f"{want[1]} or null")


def _list_of(want: Want, most: int = MAX_ITEMS, exactly: int | None = None) -> Want:
    size = f"{exactly}" if exactly is not None else f"at most {most:,}"
    return (lambda v: isinstance(v, list) and (len(v) == exactly if exactly is not None else len(v) <= most)
            and all(want[0](x) for x in v), f"a list of {size} ({want[1]})")


def _object_of(fields: dict[str, Want], what: str) -> Want:
    """An object whose named fields (each optional) are as declared."""
    return (lambda v: isinstance(v, dict) and all(k not in v or w[0](v[k]) for k, w in fields.items()), what)


def _keyed(key: Want, value: Want, most: int, what: str) -> Want:
    return (lambda v: isinstance(v, dict) and len(v) <= most and all(key[0](k) and value[0](x) for k, x in v.items()),
            what)


_TEXT = (lambda v: isinstance(v, str), "a string")
_OPT_TEXT = (_opt(lambda v: isinstance(v, str)), "a string or null")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_RANK = (_rank, f"a rank number (0 to {MAX_WORLD - 1:,})")
_OPT_RANK = (_opt(_rank), f"a rank number (0 to {MAX_WORLD - 1:,}) or null")
_NODE = (_whole(0, MAX_TOTAL_NODES - 1)[0], f"a node number (0 to {MAX_TOTAL_NODES - 1:,})")
_SECONDS = _real(0, MAX_MICROSECONDS / 1e6, f"a number of seconds from 0 to {MAX_MICROSECONDS / 1e6:.0e}")
_HELD = (held, "what a rank held (shape, dtype, numel, values; or len, list) or null")
_WORLD = _whole(1, MAX_WORLD)
_BYTES = _whole(0, MAX_MESSAGE_BYTES)
_COUNT = _whole(0, MAX_COUNT)
_TIME_US = _real(0, MAX_MICROSECONDS, f"a time in µs above 0 and at most {MAX_MICROSECONDS:.0e}", above=True)
_DURATION_US = _real(0, MAX_MICROSECONDS, f"a time in µs from 0 to {MAX_MICROSECONDS:.0e}")
_WALL_US = _real(0, MAX_WALL_US, "a wall-clock time in µs")
_RATE = (lambda v: v == 0 or _real(MIN_RATE_BPS, MAX_RATE_BPS)[0](v),
         f"0 or a rate in bytes/s from {MIN_RATE_BPS} (1 kbit/s) to {MAX_RATE_BPS:.3g} (1 Pbit/s)")
_GBPS = (lambda v: v == 0 or _real(MIN_RATE_BPS / 1e9, MAX_RATE_BPS / 1e9)[0](v),
         f"0 or a rate in GB/s from {MIN_RATE_BPS / 1e9:g} (1 kbit/s) to {MAX_RATE_BPS / 1e9:g} (1 Pbit/s)")
_RANKS = _list_of(_RANK)
_VERSION = (lambda v: v is None or (isinstance(v, str) and len(v) <= 64
                                    and all(p.isdigit() and len(p) <= 9 for p in v.split(".")[:3])),
            "a version (digits and dots) or null")

# field -> (check, what it should be): every result's fields the core reads
RESULT_FIELDS: dict[str, Want] = {
    "workload": _TEXT, "name": _TEXT, "rank": _RANK, "replica": (_count, "a replica number"),
    "ok": _BOOL, "skipped": _BOOL, "reason": (_opt(lambda v: isinstance(v, str)), "a string"),
    "seconds": _SECONDS, "world_size": _WORLD,
    # a pattern's step (labctl/stepcomm.py): its window on the rank's wall clock, its groups' ranks
    "step_window_us": _list_of(_WALL_US, exactly=2),
    "groups": _keyed(_TEXT, _RANKS, MAX_WORLD, "an object of group names to lists of rank numbers"),
}
# a data record's fields (what ranks held, drawn by the page: workloads/_report/*.py page)
DATA_FIELDS: dict[str, Want] = {
    "call": _TEXT, "op": (_opt(lambda v: isinstance(v, str)), "a string"),
    "root": _OPT_RANK, "peer": _OPT_RANK, "hop": (_opt(_count), "a hop number or null"),
    "group": (_opt(lambda v: _ints(v) and all(_rank(x) for x in v)), "a list of rank numbers or null"),
    "before": _HELD, "after": _HELD, "tensor": _HELD, "params": _HELD,
    "local_loss": (_opt(_numbers), "a list of numbers or null"),
    "mean_loss": (_opt(_numbers), "a list of numbers or null"),
    "reference_loss": (_opt(_numbers), "a list of numbers or null"),
    "every": (_opt(lambda v: _is_int(v) and v > 0), "a whole number > 0 or null"),
    "steps": (_opt(_count), "a whole number or null"),
    # pp's measured schedule: [step, stage, microbatch, "F"/"B", begin µs, end µs] per box
    "intervals": _list_of((lambda v: isinstance(v, list) and len(v) == 6 and all(_COUNT[0](x) for x in v[:3])
                           and isinstance(v[3], str) and _WALL_US[0](v[4]) and _WALL_US[0](v[5]),
                           "[step, stage, microbatch, kind, begin µs, end µs]")),
    "ranks": _WORLD, "microbatches": _whole(1, MAX_MICROBATCHES), "stages_per_rank": _whole(1, MAX_STAGES_PER_RANK),
    "compute_ms": _real(0, MAX_MICROSECONDS / 1e3),
}

# The workloads' own records, by (workload, which names): the fields labctl's plugins
# (workloads/_report/<name>.py) compute with, typed and bounded here once.
_BENCH_OPS = frozenset(algorithms.OPS)
BENCH_ROW: dict[str, Want] = {
    "size_bytes": _BYTES, "count": _BYTES, "dtype": _TEXT, "wrong": _whole(0, MAX_INT),
    "iters": _whole(1, MAX_COUNT), "time_us_median": _TIME_US, "time_us_p99": _TIME_US,
    "rtt_us_median": _TIME_US, "algbw_GBps": _real(0, MAX_RATE_BPS / 1e9),
    "busbw_GBps": _real(0, MAX_RATE_BPS / 1e9), "times_us": _list_of(_TIME_US),
    "rank_times_us": _list_of(_list_of(_TIME_US)), "peer": _RANK,
}
BENCH_ENV: dict[str, Want] = {
    "nodes": _nullable(_whole(1, MAX_TOTAL_NODES)), "nproc_per_node": _whole(1, MAX_NPROC),
    "min_bytes": _whole(1, MAX_MESSAGE_BYTES), "max_bytes": _whole(1, MAX_MESSAGE_BYTES),
    "factor": _whole(2, MAX_MESSAGE_BYTES), "iters": _whole(1, MAX_COUNT), "warmup_iters": _COUNT,
    "ranks": _list_of(_object_of({"rank": _RANK, "pid": _whole(0, MAX_INT), "device": _whole(-1, MAX_NPROC),
                                  "hostname": _OPT_TEXT}, "a rank's rank, pid, device and hostname")),
    "links": _OPT_TEXT, "dtype": _TEXT, "dist_backend": _OPT_TEXT, "nccl": _VERSION, "traced": _BOOL,
    "ops": _list_of(_TEXT, 64), "start_time": _OPT_TEXT, "hostname": _OPT_TEXT, "device": _OPT_TEXT,
}
BENCH_LINK: dict[str, Want] = {
    "bytes": _whole(0, MAX_INT), "seconds": _real(0, MAX_MICROSECONDS / 1e6), "GBps": _GBPS,
    "src_node": _NODE, "dst_node": _NODE, "dst_rank": _RANK, "address": _OPT_TEXT,
}
LINKS_PAIR: dict[str, Want] = {
    "src_node": _NODE, "dst_node": _NODE, "src_rank": _RANK, "dst_rank": _RANK,
    "p2p_Bps": _RATE, "tcp_Bps": _nullable(_RATE), "configured_Bps": _nullable(_RATE),
    "one_way_us": _nullable(_DURATION_US), "bytes": _whole(0, MAX_INT), "iters": _COUNT, "tcp_error": _OPT_TEXT,
}
LINKS_ENV: dict[str, Want] = {
    "nodes": _keyed((lambda k: isinstance(k, str) and k.isdigit() and len(k) <= 4 and int(k) < MAX_TOTAL_NODES, ""),
                    (lambda v: isinstance(v, dict), ""), MAX_TOTAL_NODES,
                    f"an object of node numbers (0 to {MAX_TOTAL_NODES - 1:,}) to objects"),
    "rounds": _list_of(_list_of(_list_of(_NODE, exactly=2), MAX_TOTAL_NODES), MAX_TOTAL_NODES),
    "round_seconds": _list_of(_real(0, MAX_MICROSECONDS / 1e6), MAX_TOTAL_NODES),
    "slow_fraction": _real(0, 1, "a number between 0 and 1", above=True), "links": _OPT_TEXT,
}
ELASTIC: dict[str, Want] = {
    "node": _NODE, "local_rank": _whole(0, MAX_NPROC - 1), "pid": _whole(0, MAX_INT),
    "time": _real(0, MAX_WALL_US / 1e6), "process_started": _nullable(_real(0, MAX_WALL_US / 1e6)),
    "restart_count": _COUNT, "step": _COUNT, "first_step": _nullable(_COUNT), "steps_done": _COUNT,
    "loss": _nullable(_any_real()), "how": _OPT_TEXT,
}
# fsdp, tp, pp, cp, ep, mesh: <variant>-matches-single-process, <variant>-bytes-per-step (its
# last step's ops, [op, group, group size, S bytes, peer], which `labctl predict` scales)
PATTERN: dict[str, Want] = {
    "max_diff": _nullable(_any_real()), "tolerance": _nullable(_any_real()),
    "bitwise": (_opt(lambda v: isinstance(v, bool)), "true, false or null"),
    "sent": _nullable(_real(0, MAX_INT)), "formula": _nullable(_real(0, MAX_INT)), "formula_text": _OPT_TEXT,
    "ops": _list_of((lambda v: isinstance(v, list) and len(v) == 5 and isinstance(v[0], str)
                     and (v[1] is None or isinstance(v[1], str)) and _WORLD[0](v[2]) and _BYTES[0](v[3])
                     and (v[4] is None or _rank(v[4])), "[op, group, group size, bytes, peer or null]")),
    "ranks": _WORLD, "tp": _WORLD, "dist_backend": _OPT_TEXT,
    "microbatches": _whole(1, MAX_MICROBATCHES), "stages_per_rank": _whole(1, MAX_STAGES_PER_RANK),
    "blocks": _whole(0, MAX_COUNT), "tokens": _whole(0, MAX_INT), "block_tokens": _whole(0, MAX_INT),
    "activation_bytes": _real(0, MAX_MESSAGE_BYTES), "param_bytes": _real(0, MAX_MESSAGE_BYTES),
    "shard_param_bytes": _real(0, MAX_MESSAGE_BYTES),
    "send_splits": _list_of(_list_of(_whole(0, MAX_INT))),
}
PREFLIGHT: dict[str, Want] = {
    "node": _NODE, "peer": (lambda v: v == "all" or _NODE[0](v), f"a node number (0 to {MAX_TOTAL_NODES - 1:,}) or \"all\""),
    "value": _OPT_TEXT,
}


def _named(*names: str) -> Any:
    chosen = frozenset(names)
    return lambda name: name in chosen


WORKLOAD_FIELDS: list[tuple[str, Any, dict[str, Want]]] = [     # (workload, which names, fields)
    ("bench", lambda name: name in _BENCH_OPS, BENCH_ROW),
    ("bench", _named("bench_env"), BENCH_ENV),
    ("bench", _named("link"), BENCH_LINK),
    ("links", _named("pair"), LINKS_PAIR),
    ("links", _named("links_env"), LINKS_ENV),
    ("elastic", lambda name: True, ELASTIC),
    ("preflight", lambda name: True, PREFLIGHT),
    *((w, lambda name: isinstance(name, str) and name.endswith(("-matches-single-process", "-bytes-per-step")),
       PATTERN) for w in ("fsdp", "tp", "pp", "cp", "ep", "mesh")),
]

_JSON_NAMES = {str: "a string", int: "a number", float: "a number", list: "a list",
               dict: "an object", bool: "true/false", type(None): "null"}


def fields_of(record: dict[str, Any]) -> dict[str, Want]:
    """The known fields of a record like this one (its workload and name): what labctl reads."""
    fields = dict(RESULT_FIELDS, **DATA_FIELDS) if record.get("name") == DATA else dict(RESULT_FIELDS)
    workload, name = record.get("workload"), record.get("name")
    for w, names, more in WORKLOAD_FIELDS:
        if workload == w and names(name):
            fields.update(more)
    return fields


def _nesting(value: Any) -> int:
    """How deep lists and objects go in `value` (no recursion: a record may be deep)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, (list, dict)):
            if depth > MAX_NESTING:
                return depth
            deepest = max(deepest, depth)
            todo.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _found(value: Any) -> str:
    if _is_int(value) or isinstance(value, float):
        text = repr(value)
        return text if len(text) <= 24 else f"a {len(text)}-digit number"
    return _JSON_NAMES.get(type(value), "a value")


def result_damage(record: dict[str, Any]) -> str | None:
    """What is wrong with one result record's known fields (None: nothing), one line: a
    field of the wrong type or out of the lab's bounds (the table above), or lists and
    objects nested deeper than MAX_NESTING."""
    for key, (check, want) in fields_of(record).items():
        if key in record and not check(record[key]):
            return f"'{key}' should be {want}, found {_found(record[key])}"
    if _nesting(record) > MAX_NESTING:
        return f"lists and objects nested deeper than {MAX_NESTING} levels"
    return None


@dataclass
class Ignored:
    """Result lines a reader left out (garbled, or a known field of the wrong type or out of
    the lab's bounds): how many, and the first KEEP named, so that a script printing a
    million of them costs a number and ten lines (status.json's `ignored_results`)."""
    count: int = 0
    first: list[str] = field(default_factory=list)
    KEEP: ClassVar[int] = 10

    def add(self, text: str) -> None:
        self.count += 1
        if len(self.first) < self.KEEP:
            self.first.append(text[:300])

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "first": list(self.first)}

    @classmethod
    def from_dict(cls, value: Any) -> "Ignored | None":
        """From status.json; None when it is not one (a damaged field is no reason to lose the record)."""
        if not isinstance(value, dict) or not (_is_int(value.get("count")) and 0 <= value["count"] <= MAX_INT):
            return None
        first = value.get("first")
        return cls(value["count"], [str(t)[:300] for t in first[:cls.KEEP]] if isinstance(first, list) else [])

    def summary(self) -> str:
        """One line: how many, and the first one's why."""
        return (f"{self.count:,} result line(s) ignored (a known field of the wrong type or outside the lab's "
                f"bounds, docs/limits.md; the rank logs keep them)" + (f"; the first: {self.first[0]}" if self.first else ""))


def result_who(record: dict[str, Any]) -> str:
    """'rank 1's record collectives/data' as far as the record's fields allow."""
    rank = record.get("rank")
    what = "/".join(str(record[k])[:60] for k in ("workload", "name") if isinstance(record.get(k), str))
    return (f"rank {rank}'s record" if _rank(rank) else "a record") + (f" {what}" if what else "")
