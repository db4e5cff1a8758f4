"""The stuck collective from the Flight Recorder entries the ranks dumped at a hang, when
tracing was off (labctl/trace/). Standard library only."""
from __future__ import annotations

from pathlib import Path

from workloads._protocol import FR_MARKER
from workloads._protocol import records
from workloads._protocol.records import BadRecord

from .loader import source_lines, record_sources
from .matcher import blame_stuck, stuck_collectives
from .model import FLIGHT_RECORDER, Diagnosis, Op

_FR_MARKER_BYTES = FR_MARKER.encode()


def flight_recorder(run_path: str | Path, world: int | None = None) -> Diagnosis | None:
    """The stuck collective from the Flight Recorder entries the ranks dumped when labctl
    asked (at the deadline, with their stacks): each rank's newest collective per group
    counts as the one it is in. None: no rank dumped, or nothing to name."""
    last: dict[str, dict[int, Op]] = {}
    dumped: set[int] = set()
    for rank, paths in sorted(record_sources(Path(run_path)).items()):
        current: dict[str, Op] = {}
        final: dict[str, Op] = {}
        for path in paths:
            for raw, whole in source_lines(path):
                at = raw.find(_FR_MARKER_BYTES)
                if at < 0 or not whole:
                    continue
                try:
                    rec = records.decode_fr(raw[at + len(_FR_MARKER_BYTES):])
                except BadRecord:
                    continue                  # a dump cut short by the stop: the last whole one counts
                if isinstance(rec, records.FrDone):
                    final, current = current, {}
                    continue
                if not isinstance(rec, records.FrEntry):
                    continue
                op = Op(rank=rank, op=rec.op, pg=rec.pg, seq=rec.seq, p2p=None, peer=None, root=None,
                        shape=rec.shape, dtype=rec.dtype, nbytes=0, caller="?", start=rec.t, end=None)
                if op.pg not in current or op.seq >= current[op.pg].seq:
                    current[op.pg] = op
        if final:
            dumped.add(rank)
        for pg, op in final.items():
            last.setdefault(pg, {})[rank] = op
    if not dumped:
        return None
    # Only ranks that dumped count: one that could not (gone, or its main thread holding the
    # GIL) must not look like a rank that never entered the collective.
    groups = {pg: (sorted(dumped) if pg == "default_pg" else sorted(by_rank))
              for pg, by_rank in last.items()}
    stuck, mismatches = stuck_collectives(last, groups, only_clear=True)
    if not stuck:
        return None
    culprit, ranks, op, _ = blame_stuck(stuck)
    silent = sorted(set(range(world)) - dumped) if world else []
    text = "; ".join(s.describe() for s in stuck)
    if silent:
        text += f" (no Flight Recorder dump from rank {', '.join(map(str, silent))})"
    return Diagnosis(rank=culprit, ranks=ranks, op=op, source=FLIGHT_RECORDER, stuck=stuck,
                     mismatches=mismatches[:5], no_dump=silent, text=text)


