"""Every rank's communication on one timeline (issues 21 and 30; docs/trace.md). Standard
library only.

The ranks write marked records (workloads/_trace.py; the codec: workloads/_protocol/records.py):
an H header (the process's time origin), S call sites, B when a rank entered an op, E when
it completed, R when it raised before torch issued it, G per process group, M who the rank
is, C its clock offset against rank 0, T "alive at". They are in each rank's record files
(records/, local and compose) or its log (ranks/rank-<R>.log: Kubernetes, a rendered
compose file). Split the way torch's Flight Recorder analyzer splits:

- `loader`: where each rank's records are (`record_sources`) and their lines, read once or
  followed while the ranks write them (`RecordFollower`, `RankFollower`);
- `model`: the types (`Op`, `Stuck`, `Summary`, `Diagnosis` ...);
- `builder`: one rank's records -> its ops, fed one record at a time (`RankBuilder`; `rank_ops`);
- `merge`: every rank's ops -> trace.json and a `Summary`, streamed (heapq.merge: only ops
  in flight and collectives some rank has not reached yet are held);
- `matcher`: stuck collectives, mismatches, who is to blame (`diagnosis`), the straggler;
- `fr`: the stuck collective from the Flight Recorder dumps (tracing off);
- `views`: what `labctl trace` prints, and the report's timeline picture.

Callers use this package's names: `trace.merge(...)`, `trace.text(summary)`.
"""
from __future__ import annotations

from workloads._protocol import FR_MARKER, TRACE_MARKER as MARKER

from .builder import RankBuilder, RankOp, rank_ops
from .fr import flight_recorder
from .loader import (TORN, Followed, RankFollower, RecordFollower, source_lines, rank_logs, record_files,
                     record_sources, trim_record_files, written_size)
from .matcher import blame, diagnosis, straggler
from .merge import LANE_TID, MAX_LANES, TRACE_FILE, merge
from .model import (CPP_OPS_NOTE, STRAGGLERS, Diagnosis, Lateness, Mismatch, Op, OpTotal, Problem, RankInfo,
                    Straggler, Stuck, Summary)
from .views import NO_TIMELINE, TIMELINE_FILE, text, write_timeline

_source_lines = source_lines            # its name before the split (tests/test_trace_witness.py)

__all__ = ["FR_MARKER", "MARKER", "RankBuilder", "Followed", "RankFollower", "RecordFollower", "Diagnosis",
           "Mismatch", "RankOp", "rank_ops", "flight_recorder", "TORN", "source_lines", "rank_logs",
           "record_files", "record_sources", "trim_record_files", "written_size", "blame", "diagnosis",
           "straggler", "LANE_TID", "MAX_LANES", "TRACE_FILE", "merge", "CPP_OPS_NOTE", "STRAGGLERS", "Lateness",
           "Op", "OpTotal", "Problem", "RankInfo", "Straggler", "Stuck", "Summary", "NO_TIMELINE",
           "TIMELINE_FILE", "text", "write_timeline"]
