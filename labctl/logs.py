"""Reading node log streams: split them per rank and pull out the result lines.

Every backend ends up with one text stream per node. torchrun tees each
worker's output with a `[rank<N>]:` prefix (workloads._protocol.RANK_PREFIX_TEMPLATE), and
direct-mode backends add the same prefix themselves, so one parser serves all.

The one reader of a node log (`NodeLogReader`) and the split of a run's node logs into
rank logs and results.jsonl (`LogSplit`); on the way, the lines that say something: the
result, join and exit lines, torchrun's failure summary. What a rank's errors and stack
dumps say is read by the trackers the reader feeds: labctl/tracebacks.py
(`ErrorTracker`), labctl/stackdumps.py (`StackTracker`, `where_stuck`).
"""
from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Protocol

from workloads._protocol import (AGENT_IDLE_LINE, EXIT_LINE_PREFIX, JOINED_MARKER, MAX_PIECE as MAX_LINE,
                                RESULT_MARKER, SIGTERM_STACKS_MARKER)
from workloads._protocol import results as codec

from .runnames import rank_logs_in
from .stackdumps import StackTracker
from .torchsays import STORE_UNREACHED_HINT, store_unreached
from .tracebacks import NATIVE_ERROR_HINTS, ErrorTracker

_RANK_PREFIX = re.compile(rb"^\[rank(\d+)\]:")
# torchrun's failure summary: "rank      : 3 (local_rank: 1)" then "exitcode  : 1 (pid: 9)"
_TORCHRUN_FAILURE = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


# "... at <epoch seconds>": when it ended, so exits on different nodes can be ordered.
_EXIT_LINE = re.compile(rf"^{re.escape(EXIT_LINE_PREFIX)}(\d+) exited with code (-?\d+)(?: at ([0-9.]+))?$", re.M)


_ANY_RANK_PREFIX = re.compile(rb"\[rank(\d+)\]:")
_LINE_RANK_PREFIX = re.compile(_RANK_PREFIX.pattern, re.M)     # at the start of any line of a text


def ranks_in(data: bytes) -> list[int]:
    """The ranks whose `[rankN]:` prefixed lines `data` (a node log, or its head) holds,
    in the order each first appears."""
    return list(dict.fromkeys(int(m.group(1)) for m in _LINE_RANK_PREFIX.finditer(data)))


def parse_results(lines: Iterable[str], rank: int | None = None) -> list[dict]:
    """The JSON records behind RESULT_MARKER; a garbled line becomes a failed record.
    With `rank` (the rank whose stream carried the lines), every record is that rank's,
    whatever its own "rank" field says: a rank may print any line, another rank's too."""
    records = []
    for line in lines:
        at = line.find(RESULT_MARKER)
        if at < 0:
            continue
        payload = line[at + len(RESULT_MARKER):]
        try:
            record = codec.decode_result(payload)
        except codec.BadRecord:
            record = {"workload": "labctl", "name": "unparsable_result_line", "ok": False,
                      "detail": payload[:200]}
        if rank is not None:
            record["rank"] = rank
        records.append(record)
    return records


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\s*\n(?:.*\n){0,3}?\s*rank\s*:\s*(\d+)")


def torchrun_root_cause(text: str) -> int | None:
    """The global rank torchrun names as this node's first observed failure, if any."""
    m = _ROOT_CAUSE.search(text)
    return int(m.group(1)) if m else None


_JOINED = re.compile(re.escape(JOINED_MARKER.encode()) + rb"(\{[^\n]{0,200}\})")


def joins_in(data: bytes) -> set[tuple[int | None, int | None]]:
    """The (rank, pid) of every JOINED_MARKER line in `data`: a process that joined. A
    line seen twice (torchrun replays a failed worker's output) is one join."""
    found = set()
    for payload in _JOINED.findall(data):
        try:
            found.add(codec.decode_joined(payload))
        except codec.BadRecord:
            continue
    return found


class JoinReader:
    """The joins in files that grow (local node or rank logs), reading only what is new
    on each call, at most READ_CHUNK per file: the join clock asks every 0.05 s."""

    KEEP = 4096                   # an unfinished line longer than this holds no marker line

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.rest: dict[str, bytes] = {}
        self.joins: set[tuple[int | None, int | None]] = set()

    def read(self, paths: Iterable) -> int:
        for path in paths:
            key = str(path)
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(key, 0))
                    data = f.read(READ_CHUNK)
            except OSError:               # not written yet
                continue
            self.offsets[key] = self.offsets.get(key, 0) + len(data)
            data = self.rest.get(key, b"") + data
            cut = data.rfind(b"\n") + 1
            self.joins |= joins_in(data[:cut])
            self.rest[key] = data[cut:][-self.KEEP:]
        return len(self.joins)


class FailedWorker(NamedTuple):
    """One worker of torchrun's failure summary."""
    rank: int
    local_rank: int
    exit_code: int


def torchrun_failed_workers(text: str) -> list[FailedWorker]:
    """The workers torchrun's ChildFailedError summary in a node log lists: every worker
    of that node that did not exit 0 (the one that failed, and those its agent then
    stopped, -15). A worker of the node it does not list had exited 0 before."""
    return [FailedWorker(int(r), int(local), int(code))
            for r, local, code in _TORCHRUN_FAILURE.findall(text)]


def torchrun_failures(text: str) -> dict[int, int]:
    """{global rank: exit code} from torchrun's ChildFailedError summary in a node log."""
    return {w.rank: w.exit_code for w in torchrun_failed_workers(text)}


# ---- streaming: split a node log of any size, and find why ranks failed --------------
READ_CHUNK = 1 << 20             # node logs are read this much at a time
# A run of whole lines of one rank: split with a few C-level bytes operations, not per line.
_RANK_RUN = re.compile(rb"\[rank(\d+)\]:[^\n]*\n(?:\[rank\1\]:[^\n]*\n)*")
_RESULT_MARKER_BYTES = RESULT_MARKER.encode()
_SIGTERM_STACKS_BYTES = SIGTERM_STACKS_MARKER.encode()
AGENT_TAIL_LINES = 400           # torchrun's failure summary sits at the end of a node log


def _needs_a_closer_look(data: bytes) -> bool:
    """Result lines, tracebacks, stack dumps or a native abort's lines somewhere in
    `data`. The one-byte memchr tests first: most chunks of a big log have no '@' and
    often no '('."""
    return (b"@" in data and _RESULT_MARKER_BYTES in data
            or b"(" in data and b"most recent call" in data
            or _native_error_hint(data)
            or STORE_UNREACHED_HINT in data
            or b"@" in data and _SIGTERM_STACKS_BYTES in data)


def _native_error_hint(data: bytes) -> bool:
    """A native abort's line may be in `data` (ErrorTracker reads it)."""
    return any(hint in data for hint in NATIVE_ERROR_HINTS)


class NodeLogReader:
    """One pass over a node log. Each rank's bytes go to `write` as the node log held
    them, prefixes removed; the lines that need it are looked at on the way (results,
    tracebacks, stack dumps, torchrun's glued half-lines, the agent's own lines).
    Memory is bounded by the longest line piece, never the log size.

    One writer: a rank log is the bytes of that rank's `[rank<N>]:` segments, each with
    its prefix cut off, and nothing else. The line-by-line path and the fast skip of
    plain runs (`feed_bytes`) both produce exactly that; the skip only spares the
    decoding and the per-line look at runs with nothing to look at."""

    def __init__(self, write=None, on_result=None) -> None:
        # write(rank, data): the rank log's next bytes: whole "\n"-ended lines, or a piece
        # of a line (over-long, or the log's unended last one) whose rest follows unbroken
        self.write = write
        # on_result(rank, text): a line or piece holding RESULT_MARKER, decoded with
        # errors="replace" (bytes that are not UTF-8 become U+FFFD, in text only)
        self.on_result = on_result
        self.pending: dict[int, bytes] = {}        # a rank's half line glued by torchrun's tee
        self.error_trackers: dict[int, ErrorTracker] = {}
        self.stacks: dict[int, StackTracker] = {}
        self.agent = ErrorTracker()
        self.agent_tail: list[str] = []
        self.exits: list[tuple[int, int]] = []
        self.exit_times: dict[int, float] = {}      # rank -> epoch seconds, when the line says
        self.ranks_seen: set[int] = set()
        self.store_unreached: dict[int, str] = {}   # rank -> the store endpoint torch said it cannot reach
        # torchrun's agent said its worker group ended 0 (LOGLEVEL=INFO), or the local guard
        # found it with no workers left when labctl stopped it (waiting at its exit barrier)
        self.workers_succeeded = False
        self._carry: int | None = None             # rank of an over-long line still being read

    def feed_line(self, line: bytes, complete: bool = True) -> None:
        """One line of the node log without its newline (`complete`), or a piece of one."""
        if self._carry is not None:                # the rest of an over-long line
            self._piece(self._carry, line, complete)
            if complete:
                self._carry = None
            return
        if not line.startswith(b"[rank"):
            if complete:
                self._agent_line(line.decode(errors="replace"))
            return
        # nearly every line: "[rank<N>]:" once, no other rank's prefix glued in
        close = line.find(b"]:", 5)
        digits = line[5:close]
        if close > 5 and digits.isdigit() and line.find(b"[rank", close + 2) < 0:
            rank = int(digits)
            self._piece(rank, line[close + 2:], complete)
        else:
            m = _RANK_PREFIX.match(line)
            if not m:
                if complete:
                    self._agent_line(line.decode(errors="replace"))
                return
            # torchrun's tee writes a prefix and then what it read of a line, never nothing:
            # another rank's prefix begins a segment only after some of this rank's text (a
            # half line glued to the next write). Right after a prefix it is the rank's own
            # text (a script that prints "[rank1]:Traceback ..." stays the printing rank's).
            rank, start = int(m.group(1)), m.end()
            for inner in _ANY_RANK_PREFIX.finditer(line, m.end()):
                if int(inner.group(1)) != rank and inner.start() > start:
                    self._piece(rank, line[start:inner.start()], False)
                    rank, start = int(inner.group(1)), inner.end()
            self._piece(rank, line[start:], complete)
        if not complete:
            self._carry = rank

    def _agent_line(self, line: str) -> None:
        self.agent.feed(line)
        if "worker group successfully finished" in line or line.startswith(AGENT_IDLE_LINE):
            self.workers_succeeded = True
        m = _EXIT_LINE.match(line)
        if m:
            self.exits.append((int(m.group(1)), int(m.group(2))))
            if m.group(3):
                self.exit_times[int(m.group(1))] = float(m.group(3))
        self.agent_tail.append(line)
        if len(self.agent_tail) > 2 * AGENT_TAIL_LINES:
            del self.agent_tail[:-AGENT_TAIL_LINES]

    def _piece(self, rank: int, piece: bytes, complete: bool, unended: bool = False) -> None:
        """A rank's segment, prefix cut off. `complete`: the line is over (written with its
        newline, looked at); `unended`: it is over although it had no newline (the end of
        the log): written without one."""
        data = self.pending.pop(rank, b"") + piece if self.pending else piece
        if not complete and len(data) < MAX_LINE:
            self.ranks_seen.add(rank)
            self.pending[rank] = data
            return
        self._write(rank, data + b"\n" if complete and not unended else data)
        text = None                                 # decoded only to be looked at
        tracker = self.error_trackers.get(rank)
        if tracker is not None and tracker.expecting or b"Traceback (most recent" in data \
                or data.startswith(NATIVE_ERROR_HINTS):
            if tracker is None:
                tracker = self.error_trackers[rank] = ErrorTracker(rank)
            text = data.decode(errors="replace")
            tracker.feed(text)
        stack = self.stacks.get(rank)
        if stack is not None and stack.capturing is not None or b"(most recent call first):" in data \
                or _SIGTERM_STACKS_BYTES in data:
            if stack is None:
                stack = self.stacks[rank] = StackTracker(rank)
            text = text if text is not None else data.decode(errors="replace")
            stack.feed(text)
        if STORE_UNREACHED_HINT in data:
            endpoint = store_unreached(text if text is not None else data.decode(errors="replace"))
            if endpoint:
                self.store_unreached[rank] = endpoint
        if self.on_result is not None and _RESULT_MARKER_BYTES in data:
            self.on_result(rank, text if text is not None else data.decode(errors="replace"))

    def _write(self, rank: int, data: bytes) -> None:
        """The one place rank-log bytes leave the reader, from either path."""
        self.ranks_seen.add(rank)
        if self.write is not None:
            self.write(rank, data)

    def feed_bytes(self, data: bytes) -> None:
        """Complete lines (data ends with a newline, or is the very end of the log).

        Runs of plain lines of one rank (nearly all of a big log) are written in one
        go, unlooked at; anything that needs a closer look (results, tracebacks, stack
        dumps, glued half-lines, agent lines) goes line by line."""
        if self._one_rank_chunk(data):
            return
        pos = 0
        for m in _RANK_RUN.finditer(data):
            rank = int(m.group(1))
            run = m.group(0)
            if not self._plain_run(rank, run):
                continue                            # left for the line-by-line pass below
            if m.start() > pos:
                self._feed_lines(data[pos:m.start()])
                pos = m.start()
                if not self._plain_run(rank, run):  # that pass left state for this rank
                    continue
            if self._block(rank, m.group(1), run):
                pos = m.end()
        if pos < len(data):
            self._feed_lines(data[pos:])

    def _plain_run(self, rank: int, run: bytes) -> bool:
        if self._carry is not None or rank in self.pending:
            return False
        tracker, stack = self.error_trackers.get(rank), self.stacks.get(rank)
        if tracker is not None and tracker.expecting or stack is not None and stack.capturing is not None:
            return False
        return not _needs_a_closer_look(run)

    def _one_rank_chunk(self, data: bytes) -> bool:
        """The common case of a big log, a whole chunk of one rank's plain lines, split
        with a few passes over the bytes (no per-line regex). False: nothing done."""
        if not data.startswith(b"[rank") or not data.endswith(b"\n"):
            return False
        close = data.find(b"]:", 5, 32)
        digits = data[5:close]
        if close < 0 or not digits.isdigit() or not self._plain_run(int(digits), data):
            return False
        return self._block(int(digits), digits, data, every_line_checked=False)

    def _block(self, rank: int, digits: bytes, run: bytes, every_line_checked: bool = True) -> bool:
        """Write a plain run: every line's prefix cut off at once, which is what the line
        path writes line by line. False (nothing done) when some line holds another
        prefix, or (`every_line_checked` False: a chunk not matched line by line) lacks
        its own: those go line by line."""
        prefix = b"[rank" + digits + b"]:"
        data = run[len(prefix):].replace(b"\n" + prefix, b"\n")
        # every line began with the prefix exactly when one prefix per line went away
        if not every_line_checked and len(run) - len(data) != len(prefix) * run.count(b"\n"):
            return False                            # another rank's or the agent's line
        if b"[" in data and b"[rank" in data:      # glued half-lines: line by line
            return False
        self._write(rank, data)
        return True

    def _feed_lines(self, data: bytes) -> None:
        # lines end at "\n" only: a progress bar's "\r" stays inside its line, as in a block
        raws = data.split(b"\n")
        last = raws.pop()
        for raw in raws:
            self.feed_line(raw, True)
        if last:
            self.feed_line(last, len(last) < MAX_LINE)

    def feed_stream(self, f, budget: int | None = None) -> int:
        """A seekable binary file from its position: everything left, or with a budget
        about that many bytes of whole lines (a log still being written). Returns the
        bytes consumed."""
        return _stream(f, budget, self.feed_bytes, lambda piece: self.feed_line(piece, False))

    def feed_rank_stream(self, rank: int, f, budget: int | None = None) -> int:
        """Like feed_stream, over one rank's own log (no prefixes), which something else
        (the local node guard) already wrote: its lines are only looked at (the reader's
        `write` is not called for them: give such a reader none)."""
        return _stream(f, budget, lambda data: self._rank_bytes(rank, data),
                       lambda piece: self._piece(rank, piece, False))

    def _rank_bytes(self, rank: int, data: bytes) -> None:
        self.ranks_seen.add(rank)
        if self._plain_run(rank, data):
            return                                  # nothing in it to parse
        for raw in data.split(b"\n")[:-1]:
            self._piece(rank, raw, True)

    def feed_file(self, path) -> None:
        with open(path, "rb") as f:
            self.feed_stream(f)

    def close(self) -> None:
        """The end of the log: a rank's unended last line is parsed, and kept unended."""
        for rank in list(self.pending):
            self._piece(rank, self.pending.pop(rank), True, unended=True)

    # ---- what the pass found -------------------------------------------------
    @property
    def tail_text(self) -> str:
        return "\n".join(self.agent_tail[-AGENT_TAIL_LINES:]) + "\n"

    def stack_dumps(self) -> dict[int, list[str]]:
        for tracker in self.stacks.values():
            tracker.close()
        return {r: t.best for r, t in self.stacks.items() if t.best}

    def spinning(self) -> dict[int, int]:
        """rank -> the first line of the loop its last two asked stack dumps show it spin in."""
        found = {r: t.spinning() for r, t in self.stacks.items()}
        return {r: line for r, line in found.items() if line is not None}

    def errors(self) -> dict[int, dict]:
        return {r: t.error for r, t in self.error_trackers.items() if t.error}

    def agent_error(self) -> dict | None:
        return self.agent.error


def _stream(f, budget: int | None, whole, piece) -> int:
    """Feed a file's whole lines to `whole(bytes)` a chunk at a time, and an over-long
    line (or, without a budget, the last unended one) to `piece(bytes)`. Reads stop at
    line ends (the file is seeked back to the last one), so chunks are never copied
    together; with a budget, a line still being written is left for next time."""
    consumed = 0
    while budget is None or consumed < budget:
        want = READ_CHUNK if budget is None else min(READ_CHUNK, budget - consumed)
        chunk = f.read(want)
        if not chunk:
            break
        cut = chunk.rfind(b"\n") + 1
        if cut:
            whole(chunk if cut == len(chunk) else chunk[:cut])
            if cut < len(chunk):
                f.seek(cut - len(chunk), 1)
            consumed += cut
            continue
        # no line end in the chunk: a piece of an over-long line, or the log's last line
        if len(chunk) < want or len(chunk) >= MAX_LINE:
            line = chunk                            # the end of the file, or a full piece
        else:                                       # cut short by the budget: read on
            f.seek(-len(chunk), 1)
            line = f.readline(MAX_LINE)
            if line.endswith(b"\n"):
                whole(line)
                consumed += len(line)
                continue
        if len(line) >= MAX_LINE or budget is None:
            piece(line)                             # over-long (in pieces), or the last one
        else:                                       # still being written: next time
            f.seek(-len(line), 1)
            break
        consumed += len(line)
    return consumed


# ---- the split of a run's node logs into rank logs and results.jsonl ------------------
OPEN_RANK_LOGS = 256             # rank logs kept open at once while splitting


class SplitTarget(Protocol):
    """Where a split writes and reads (the run folder, labctl/rundir.py): handed to the
    split, so that this module knows no run folder."""
    def node_log(self, index: int) -> Path: ...
    def guard_log(self, index: int) -> Path: ...
    def rank_log(self, rank: int) -> Path: ...
    @property
    def results_path(self) -> Path: ...


class LogSplit:
    """One streaming pass over every node log, resumable (the local backend's logs are
    split while the lab runs): rank logs, results.jsonl, and what each node's log
    showed (a NodeLogReader per node, `finish`). Memory stays flat at any log size.

    `on_result(record)` sees every result record as it is written. `guard_ranks`:
    local direct-mode nodes whose guard wrote each rank's log itself as the output came
    ({node: its ranks}); those are only read for results and errors, not split out of
    the node log again: a GB-sized log costs about one read."""

    def __init__(self, target: SplitTarget, indices: list[int], on_result: Callable[[dict], None],
                 guard_ranks: dict[int, tuple[int, ...]] | None = None):
        self.target, self.indices, self.on_result = target, indices, on_result
        self.guard_ranks = {i: r for i, r in (guard_ranks or {}).items() if i in indices and r}
        self.open_logs: dict[int, Any] = {}
        kept = {target.rank_log(r) for ranks in self.guard_ranks.values() for r in ranks}
        for _, old in rank_logs_in(target.rank_log(0).parent):
            if old not in kept:
                old.unlink()
        self.results = open(target.results_path, "w")
        self.ignored = codec.Ignored()          # result lines left out (a field out of bounds)
        self.readers = {i: NodeLogReader(on_result=self._result_line) if i in self.guard_ranks
                        else NodeLogReader(self._write, self._result_line) for i in indices}
        self.offsets: dict[Path, int] = {}

    def _rank_file(self, rank: int):
        f = self.open_logs.get(rank)
        if f is None:
            if len(self.open_logs) >= OPEN_RANK_LOGS:
                self.open_logs.pop(next(iter(self.open_logs))).close()
            f = self.open_logs[rank] = open(self.target.rank_log(rank), "ab")
        return f

    def _write(self, rank: int, data: bytes) -> None:
        """A rank's bytes as the node log held them, prefixes removed: straight to its log."""
        self._rank_file(rank).write(data)

    def _result_line(self, rank: int, line: str) -> None:
        """A line holding the result marker, decoded (undecodable bytes as U+FFFD) and
        checked once (workloads/_protocol/results.py: its known fields typed and inside the
        lab's bounds): a record that is not is left out of results.jsonl and of the checks,
        counted and the first few named in `ignored` (status.json's `ignored_results`)."""
        for record in parse_results([line], rank=rank):
            damage = codec.result_damage(record)
            if damage:
                self.ignored.add(f"{codec.result_who(record)}: {damage}")
                continue
            self.results.write(json.dumps(record, sort_keys=True) + "\n")
            self.on_result(record)

    def advance(self, budget: int | None) -> bool:
        """Feed every node log from where the last call stopped; with a budget, only
        complete lines and at most about `budget` bytes per node. True when every
        log was read up to its end (its last line may still be being written)."""
        caught_up = True
        for index in self.indices:
            reader = self.readers[index]
            if index in self.guard_ranks:
                sources = [(self.target.guard_log(index), reader.feed_stream)]
                sources += [(self.target.rank_log(rank), partial(reader.feed_rank_stream, rank))
                            for rank in self.guard_ranks[index]]
            else:
                sources = [(self.target.node_log(index), reader.feed_stream)]
            for path, feed in sources:
                if not path.is_file():
                    continue
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    fed = feed(f, budget)
                self.offsets[path] = self.offsets.get(path, 0) + fed
                if budget is not None and fed >= budget:
                    caught_up = False
        # what was split so far is on disk while the lab runs (and after labctl is killed)
        for f in self.open_logs.values():
            f.flush()
        self.results.flush()
        return caught_up

    def close(self) -> None:
        """Close every file (a split given up on); what was written stays."""
        for f in [*self.open_logs.values(), self.results]:
            try:
                f.close()
            except OSError:
                pass
        self.open_logs.clear()

    def finish(self) -> dict[int, "NodeLogReader"]:
        """Read the rest of every node log; what each showed, by node."""
        try:
            self.advance(None)
            for index in self.indices:
                if not self.target.node_log(index).is_file():
                    self.target.node_log(index).write_text("")
                self.readers[index].close()
        finally:
            self.close()
        return self.readers
