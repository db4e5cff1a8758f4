"""Call sites: which frame is the user's (the script's or the workload's line an op was
called from), and the S record that says, once per call site, what repeats between its
ops (op, group, dtype, shape, bytes, peer or root, caller); an op's B line names its site.
"""
from __future__ import annotations

import contextlib
import itertools
import os
from typing import Any

from .._protocol import frames, ops, records
from .bound import T
from .sink import _new_sink, proc, write

MAX_SITES = 20_000                  # call sites remembered; past that they are numbered afresh
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep     # the recorder's own files

_sites: dict[tuple, int] = {}        # what repeats between ops of one call site -> its number
_site_ids = itertools.count(1)


def _site(route: Any, dtype: Any, shape: Any, nbytes: Any, where: Any, code: Any, lasti: int,
          name: Any, api: Any, reduce: Any = None, splits: Any = None) -> int:
    """The number of a call site, with its S line the first time it is seen. `reduce`: a
    reducing op's ReduceOp.RedOpType (SUM, MAX ...), None for the rest; `splits`:
    all_to_all_single's (input split sizes, output split sizes) as tuples, None for the rest."""
    key = (route.rid, id(code), lasti, shape, dtype, nbytes, where, name, api, reduce, splits)   # id: a code object's hash is not cached
    site = _sites.get(key)
    if site is not None:
        return site
    if len(_sites) >= MAX_SITES:
        _sites.clear()
    site = _sites[key] = next(_site_ids)
    if api in ops.ONE_OP_APIS:
        name = api                      # send() posts an isend and waits; all_gather_into_tensor calls all_gather_single
    if nbytes is None:
        nbytes = dtype.itemsize * _numel(shape)
    where = int(where) if where is not None else None
    write(records.Site(
        ident=site, op=name or route.op, pg=route.pg, p2p=route.p2p, nbytes=int(nbytes),
        dtype=_dtype_name(dtype) if dtype is not None else None,
        shape=[int(x) for x in shape] if dtype is not None else None,
        peer=where if route.p2p else None, root=None if route.p2p else where,
        caller=f"{code.co_filename}:{_line_of(code, lasti)}" if code is not None else "?",
        api=api or None, via="c++" if route.via_cpp else None,
        reduce=getattr(reduce, "name", str(reduce)) if reduce is not None else None,
        splits=[list(splits[0]), list(splits[1])] if splits is not None else None))
    return site


def begin(ident: int, route: Any, seq: int, dtype: Any, shape: Any, nbytes: Any, where: Any,
          code: Any, lasti: int, name: Any, api: Any, entered: int, splits: Any = None) -> None:
    """Op `ident`'s B line, written before torch is called: a rank that hangs or dies in
    the op has said which op it was in."""
    site = _site(route, dtype, shape, nbytes, where, code, lasti, name, api, None, splits)
    (proc.sink or _new_sink()).write(records.BEGIN % (ident, site, seq, entered - proc.t0))


def split_sizes(inputs: Any, outputs: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """all_to_all_single's split sizes as the site keeps them; None where either is not
    given (even splits: nothing to compare across ranks beyond the shape)."""
    try:
        if not inputs or not outputs:
            return None
        return tuple(int(x) for x in inputs), tuple(int(x) for x in outputs)
    except (TypeError, ValueError):
        return None


def _numel(shape: Any) -> int:
    n = 1
    for x in shape:
        n *= int(x)
    return n


_line_tables: dict[Any, list] = {}


def _line_of(code: Any, lasti: int) -> int:
    """The source line of instruction offset `lasti` in `code` (co_lines, once per code)."""
    table = _line_tables.get(code)
    if table is None:
        table = _line_tables[code] = [(start, end, line) for start, end, line in code.co_lines()]
    for start, end, line in table:
        if start <= lasti < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


def _dtype_name(dtype: Any) -> str:
    name = str(dtype)
    return name[6:] if name.startswith("torch.") else name


# ---------------------------------------------------------------- which frame is the user's

_torch_dir = ""
_c10d_file = ""
_USER, _PLAIN, _GRAPH, _TORCH = 1, 0, 2, 3     # _GRAPH: torch.compile's generated graph code (<eval_with_key>)
# _TORCH: torch's machinery outside torch.distributed (autograd's backward, nn.Module's call):
# a public torch.distributed function inside it was called by torch (DDP's comm hook from
# the backward), not by the script's line
# Both keyed by id(code): a code object's hash is not cached, and hashes its constants,
# nested functions' code included (6.9 µs for workloads/bench.py's module: every op of a
# loop at a script's top level paid it). The codes are kept in _codes, so no id is reused.
_frames: dict[int, Any] = {}         # id(code) -> its role: _USER, _PLAIN, _GRAPH, _TORCH, or the torch.distributed function's name
_names: dict[int, Any] = {}          # id(code of the direct caller) -> the op's name (isend ...) or None
_methods: dict[int, Any] = {}        # id(code) -> a public torch.distributed method's name, or None
_codes: list[Any] = []               # every code in either: alive, so that their ids stay theirs
_WRAPPERS = frames.TORCH_WRAPPERS
_PUBLIC: frozenset[str] = frozenset()


def bind(torch: Any) -> None:
    """Where torch is (its frames are not the user's) and its public c10d functions."""
    global _torch_dir, _c10d_file, _PUBLIC
    c10d = torch.distributed.distributed_c10d
    _torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    _c10d_file = os.path.abspath(c10d.__file__)
    _PUBLIC = frozenset(n for n in getattr(c10d, "__all__", ()) if not n[0].isupper())


@contextlib.contextmanager
def forgetting_frames() -> Any:
    """Frames classified inside are forgotten after (the start-up measurement, cost.py:
    before install torch's folder is not known, and they would stay classified wrong); a
    frame there outside the recorder is the user's."""
    global _torch_dir
    known, kept, torch_dir = {id(c) for c in _codes}, len(_codes), _torch_dir
    if not torch_dir:
        _torch_dir = os.sep + "\0"     # no path: the first frame outside the recorder is the user's
    try:
        yield
    finally:
        _torch_dir = torch_dir
        for table in (_frames, _names, _methods):
            for key in [key for key in table if key not in known]:
                del table[key]
        del _codes[kept:]


def _public_function(code: Any, path: str) -> bool:
    """A module-level function of a public torch.distributed package: the call a script
    could have made (all_gather_object, all_gather_tensor, allreduce_hook). A method
    (FSDP2's FSDPParamGroup.pre_forward) or a function of a private package
    (fsdp/_fully_shard/'s foreach_all_gather) is the machinery between the script's call
    and the collective, not a call a script makes."""
    if "." in getattr(code, "co_qualname", code.co_name):
        return False
    inside = path.split(os.sep + "distributed" + os.sep, 1)[1]
    return not any(part.startswith("_") for part in inside.split(os.sep)[:-1])


def _public_method(code: Any) -> str | None:
    """The name of a public torch.distributed class's public method (DTensor.full_tensor,
    a pipeline schedule's step), else None: the call the script's line made when it is the
    frame right inside the script's (the collective DTensor issues under it comes from
    private machinery, `redistribute_local_tensor`)."""
    path, qualname = code.co_filename, getattr(code, "co_qualname", code.co_name)
    found = None
    if _torch_dir and path.startswith(_torch_dir) and os.sep + "distributed" + os.sep in path:
        parts = qualname.split(".")
        inside = path.split(os.sep + "distributed" + os.sep, 1)[1]
        if len(parts) == 2 and all(p[:1].isalpha() for p in parts) and "<" not in qualname \
                and not any(part.startswith("_") for part in inside.split(os.sep)[:-1]):
            found = parts[1]
    _methods[id(code)] = found
    _codes.append(code)
    return found


def _classify(code: Any) -> Any:
    path = code.co_filename
    if path.startswith("<eval_with_key>"):
        role = _GRAPH
    elif path.startswith(_HERE):
        role = _PLAIN
    elif path.startswith(_torch_dir):
        distributed = os.sep + "distributed" + os.sep in path
        role = code.co_name if distributed and code.co_name[:1].isalpha() \
            and code.co_name not in _WRAPPERS and _public_function(code, path) else _PLAIN if distributed else _TORCH
        # a public torch.distributed function (all_gather_object ...), else torch's machinery
    elif frames.user_frame(path):
        role = _USER
    else:
        role = _PLAIN                   # another library's (accelerate's gather): its caller is the user's
    _frames[id(code)] = role
    _codes.append(code)
    return role


class _Origin:
    """Where an op of a torch.compile'd graph came from in the script (the file and line
    its FX node recorded in `stack_trace`), standing in for a code object: the generated
    graph's own line is no line of the script's, and dynamo's rewritten frame of the
    function says only its first line."""
    __slots__ = ("co_filename", "co_firstlineno", "__weakref__")

    def __init__(self, file: str, line: int):
        self.co_filename, self.co_firstlineno = file, line

    def co_lines(self) -> Any:
        yield 0, 1 << 30, self.co_firstlineno


_origins: dict[tuple[int, int], Any] = {}     # (id(graph code), its line) -> _Origin or None
_ASSIGNED = None                              # re: the name a generated line assigns


def _graph_origin(frame: Any) -> Any:
    """The script's line behind the generated graph line `frame` runs (None: not found):
    the FX node the line assigns, and the last frame of its stack trace outside torch."""
    global _ASSIGNED
    key = (id(frame.f_code), frame.f_lineno)
    if key in _origins:
        return _origins[key]
    found = None
    try:
        import linecache
        import re
        _ASSIGNED = _ASSIGNED or re.compile(r"\s*(\w+)\s*=")
        assigned = _ASSIGNED.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
        graph = getattr(frame.f_locals.get("self"), "graph", None)
        if assigned is not None and graph is not None:
            node = next((n for n in graph.nodes if n.name == assigned.group(1)), None)
            trace = str(node.meta.get("stack_trace") or "") if node is not None else ""
            mine = [(f, int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', trace)
                    if not f.startswith((_torch_dir, _HERE, "<"))]
            if mine:
                found = _Origin(*mine[-1])
                _codes.append(found)
    except Exception:          # noqa: BLE001 - a graph we cannot read: the next frame out says where
        found = None
    _origins[key] = found
    return found


def _where(frame: Any) -> tuple[Any, int, str | None]:
    """(code, instruction offset) of the first frame outside torch and this recorder (the
    script's or the workload's call), and the outermost public torch.distributed function
    on the way (all_gather_object for the all_gather it makes; None when called directly).
    The offset, not the line: `f_lineno` scans the code's line table, 17 µs at the end of a
    3,000-line module; the site's S line, written once, has the line (`_line_of`)."""
    api = None
    get = _frames.get
    inner = None
    while frame is not None:
        code = frame.f_code
        role = get(id(code))
        if role is None:
            role = _classify(code)
        if role is _USER:
            if inner is not None:
                method = _methods.get(id(inner), False)
                if method is False:
                    method = _public_method(inner)
                api = method or api
            return code, frame.f_lasti, api
        if role is _GRAPH:
            origin = _graph_origin(frame)
            if origin is not None:
                return origin, 0, api
        elif role is _TORCH:
            api = None                  # what torch's machinery called is not the script's call
        elif role is not _PLAIN:
            api = role
        inner = code
        frame = frame.f_back
    return None, 0, api


def enclosing_call(code: Any, frame: Any) -> str | None:
    """The public torch.distributed function that the script's frame running `code` (found
    from `frame` outward) runs inside, called by the script's own line further out: a
    `__getstate__` that all_reduces while broadcast_object_list pickles the object. Its op
    is then that call's, the one the other ranks wait in. None: not nested (torch's
    machinery on the way, autograd calling a comm hook, breaks it). Once per call site."""
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    found = None
    frame = frame.f_back if frame is not None else None
    while frame is not None:
        role = _frames.get(id(frame.f_code))
        if role is None:
            role = _classify(frame.f_code)
        if role is _USER:
            return found
        if role is _TORCH or role is _GRAPH:
            found = None
        elif role is not _PLAIN:
            found = role
        frame = frame.f_back
    return None


def _op_name(code: Any) -> str | None:
    """The name the direct caller gives the op: the torch.distributed function that called
    the group's method (isend and send both call `group.send`), else None."""
    name = _names.get(id(code), False)
    if name is False:
        _codes.append(code)
        name = _names[id(code)] = code.co_name if code.co_filename == _c10d_file \
            and code.co_name in _PUBLIC else None
    return name


def _tensor_info(value: Any) -> tuple[Any, Any, int | None]:
    """(dtype, shape, bytes) of an op's input: a tensor, or a list (of lists) of them:
    the first tensor's dtype and shape, every tensor's bytes. Bytes None: one tensor's,
    worked out from dtype and shape when the site's S line is written."""
    tensor_class = T.tensor
    if isinstance(value, tensor_class):
        return value.dtype, value.shape, None
    if type(value) is list and len(value) == 1 and isinstance(value[0], tensor_class):
        return value[0].dtype, value[0].shape, None          # group.allreduce([tensor], opts)
    if isinstance(value, (list, tuple)):
        flat = []
        for v in value:
            if isinstance(v, (list, tuple)):
                flat.extend(v)
            else:
                flat.append(v)
        tensors = [v for v in flat if isinstance(v, tensor_class)]
        if tensors:
            return tensors[0].dtype, tensors[0].shape, sum(t.nbytes for t in tensors)
    return None, None, 0


def _forked() -> None:
    """A forked child's file describes its own call sites."""
    _sites.clear()


os.register_at_fork(after_in_child=_forked)
