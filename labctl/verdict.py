"""How a run ended: decided here, and only here.

`decide` takes what was known of a run when its folder was finished (`Evidence`: what
the driver saw, what the logs showed, the faults that fired, the stuck collective, or
that the finish itself failed or was cut short) and returns the run record with its
state, message and first failure. Every other place asks the record (torch elastic's
`_monitor_workers` returns one RunResult; TorchX has one AppStatus). `as_seen_now` is
the one reading of a record at a later time (a run whose labctl died is abandoned).

The rules, in order:

1. the finish failed (the run folder could not be written) -> error; a second signal
   cut the finish short -> interrupted, saying what is missing;
2. the log collection was cut short -> interrupted; it failed -> error (logs kept);
3. how the lifecycle ended: a signal -> interrupted, the deadline -> timeout, the
   backend saw the lab fail -> failed, the backend broke -> error; a run watched only
   (`labctl collect`, `labctl down`) that still runs -> running (or failed when
   `collect --delete` removed it, abandoned when `down` stopped it);
4. a run that otherwise passed failed when a node that could not be spared did not
   succeed (an elastic lab goes on without some: `outcome.spared`), a check failed, a
   rank exited non-zero, or some rank never finished its workloads;
5. a grade labctl makes of a finished run (`labctl exercise check`: bytes sent,
   collectives called, from the trace; `judge`) comes last: a run that passed fails
   when the grade failed, a second signal that cut the grade short -> interrupted, and
   every other state stands (a deadline, a signal or a failed rank is never graded
   into a pass).
"""
from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field

from workloads._protocol.ops import CALLS, DEFAULT_PG, OBJECT_APIS, P2P

from . import blame, stackdumps, torchsays, tracebacks
from .outcome import NodeOutcome, NodeState, RunState, spared
from .runrecord import Checks, FailedCheck, FiredFault, FirstFailure, RunRecord
from .storeverdict import (counter_reset, deleted_before_it_was_read, elected_never_set, never_added, polls_apart,
                           store_writer, waits_for_its_own_key)
from .trace.calls import says_uninitialized
from .trace.model import Diagnosis, Mismatch, Stuck


class Ending(enum.Enum):
    """Why the driver's lifecycle ended (labctl/driver.py sets it; this module reads it)."""
    ALL_ENDED = "every node ended"
    NODE_FAILED = "a node failed and the grace after it ran out"
    DEADLINE = "the lab's deadline passed"
    HANG = "the live watcher named a hang (on_hang: stop)"
    SIGNAL = "a signal stopped the lab"
    BACKEND_FAILURE = "the backend saw the lab fail"
    ERROR = "the backend could not run the lab"
    WATCHED = "the watching ended"          # a run labctl did not start: it may still run


class Collection(enum.Enum):
    COLLECTED = "every log collected"
    CUT = "a second signal cut the collection short"
    FAILED = "the collection failed"


@dataclass
class Seen:
    """What the driver (or `labctl collect`, `labctl down`) saw of the run."""
    ending: Ending
    outcomes: list[NodeOutcome]
    message: str = ""                 # the backend's or the driver's own words
    signal: str | None = None         # the signal that stopped the lab (or the watching)
    collection: Collection = Collection.COLLECTED
    collection_failure: str = ""      # why the collection failed
    cut_by: str | None = None         # the signal that cut the collection short
    still_running: list[int] = field(default_factory=list)   # watched only: nodes not ended
    why_still_running: str = ""
    removed_before_end: bool = False  # `labctl collect --delete` removed it while it ran
    abandoned: bool = False           # `labctl down` finished a run whose labctl was gone


@dataclass(frozen=True)
class Cut:
    """A second signal cut the run folder's finish short at `step`: what is missing."""
    signal: str
    step: str
    missing: tuple[str, ...]


@dataclass
class Evidence:
    """Everything known when the run folder is finished; `found` None: the logs were not
    read (the folder failed, or the finish was cut before they were)."""
    seen: Seen
    spec_nodes: int
    fewest_nodes: int
    has_workloads: bool
    faults: list[FiredFault] = field(default_factory=list)
    found: blame.Findings | None = None
    diagnosis: Diagnosis | None = None   # where the collectives stopped (labctl/trace/)
    ended_in: dict[int, str] = field(default_factory=dict)   # rank -> where its trace records end
    ended_at: dict[int, dict] = field(default_factory=dict)  # ... as {"op", "caller", "inside"}
    destroyed: dict[int, str] = field(default_factory=dict)  # rank -> where it called destroy_process_group
    deleted: dict[str, tuple[int, str]] = field(default_factory=dict)  # store key -> (rank, caller) that deleted it
    added: dict[str, tuple[list[int], str]] = field(default_factory=dict)  # store key -> (ranks, caller) that added
    set_keys: dict[str, tuple[int, str]] = field(default_factory=dict)  # store key -> (rank, caller) that last set it
    resets: dict[str, tuple[int, str]] = field(default_factory=dict)  # store key -> (rank, caller) that set it after others added
    elected: dict[str, tuple[int, str]] = field(default_factory=dict)
    timeouts: dict[tuple[int, str], int] = field(default_factory=dict)
    pickled: dict[int, set[str]] = field(default_factory=dict)   # rank -> the classes its object collectives sent  # (rank, pg) -> the group's timeout there, ms  # store key -> (rank, caller) that won its compare_set
    storage_failure: str = ""         # the run folder could not be written: why
    cut: Cut | None = None
    previous: RunState | None = None  # `labctl down` of a run whose labctl could not collect


def decide(record: RunRecord, ev: Evidence, folder: str = "") -> RunRecord:
    """The record with the run's state, message, first failure and what the logs showed
    filled in from `ev` (a new record; `record` is not changed). `folder` names the run
    folder in the messages that tell how to save or finish it."""
    out = dataclasses.replace(record, node_outcomes=[dataclasses.replace(o) for o in ev.seen.outcomes],
                              notes=list(record.notes), unfinished=[])
    seen, outcomes = ev.seen, out.node_outcomes
    gone = spared(outcomes, ev.spec_nodes, ev.fewest_nodes)
    for o in outcomes:
        if o.index in gone and not o.reason:
            o.reason = f"the lab went on without it, min_nodes {ev.fewest_nodes} of {ev.spec_nodes}"
    out.signal = record.signal or seen.signal or seen.cut_by
    if ev.found is not None:
        _what_the_logs_showed(out, ev)

    state, message = _state(ev, outcomes, gone, folder)
    first = None
    if ev.found is not None:
        fired = [f for f in ev.faults if f.began]
        blame.blame_nodes(outcomes, fired, ev.found)
        if state is not RunState.PASSED and not ev.storage_failure:
            first = blame.first_failure(outcomes, ev.found)
            if fired and state is not RunState.INTERRUPTED:
                first = blame.fault_cause(first, outcomes, ev.found, fired)
        where = {r: stackdumps.where_stuck(lines) for r, lines in ev.found.stacks.items()}
        for r, loop in ev.found.spinning.items():      # spinning in a loop: the loop is where it is
            if where.get(r) and not where[r].get("call"):
                where[r] = {**where[r], "line": loop}
        diagnosis = ev.diagnosis
        if state is RunState.TIMEOUT and (first is None or first.hang) and not _group_made_apart(diagnosis):
            # ranks held in a call every rank must make (new_group) wait for those elsewhere,
            # whatever the records of the ops after it say (unless the records show that every
            # rank made it, with other members: that is the cause)
            diagnosis = blame.setup_hang(where, out.world_size, ev.found.store_unreached) or diagnosis
        if diagnosis is not None and state is not RunState.PASSED:
            if first is None:                  # a hang: nobody failed, the deadline came
                first = FirstFailure(diagnosis.rank, hang=True)
            first.collective = diagnosis
        polled = (polls_apart(ev.found, ev.ended_at, out.world_size)
                  or counter_reset(ev.found, ev.ended_at, ev.resets, out.world_size)
                  or elected_never_set(ev.found, ev.ended_at, ev.elected, ev.set_keys, out.world_size)
                  or waits_for_its_own_key(ev.found, ev.ended_at, ev.set_keys, out.world_size)) \
            if first is None and state is RunState.TIMEOUT else None
        if first is not None and not first.hang and first.rank is not None and first.rank in ev.ended_in \
                and not (first.error and first.error.get("file")):
            first.last_op = ev.ended_in[first.rank]      # it died saying nothing of where: its records do
        if first is not None and diagnosis is not None:
            first = _odd_call_behind(first, diagnosis, ev.found, ev.timeouts) or first
            first = _the_leavers_waited_for(first, diagnosis, ev.found) or first
        if first is not None:
            _name_the_call(first, ev.ended_at, where)
            _destroyed_first(first, ev.destroyed, ev.ended_at)
            first = _named_by_torch(first, ev.found, out.world_size, ev.ended_at) or first
            _everyone_raised_it(first, ev.found)
            if not _made_the_odd_call(first, out.trace.mismatch if out.trace else None):
                first = _sent_what_could_not_be_loaded(first, ev.found, ev.ended_at, ev.pickled) or first
            first = deleted_before_it_was_read(first, ev.found, ev.ended_at, ev.deleted) or first
            first = never_added(first, ev.found, ev.ended_at, ev.added, out.world_size) or first
            first = store_writer(first, ev.found, ev.ended_at, ev.set_keys, out.world_size) or first
        first = first or polled
        failed_ranks = ev.found.failed_ranks
        out.rank_errors = {k: v for k, v in sorted(ev.found.errors.items())
                           if k in failed_ranks or (first is not None and first.rank == k)}
    if ev.cut is not None:
        lab = ("the lab itself had been interrupted" if state is RunState.INTERRUPTED
               else f"the lab itself had {state.value}")
        reason = message or (first.describe() if first else "")
        message = (f"{ev.cut.signal} cut the run folder's finish short while {ev.cut.step}: "
                   + "; ".join(ev.cut.missing) + f"; {lab}" + (f" ({reason})" if reason else ""))
        state, out.signal, out.unfinished = RunState.INTERRUPTED, ev.cut.signal, list(ev.cut.missing)
    out.state = state
    out.first_failure = first
    out.message = message or (first.describe() if first else "")
    return out


def _group_made_apart(diagnosis: Diagnosis | None) -> bool:
    """The trace saw ranks create one group with other members (labctl/trace/calls.py)."""
    return diagnosis is not None and diagnosis.mismatch is not None and "members" in diagnosis.mismatch.differs


def _odd_call_behind(first: FirstFailure, diagnosis: Diagnosis, found: blame.Findings,
                     timeouts: dict[tuple[int, str], int] | None = None) -> FirstFailure | None:
    """The cause behind a first failure that is only a symptom, where the trace names it: a
    rank that died without a line of its own (gloo's size check aborts the rank that
    receives more than it expected: SIGABRT) inside a collective whose ranks' calls differed
    is the symptom of the odd call; a rank whose error only says a peer went away, or that
    the collective timed out, while it waited in a collective another rank never entered
    (rank 0 still preparing data past the group's timeout) is the symptom of that rank's absence
    (a rank that finished and was then stopped with the others, SIGTERM, is no failure of
    its own). The other rank is then the first failure, the first rank's end its
    `peer_rank`, `peer_error`. None: not so, or the rank timed out in a group whose timeout
    it made shorter than the other members did (minutes read as seconds, on its node only):
    its own timeout is the cause, not the other rank's time."""
    culprit = diagnosis.rank
    if first.rank is None or culprit is None or culprit == first.rank or first.fault or first.left_early:
        return None
    error = first.error or {}
    gone = tracebacks.peer_gone(error.get("exception")) or tracebacks.timed_out_waiting(error.get("exception"))
    stuck = diagnosis.stuck
    mismatches: list[Stuck | Mismatch] = [st for st in stuck if st.mismatch]
    mismatches += [diagnosis.mismatch] if diagnosis.mismatch is not None else []
    odd = any(culprit in (m.ranks if isinstance(m, Mismatch) else m.targets) and first.rank in m.calls
              for m in mismatches)
    # raised inside a torch.distributed call after a collective whose odd call was
    # another's (DDP's join, its shadow collectives met by another all_reduce: rank 0's
    # _broadcast_coalesced then fails on what it received): the odd call's symptom
    symptom = odd and bool(error.get("call"))
    if error.get("file") and not gone and not symptom:
        return None                     # its own error, in its own code
    waited = gone and any(culprit in st.missing and first.rank in st.waiting for st in stuck)
    if not (odd or waited):
        return None
    if waited and tracebacks.timed_out_waiting(error.get("exception")) and any(
            _shorter_timeout(first.rank, st, timeouts or {}) for st in stuck if first.rank in st.waiting):
        return None
    if error.get("file"):
        peer_error = dict(error)
    else:
        said = error.get("exception")
        how = f"was killed by {first.signal}" if first.signal else f"exited with code {first.exit_code}"
        peer_error = {"exception": f"{how}: {said}" if said else how}
    return FirstFailure(culprit, blame.node_of_rank(culprit, found), found.exit_codes.get(culprit),
                        collective=diagnosis, peer_rank=first.rank, peer_error=peer_error,
                        blamed_for="odd call" if odd else "absence")


def _shorter_timeout(rank: int, st: Stuck, timeouts: dict[tuple[int, str], int]) -> bool:
    """The group's timeout on `rank` is shorter than on every other member that said its."""
    mine = timeouts.get((rank, st.pg))
    theirs = [timeouts[(r, st.pg)] for r in [*st.waiting, *st.missing] if r != rank and (r, st.pg) in timeouts]
    return mine is not None and bool(theirs) and mine < min(theirs)


def _killed_by_fault(first: FirstFailure) -> bool:
    """Killed by an injected fault (kill-rank, kill-node): the fault is the cause, said as
    such; a frozen or cut-off rank is named with the op its records end in."""
    return bool(first.fault) and first.fault.split(":", 1)[0] in ("kill-rank", "kill-node")


def _the_leavers_waited_for(first: FirstFailure, diagnosis: Diagnosis, found: blame.Findings
                            ) -> FirstFailure | None:
    """Of the ranks that left early, the ones the stuck collective waits for: ranks that
    exited 0 after a world all_reduce while rank 2 waits in its subgroup's for rank 3 did
    nothing wrong but rank 3. Where the diagnosis names one rank and none of them (their
    scripts ran to the end; rank 3 reduced over the wrong mesh dimension, with rank 1,
    which never did), that rank is the first failure (returned), the first leaver its
    `peer_rank`. Else None (narrowed in place, or left as it is)."""
    if not first.left_early:
        return None
    leavers = first.ranks or ([first.rank] if first.rank is not None else [])
    named = diagnosis.ranks or ([diagnosis.rank] if diagnosis.rank is not None else [])
    kept = [r for r in leavers if r in named]
    culprit = diagnosis.rank
    if not kept and culprit is not None and leavers:
        absent = any(culprit in st.missing for st in diagnosis.stuck)
        return FirstFailure(culprit, blame.node_of_rank(culprit, found), found.exit_codes.get(culprit),
                            collective=diagnosis, peer_rank=leavers[0],
                            peer_error={"exception": "exited 0 (its script ran to its end) while the others "
                                                     "were still in a collective"},
                            blamed_for="absence" if absent else "odd call")
    if not kept or len(kept) == len(leavers):
        return None
    nodes = [first.nodes[leavers.index(r)] for r in kept] if first.nodes and len(first.nodes) == len(leavers) \
        else None
    first.rank = kept[0] if len(kept) == 1 else None
    first.ranks = kept if len(kept) > 1 else None
    first.node = nodes[0] if nodes else first.node
    first.nodes = nodes if nodes and len(kept) > 1 and len(set(nodes)) > 1 else None
    return None


def _name_the_call(first: FirstFailure, ended_at: dict[int, dict], where: dict[int, dict]) -> None:
    """first_failure's `op` and `caller`: the call the culprit failed in and its line. The
    op: the one its records end in when its error was raised on that op's line, else the
    torch.distributed function its traceback was raised in, else the one the diagnosis
    names for it (the call it made where the others made another, or the
    one they wait in that it never entered), else, for a rank that died without a line of
    its own, where its records end. The line: its error's, else the diagnosis', else, for
    a rank the others waited for, where its stack had it when it was stopped outside any
    torch.distributed call, else (or for one that died between ops, named with the
    collective it then never entered) the line they called that collective at, else where
    its records end (it died without a line), else its stack at the deadline."""
    rank = first.rank
    if rank is None or _killed_by_fault(first):
        return
    diagnosis = first.collective
    named = diagnosis is not None and diagnosis.rank == rank
    ended = ended_at.get(rank) or {}
    error = None if first.left_early else first.error
    at = f"{error['file']}:{error['line']}" if error and error.get("file") else None
    # died without a line of its own; not the odd caller the diagnosis named, which the
    # launcher stopped wherever it waited after its odd call
    silent = at is None and not first.hang and not first.left_early and first.blamed_for != "odd call"
    if first.hang and ended.get("inside") and (ended.get("op") in CALLS or ended.get("op") == torchsays.MONITORED_BARRIER):
        # held in a call the others cannot see (a store read nobody answers, a new_group the
        # others made otherwise, a monitored_barrier, whose sends no plain barrier answers):
        # that call, not the collective it never entered
        first.op, first.caller = ended["op"], ended.get("caller")
        return
    op = ended.get("op") if at is not None and ended.get("caller") == at else None
    op = (error or {}).get("called") or op   # the call the script's line made (DistributedDataParallel)
    op = op or (error or {}).get("call")     # raised inside a torch.distributed call before it issued an op
    if silent and ended.get("inside"):       # it died inside an op (gloo's abort): that op, not the one it then missed
        op = op or ended.get("op")
    op = op or (diagnosis.op if diagnosis and named else None) or (ended.get("op") if silent else None)
    stack = where.get(rank) or {}
    absent = None                       # the collective it never entered, where the others called it
    if first.blamed_for == "absence" and diagnosis is not None:
        # alive elsewhere when it was stopped (its stack at the SIGTERM: still computing, late
        # past the others' timeout): there; else where the others called what it never entered
        absent = (f"{stack['file']}:{stack['line']}" if stack.get("file") and stack.get("call") is None
                  else None) or next(((st.calls.get(first.peer_rank) or {}).get("caller")
                                      for st in diagnosis.stuck if rank in st.missing), None)
    elif silent and named and not ended.get("inside") and op == diagnosis.op:
        # it died between ops, and the op named is the one the others then waited in: its line
        absent = next((c.get("caller") for st in diagnosis.stuck if rank in st.missing
                       for _, c in sorted(st.calls.items()) if c.get("caller")), None)
    inside = ended.get("caller") if silent and ended.get("inside") else None
    caller = at or inside or (diagnosis.caller if diagnosis and named else None) or absent or \
        (ended.get("caller") if silent else None)
    if caller is None and stack.get("file") and not first.left_early:
        caller = f"{stack['file']}:{stack['line']}"
    first.op, first.caller = op, caller


def _named_by_torch(first: FirstFailure, found: blame.Findings, world: int | None,
                    ended_at: dict[int, dict] | None = None) -> FirstFailure | None:
    """torch's own check named the rank at fault in another rank's error (torchsays.py): a
    first failure that is not that rank is its victim. The named rank is the first failure,
    the victim its `peer_rank`/`peer_error`; the op is the check's call (the monitored
    barrier the named rank never reached: its line is where the others waited). None:
    torch named nobody, or named the first failure itself (its op then said here)."""
    if first.fault or first.left_early:
        return None
    named = torchsays.named_culprits(found.errors, world)
    if named is None or not named.ranks:
        return None
    said = found.errors.get(named.by) or {}
    at = f"{said['file']}:{said['line']}" if said.get("file") else None
    if named.op == torchsays.MONITORED_BARRIER and _waited_for_the_caller(named, ended_at or {}):
        # the ranks it names sat in a collective of everyone's group that the caller never
        # entered: they waited for it; its monitored_barrier was the odd call
        return FirstFailure(named.by, blame.node_of_rank(named.by, found), found.exit_codes.get(named.by),
                            error=dict(said) or None, blamed_for="odd call", op=named.op, caller=at)
    if first.rank is not None and first.rank in named.ranks:      # the first failure is among them: it stays
        if named.op is not None and len(named.ranks) == 1:
            first.op = named.op
        return None
    one = named.ranks[0] if len(named.ranks) == 1 else None
    own = found.errors.get(one) if one is not None else None
    caller = f"{own['file']}:{own['line']}" if own and own.get("file") and named.op != torchsays.MONITORED_BARRIER \
        else at
    return FirstFailure(one, blame.node_of_rank(one, found) if one is not None else None,
                        found.exit_codes.get(one) if one is not None else None,
                        ranks=list(named.ranks) if one is None else None, error=own,
                        peer_rank=named.by, peer_error=dict(said) or {"exception": named.text},
                        blamed_for="named by torch", op=named.op or first.op, caller=caller or first.caller)


def _waited_for_the_caller(named: torchsays.Named, ended_at: dict[int, dict]) -> bool:
    """Every rank a monitored barrier named ended inside one collective of the default
    group (a plain `barrier`) that the barrier's caller did not end in."""
    ends = [ended_at.get(r) or {} for r in named.ranks]
    if not ends or any(not e.get("inside") or e.get("op") in CALLS or e.get("op") in P2P
                       or not str(e.get("pg") or "").startswith(DEFAULT_PG) for e in ends):
        return False
    if len({(e.get("op"), e.get("pg")) for e in ends}) != 1:
        return False
    mine = ended_at.get(named.by) or {}
    return not (mine.get("inside") and mine.get("op") == ends[0].get("op"))


_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{4,}\b")


def _one_error(text: object) -> str:
    """An error's text with its object addresses left out: one error raised on two ranks
    names each rank's own object (`<ProcessGroup object at 0x7f...>`)."""
    return _ADDRESS.sub("0x…", str(text or ""))


def _everyone_raised_it(first: FirstFailure, found: blame.Findings) -> None:
    """Several ranks raised the same error at the same line of their own (the script's bug
    on each of them, not a peer's symptom): every one of them is the first failure
    (`ranks`), not only the first to exit."""
    error = first.error or {}
    if first.rank is None or first.blamed_for or first.fault or first.left_early or not error.get("file") \
            or blame.comm_symptom(error.get("exception")):
        return
    said = _one_error(error.get("exception"))
    same = sorted(r for r, e in found.errors.items()
                  if found.exit_codes.get(r, 0) != 0 and _one_error((e or {}).get("exception")) == said
                  and e.get("file") == error["file"] and e.get("line") == error.get("line"))
    if len(same) > 1 and first.rank in same:
        nodes = [blame.node_of_rank(r, found) for r in same]
        first.rank, first.ranks = None, same
        first.nodes = nodes if len(set(nodes)) > 1 else None


_UNLOADABLE = ("Can't get attribute", "UnpicklingError", "No module named", "Can't pickle", "cannot import name")
_FROM_ROOT = ("broadcast_object_list", "scatter_object_list")


def _made_the_odd_call(first: FirstFailure, mismatch: Mismatch | None) -> bool:
    """The rank that raised made the odd call of a collective the trace saw complete with
    calls that differ (a broadcast_object_list of a longer list: what it then failed to
    unpickle came of its own call, not of what the root sent)."""
    raisers = list(first.ranks or []) or ([first.rank] if first.rank is not None else [])
    return mismatch is not None and mismatch.rank is not None and mismatch.rank in raisers


_CLASS_IN_ERROR = re.compile(r"\b([A-Za-z_]\w*)\.__init__\(\)|Can't get attribute '([A-Za-z_]\w*)'")


def _sent_what_could_not_be_loaded(first: FirstFailure, found: blame.Findings, ended_at: dict[int, dict],
                                   pickled: dict[int, set[str]] | None = None) -> FirstFailure | None:
    """The ranks that raised while unpickling what an object collective's root sent them (a
    class only the root defined, a module only it imported) are its victims: the root is
    the first failure, with the call and the line. So is, in any object collective, the one
    rank whose pickled object named the class the error names (an exception class whose
    `__init__` takes other arguments, in an all_gather_object's records: every rank fails to
    load it). None: not such a failure, or the root is among those that raised."""
    raisers = list(first.ranks or []) or ([first.rank] if first.rank is not None else [])
    if not raisers or first.fault or first.left_early or first.blamed_for:
        return None
    error = found.errors.get(raisers[0]) or {}
    ended = ended_at.get(raisers[0]) or {}
    call = error.get("called") or error.get("call") or ended.get("op")
    named = _CLASS_IN_ERROR.search(str(error.get("exception") or ""))
    if named and pickled and call in OBJECT_APIS:
        name = named.group(1) or named.group(2)
        senders = [r for r, names in sorted(pickled.items()) if any(n.rpartition(".")[2] == name for n in names)]
        if len(senders) == 1:
            sender = senders[0]
            at = f"{error['file']}:{error['line']}" if error.get("file") else ended.get("caller")
            return FirstFailure(sender, blame.node_of_rank(sender, found), found.exit_codes.get(sender),
                                peer_rank=next((r for r in raisers if r != sender), raisers[0]), peer_error=dict(error),
                                blamed_for="sent it", op=call, caller=at)
    root = ended.get("root")
    if call not in _FROM_ROOT or not isinstance(root, int) or root in raisers \
            or not any(s in str(error.get("exception") or "") for s in _UNLOADABLE):
        return None
    at = f"{error['file']}:{error['line']}" if error.get("file") else ended.get("caller")
    return FirstFailure(root, blame.node_of_rank(root, found), found.exit_codes.get(root),
                        peer_rank=raisers[0], peer_error=dict(error), blamed_for="sent it", op=call, caller=at)


def _destroyed_first(first: FirstFailure, destroyed: dict[int, str], ended_at: dict[int, dict]) -> None:
    """A rank that raised "not initialized" (or "destroyed") after destroying the group
    itself, or one the others waited for whose records end with that destroy (it tore the
    group down and re-made it alone: an in-process restart): the destroy is the call to
    name, its line the one to show (its error's line is where it found out)."""
    if first.rank is None or first.rank not in destroyed or first.left_early:
        return
    ended = ended_at.get(first.rank) or {}
    waited_for = first.blamed_for == "absence" or first.hang
    if says_uninitialized((first.error or {}).get("exception")) or \
            (waited_for and ended.get("op") == "destroy_process_group" and not ended.get("inside")):
        first.op, first.caller = "destroy_process_group", destroyed[first.rank]


def _state(ev: Evidence, outcomes: list[NodeOutcome], gone: set[int], folder: str) -> tuple[RunState, str]:
    """The run's state and the message that says why, by the rules of the module docstring."""
    seen = ev.seen
    if ev.storage_failure:
        return RunState.ERROR, ev.storage_failure
    if ev.previous is not None:               # `down`: the logs are saved now, the state stands
        return ev.previous, seen.message
    before = f" (before that: {seen.message})" if seen.message else ""
    if seen.collection is Collection.CUT:     # never a pass: not every log was seen
        return RunState.INTERRUPTED, (f"interrupted ({seen.cut_by}) while collecting the logs: they "
                                      f"are incomplete and the lab was kept; `labctl down {folder}` "
                                      "saves them" + before)
    if seen.collection is Collection.FAILED:
        return RunState.ERROR, (f"collecting the logs failed: {seen.collection_failure}; nothing was "
                                f"deleted; `labctl down {folder}` saves them, then removes the lab"
                                + before)
    if seen.abandoned:
        return RunState.ABANDONED, seen.message
    state = {Ending.SIGNAL: RunState.INTERRUPTED, Ending.DEADLINE: RunState.TIMEOUT, Ending.HANG: RunState.TIMEOUT,
             Ending.BACKEND_FAILURE: RunState.FAILED, Ending.ERROR: RunState.ERROR}.get(
        seen.ending, RunState.PASSED)
    message = seen.message
    if seen.ending is Ending.WATCHED and seen.still_running and state is RunState.PASSED:
        if seen.removed_before_end:
            return RunState.FAILED, "removed by `labctl collect --delete` before it ended"
        state = RunState.RUNNING
        message = (f"node(s) {', '.join(map(str, seen.still_running))} still running "
                   f"({seen.why_still_running}): collected what they wrote so far")
    if state is RunState.PASSED and any(o.state is not NodeState.SUCCEEDED and o.index not in gone
                                        for o in outcomes):
        state = RunState.FAILED
    found = ev.found
    if state is RunState.PASSED and found is not None:
        if found.failed_count or found.exit_codes:
            return RunState.FAILED, message
        world = found.world
        if gone and len(found.finished_world) == 1:
            world = next(iter(found.finished_world))    # the world the lab went on with
        if ev.has_workloads and found.finished != set(range(world or 0)):
            return RunState.FAILED, message or "some ranks never finished their workloads"
    return state, message


def _what_the_logs_showed(out: RunRecord, ev: Evidence) -> None:
    found = ev.found
    world = out.world_size
    out.rank_exit_codes = dict(sorted(found.exit_codes.items()))
    out.failed_ranks = found.failed_ranks
    out.ranks_without_output = sorted(set(range(world)) - found.ranks)
    out.checks = Checks(found.total, found.failed_count, found.skipped)
    out.failed_checks = [FailedCheck(*(r.get(k) for k in ("workload", "name", "rank", "detail")))
                         for r in found.failed]


@dataclass(frozen=True)
class Grade:
    """What labctl graded of a finished run (`labctl exercise check`), the checks that
    failed (as results.jsonl's), and a second signal that cut the grading short."""
    failed: tuple[FailedCheck, ...] = ()
    message: str = ""                 # the grade's one line, when it failed
    cut_by: str | None = None
    notes: tuple[str, ...] = ()


def judge(record: RunRecord, grade: Grade) -> RunRecord:
    """The record once `grade` is known (rule 5 of the module docstring); a new record.
    The grade's failed checks join the record's whatever the state, so status.json
    names them."""
    out = dataclasses.replace(record, notes=[*record.notes, *grade.notes],
                              failed_checks=[*record.failed_checks, *grade.failed])
    if grade.failed:
        before = record.checks or Checks()
        out.checks = Checks(before.total + len(grade.failed), before.failed + len(grade.failed), before.skipped)
    if grade.cut_by is not None:
        lab = ("the lab itself had been interrupted" if record.state is RunState.INTERRUPTED
               else f"the lab itself had {record.state.value}")
        out.state, out.signal = RunState.INTERRUPTED, record.signal or grade.cut_by
        out.message = f"{grade.cut_by} cut the exercise's grade short; {lab}" + (
            f" ({record.message})" if record.message else "")
    elif record.state is RunState.PASSED and grade.failed:
        out.state, out.message = RunState.FAILED, grade.message
    return out


def as_seen_now(record: RunRecord, controller_gone: bool) -> RunState:
    """The state of a recorded run as it stands now: one marked running whose labctl
    is gone (`RunDir.controller_gone`) is abandoned."""
    if record.state is RunState.RUNNING and controller_gone:
        return RunState.ABANDONED
    return record.state
