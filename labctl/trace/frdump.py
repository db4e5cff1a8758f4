"""torch's own Flight Recorder dumps, read without trusting them (issue 50): the files a job
that never ran in the lab wrote (TORCH_FR_DUMP_TEMP_FILE=<prefix>: `<prefix><rank>`;
`_dump_fr_trace()` / `_dump_nccl_trace()`, pickle; `_dump_fr_trace_json()` and the debug
server's, JSON; torchcomms' FlightRecorderHook writes the same model) -> typed values ->
the trace model's `Op`s, so that the lab's own matcher names who, what and where.

Pure but for reading the files. A pickle is read by an unpickler that resolves no global
at all: torch's dumps hold dicts, lists, tuples, str, int, float, bool and None only, so
a dump that names any class or function is refused, never run. Sizes and counts are
bounded. Standard library only."""
from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads._protocol.ops import ONE_OP_APIS, OBJECT_APIS, P2P, traced_name

from .model import Op

MAX_FILE_BYTES = 256 << 20          # one rank's dump (torch's default ring: 2,000 entries, ~2 MB)
MAX_TOTAL_BYTES = 1 << 30           # every rank's together
MAX_FILES = 4096                    # ranks read from one folder
MAX_ENTRIES = 100_000               # entries kept per rank (the newest: the ring's end)
MAX_FRAMES = 64                     # frames kept per entry (innermost first)
MAX_TEXT = 4096                     # characters kept of a name, a path, a dtype
NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<json>\.json)?$")


class BadDump(ValueError):
    """Not a Flight Recorder dump, or one past the bounds: one line, exit 2."""


@dataclass(frozen=True)
class Frame:
    name: str
    file: str
    line: int


@dataclass(frozen=True)
class Entry:
    """One entry of torch's ring (torch/distributed/flight_recorder: the fields it reads)."""
    record_id: int
    pg_id: int | None
    pg_name: str                    # process_group[0]: the group's name ("0", "1" ...)
    pg_desc: str                    # process_group[1]: "default_pg", a description, "undefined"
    seq: int                        # collective_seq_id
    p2p_seq: int                    # p2p_seq_id
    op_id: int | None
    profiling_name: str             # "gloo:all_reduce", "nccl:send 0->1"
    input_sizes: list[list[int]]
    input_dtypes: list[str]
    output_sizes: list[list[int]]
    output_dtypes: list[str]
    state: str                      # scheduled, started, completed
    time_created_ns: int
    completed_ns: int | None        # time_discovered_completed_ns
    is_p2p: bool
    frames: tuple[Frame, ...] = ()

    @property
    def group(self) -> str:
        """The lab's name of its group (as the lab's own FR records name it)."""
        desc = self.pg_desc
        return desc if desc and desc != "undefined" else f"pg{self.pg_name}"


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]          # empty: not said (gloo leaves its pg_config nameless)


@dataclass
class Dump:
    """One rank's dump."""
    rank: int
    path: Path
    kind: str                       # "pickle" or "json"
    version: str
    entries: list[Entry]
    groups: dict[str, Group]        # pg_config by the group's name
    dropped: int = 0                # entries past MAX_ENTRIES, left out (the oldest)

    @property
    def backend(self) -> str:
        names = {e.profiling_name.partition(":")[0] for e in self.entries if ":" in e.profiling_name}
        return "/".join(sorted(names)) or "?"

    @property
    def has_frames(self) -> bool:
        return any(e.frames for e in self.entries)

    @property
    def has_states(self) -> bool:
        """Whether its entries say whether they completed (NCCL's do; gloo's all stay
        "scheduled")."""
        return any(e.state != "scheduled" or e.completed_ns for e in self.entries)


class _NoGlobals(pickle.Unpickler):
    """An unpickler that resolves nothing: a dump that names a class or a function (the
    way a pickle runs code) is refused before anything is called."""

    def find_class(self, module: str, name: str) -> Any:
        raise BadDump(f"it names {module[:80]}.{name[:80]}, which no Flight Recorder dump does "
                      "(refused, not run)")

    def persistent_load(self, pid: Any) -> Any:
        raise BadDump("it holds a persistent id, which no Flight Recorder dump does")


def _raw(data: bytes) -> tuple[Any, str]:
    """The dump's top object and its kind, from a pickle or from JSON."""
    head = data.lstrip()[:1]
    if head == b"{":
        try:
            return json.loads(data.decode("utf-8")), "json"
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise BadDump(f"not JSON ({str(exc)[:120]})") from None
    if data[:1] != b"\x80":
        raise BadDump("neither a pickle nor JSON")
    try:
        return _NoGlobals(io.BytesIO(data)).load(), "pickle"
    except BadDump:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, UnicodeDecodeError, RecursionError, MemoryError, OverflowError) as exc:
        raise BadDump(f"a broken or cut pickle ({type(exc).__name__}: {str(exc)[:120]})") from None


def _int(v: Any, default: int | None = None) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,30}", v.strip()):
        return int(v)               # the JSON dump writes pg_status' numbers as text
    return default


def _text(v: Any) -> str:
    return v[:MAX_TEXT] if isinstance(v, str) else ""


def _dtypes(value: Any) -> list[str]:
    return [_text(d) for d in value[:64]] if isinstance(value, (list, tuple)) else []


def _sizes(v: Any) -> list[list[int]]:
    if not isinstance(v, (list, tuple)):
        return []
    return [[x for x in s[:64] if type(x) is int] for s in v[:64] if isinstance(s, (list, tuple))]


def _frames(v: Any) -> tuple[Frame, ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    return tuple(Frame(_text(f.get("name")), _text(f.get("filename")), _int(f.get("line"), 0) or 0)
                 for f in v[:MAX_FRAMES] if isinstance(f, dict))


def _entry(e: Any) -> Entry | None:
    if not isinstance(e, dict) or not isinstance(e.get("profiling_name"), str):
        return None
    pg = e.get("process_group")
    pg = list(pg)[:2] if isinstance(pg, (list, tuple)) else []
    pg += [""] * (2 - len(pg))
    done = _int(e.get("time_discovered_completed_ns"))
    return Entry(record_id=_int(e.get("record_id"), 0) or 0, pg_id=_int(e.get("pg_id")), pg_name=_text(pg[0]),
                 pg_desc=_text(pg[1]), seq=_int(e.get("collective_seq_id"), 0) or 0,
                 p2p_seq=_int(e.get("p2p_seq_id"), 0) or 0, op_id=_int(e.get("op_id")),
                 profiling_name=_text(e["profiling_name"]), input_sizes=_sizes(e.get("input_sizes")),
                 input_dtypes=_dtypes(e.get("input_dtypes")), output_sizes=_sizes(e.get("output_sizes")),
                 output_dtypes=_dtypes(e.get("output_dtypes")), state=_text(e.get("state")) or "scheduled",
                 time_created_ns=_int(e.get("time_created_ns"), 0) or 0, completed_ns=done or None,
                 is_p2p=e.get("is_p2p") is True, frames=_frames(e.get("frames")))


def _groups(config: Any) -> dict[str, Group]:
    if not isinstance(config, dict):
        return {}
    out = {}
    for key, g in list(config.items())[:MAX_FILES]:
        if not isinstance(g, dict):
            continue
        name = _text(g.get("name")) or _text(key)
        ranks = _text(g.get("ranks"))
        said = tuple(int(x) for x in re.findall(r"\d+", ranks)) if re.fullmatch(r"\[[\d,\s]*\]", ranks) else ()
        if name:
            out[name] = Group(name, _text(g.get("desc")), said)
    return out


def decode(data: bytes, rank: int, path: Path = Path("-")) -> Dump:
    """One rank's dump from its bytes (pickle or JSON); BadDump for anything else."""
    top, kind = _raw(data)
    if not isinstance(top, dict) or "entries" not in top or not isinstance(top.get("entries"), list):
        raise BadDump("no `entries` list at its top")
    raw = top["entries"]
    dropped = max(0, len(raw) - MAX_ENTRIES)
    entries = [e for e in map(_entry, raw[dropped:]) if e is not None]
    version = top.get("version")
    return Dump(rank=rank, path=path, kind=kind, version=version if isinstance(version, str) else str(version or "?"),
                entries=sorted(entries, key=lambda e: e.record_id), groups=_groups(top.get("pg_config")),
                dropped=dropped)


def _read(path: Path, budget: list[int]) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise BadDump(f"{path}: {size} bytes, more than any dump this reads ({MAX_FILE_BYTES >> 20} MiB)")
        budget[0] -= size
        if budget[0] < 0:
            raise BadDump(f"{path}: the dumps hold more than {MAX_TOTAL_BYTES >> 20} MiB together")
        with open(path, "rb") as f:
            return f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BadDump(f"{path}: {exc.strerror or exc}") from None


def dump_files(path: Path) -> dict[int, Path]:
    """rank -> its dump file: `path` itself (its name ends in the rank; else rank 0), or the
    files of a folder named `<prefix><rank>` (or `<prefix><rank>.json`), of one prefix."""
    if not path.exists():
        raise BadDump(f"{path}: no such file or folder")
    if path.is_file():
        m = NAME.match(path.name)
        return {int(m.group("rank")) if m else 0: path}
    if not path.is_dir():
        raise BadDump(f"{path}: neither a file nor a folder")
    by_prefix: dict[str, dict[int, Path]] = {}
    try:
        names = sorted(p for p in path.iterdir() if not p.name.startswith(".") and p.is_file())
    except OSError as exc:
        raise BadDump(f"{path}: {exc.strerror or exc}") from None
    for p in names[:MAX_FILES * 4]:
        m = NAME.match(p.name)
        if m:
            ranks = by_prefix.setdefault(m.group("prefix"), {})
            if int(m.group("rank")) not in ranks or not m.group("json"):   # the pickle over its JSON twin
                ranks[int(m.group("rank"))] = p
    if not by_prefix:
        raise BadDump(f"{path}: no dump in it (files named <prefix><rank>, as TORCH_FR_DUMP_TEMP_FILE writes)")
    if len(by_prefix) > 1:
        counts = sorted(((len(v), k) for k, v in by_prefix.items()), reverse=True)
        if counts[0][0] == counts[1][0]:
            raise BadDump(f"{path}: dumps of several prefixes ({', '.join(repr(k) for _, k in counts[:4])}); "
                          "give one rank's file or a folder of one job's dumps")
    files = max(by_prefix.values(), key=len)
    if len(files) > MAX_FILES:
        raise BadDump(f"{path}: {len(files)} dumps, more than {MAX_FILES}")
    return files


def load(path: str | Path) -> list[Dump]:
    """Every rank's dump under `path` (a file or a folder), by rank; BadDump (one line) for
    a path without one, a file that is none, or one past the bounds."""
    path = Path(path)
    budget = [MAX_TOTAL_BYTES]
    dumps = []
    for rank, file in sorted(dump_files(path).items()):
        data = _read(file, budget)
        try:
            dumps.append(decode(data, rank, file))
        except BadDump as exc:
            raise BadDump(f"{file}: not a Flight Recorder dump: {exc}") from None
    return dumps


# ---------------------------------------------------------------- entries -> the trace's ops

_NAMES = {"all_reduce_barrier": "barrier", "_broadcast_oop": "broadcast", "_reduce_oop": "reduce",
          "_all_gather_base": "all_gather_into_tensor", "all_gather_v": "all_gather",
          "_reduce_scatter_base": "reduce_scatter_tensor", "reduce_scatter_v": "reduce_scatter",
          "ALLGATHER_coalesced": "all_gather_into_tensor_coalesced",
          "REDUCE_SCATTER_coalesced": "reduce_scatter_tensor_coalesced",
          "allreduce_coalesced": "all_reduce_coalesced", "all_to_all_v_single": "all_to_all_single",
          "recvAnySource": "recv", "coalesced": "batch_p2p_ops"}
_P2P_NAME = re.compile(r"^(?P<op>send|recv) (?P<me>\d+)(?:->|<-)(?P<peer>\d+)$")   # NCCL: "send 0->1", "recv 1<-0"
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
           "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "ComplexFloat": "complex64", "ComplexDouble": "complex128"}
_APIS = ONE_OP_APIS | OBJECT_APIS | {"batch_isend_irecv", "send_object_list", "recv_object_list"}
_PYTHON_OWN = re.compile(r"/lib/python\d+(?:\.\d+)?/(?!.*-packages/)|^<frozen |/typing_extensions\.py$"
                         r"|/workloads/_trace/")     # the last: the lab's recorder, in a lab run's dumps


def op_name(profiling_name: str) -> tuple[str, int | None]:
    """The lab's op name (workloads/_protocol/ops.py) of an entry's profiling name, and the
    peer a p2p name carries (a group rank): "gloo:all_reduce" -> all_reduce, "nccl:send
    0->1" -> (send, 1), "nccl:_all_gather_base" -> all_gather_into_tensor."""
    body = profiling_name.partition(":")[2] if ":" in profiling_name else profiling_name
    m = _P2P_NAME.match(body.strip())
    if m:
        return m.group("op"), int(m.group("peer"))
    word = (body.split() or ["?"])[0]
    return _NAMES.get(word) or traced_name(word), None


def _torch_own(file: str) -> bool:
    return "/torch/" in file.replace("\\", "/") or "/torchcomms/" in file


def where_called(frames: tuple[Frame, ...]) -> tuple[str, str | None]:
    """(file:line of the innermost frame that is neither torch's nor Python's own, "?"
    without one; the outermost torch.distributed function on the way: all_gather_object for
    the all_gather it makes). Frames come innermost first."""
    api = None
    for i, f in enumerate(frames):
        path = f.file.replace("\\", "/")
        if _torch_own(path):
            if "/distributed/" in path and f.name in _APIS:
                api = f.name
            continue
        if _PYTHON_OWN.search(path) or not path:
            continue
        return f"{f.file}:{f.line}", _enclosing(frames[i + 1:]) or api
    return "?", api


def _enclosing(outer: tuple[Frame, ...]) -> str | None:
    """The torch.distributed call the script's frame runs inside, made by the script's own
    line further out (a `__getstate__` that all_reduces while broadcast_object_list pickles
    the object: sites.enclosing_call's rule); None: not nested."""
    found = None
    for f in outer:
        path = f.file.replace("\\", "/")
        if _torch_own(path):
            found = f.name if "/distributed/" in path and f.name in _APIS else found if "/distributed/" in path else None
        elif not _PYTHON_OWN.search(path) and path:
            return found
    return None


def ops_of(dump: Dump) -> list[Op]:
    """The rank's entries as the trace's ops. Ended: an entry torch saw complete; where its
    entries never say (gloo's stay "scheduled"), every entry but the rank's newest (its
    calls return when done, so it issued the next one after), which never ended."""
    states = dump.has_states
    newest = dump.entries[-1].record_id if dump.entries else None
    ops = []
    for e in dump.entries:
        name, peer = op_name(e.profiling_name)
        p2p = e.is_p2p or name in P2P
        if states:
            end = (e.completed_ns or e.time_created_ns) if e.state == "completed" else None
        else:
            end = None if p2p or e.record_id == newest else e.time_created_ns
        # scatter's input is the source's alone (empty elsewhere): its output is what agrees
        sizes, dtypes = (e.output_sizes, e.output_dtypes) if name == "scatter" else (e.input_sizes, e.input_dtypes)
        caller, api = where_called(e.frames)
        dtype = dtypes[0] if dtypes else None
        ops.append(Op(rank=dump.rank, op=name, pg=e.group, seq=None if p2p else e.seq,
                      p2p=e.p2p_seq if p2p else None, peer=peer, root=None,
                      shape=sizes[0] if sizes else None, dtype=_DTYPES.get(dtype, dtype) if dtype else None,
                      nbytes=0, caller=caller, start=e.time_created_ns, end=end, api=api))
    return ops

