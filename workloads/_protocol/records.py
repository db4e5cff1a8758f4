"""The rank's trace and Flight Recorder records, one codec (issue 36): what the recorder
writes (workloads/_trace/) and what labctl's one reader takes (labctl/trace.py), spelled
here once, both ways: `encode` makes each typed record's marked line (the recorder writes
through it), `decode` reads one back, so that decode(encode(x)) == x for every family
(issue 48). Standard library only.

A record is one marked line, `@@labctl-trace ` or `@@labctl-fr ` and a payload. Ops use a
compact text form (they are most of the lines); everything else is a JSON object with a
kind `k`. Times are ns after the process's header time `t0` (the H record). Every line read
back is untrusted input: `decode` checks every field once (whole numbers in range, strings
of bounded length, shapes of whole numbers) and raises BadRecord with a sentence naming
the field; nothing else parses a payload.

    {"k":"H","v":2,"t0":..,"pid":..,      Header        this process's time origin; which recorder
     "rec":"python","cost_ns":..}                       wrote the file and its own work per op (ns,
                                                        measured at start-up); both absent in older files
    {"k":"M",...}                         Who           rank, world, node, local_rank, backend, host, pid, t
    {"k":"C","offset_ns":..,"rtt_ns":..}  Clock         the clock against rank 0's (or "error")
    {"k":"G","pg":..,"ranks":[..],"timeout_ms":..}  Group  a process group's global ranks, its timeout here
    {"k":"S","s":..,"op":..,...}          Site          what repeats between ops of one call site
                                                        (op, pg, kind, bytes, dtype, shape, peer|root,
                                                        reduce, caller, api, via)
    B <id> <site> <seq> <t>               Begin         written before torch is called
    E <id> <t> [<peer>]                   End           completed (peer: a recv from any source)
    X <id> <site> <seq> <t> <end>         Begin, ended  (the earlier recorder's; still read)
    {"k":"R","i":..,"t":..,"error":..}    Raised        raised before torch issued it
    {"k":"T","t":..}                      Alive         the process was alive then
    @@labctl-fr {"rank","pg","seq","op","shape","dtype","t"}   FrEntry  (Flight Recorder, at a dump)
    @@labctl-fr {"rank","done"}                                FrDone   (the dump's end)
    @@labctl-fr {"error"}                                      FrError

The workloads' records travel the same way, spelled in results.py beside this module
(workloads/_common.py writes them; labctl/logs.py and labctl/rundir.py read them through
its functions only):

    @@labctl-result {"workload","name","rank","ok",...}       a result (a check or a measurement)
    @@labctl-joined {"rank","pid"}                             this rank's process group is up
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Union

from . import FR_MARKER, TRACE_MARKER

VERSION = 2
MAX_INT = 1 << 62                   # no count, rank, size or time a rank writes is larger
MAX_TEXT = 4096                     # no string a rank writes is longer (a caller's path, an error)
MAX_DIMS = 64
MAX_RANKS = 1 << 20
MAX_SPAN_NS = 30 * 86_400 * 10**9   # a record's time after its process's t0: no lab runs 30 days
MAX_WORLD = 65_536                  # ranks in the largest lab (labctl/limits.py's bound; labctl/record.py reads it)
MAX_HELD_DEPTH = 8                  # a result's list of lists of tensors is as deep as a real record goes

TRACE = TRACE_MARKER.encode()
FR = FR_MARKER.encode()

# The writer's forms of the op records (bytes %-formatting: the cheapest on the op's path).
# They are the encoders of Begin and End (`encode` uses them too); the recorder's wrappers
# take them from here and fill them inline.
BEGIN = TRACE + b"B %d %d %d %d\n"          # ident, site, seq, t
BEGUN_ENDED = TRACE + b"X %d %d %d %d %d\n"  # ident, site, seq, t, end (the earlier recorder's)
END = TRACE + b"E %d %d\n"                  # ident, t
END_FROM = TRACE + b"E %d %d %d\n"          # ident, t, the sender of a recv from any source


def trace_line(record: dict[str, Any]) -> bytes:
    """A JSON trace record given as a dict (every kind but the op lines) as its marked line;
    the recorder writes typed records through `encode`."""
    return TRACE + _json(record)


def fr_line(record: dict[str, Any]) -> bytes:
    return FR + _json(record)


def _json(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


# ---------------------------------------------------------------- what a reader gets

class BadRecord(Exception):
    """A record that cannot be used; its text names what is wrong."""


@dataclass(frozen=True, slots=True)
class Header:
    t0: int
    pid: int | None
    version: int
    recorder: str | None = None         # which recorder wrote the file ("python"); None: an older one
    cost_ns: int | None = None          # its own work per op (a B and an E line), measured at start-up


@dataclass(frozen=True, slots=True)
class Who:
    rank: int | None
    node: int | None
    host: str | None
    world: int | None = None
    local_rank: int | None = None
    backend: str | None = None
    pid: int | None = None
    t: int | None = None


@dataclass(frozen=True, slots=True)
class Clock:
    offset_ns: int = 0
    rtt_ns: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Group:
    pg: str
    ranks: list[int]
    timeout_ms: int | None = None       # the group's timeout on this rank (None: not known)


@dataclass(frozen=True, slots=True)
class Site:
    ident: int
    op: str
    pg: str
    p2p: bool
    nbytes: int
    dtype: str | None
    shape: list[int] | None
    peer: int | None
    root: int | None
    caller: str
    api: str | None
    via: str | None
    reduce: str | None = None           # a reducing op's reduce op (SUM, MAX ...)
    call: bool = False                  # a call, no op of a group: new_group, destroy_process_group, a store read
    members: list[int] | None = None    # new_group's ranks as the script passed them (None: every rank)
    key: str | None = None              # a store read's key(s)
    splits: list[list[int]] | None = None   # all_to_all_single: [input split sizes, output split sizes]


@dataclass(frozen=True, slots=True)
class Begin:
    ident: int
    site: int
    seq: int
    t: int
    end: int | None = None          # an X line: begun and ended


@dataclass(frozen=True, slots=True)
class End:
    ident: int
    t: int
    peer: int | None = None


@dataclass(frozen=True, slots=True)
class Raised:
    ident: int
    t: int
    error: str


@dataclass(frozen=True, slots=True)
class Alive:
    t: int


@dataclass(frozen=True, slots=True)
class OldOp:
    """The first recorder's B line: its call site inline (`site`, ident 0), absolute time."""
    ident: Any
    site: Site
    seq: int | None
    p2p: int | None
    t: int


@dataclass(frozen=True, slots=True)
class OldEnd:
    ident: Any
    t: int
    peer: int | None


Record = Union[Header, Who, Clock, Group, Site, Begin, End, Raised, Alive, OldOp, OldEnd]


@dataclass(frozen=True, slots=True)
class FrEntry:
    rank: int | None
    pg: str
    seq: int
    op: str
    shape: list[int]
    dtype: str | None
    t: int


@dataclass(frozen=True, slots=True)
class FrDone:
    rank: int | None
    entries: int


@dataclass(frozen=True, slots=True)
class FrError:
    error: str


FrRecord = Union[FrEntry, FrDone, FrError]


# ---------------------------------------------------------------- checks, once

def whole(value: Any, what: str, low: int = 0) -> int:
    """A whole number in [low, MAX_INT]: JSON's 1e309 (inf), 1.5, true and "7" are not."""
    if type(value) is not int or not low <= value <= MAX_INT:
        raise BadRecord(f"trace record with an unusable {what}: {str(value)[:40]}")
    return value


def opt_whole(value: Any, what: str, low: int = 0) -> int | None:
    return None if value is None else whole(value, what, low)


def text(value: Any, what: str) -> str:
    if type(value) is not str or len(value) > MAX_TEXT:
        raise BadRecord(f"trace record with an unusable {what}: {str(value)[:40]}")
    return sys.intern(value)


def opt_text(value: Any, what: str) -> str | None:
    return None if value is None else text(value, what)


def shape(value: Any) -> list[int] | None:
    if value is None:
        return None
    if type(value) is not list or len(value) > MAX_DIMS:
        raise BadRecord(f"trace record with an unusable shape: {str(value)[:40]}")
    return [whole(x, "shape") for x in value]


def when(value: Any) -> int:
    """A time after the process's t0 (ns): whole, not before it, not 30 days after (an
    absurd time would stretch every view of the trace)."""
    if type(value) is not int or not 0 <= value <= MAX_SPAN_NS:
        raise BadRecord(f"trace record with an unusable time: {str(value)[:40]}")
    return value


def _garbled(payload: bytes) -> BadRecord:
    return BadRecord("garbled or truncated trace record: " + payload[:60].decode(errors="replace").strip())


def decode(payload: bytes) -> Record:
    """One trace record's payload (what follows the marker), checked."""
    payload = payload.strip()
    if payload[:1] != b"{":
        return _decode_op(payload)
    try:
        rec = json.loads(payload)
        kind = rec["k"]
    except (ValueError, KeyError, TypeError, RecursionError):     # RecursionError: 100,000 [ in a shape
        raise _garbled(payload) from None
    if not isinstance(rec, dict):
        raise _garbled(payload)
    try:
        return _decode_json(kind, rec)
    except BadRecord:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        raise BadRecord(f"trace record without a usable {exc}") from None


def _decode_op(payload: bytes) -> Record:
    fields = payload.split()
    try:
        kind = fields[0]
        if kind in (b"B", b"X"):
            if len(fields) != (6 if kind == b"X" else 5):
                raise ValueError
            ident, site, seq, t = (int(x) for x in fields[1:5])
            end = int(fields[5]) if kind == b"X" else None
            return Begin(whole(ident, "op id"), whole(site, "site"), whole(seq, "sequence number"),
                         when(t), None if end is None else when(end))
        if kind == b"E":
            if len(fields) not in (3, 4):
                raise ValueError
            peer = int(fields[3]) if len(fields) == 4 else None
            return End(whole(int(fields[1]), "op id"), when(int(fields[2])), opt_whole(peer, "peer"))
    except (ValueError, IndexError):
        raise _garbled(payload) from None
    raise _garbled(payload)


def _decode_json(kind: Any, rec: dict) -> Record:
    if kind == "S":
        return Site(ident=whole(rec["s"], "site"), op=text(rec["op"], "op"), pg=text(rec["pg"], "pg"),
                    p2p=rec.get("kind") == "p", call=rec.get("kind") == "l", nbytes=whole(rec["bytes"], "bytes"),
                    dtype=opt_text(rec.get("dtype"), "dtype"), shape=shape(rec.get("shape")),
                    peer=opt_whole(rec.get("peer"), "peer"), root=opt_whole(rec.get("root"), "root"),
                    caller=text(rec.get("caller", "?"), "caller"), api=opt_text(rec.get("api"), "api"),
                    via=opt_text(rec.get("via"), "via"), reduce=opt_text(rec.get("reduce"), "reduce"),
                    members=_members(rec.get("members")), key=opt_text(rec.get("key"), "key"),
                    splits=_splits(rec.get("splits")))
    if kind == "H":
        return Header(whole(rec["t0"], "t0"), opt_whole(rec.get("pid"), "pid"),
                      whole(rec.get("v", 1), "version"), opt_text(rec.get("rec"), "recorder"),
                      opt_whole(rec.get("cost_ns"), "cost per op"))
    if kind == "G":
        ranks = rec["ranks"]
        if type(ranks) is not list or len(ranks) > MAX_RANKS:
            raise BadRecord(f"trace record with unusable ranks: {str(ranks)[:40]}")
        return Group(text(rec["pg"], "pg"), [whole(r, "rank") for r in ranks],
                     opt_whole(rec.get("timeout_ms"), "timeout"))
    if kind == "M":
        t = rec.get("t")
        return Who(opt_whole(rec.get("rank"), "rank"), opt_whole(rec.get("node"), "node"),
                   opt_text(rec.get("host"), "host"), opt_whole(rec.get("world"), "world"),
                   opt_whole(rec.get("local_rank"), "local rank"), opt_text(rec.get("backend"), "backend"),
                   opt_whole(rec.get("pid"), "pid"), None if t is None else when(t))
    if kind == "C":
        if "error" in rec:
            return Clock(error=str(rec["error"])[:200])
        return Clock(whole(rec["offset_ns"], "clock offset", -MAX_INT), whole(rec.get("rtt_ns", 0), "round trip"))
    if kind == "T":
        return Alive(when(rec["t"]))
    if kind == "R":
        return Raised(whole(rec["i"], "op id"), when(rec["t"]), text(rec.get("error", "?"), "error")[:300])
    if kind == "B":                      # the first recorder: everything inline
        p2p = opt_whole(rec.get("p2p"), "p2p number")
        site = Site(ident=0, op=text(rec["op"], "op"), pg=text(rec["pg"], "pg"), p2p=p2p is not None,
                    nbytes=whole(rec.get("bytes", 0), "bytes"), dtype=opt_text(rec.get("dtype"), "dtype"),
                    shape=shape(rec.get("shape")), peer=opt_whole(rec.get("peer"), "peer"),
                    root=opt_whole(rec.get("root"), "root"), caller=text(rec.get("caller", "?"), "caller"),
                    api=None, via=None)
        return OldOp(rec["i"], site, opt_whole(rec.get("seq"), "sequence number"), p2p, whole(rec["t"], "time"))
    if kind == "E":
        peer = rec.get("peer")
        return OldEnd(rec["i"], whole(rec["t"], "time"), peer if type(peer) is int else None)
    raise BadRecord(f"trace record of an unknown kind: {str(kind)[:20]}")


def decode_fr(payload: bytes) -> FrRecord:
    """One Flight Recorder record's payload, checked."""
    try:
        rec = json.loads(payload)
    except (ValueError, RecursionError):
        raise BadRecord("garbled or truncated Flight Recorder record") from None
    if not isinstance(rec, dict):
        raise BadRecord("garbled or truncated Flight Recorder record")
    try:
        if "done" in rec:
            return FrDone(opt_whole(rec.get("rank"), "rank"), whole(rec["done"], "count"))
        if "error" in rec and "seq" not in rec:
            return FrError(str(rec["error"])[:200])
        entry_shape = rec.get("shape") or []
        return FrEntry(rank=opt_whole(rec.get("rank"), "rank"), pg=text(str(rec["pg"]), "pg"),
                       seq=whole(rec["seq"], "sequence number"), op=text(str(rec["op"]), "op"),
                       shape=shape(entry_shape) or [], dtype=_fr_dtype(rec.get("dtype")),
                       t=whole(rec.get("t") or 0, "time"))
    except BadRecord:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRecord(f"Flight Recorder record without a usable {exc}") from None


_FR_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
              "Long": "int64", "Int": "int32", "Byte": "uint8", "Char": "int8", "Bool": "bool"}


def _fr_dtype(name: Any) -> str | None:
    return _FR_DTYPES.get(name, name) if isinstance(name, str) else None


# ---------------------------------------------------------------- what a writer makes

def encode(rec: Record | FrRecord) -> bytes:
    """One typed record as its marked line (a newline at its end): what `decode` (or
    `decode_fr`) reads back as the same record. Begin and End are the %-templates above."""
    return _ENCODERS[type(rec)](rec)


def _header(r: Header) -> bytes:
    out: dict[str, Any] = {"k": "H", "v": r.version, "t0": r.t0, "pid": r.pid}
    if r.recorder is not None:
        out["rec"] = r.recorder
    if r.cost_ns is not None:
        out["cost_ns"] = r.cost_ns
    return trace_line(out)


def _who(r: Who) -> bytes:
    return trace_line({"k": "M", **_present(rank=r.rank, world=r.world, node=r.node, local_rank=r.local_rank,
                                            backend=r.backend, host=r.host, pid=r.pid, t=r.t)})


def _clock(r: Clock) -> bytes:
    if r.error is not None:
        return trace_line({"k": "C", "error": r.error[:200]})
    return trace_line({"k": "C", "offset_ns": r.offset_ns, "rtt_ns": r.rtt_ns})


def _members(value: Any) -> list[int] | None:
    if value is None:
        return None
    if type(value) is not list or len(value) > MAX_RANKS:
        raise BadRecord(f"trace record with unusable members: {str(value)[:40]}")
    return [whole(r, "rank") for r in value]


def _splits(value: Any) -> list[list[int]] | None:
    if value is None:
        return None
    if type(value) is not list or len(value) != 2 or any(type(v) is not list or len(v) > MAX_RANKS for v in value):
        raise BadRecord(f"trace record with unusable splits: {str(value)[:40]}")
    return [[whole(x, "split size") for x in v] for v in value]


def _site(r: Site) -> bytes:
    out: dict[str, Any] = {"k": "S", "s": r.ident, "op": r.op, "pg": r.pg,
                           "kind": "l" if r.call else "p" if r.p2p else "c", "bytes": r.nbytes}
    out.update(_present(dtype=r.dtype, shape=r.shape, peer=r.peer, root=r.root, reduce=r.reduce,
                        members=r.members, key=r.key, splits=r.splits))
    out["caller"] = r.caller
    out.update(_present(api=r.api, via=r.via))
    return trace_line(out)


def _begin(r: Begin) -> bytes:
    if r.end is None:
        return BEGIN % (r.ident, r.site, r.seq, r.t)
    return BEGUN_ENDED % (r.ident, r.site, r.seq, r.t, r.end)


def _end(r: End) -> bytes:
    return END % (r.ident, r.t) if r.peer is None else END_FROM % (r.ident, r.t, r.peer)


def _old_op(r: OldOp) -> bytes:
    site = r.site
    return trace_line({"k": "B", "i": r.ident, "op": site.op, "pg": site.pg, "bytes": site.nbytes,
                       "caller": site.caller, "t": r.t,
                       **_present(seq=r.seq, p2p=r.p2p, peer=site.peer, root=site.root, shape=site.shape,
                                  dtype=site.dtype)})


def _old_end(r: OldEnd) -> bytes:
    return trace_line({"k": "E", "i": r.ident, "t": r.t, **_present(peer=r.peer)})


def _fr_entry(r: FrEntry) -> bytes:
    return fr_line({"rank": r.rank, "pg": r.pg, "seq": r.seq, "op": r.op, "shape": r.shape, "dtype": r.dtype,
                    "t": r.t})


def _present(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


_ENCODERS: dict[type, Any] = {
    Header: _header, Who: _who, Clock: _clock, Site: _site, Begin: _begin, End: _end,
    Group: lambda r: trace_line({"k": "G", "pg": r.pg, "ranks": r.ranks}
                                | ({"timeout_ms": r.timeout_ms} if r.timeout_ms is not None else {})),
    Raised: lambda r: trace_line({"k": "R", "i": r.ident, "t": r.t, "error": r.error[:300]}),
    Alive: lambda r: trace_line({"k": "T", "t": r.t}),
    OldOp: _old_op, OldEnd: _old_end, FrEntry: _fr_entry,
    FrDone: lambda r: fr_line({"rank": r.rank, "done": r.entries}),
    FrError: lambda r: fr_line({"error": r.error[:200]}),
}
