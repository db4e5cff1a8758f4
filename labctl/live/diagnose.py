"""The diagnosis of a lab that still hangs: every rank's stacks once, then the same
diagnosis the finish runs (labctl/verdict.py over the logs, the trace and the stacks), on
copies under the run folder's `live/`, so nothing the finish writes is touched and no rank
is stopped (issue 49)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .. import blame, logs, stackdumps, verdict
from ..backends.base import Backend, TakeStacks
from ..outcome import NodeOutcome
from ..runrecord import LiveDiagnosis
from ..rundir import RANKS_SUBDIR, RESULTS_FILE, TRACE_FILE, RunDir, rank_log_name
from ..trace.calls import added_keys, deleted_keys, destroyed_at, elections, reset_keys, set_keys
from ..verdict import Ending, Evidence, Seen

IMPORTING = "<frozen importlib._bootstrap"     # a frame of a rank still importing (torch takes seconds)


@dataclass
class _LiveTarget:
    """Where the throwaway log split writes: the live folder, never the run's ranks/."""
    run: RunDir
    folder: Path

    def node_log(self, index: int) -> Path:
        return self.run.node_log(index)

    def guard_log(self, index: int) -> Path:
        return self.run.guard_log(index)

    def rank_log(self, rank: int) -> Path:
        return self.folder / RANKS_SUBDIR / rank_log_name(rank)

    @property
    def results_path(self) -> Path:
        return self.folder / RESULTS_FILE


def take_stacks(run: RunDir, backend: Backend) -> list[str]:
    """Ask every rank for its stacks; the dumps land in the node logs (on a backend
    without live logs, the logs are streamed into the folder first)."""
    notes = backend.signal(TakeStacks(run))
    if not backend.live_logs:
        backend.stream(run, strict=True)
    return notes


def stacks_now(run: RunDir) -> dict[int, dict]:
    """Every rank's place in its latest stack dump (stackdumps.where_stuck), read from the node
    logs, and the rendezvous store it said it cannot reach (torchsays.store_unreached)."""
    dumps: dict[int, list[str]] = {}
    unreached: dict[int, str] = {}
    for node in run.planned_nodes:
        if run.node_log(node.index).is_file():
            reader = logs.NodeLogReader()
            reader.feed_file(run.node_log(node.index))
            reader.close()
            dumps.update(reader.stack_dumps())
            unreached.update(reader.store_unreached)
    return {rank: {**stackdumps.where_stuck(lines), "importing": any(IMPORTING in line for line in lines),
                   "store_unreached": unreached.get(rank)}
            for rank, lines in dumps.items()}


def diagnose(run: RunDir, outcomes: list[NodeOutcome], since_ns: int, reason: str,
             folder: Path) -> LiveDiagnosis:
    """Who, what and where, as the finish would say it at a deadline now; the copies it
    reads and writes go under `folder` (the run folder's live/)."""
    from .. import trace

    (folder / RANKS_SUBDIR).mkdir(parents=True, exist_ok=True)
    rec = run.record
    spec = run.spec
    reading = blame.LogReading(_LiveTarget(run, folder), [n.index for n in run.planned_nodes],
                               rec.world_size, rec.nproc_per_node, None)
    found = reading.finish()
    where = {r: stackdumps.where_stuck(lines) for r, lines in sorted(found.stacks.items())}
    summary = None
    if spec.trace:
        try:
            # the record files where the ranks write them, else their logs as split just now
            source = run.path if trace.record_files(run.path) else folder
            summary = trace.merge(source, world=rec.world_size, hostnames=run.hostnames,
                                  out=folder / TRACE_FILE)
        except Exception:           # noqa: BLE001 - the stacks alone still say something
            summary = None
    diagnosis = trace.diagnosis(summary) if summary is not None else None
    ended_in = {r: i.ended_in for r, i in summary.ranks.items() if i.ended_in} if summary else {}
    ended_at = {r: i.ended_at for r, i in summary.ranks.items() if i.ended_at} if summary else {}
    calls = summary.calls if summary else {}
    seen = Seen(Ending.DEADLINE, outcomes, reason)
    ev = Evidence(seen, spec.nodes, spec.fewest_nodes, bool(spec.workloads), list(rec.faults), found,
                  diagnosis, ended_in=ended_in, ended_at=ended_at,
                  destroyed=destroyed_at(calls),
                  deleted=deleted_keys(calls), added=added_keys(calls), set_keys=set_keys(calls),
                  resets=reset_keys(calls), elected=elections(calls))
    decided = verdict.decide(rec, ev, str(run.path))
    first = decided.first_failure
    rank, ranks, op, caller = first.answer() if first is not None else (None, [], None, None)
    return LiveDiagnosis(made_at=time.time(), since=since_ns / 1e9, reason=reason,
                         text=first.describe() if first else reason, rank=rank, ranks=ranks, op=op,
                         caller=caller, where={str(r): w for r, w in where.items()}, waiting=_waiting(summary))


def _waiting(summary) -> list[str]:
    """What the others wait in: one line per stuck collective, and the p2p ops never finished."""
    if summary is None:
        return []
    lines = [st.describe() for st in summary.stuck[:4]]
    return lines + list(summary.stuck_p2p[:4])
