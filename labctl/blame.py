"""Failure blame: what the logs showed, and who failed first and why.

When one rank dies its peers fail too (closed connections) or are stopped;
naming the first one, with its exception, saves the reader a log hunt. The
log pass (logs.LogSplit, driven by labctl/finish.py) fills `Findings`;
`first_failure` and `fault_cause` turn them into one `FirstFailure`
(labctl/runrecord.py), whose `describe()` is the sentence status.json's message and
report.md print. How the run ended is decided from these by labctl/verdict.py.
Standard library only, no run folder.

Under torchrun, which rank failed first and with what comes from the workers'
torch elastic error files where labctl can read them (`read_error_files`; the
local backend's `torchrun/node-<i>/`, workloads/_record.py writes them), else
from the failure summary torchrun prints at the end of a node log. A rank's
error is its own (its error file, else the last error its log shows: a Python
exception or a native abort's `what():`), never the agent's ChildFailedError.
"""
from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from workloads._protocol import DATA, WORKLOAD_DONE

from . import logs, torchsays, tracebacks
from .faults import parse as parse_fault
from .runrecord import FiredFault, FirstFailure
from .trace.model import STACKS, Diagnosis
from .outcome import NodeOutcome, NodeState, signal_name
from .rundir import RunDir


MAX_ERROR_FILE_BYTES = 16 << 20      # a traceback, even a long one, is far smaller
_ATTEMPT = re.compile(r"attempt_(\d+)")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    call: str | None = None         # the torch.distributed function raised in, below this frame
    called: str | None = None       # the call this frame's line made (tracebacks.called_on_line)


@dataclass(frozen=True)
class ErrorFile:
    """One worker's torch elastic error file (`TORCHELASTIC_ERROR_FILE`): the exception
    that escaped it, where it was raised, and when."""
    node: int
    local_rank: int
    rank: int | None            # the global rank: labctl's key, torch's own file has none
    exit_code: int | None       # torch's errorCode (an agent's copy); a worker's file has none
    message: str                # the exception line the traceback ends with ("ValueError: boom")
    frame: Frame | None         # the innermost frame in the user's or workload's code
    timestamp: float            # epoch s: labctl's time_ns, else torch's whole seconds

    def error(self) -> dict:
        """The `error` of status.json's first_failure and rank_errors (the log's shape)."""
        where = {} if self.frame is None else {
            "file": self.frame.file, "line": self.frame.line, "function": self.frame.function,
            **({"call": self.frame.call} if self.frame.call else {}),
            **({"called": self.frame.called} if self.frame.called else {})}
        return {"exception": self.message, **where}


def read_error_files(log_dir: Path, node: int) -> tuple[list[ErrorFile], list[str]]:
    """The error files one torchrun agent's workers wrote under its --log-dir
    (`<run id>_*/attempt_<n>/<local rank>/error.json`), the newest attempt only: an
    earlier attempt's failure was restarted from. Returns (files, notes): a garbled,
    truncated or unreadable file is left out with a note, never an exception."""
    files: list[ErrorFile] = []
    notes: list[str] = []
    try:
        agents = [d for d in log_dir.iterdir() if d.is_dir()] if log_dir.is_dir() else []
    except OSError as exc:
        return [], [f"node {node}: torchrun's log dir {log_dir}: {exc.strerror or exc}"]
    for agent in sorted(agents):
        attempts = [(int(m.group(1)), d) for d in agent.glob("attempt_*")
                    if (m := _ATTEMPT.fullmatch(d.name)) and d.is_dir()]
        if not attempts:
            continue
        newest = max(attempts)[1]
        for path in sorted(newest.glob("*/error.json")):
            if not path.parent.name.isdigit():
                continue
            try:
                files.append(_error_file(path, node, int(path.parent.name)))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else str(exc) or type(exc).__name__
                notes.append(f"node {node}: ignored torch elastic error file {path} ({why[:200]}); "
                             "the node log was read instead")
    return files, notes


def _error_file(path: Path, node: int, local_rank: int) -> ErrorFile:
    """torch's layout: {"message": {"message", "extraInfo": {"py_callstack", "timestamp"},
    ["errorCode"]}} (or a plain "message" string and a top-level "timestamp"), plus
    labctl's {"labctl": {"rank", "local_rank", "time_ns", "py_callstack"}}
    (workloads/_record.py moves the traceback there)."""
    if path.stat().st_size > MAX_ERROR_FILE_BYTES:
        raise ValueError(f"larger than {MAX_ERROR_FILE_BYTES >> 20} MiB")
    data = json.loads(path.read_bytes())
    message = data["message"]
    if isinstance(message, str):
        text, stack, stamp, code = message, "", data.get("timestamp", 0), None
    else:
        info = message.get("extraInfo") or {}
        text, stack, stamp, code = message["message"], info.get("py_callstack") or "", \
            info["timestamp"], message.get("errorCode")
    if not isinstance(text, str) or not isinstance(stack, str):
        raise ValueError("message or py_callstack is not text")
    timestamp = float(int(stamp))
    ours = data.get("labctl") or {}
    stack = stack or ours.get("py_callstack") or ""
    if not isinstance(stack, str):
        raise ValueError("py_callstack is not text")
    rank = ours.get("rank")
    if isinstance(ours.get("time_ns"), int):
        timestamp = ours["time_ns"] / 1e9
    tracker = tracebacks.ErrorTracker()          # the same reading as a traceback in a log
    for line in stack.split("\n"):         # lines end at "\n" only, as in a log: a "\r" in a
        tracker.feed(line.removesuffix("\r"))   # message stays inside it (splitlines cut it there)
    error = tracker.error or {}
    frame = Frame(error["file"], error["line"], error["function"], error.get("call"), error.get("called")) \
        if error.get("file") else None
    return ErrorFile(node, local_rank, rank if isinstance(rank, int) else None,
                     code if isinstance(code, int) else None,
                     error.get("exception") or text.split("\n", 1)[0].removesuffix("\r")[:500], frame, timestamp)


@dataclass
class Findings:
    """What one pass over every node log found (rank logs and results are on disk)."""
    ranks: set[int] = field(default_factory=set)                 # ranks that printed anything
    exit_codes: dict[int, int] = field(default_factory=dict)     # rank -> non-zero exit code
    root_causes: dict[int, int] = field(default_factory=dict)    # node -> the rank its agent blamed
    errors: dict[int, dict] = field(default_factory=dict)        # rank -> its last exception
    agent_errors: dict[int, dict] = field(default_factory=dict)  # node -> its agent's exception
    exits: dict[int, list[tuple[int, int]]] = field(default_factory=dict)   # node -> (rank, code) in order
    exit_times: dict[int, tuple[float, int]] = field(default_factory=dict)  # rank -> (epoch s, node)
    node_ranks: dict[int, list[int]] = field(default_factory=dict)          # node -> its ranks
    workers_succeeded: set[int] = field(default_factory=set)     # nodes whose agent saw its workers end 0
    finished: set[int] = field(default_factory=set)              # ranks that said workload_done
    finished_world: set[int] = field(default_factory=set)        # the world sizes they said it in
    stacks: dict[int, list[str]] = field(default_factory=dict)   # rank -> its last stack dump
    spinning: dict[int, int] = field(default_factory=dict)       # rank -> the loop's first line it spins in
    store_unreached: dict[int, str] = field(default_factory=dict)  # rank -> the store it said it cannot reach
    error_files: dict[int, ErrorFile] = field(default_factory=dict)  # rank -> its torch elastic error file
    summaries: dict[int, list[logs.FailedWorker]] = field(default_factory=dict)  # node -> its agent's failure summary
    nproc_per_node: int | None = None
    total: int = 0                                               # result records
    failed: list[dict] = field(default_factory=list)             # the first 50 failed records
    failed_count: int = 0
    skipped: int = 0
    world: int | None = None

    def add_result(self, record: dict) -> None:
        if record.get("name") == DATA:          # what a rank held (for the page), not a check
            return
        if record.get("name") != WORKLOAD_DONE:     # a rank's end of a workload is no check
            self.total += 1                         # (the Checks table counts none: issue 53)
        if record.get("skipped"):
            self.skipped += 1
        if record.get("ok") is not True:        # "ok": "no" (a forged record) is no pass
            self.failed_count += 1
            if len(self.failed) < 50:
                self.failed.append(record)
        if record.get("name") == WORKLOAD_DONE:
            self.finished.add(record.get("rank"))
            if isinstance(record.get("world_size"), int):
                self.finished_world.add(record["world_size"])

    def add_node(self, index: int, reader: "logs.NodeLogReader") -> None:
        """A node log read to its end."""
        self.ranks |= reader.ranks_seen
        self.node_ranks[index] = sorted(reader.ranks_seen)
        tail = reader.tail_text
        summary = logs.torchrun_failed_workers(tail)
        if summary:
            self.summaries[index] = summary
        self.exit_codes.update((w.rank, w.exit_code) for w in summary)
        self.exit_codes.update((r, c) for r, c in reader.exits if c != 0)
        self.exits[index] = reader.exits
        if reader.workers_succeeded:
            self.workers_succeeded.add(index)
        self.exit_times.update({r: (t, index) for r, t in reader.exit_times.items()})
        self.errors.update(reader.errors())
        self.stacks.update(reader.stack_dumps())
        self.spinning.update(reader.spinning())
        self.store_unreached.update(reader.store_unreached)
        agent_error = reader.agent_error()
        if agent_error and not tracebacks.launcher_wrapper(agent_error.get("exception")):
            self.agent_errors[index] = agent_error
        cause = logs.torchrun_root_cause(tail)
        if cause is None:
            cause = next((r for r, c in reader.exits if c != 0), None)
        if cause is not None:
            self.root_causes[index] = cause

    def add_error_files(self, files: list[ErrorFile]) -> None:
        """Workers' error files: their exception wins over the one read from the log (the
        same traceback, but whole even when the log was cut). A file naming no global
        rank (not written by workloads/_record.py) cannot be placed and is left out."""
        for f in files:
            if f.rank is not None:
                self.error_files[f.rank] = f
                self.errors[f.rank] = f.error()

    @property
    def failed_ranks(self) -> list[int]:
        return sorted({r["rank"] for r in self.failed if isinstance(r.get("rank"), int)}
                      | set(self.exit_codes) | set(self.error_files))


class LogReading:
    """A run's node logs read into its rank logs, results.jsonl and `Findings`, in one
    streaming pass that may go on as the logs grow (the local backend's, while the lab
    runs: `advance`) and ends at the run folder's finish (`finish`)."""

    def __init__(self, target: "logs.SplitTarget", indices: list[int], world: int,
                 nproc_per_node: int | None = None,
                 guard_ranks: dict[int, tuple[int, ...]] | None = None):
        self.found = Findings(nproc_per_node=nproc_per_node, world=world)
        self.split = logs.LogSplit(target, indices, self.found.add_result, guard_ranks)

    @classmethod
    def of(cls, run: RunDir, indices: list[int]) -> "LogReading":
        """The reading of a run folder's node logs (nodes `indices`)."""
        rec = run.record
        guards = ({n.index: n.ranks for n in run.planned_nodes} if rec.rank_logs_by_guards else None)
        return cls(run, indices, rec.world_size, rec.nproc_per_node, guards)

    def advance(self, budget: int | None) -> bool:
        return self.split.advance(budget)

    def close(self) -> None:
        self.split.close()

    def finish(self) -> Findings:
        """The rest of every node log; what they all showed."""
        for index, reader in self.split.finish().items():
            self.found.add_node(index, reader)
        return self.found


def first_failure(outcomes: list[NodeOutcome], found: Findings) -> FirstFailure | None:
    """The rank that failed first, and why.

    A rank that *exited 0* while its peers were still in a collective is the
    real culprit when the first error only says that a peer went away.
    """
    exit_codes, errors = found.exit_codes, found.errors
    failed = [n for n in outcomes if n.state.bad]
    failed.sort(key=lambda n: (n.exited_s is None, n.exited_s or 0.0, n.state is not NodeState.FAILED))
    first: FirstFailure | None = None
    # direct mode with timed exit lines: the earliest non-zero exit across all nodes
    timed = sorted((t, r, index) for r, (t, index) in found.exit_times.items()
                   if exit_codes.get(r, 0) != 0)
    if timed:
        _, rank, index = timed[0]
        first = FirstFailure(rank, index, exit_codes[rank])
    if first is None:
        first = _first_raised(failed, found)
    for node in ([] if first else failed):
        if node.index in found.root_causes:
            rank = found.root_causes[node.index]
            first = FirstFailure(rank, node.index, exit_codes.get(rank))
            break
    if first is None:
        positive = sorted((r, c) for r, c in exit_codes.items() if c > 0)
        if positive:
            first = FirstFailure(positive[0][0], None, positive[0][1])
    if first is None and found.failed:
        r = found.failed[0]
        first = FirstFailure(r.get("rank"), None, None, check=f"{r.get('workload')}/{r.get('name')}")
    if first is None and failed:
        node = failed[0]
        first = FirstFailure(None, node.index, node.exit_code)
        if node.state is NodeState.LOST:
            first.lost = node.reason or "gone without a trace"
        if node.index in found.agent_errors:
            first.error = found.agent_errors[node.index]
    if first is None:
        return None
    if first.rank is not None and tracebacks.peer_gone((errors.get(first.rank) or {}).get("exception")):
        first = _culprit_behind_symptom(first, found) or first
    if first.rank is not None and first.rank in errors:
        first.error = errors[first.rank]
    node_of_first = next((n for n in outcomes if n.index == first.node), None)
    if node_of_first is not None and node_of_first.signal:
        first.signal = node_of_first.signal
    code = first.exit_code
    if isinstance(code, int) and code < 0 and first.signal is None:
        first.signal = signal_name(-code)
    # the agent's own error (a rendezvous that failed) only when no rank is to blame: a
    # rank's failure is told in its own words, or in none, never in its launcher's
    if first.error is None and first.rank is None and first.node in found.agent_errors:
        first.error = found.agent_errors[first.node]
    early = _left_early(outcomes, found, first)
    return early if early is not None else first


def _culprit_behind_symptom(first: FirstFailure, found: Findings) -> FirstFailure | None:
    """The first failure chosen says only that a peer hung up (a printed summary's root
    cause is one node's first observation, not the lab's): a rank that failed in its own
    words, or was killed by a signal its launcher did not send (SIGABRT from a C++
    abort, SIGSEGV, an OOM kill), is the cause; the earliest to exit where that is
    known. None: no such rank (a rank that left early may be the cause). Where the exits
    were timed (direct mode), a cause exited no later than the symptom: one stopped
    afterwards (labctl's stop escalating to SIGKILL) is not."""
    symptom_at = found.exit_times.get(first.rank, (None,))[0] if first.rank is not None else None

    def own_failure(rank: int, code: int) -> bool:
        error = (found.errors.get(rank) or {}).get("exception")
        at = found.exit_times.get(rank, (None,))[0]
        return rank != first.rank and code != 0 and not tracebacks.peer_gone(error) and (
            error is not None or code < 0 and code != -signal.SIGTERM) and (
            symptom_at is None or at is None or at <= symptom_at)

    causes = [r for r, code in found.exit_codes.items() if own_failure(r, code)]
    if not causes:
        return None
    rank = min(causes, key=lambda r: (r not in found.errors, found.exit_times.get(r, (0.0,))[0], r))
    return FirstFailure(rank, node_of_rank(rank, found), found.exit_codes[rank])


def _first_raised(failed: list[NodeOutcome], found: Findings) -> FirstFailure | None:
    """torchrun: the rank whose error file is the earliest (each worker's own clock
    reading when its exception escaped, across nodes: better evidence than the order of
    torchrun's summary, which each agent prints for its own node alone). When that first
    exception only says a peer hung up while some rank failed without raising (a signal
    other than SIGTERM, os._exit, sys.exit: no error file), that rank hung up: the one an
    agent's summary named, else a positive exit code first. None without error files (the
    summary decides)."""
    if not found.error_files:
        return None
    first, raised = min(found.error_files.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    # a rank that died of SIGTERM was stopped (by its agent, after a peer failed), not the
    # one that hung up: a rank that left early (exit 0) is looked for next (`_left_early`)
    silent = {r: c for r, c in found.exit_codes.items() if c != 0 and r not in found.error_files
              and c != -signal.SIGTERM}
    if silent and tracebacks.peer_gone(raised.message):
        named = [found.root_causes[n.index] for n in failed if found.root_causes.get(n.index) in silent]
        rank = named[0] if named else min(silent, key=lambda r: (silent[r] <= 0, r))
        return FirstFailure(rank, node_of_rank(rank, found), silent[rank])
    return FirstFailure(first, raised.node, found.exit_codes.get(first, raised.exit_code))


def node_of_rank(rank: int, found: Findings) -> int | None:
    """The node whose log holds `rank` (torchrun's rendezvous decides it), or whose
    agent named it as its root cause when the rank printed nothing."""
    return next((i for i, ranks in found.node_ranks.items() if rank in ranks),
                next((i for i, r in found.root_causes.items() if r == rank), None))


def blame_nodes(outcomes: list[NodeOutcome], fired: list[FiredFault], found: Findings) -> None:
    """A node that died by a kill-node fault, or failed because its rank was killed by
    one, says so, instead of looking like a crash."""
    for record in fired:
        fault = parse_fault(record.fault)
        if not fault.kills:
            continue
        if fault.node_fault:
            index, why = fault.target, f"killed by fault {record.fault}"
        else:
            index = node_of_rank(fault.target, found)
            why = f"its rank {fault.target} was killed by fault {record.fault}"
        for node in outcomes:
            if node.index == index and node.state.bad and not node.reason:
                node.reason = why


def fault_cause(first: FirstFailure | None, outcomes: list[NodeOutcome], found: Findings,
                fired: list[FiredFault]) -> FirstFailure | None:
    """With injected faults, the first failure names the fault that caused it.

    A kill (kill-rank, kill-node) that fired is the root cause: what the peers
    then raise (a closed connection) is its symptom, kept as `peer_error`. So is a
    freeze (stop-node) or a cut-off (partition) of a node when the first failure is a
    rank's timeout or lost connection: the rank the others waited for is the frozen or
    cut-off node's, and the timeout is their symptom (`peer_error`). Any other first
    failure (a rank's own error) stays, and says which fault came before it.
    """
    failed_at = min((n.exited_s for n in outcomes if n.state.bad and n.exited_s is not None),
                    default=None)
    if failed_at is not None:         # only what came before the first failure can have caused it
        fired = [r for r in fired if r.lab_s - r.took_s <= failed_at]
    if not fired:
        return first
    kills = sorted((r for r in fired if parse_fault(r.fault).kills), key=lambda r: r.lab_s)
    if kills:
        record = kills[0]
        fault = parse_fault(record.fault)
        cause = FirstFailure(fault=record.fault, fault_s=record.lab_s, signal="SIGKILL")
        if fault.node_fault:
            node = next((n for n in outcomes if n.index == fault.target), None)
            cause.node, cause.exit_code = fault.target, node.exit_code if node is not None else None
        else:
            cause.rank, cause.node = fault.target, node_of_rank(fault.target, found)
            cause.exit_code = found.exit_codes.get(fault.target)
        if first and first.error and first.rank != cause.rank:
            cause.peer_error, cause.peer_rank = first.error, first.rank
        else:                         # the first failure is the killed rank itself: a peer's word
            cause.peer_rank, cause.peer_error = _peer_symptom(
                found, cause.rank, cause.node if fault.node_fault else None)
        return cause
    held = _held_node_behind(first, fired, found)
    if held is not None:
        return held
    if first is not None:
        first.after_fault = ", ".join(r.fault for r in fired)
    return first


_TIMED_OUT = re.compile(r"timed? ?out|timeout|deadline exceeded", re.I)


def comm_symptom(error: str | None) -> bool:
    """An error that says a rank waited for others in vain: a peer went away, or a
    collective's own timeout ran out."""
    return bool(error and (tracebacks.peer_gone(error) or _TIMED_OUT.search(error)))


def _held_node_behind(first: FirstFailure | None, fired: list[FiredFault], found: Findings
                      ) -> FirstFailure | None:
    """The frozen or cut-off node behind a first failure that is a timeout or a lost
    connection (rank 0 timed out in all_reduce while node 1 was paused): that node's rank
    is the first failure (`fault`), the timeout its peers' symptom. None: not so."""
    if first is None or first.error is None or not comm_symptom(first.error.get("exception")):
        return None
    for record in sorted(fired, key=lambda r: r.lab_s):
        fault = parse_fault(record.fault)
        if record.phase != "begin" or fault.kind not in ("stop-node", "partition"):
            continue
        if fault.kind == "stop-node" and first.node == fault.target:
            continue                  # a frozen node raises nothing while frozen: another cause
        ranks = sorted(found.node_ranks.get(fault.target) or [])
        cause = FirstFailure(fault=record.fault, fault_s=record.lab_s, node=fault.target,
                             rank=ranks[0] if len(ranks) == 1 else None,
                             ranks=ranks if len(ranks) > 1 else None)
        if first.rank is not None and first.rank not in ranks:
            cause.peer_error, cause.peer_rank = first.error, first.rank
        else:                         # a cut-off node's own timeout: a peer's word, if any
            cause.peer_rank, cause.peer_error = _peer_symptom(found, cause.rank, fault.target)
            if cause.peer_error is None:
                cause.peer_error, cause.peer_rank = first.error, first.rank
        return cause
    return None


def _peer_symptom(found: Findings, killed_rank: int | None,
                  killed_node: int | None) -> tuple[int | None, dict | None]:
    """What the others raised after a kill: the earliest error file of a rank not killed,
    else the lowest such rank's error from its log, preferring a peer hanging up."""
    gone = set(found.node_ranks.get(killed_node, [])) if killed_node is not None else set()
    gone |= {killed_rank} if killed_rank is not None else set()
    files = sorted((f.timestamp, r) for r, f in found.error_files.items() if r not in gone)
    if files:
        return files[0][1], found.errors.get(files[0][1])
    others = sorted((not tracebacks.peer_gone(e.get("exception")), r) for r, e in found.errors.items()
                    if r not in gone)
    return (others[0][1], found.errors[others[0][1]]) if others else (None, None)


def _left_early(outcomes: list[NodeOutcome], found: Findings, first: FirstFailure) -> FirstFailure | None:
    """The ranks that exited 0 before the first failure, when that failure only says a
    peer left: every one of them, on whichever node, a node that also holds a failing
    rank included."""
    if not tracebacks.peer_gone((first.error or {}).get("exception")):
        return None
    leavers = _leavers(outcomes, found)
    if not leavers:
        return None
    ranks = [r for r, _ in leavers if r is not None]
    nodes = [i for _, i in leavers]
    one_node = len(set(nodes)) == 1
    return FirstFailure(ranks[0] if len(ranks) == 1 or found.exit_times else None, nodes[0], 0,
                        ranks=ranks if len(ranks) > 1 else None,
                        nodes=None if one_node else nodes,
                        left_early=True, error=first.error, symptom_rank=first.rank)


def _leavers(outcomes: list[NodeOutcome], found: Findings) -> list[tuple[int | None, int]]:
    """(rank, node) of every rank that exited 0 while others went on: first leaver first
    where the logs say when (direct mode), else by rank (rank None: a node that printed
    nothing and whose ranks are unknown)."""
    # direct mode: the wrapper logs every worker's exit in order (and, lately, when)
    times = found.exit_times
    if times:
        failed_time = min((t for r, (t, _) in times.items() if found.exit_codes.get(r, 0) != 0),
                          default=None)
        return [(r, i) for t, r, i in sorted((t, r, i) for r, (t, i) in times.items()
                                              if found.exit_codes.get(r, 0) == 0
                                              and (failed_time is None or t <= failed_time))]
    if any(found.exits.values()):
        left = []
        for index, exits in sorted(found.exits.items()):
            for rank, code in exits:
                if code != 0:
                    break
                left.append((rank, index))
        return left
    # torchrun: a node whose ranks all exited 0 in a lab whose first error is a vanished
    # peer (its agent itself may end later: it waits at torchrun's exit barrier, and
    # under load labctl may stop it there after the grace period) ...
    if all(n.exited_s is None for n in outcomes if n.state.bad):
        return []
    left: list[tuple[int | None, int]] = []
    for node in sorted(outcomes, key=lambda n: (n.exited_s if n.exited_s is not None else 1e18, n.index)):
        if node.state is NodeState.SUCCEEDED or (node.index in found.workers_succeeded
                                                 and node.state is NodeState.STOPPED):
            ranks = found.node_ranks.get(node.index) or []
            if not ranks and found.world is not None:   # it printed nothing: the ranks nobody else had
                others = set().union(*(r for i, r in found.node_ranks.items() if i != node.index))
                ranks = sorted(set(range(found.world)) - others)
            left += [(r, node.index) for r in ranks] or [(None, node.index)]
        else:
            left += [(r, node.index) for r in _exited_zero_beside_failures(node.index, found)]
    return sorted(left, key=lambda x: (x[0] is None, x[0] or 0))    # torchrun does not say when


def _exited_zero_beside_failures(node: int, found: Findings) -> list[int]:
    """... and on a node that also holds a failing rank, the ranks its agent's failure
    summary does not list: torchrun lists every worker of its node that did not exit 0
    (the failed one and those it then stopped, -15), so one it leaves out had exited 0
    before its agent saw the failure. A node's ranks are consecutive from its local rank
    0 (torchrun's rendezvous gives each node a block of nproc_per_node ranks)."""
    listed = found.summaries.get(node) or []
    if not listed or not found.nproc_per_node:
        return []
    base = listed[0].rank - listed[0].local_rank
    return sorted(set(range(base, base + found.nproc_per_node)) - {w.rank for w in listed})


# the calls every rank of the world must make (new_group: unless use_local_synchronization)
SETUP_CALLS = ("init_process_group", "new_group", "new_subgroups", "new_subgroups_by_enumeration",
               "init_device_mesh")


def setup_hang(where: dict[int, dict], world: int | None,
               unreached: dict[int, str] | None = None) -> Diagnosis | None:
    """At a hang, from the ranks' stacks (stackdumps.where_stuck: their innermost own frame and
    the torch.distributed call it is in): ranks held in a call every rank must make
    (init_process_group, new_group) wait for the ranks that are not in it, and those are to
    blame, whatever the others' op records say after it (ranks that skipped a new_group
    wait in the next collective for the ranks held in it). Every rank held in
    init_process_group: the ranks whose logs say they cannot reach the rendezvous store
    (`unreached`, torch's retry warnings) while the others reached it. The diagnosis in
    the trace's form (rank, ranks, op, caller, text; `source`: stacks). None: no rank is
    held so, or every rank is and no log tells them apart."""
    held = {r: w for r, w in where.items() if w.get("call") in SETUP_CALLS}
    if not held or not world:
        return None
    others = sorted(set(range(world)) - set(held))
    if not others:
        return _store_unreached(held, world, unreached or {})
    calls = [w["call"] for _, w in sorted(held.items())]
    call = max(set(calls), key=calls.count)
    first = held[min(held)]
    waiting = ", ".join(map(str, sorted(held)))
    went_on = {(where.get(r, {}).get("file"), where.get(r, {}).get("line"), where.get(r, {}).get("call"))
               for r in others}
    if call != "init_process_group" and len(held) < len(others) and len(went_on) == 1 \
            and next(iter(went_on))[2] is not None:
        # the fewer ranks made a group the rest never make (one made only in rank 0's logger):
        # the rest went on together to one collective; the odd call is the held ranks'
        file, line, their = next(iter(went_on))
        one = min(held) if len(held) == 1 else None
        return Diagnosis(rank=one, ranks=sorted(held), op=call, caller=f"{first['file']}:{first['line']}",
                         source=STACKS,
                         text=f"rank{'s' if len(held) > 1 else ''} {waiting} alone call{'' if len(held) > 1 else 's'} "
                              f"{call} (at {first['file']}:{first['line']}), which every rank must call, while "
                              f"rank {', '.join(map(str, others))} went on to {their} at {file}:{line}")
    elsewhere = "; ".join(f"rank {r} at {where[r]['file']}:{where[r]['line']}"
                          + (f" in {where[r]['call']}" if where[r].get("call") else "")
                          if where.get(r, {}).get("file") else f"rank {r}: no stack" for r in others)
    text = (f"rank{'s' if len(held) > 1 else ''} {waiting} wait{'' if len(held) > 1 else 's'} in {call} "
            f"(at {first['file']}:{first['line']}), which every rank must call; "
            f"rank {', '.join(map(str, others))} never called it ({elsewhere})")
    one = others[0] if len(others) == 1 else None
    at = where.get(one, {}) if one is not None else {}
    return Diagnosis(rank=one, ranks=others, op=call, caller=f"{at['file']}:{at['line']}" if at.get("file") else None,
                     source=STACKS, text=text)


def _store_unreached(held: dict[int, dict], world: int, unreached: dict[int, str]) -> Diagnosis | None:
    """Every rank held in init_process_group: the ranks that said they cannot reach the
    rendezvous store (another MASTER_ADDR or MASTER_PORT than the others'), when not all did."""
    if len(held) < world or any(w.get("call") != "init_process_group" for w in held.values()):
        return None
    away = torchsays.unreached_store(unreached, sorted(held))
    if not away:
        return None
    first = held[away[0]]
    endpoints = ", ".join(sorted({unreached[r] for r in away}))
    rest = sorted(set(held) - set(away))
    text = (f"rank{'s' if len(away) > 1 else ''} {', '.join(map(str, away))} cannot reach the rendezvous store "
            f"at {endpoints} (torch: failed to connect), so init_process_group "
            f"(at {first['file']}:{first['line']}) waits on every rank: "
            f"rank {', '.join(map(str, rest))} reached the store and wait{'s' if len(rest) == 1 else ''} for "
            f"{'them' if len(away) > 1 else 'it'} (all ranks must use one MASTER_ADDR and MASTER_PORT)")
    return Diagnosis(rank=away[0] if len(away) == 1 else None, ranks=away, op="init_process_group",
                     caller=f"{first['file']}:{first['line']}" if first.get("file") else None,
                     source=STACKS, text=text)
