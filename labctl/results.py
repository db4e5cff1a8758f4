"""A result record (one line of results.jsonl), checked before any reader trusts it.

A rank may print any `@@labctl-result` line: a script's own, a typo, a forgery. The
report, the page and the grader read the known fields below as the workloads write
them (`workloads/_common.py`); one record with another type there (`"group": 5`, a
`"seconds": "abc"`, an `"ok": "no"` that would count as passed) once stopped the whole
page (TypeError in its script) or report.md. `damage(record)` says, in a few words,
what is wrong with one record (None: readable); `rundir.read_results` leaves such a
record out with one line naming it, so a bad record costs itself, never the rest.
Fields not named here are the workloads' own and are passed on as they are.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from workloads._protocol import DATA

from .record import MAX_WORLD

MAX_HELD_DEPTH = 8          # a list of lists of tensors is as deep as a real record goes


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _rank(v: Any) -> bool:
    return _is_int(v) and 0 <= v < MAX_WORLD


def _count(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
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


_TEXT = (lambda v: isinstance(v, str), "a string")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_RANK = (_rank, f"a rank number (0 to {MAX_WORLD - 1})")
_OPT_RANK = (_opt(_rank), f"a rank number (0 to {MAX_WORLD - 1}) or null")
_SECONDS = (lambda v: _is_number(v) and math.isfinite(v), "a finite number")
_HELD = (held, "what a rank held (shape, dtype, numel, values; or len, list) or null")

# field -> (check, what it should be): every record's fields the core reads
COMMON: dict[str, tuple[Callable[[Any], bool], str]] = {
    "workload": _TEXT, "name": _TEXT, "rank": _RANK, "replica": (_count, "a replica number"),
    "ok": _BOOL, "skipped": _BOOL, "reason": (_opt(lambda v: isinstance(v, str)), "a string"),
    "seconds": _SECONDS,
}
# a data record's fields (what ranks held, drawn by the page: workloads/_report/*.py page)
DATA_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "call": _TEXT, "op": (_opt(lambda v: isinstance(v, str)), "a string"),
    "root": _OPT_RANK, "peer": _OPT_RANK, "hop": (_opt(_count), "a hop number or null"),
    "group": (_opt(lambda v: _ints(v) and all(_rank(x) for x in v)), "a list of rank numbers or null"),
    "before": _HELD, "after": _HELD, "tensor": _HELD, "params": _HELD,
    "local_loss": (_opt(_numbers), "a list of numbers or null"),
    "mean_loss": (_opt(_numbers), "a list of numbers or null"),
    "reference_loss": (_opt(_numbers), "a list of numbers or null"),
    "every": (_opt(lambda v: _is_int(v) and v > 0), "a whole number > 0 or null"),
    "steps": (_opt(_count), "a whole number or null"),
}

_JSON_NAMES = {str: "a string", int: "a number", float: "a number", list: "a list",
               dict: "an object", bool: "true/false", type(None): "null"}


def damage(record: dict[str, Any]) -> str | None:
    """What is wrong with one result record's known fields (None: nothing), one line."""
    fields = dict(COMMON, **DATA_FIELDS) if record.get("name") == DATA else COMMON
    for key, (check, want) in fields.items():
        if key in record and not check(record[key]):
            found = _JSON_NAMES.get(type(record[key]), "a value")
            return f"'{key}' should be {want}, found {found}"
    return None


def who(record: dict[str, Any]) -> str:
    """'rank 1's record collectives/data' as far as the record's fields allow."""
    rank = record.get("rank")
    what = "/".join(str(record[k])[:60] for k in ("workload", "name") if isinstance(record.get(k), str))
    return (f"rank {rank}'s record" if _rank(rank) else "a record") + (f" {what}" if what else "")
