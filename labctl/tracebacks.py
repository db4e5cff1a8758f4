"""What a rank's lines say went wrong: its last error (`ErrorTracker`: a Python
traceback's exception with the innermost frame in the user's or a workload's code and the
torch.distributed call it raised in, or the line a native abort printed), the last
traceback in a rank log's lines, what the script's line called on the way
(`called_on_line`), whether an error only says a peer went away (`peer_gone`) or is
torchrun's wrapper of a failed worker (`launcher_wrapper`), and the one rule for which
frame is the user's (`own_frame`), which labctl/stackdumps.py reads a stack dump with.
The node-log split (labctl/logs.py) feeds a tracker each rank's lines.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Iterable

from workloads._protocol import MARKER_PREFIX
from workloads._protocol.frames import TORCH_WRAPPERS, user_frame

_PEER_GONE = re.compile(r"Connection (closed|reset) by peer|Broken pipe|ECONNRESET|"
                        r"EPIPE|Connection refused|peer closed|recvBytes|Socket closed", re.I)
_TORCH_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')
# torch's collective fingerprints (TORCH_DISTRIBUTED_DEBUG=DETAIL) spell out every tensor
# option; shortened, the two ranks' op and shapes fit in the quoted line.
_TENSOR_OPTIONS = re.compile(r"TensorOptions\((?:[^()]|\([^()]*\))*\)")
DIST_WRAPPERS = TORCH_WRAPPERS          # torch's own wrappers around a torch.distributed call: no call's name


# torchrun's own wrapper of a failed worker (its summary follows): says only that a rank
# failed, never why; the rank's own error file or log says that
_LAUNCHER_WRAPPER = re.compile(r"^(?:torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError\b")


def launcher_wrapper(error: str | None) -> bool:
    """The exception torchrun's agent raises when a worker failed (ChildFailedError)."""
    return bool(error and _LAUNCHER_WRAPPER.match(error))


def peer_gone(error: str | None) -> bool:
    """An error that only says a *peer* went away: a symptom, rarely the cause."""
    return bool(error and _PEER_GONE.search(error))


# a collective's own timeout: gloo's transport ("Timed out waiting 10000ms for send
# operation to complete"), NCCL's watchdog ("Watchdog caught collective operation timeout")
_COLLECTIVE_TIMEOUT = re.compile(r"Timed out waiting \d+ ?ms for (?:send|recv) operation|"
                                 r"Watchdog caught collective operation timeout")


def timed_out_waiting(error: str | None) -> bool:
    """An error that says the rank's collective timed out waiting for its peers: a symptom
    of a peer that never came, when the records name one."""
    return bool(error and _COLLECTIVE_TIMEOUT.search(error))


# What a process prints when it dies in C++ (libstdc++'s verbose terminate handler, as
# when gloo throws from its own thread: no Python exception, no error file, SIGABRT) or
# in the interpreter itself (faulthandler).
_TERMINATE_THROWN = re.compile(r"^terminate called after throwing an instance of '(.+)'$")
_TERMINATE_OTHER = re.compile(r"^terminate called (without an active exception|recursively)$")
_WHAT = re.compile(r"^\s*what\(\):\s+(.*)$")
_FATAL_PYTHON = re.compile(r"^Fatal Python error: .+$")
# the bytes that begin those lines (written straight to fd 2: no prefix of torch's); the
# reader looks closer at a line that begins so, or a chunk holding one
NATIVE_ERROR_HINTS = (b"terminate called", b"Fatal Python error: ")


TRACEBACK_HEADER = "Traceback (most recent call last):"


def without_rank_prefix(line: str, rank: int | None = None) -> str:
    """A rank's line without the `[rankN]: ` torch puts before a worker's own lines (its
    traceback, its dumps), on top of torchrun's tee. With `rank`, only that rank's own
    (torch prefixes a worker's lines with its own rank: another's was printed by the script)."""
    if rank is None:
        return _TORCH_RANK_PREFIX.sub("", line, count=1)
    own = f"[rank{rank}]:"
    if not line.startswith(own):
        return line
    return line[len(own) + 1:] if line[len(own):len(own) + 1] == " " else line[len(own):]


def inside_traceback(line: str) -> bool:
    """A line (its rank prefix gone) that a Python traceback goes on past: a frame, its
    source line, a caret marker, a blank line. The first other line is the exception's,
    which ends the traceback."""
    return (not line or line[:1].isspace() or line.startswith("^") or set(line) <= set("~^ ")
            or bool(_FRAME.match(line)))


def last_traceback(lines: Iterable[str]) -> list[str] | None:
    """The last Python traceback in a rank's lines, from its header to the exception line,
    each line without its rank prefix, as ErrorTracker reads it (a marked line of the rank's
    other stream amid it is no part of it); None when they hold none."""
    block: list[str] | None = None
    done = False
    for line in lines:
        text = without_rank_prefix(line.rstrip("\n"))
        if text.startswith(TRACEBACK_HEADER):
            block, done = [text], False
        elif block is not None and not done and not text.startswith(MARKER_PREFIX):
            block.append(text)
            done = not inside_traceback(text)
    return block


class ErrorTracker:
    """Follows one stream's lines and keeps its last error: a Python exception's line
    (`ValueError: boom`) with the innermost frame in the user's or workload's code, or
    the line a native abort printed (`gloo::EnforceNotMet: [enforce fail at ...]
    Received data size doesn't match expected size ...`, from `terminate called after
    throwing an instance of '...'` and the `what():` line after it; `Fatal Python
    error: ...`), which names no frame. Whichever came last is the error."""

    def __init__(self, rank: int | None = None) -> None:
        self.rank = rank                   # the stream's rank: only its own torch prefix is cut
        self.in_traceback = False
        self.frames: list[tuple[str, int, str]] = []
        self.sources: dict[int, str] = {}  # index in frames -> its source line, as the traceback shows it
        self.error: dict | None = None
        self.thrown: str | None = None     # terminate named a C++ type: its what() comes next
        self._native = False               # the error is a native abort's (not a traceback's)

    @property
    def expecting(self) -> bool:
        """Inside something that goes on over the next lines (a traceback, a what())."""
        return self.in_traceback or self.thrown is not None

    def feed(self, line: str) -> None:
        stripped = without_rank_prefix(line.rstrip("\n"), self.rank)
        if self._native_line(stripped):
            return
        if stripped.startswith(TRACEBACK_HEADER):
            self.in_traceback, self.frames, self.sources = True, [], {}
            return
        if not self.in_traceback or stripped.startswith(MARKER_PREFIX):
            return                    # a marked line from the rank's other stream (stdout) is no part of it
        m = _FRAME.match(stripped)
        if m:
            if len(self.frames) >= 64:
                del self.frames[0]
                self.sources = {i - 1: text for i, text in self.sources.items() if i > 0}
            self.frames.append((m.group(1), int(m.group(2)), m.group(3).strip()))
            return
        if inside_traceback(stripped):
            last = len(self.frames) - 1  # source lines and caret markers inside the traceback
            if last >= 0 and last not in self.sources and stripped.strip() and stripped.strip()[0] not in "~^":
                self.sources[last] = stripped.strip()[:300]
            return
        self.in_traceback, self._native = False, False
        self.error = {"exception": _quoted(stripped), **self._where(stripped)}

    def _native_line(self, text: str) -> bool:
        """A native abort's line: kept as the error (True), or False for any other line."""
        thrown, self.thrown = self.thrown, None
        if thrown is not None:
            m = _WHAT.match(text)
            if m:                     # "gloo::EnforceNotMet: [enforce fail at ...] ..."
                self._set_native(f"{thrown}: {m.group(1)}")
                return True
        if not text.startswith(("terminate called", "Fatal Python error: ")):
            return False
        m = _TERMINATE_THROWN.match(text)
        if m:
            self.thrown = m.group(1)
            self._set_native(text)    # until its what() line says more
        elif _TERMINATE_OTHER.match(text):
            self._set_native(text)
        elif _FATAL_PYTHON.match(text):
            # faulthandler's word on the same abort says less than the terminate before it
            if not self._native or self.error["exception"].startswith("Fatal Python error"):
                self._set_native(text)
        else:
            return False
        return True

    def _set_native(self, text: str) -> None:
        self.in_traceback, self.frames, self._native = False, [], True
        self.error = {"exception": _quoted(text)}

    def _where(self, exception: str = "") -> dict:
        if not self.frames:
            return {}
        own = [f for f in self.frames if own_frame(f[0])]
        file, line, func = (own or self.frames)[-1]
        where = {"file": file, "line": line, "function": func}
        if own:                           # raised inside a torch.distributed call: which one
            inner = self.frames[self.frames.index(own[-1]) + 1:]
            call = next((f[2] for f in inner if "torch/distributed/" in f[0] and f[2] not in DIST_WRAPPERS),
                        None)
            if call is not None:
                where["call"] = call
            called = called_on_line(self.sources.get(self.frames.index(own[-1]), ""), [f[2] for f in inner]) \
                if any(_DIST_SOURCE in f[0] or _DDP_SOURCE in f[0] for f in inner) else None
            if called is None and not inner and exception.startswith(_DIST_ERRORS):
                called = called_in_native(self.sources.get(self.frames.index(own[-1]), ""))
            if called is None:
                called = pybind_refused(exception, self.sources.get(self.frames.index(own[-1]), ""))
            if called is not None:      # a call into torch.distributed or DDP; load_state_dict is no op to name
                where["called"] = unaliased(called, file)   # what the script's line called (DistributedDataParallel)
        return where


_CALLED = re.compile(r"([A-Za-z_]\w*)\s*\(")
_DIST_SOURCE, _DDP_SOURCE = "torch/distributed/", "torch/nn/parallel/"


# torch.distributed's own error types (DistNetworkError, DistStoreError ...), raised by its
# C++ with no Python frame under the script's line
_DIST_ERRORS = ("torch.distributed.", "DistError", "DistNetworkError", "DistStoreError", "DistBackendError")
_DIST_CALL = re.compile(r"\b(?:dist|distributed|c10d)\.([A-Za-z_]\w*)\s*\(")


def called_in_native(source: str) -> str | None:
    """The torch.distributed call a script's line made where torch's C++ raised under it
    (`dist.TCPStore(host, port, ...)` -> TCPStore: no Python frame of torch's to name it):
    the line's one `dist.<name>(` call. None: none, or several."""
    found = set(_DIST_CALL.findall(source))
    return found.pop() if len(found) == 1 else None


# pybind11's refusal of a C++ function's arguments names the function:
# "TypeError: set(): incompatible function arguments. The following argument types ..."
_PYBIND_REFUSED = re.compile(r"^TypeError: ([A-Za-z_]\w*)\(\): incompatible function arguments")


def pybind_refused(exception: str, source: str) -> str | None:
    """The function the script's line called where torch's C++ binding refused its
    arguments (`store.set(key, 42)`: set): the name pybind's TypeError gives, when the
    line calls it. None: not such an error, or another function's (one torch called)."""
    m = _PYBIND_REFUSED.match(exception or "")
    return m.group(1) if m and m.group(1) in _CALLED.findall(source) else None


def called_on_line(source: str, inner: list[str]) -> str | None:
    """The function the script's line called on the way to the error: the first name the
    line calls that is the next frame's function (`dist.all_gather_object(...)` ->
    all_gather_object), or, where that frame is a constructor, the class the line names
    (`DistributedDataParallel(model)`), or, where torch's decorator raised around the call
    (c10d_logger's wrapper failing in its own message), the line's outermost call. None:
    the line does not say."""
    names = _CALLED.findall(source)
    if not names or not inner:
        return None
    callee = next((f for f in inner if f not in DIST_WRAPPERS), None)
    if callee == "__init__":
        return next((n for n in names if n[:1].isupper()), None)
    found = next((n for n in names if n == callee), None)
    if found is None and inner[0] in DIST_WRAPPERS:
        return names[0]         # torch's logging wrapper raised around the call: the call the line made
    return found


MAX_SCRIPT_BYTES = 1 << 20          # a script read for its imports' aliases (larger: not read)


@lru_cache(maxsize=64)
def _aliases(file: str) -> dict[str, str]:
    """The names a script's imports give things under another name (`from
    torch.nn.parallel import DistributedDataParallel as DDP`: DDP -> DistributedDataParallel);
    {} for a file not here (a container's path) or not Python."""
    try:
        with open(file, "rb") as f:
            text = f.read(MAX_SCRIPT_BYTES + 1)
        if len(text) > MAX_SCRIPT_BYTES:
            return {}
        tree = ast.parse(text)
    except (OSError, ValueError, SyntaxError, RecursionError, MemoryError):
        return {}
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    return {a.asname: a.name.rpartition(".")[2] for node in imports for a in node.names
            if a.asname and a.asname != a.name.rpartition(".")[2]}


def unaliased(name: str, file: str) -> str:
    """The call's own name where the script imported it under another (DDP ->
    DistributedDataParallel)."""
    return _aliases(file).get(name, name) if file else name


def _quoted(line: str) -> str:
    """An error line as the report quotes it: one line, torch's spelled-out tensor options
    shortened, at most 500 characters."""
    return _TENSOR_OPTIONS.sub("TensorOptions(...)", line.strip())[:500]


# labctl's own machinery inside a rank: the runner, the stack dumper, the recorder (whose
# wrappers stand between a script's call and torch's C++: an error raised there is the
# script's call's)
def own_frame(file: str) -> bool:
    """A frame in the user's script or a workload, not in a library or labctl's harness
    (the recorder's own rule: workloads/_protocol/frames.py)."""
    return user_frame(file)
