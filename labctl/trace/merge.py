"""Every rank's ops merged into one timeline (labctl/trace/): trace.json (Chrome trace
events, a process per node, a thread per rank and lanes for overlapping ops, send->recv
flows) and the merge's `Summary` (totals, stragglers, mismatches, where the ranks
stopped). Streamed: heapq.merge over the ranks' readers holds only ops in flight and
collectives some rank has not reached yet. Standard library only."""
from __future__ import annotations

import hashlib
import heapq
import json
from collections import deque
from pathlib import Path
from typing import Any, Iterator

from workloads._protocol import CLOCK_ROUNDS
from workloads._protocol.ops import RECVS, SENDS

from .. import atomicfile
from ..runnames import TRACE_FILE
from .builder import MAX_PENDING_OPS, RankReader
from .loader import record_sources
from .matcher import mismatch_of, mismatch_text, splits_mismatch, stuck_collectives
from .calls import local_group_out_of_step, odd_new_group
from .model import (MAX_CALLS, MAX_PROBLEMS, P2P_KEPT, STRAGGLERS, Lateness, Mismatch, Op, OpTotal, SendSite,
                    Straggler, Stuck, Summary, Unreceived)

MAX_OPEN_INSTANCES = 100_000        # collectives waiting for a rank that may never come
MIN_PENDING_PER_RANK = 10_000       # (about 400 B each), shared out, but at least this many a rank
MAX_LANES = 16                      # threads per rank for overlapping ops; past that: async events
LANE_TID = 1_000_000                # a lane's thread id: rank + lane * LANE_TID
MAX_UNFINISHED_DRAWN = 10_000       # ops never ended drawn to the trace's end; the rest: instants
MAX_SEND_SITES = 10_000             # (group, sender, line) kept for the shape of an exchange; (rank, line) of collectives


def _flow_id(pg: str, src: int, dst: int, k: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{pg}:{src}>{dst}#{k}".encode(), digest_size=6).digest(), "big")


def _us(ns: int) -> float:
    """ns since t0 as µs: whole ns, so ts + dur lands exactly where the end is."""
    return ns / 1000.0


class _Lanes:
    """Threads for one rank's ops so that no two slices of a thread partly overlap: lane 0
    (tid = rank) first, then the lowest lane free since the op began; past MAX_LANES, None
    (the op is drawn as an async event)."""

    def __init__(self) -> None:
        self.free_at: list[int] = []                # lane -> when its last slice ends

    def place(self, start: int, end: int) -> int | None:
        for lane, free in enumerate(self.free_at):
            if free <= start:
                self.free_at[lane] = end
                return lane
        if len(self.free_at) < MAX_LANES:
            self.free_at.append(end)
            return len(self.free_at) - 1
        return None


class _Merge:
    def __init__(self, summary: Summary, out, hostnames: dict[int, str], t0: int):
        self.s, self.out, self.hostnames, self.t0 = summary, out, hostnames, t0
        self.first = True
        self.named_nodes: set[int] = set()
        self.named_threads: set[tuple[int, int]] = set()
        self.lanes: dict[int, _Lanes] = {}
        self.sent: dict[tuple[str, int, int], int] = {}      # (pg, src, dst) -> sends so far
        self.last_send: dict[tuple[str, int, int], Op] = {}   # (pg, src, dst) -> its last send
        self.last_recv: dict[tuple[str, int, int], Op] = {}   # ... -> the last receive of one
        self.received: dict[tuple[str, int, int], int] = {}
        self.send_sites: dict[tuple[str, int, str], SendSite] = {}   # (pg, src, caller) -> its sends' shape
        self.pairs = _P2pPairs(summary)
        # (pg, seq) -> rank -> (start, op): collectives not every member reached yet
        self.open: dict[tuple[str, tuple | None, int], dict[int, tuple[int, Op]]] = {}
        self.worst: list[tuple[int, int, Straggler]] = []     # min-heap of the worst ten
        self.tiebreak = 0
        self.unfinished: list[tuple[int, int, Op]] = []       # drawn at the end; heap of the latest
        self.async_ids = 0

    def event(self, ev: dict) -> None:
        self.out.write(("" if self.first else ",\n") + json.dumps(ev, separators=(",", ":")))
        self.first = False

    def node_of(self, rank: int) -> int:
        info = self.s.ranks.get(rank)
        return info.node if info and isinstance(info.node, int) else 0

    def thread(self, rank: int, lane: int) -> int:
        """The tid of a rank's lane, named the first time."""
        node = self.node_of(rank)
        if node not in self.named_nodes:
            self.named_nodes.add(node)
            info = self.s.ranks.get(rank)
            host = self.hostnames.get(node) or (info.host if info else None) or "?"
            self.event({"ph": "M", "name": "process_name", "pid": node,
                        "args": {"name": f"node {node} ({host})"}})
            self.event({"ph": "M", "name": "process_sort_index", "pid": node, "args": {"sort_index": node}})
        tid = rank + lane * LANE_TID
        if (rank, lane) not in self.named_threads:
            self.named_threads.add((rank, lane))
            self.event({"ph": "M", "name": "thread_name", "pid": node, "tid": tid,
                        "args": {"name": f"rank {rank}" if lane == 0 else f"rank {rank} (overlapping {lane})"}})
            self.event({"ph": "M", "name": "thread_sort_index", "pid": node, "tid": tid,
                        "args": {"sort_index": rank * (MAX_LANES + 1) + lane}})
            self.s.lanes[rank] = max(self.s.lanes.get(rank, 0), lane + 1)
        return tid

    def add(self, op: Op, members: list[int] | None) -> None:
        """One op; `members`: its group's ranks as its own rank declared them (two groups may
        share a name: DeviceMesh names every tp group `mesh_tp`)."""
        s = self.s
        if op.raised is not None:               # never issued: an error instant, no slice, no count
            s.raised_count += 1
            if len(s.raised) < MAX_PROBLEMS:
                s.raised.append(f"rank {op.rank}'s {op.op} at {op.caller} raised {op.raised}")
            args = self.args(op)
            args["raised"] = op.raised
            self.event({"ph": "i", "s": "t", "name": f"{op.op} raised", "cat": op.pg,
                        "pid": self.node_of(op.rank), "tid": self.thread(op.rank, 0),
                        "ts": _us(max(op.start - self.t0, 0)), "args": args})
            return
        if op.is_call:                          # no op of a group: drawn, kept for the diagnosis, not counted
            kept = s.calls.setdefault(op.rank, [])
            if len(kept) < MAX_CALLS:
                kept.append(op)
            self.place(op)
            return
        s.ops += 1
        if op.via is not None:
            s.cpp_ops += 1
        if op.end is None:
            s.unfinished += 1
        self.place(op)
        total = s.totals.setdefault((op.pg, op.op), OpTotal())
        total.count += 1
        total.nbytes += op.nbytes
        if op.end is None:
            total.unfinished += 1
        else:
            dur = op.end - op.start
            total.total_ns += dur
            if dur > total.slowest_ns:
                total.slowest_ns, total.slowest_rank = dur, op.rank
        if op.seq is not None:
            key = (op.rank, op.caller)
            if key in s.collective_sites or len(s.collective_sites) < MAX_SEND_SITES:
                s.collective_sites[key] = s.collective_sites.get(key, 0) + 1
            self.collective(op, members)
        elif op.p2p is not None and op.peer is not None:
            self.pairs.add(op)
            kept = s.p2p_calls.get((op.rank, op.pg, op.peer))
            if kept is None and len(s.p2p_calls) < MAX_SEND_SITES:
                kept = s.p2p_calls[(op.rank, op.pg, op.peer)] = []
            if kept is not None:
                kept.append((op.p2p, op.call, op.caller, op.op))
                if len(kept) > 2 * P2P_KEPT:        # the newest by number (ops may come out of order)
                    kept.sort()
                    del kept[:-P2P_KEPT]

    def place(self, op: Op) -> None:
        """The op's slice; an unfinished one's once the trace's end is known."""
        if op.end is None:
            item = (op.start, self.tiebreak, op)
            self.tiebreak += 1
            if len(self.unfinished) < MAX_UNFINISHED_DRAWN:
                heapq.heappush(self.unfinished, item)
            else:                                   # keep the latest: the op a rank hangs in is one
                self.draw_instant(heapq.heappushpop(self.unfinished, item)[2])
        else:
            self.draw(op, op.end)

    def args(self, op: Op) -> dict[str, Any]:
        args: dict[str, Any] = {"rank": op.rank, "pg": op.pg, "seq": op.seq, "bytes": op.nbytes,
                                "dtype": op.dtype, "shape": op.shape, "caller": op.caller}
        if op.p2p is not None:
            args["p2p_seq"] = op.p2p
        if op.peer is not None:
            args["peer"] = op.peer
        if op.root is not None:
            args["root"] = op.root
        if op.api is not None and op.api != op.op:
            args["api"] = op.api
        if op.via is not None:
            args["via"] = op.via
        if op.reduce is not None:
            args["reduce"] = op.reduce
        if op.members is not None:
            args["members"] = op.members
        if op.key is not None:
            args["key"] = op.key
        return args

    def draw(self, op: Op, end: int) -> None:
        """The op's slice, on the first lane of its rank free since it began, and its end
        of a send->recv flow."""
        start = max(op.start - self.t0, 0)
        stop = max(end - self.t0, start)
        lanes = self.lanes.setdefault(op.rank, _Lanes())
        lane = lanes.place(start, stop)
        args = self.args(op)
        if op.end is None:
            args["unfinished"] = True
        node = self.node_of(op.rank)
        if lane is None:                            # more overlapping ops than lanes: an async pair
            self.async_ids += 1
            tid = self.thread(op.rank, 0)
            common = {"name": op.op, "cat": op.pg, "pid": node, "tid": tid, "id2": {"local": self.async_ids}}
            self.event({**common, "ph": "b", "ts": _us(start), "args": args})
            self.event({**common, "ph": "e", "ts": _us(stop)})
            return
        tid = self.thread(op.rank, lane)
        self.event({"ph": "X", "name": op.op, "cat": op.pg, "pid": node, "tid": tid,
                    "ts": _us(start), "dur": _us(stop - start), "args": args})
        if op.peer is not None and op.op in SENDS:
            key = (op.pg, op.rank, op.peer)
            k = self.sent[key] = self.sent.get(key, 0) + 1
            self.last_send[key] = op
            site = self.send_sites.get((op.pg, op.rank, op.caller))
            if site is None and len(self.send_sites) < MAX_SEND_SITES:
                site = self.send_sites[(op.pg, op.rank, op.caller)] = SendSite(op, {})
            if site is not None:
                site.sent[op.peer] = site.sent.get(op.peer, 0) + 1
            self.event({"ph": "s", "id": _flow_id(op.pg, op.rank, op.peer, k), "name": "p2p",
                        "cat": "p2p", "pid": node, "tid": tid, "ts": _us(start)})
            self.s.flows += 1
        elif op.peer is not None and op.op in RECVS:
            key = (op.pg, op.peer, op.rank)
            k = self.received[key] = self.received.get(key, 0) + 1
            self.last_recv[key] = op
            self.event({"ph": "f", "bp": "e", "id": _flow_id(op.pg, op.peer, op.rank, k), "name": "p2p",
                        "cat": "p2p", "pid": node, "tid": tid, "ts": _us(stop)})

    def draw_instant(self, op: Op) -> None:
        """An unfinished op past MAX_UNFINISHED_DRAWN: an instant where it began."""
        args = self.args(op)
        args["unfinished"] = True
        self.event({"ph": "i", "s": "t", "name": op.op, "cat": op.pg, "pid": self.node_of(op.rank),
                    "tid": self.thread(op.rank, 0), "ts": _us(max(op.start - self.t0, 0)), "args": args})

    def finish(self, end: int) -> None:
        """Every unfinished op, to the end of the trace (earliest first: the lanes fill in order)."""
        for _, _, op in sorted(self.unfinished, key=lambda x: (x[0], x[1])):
            self.draw(op, max(end, op.start))
        self.unfinished = []

    def collective(self, op: Op, members: list[int] | None) -> None:
        key = (op.pg, tuple(members) if members else None, op.seq)
        seen = self.open.setdefault(key, {})
        seen[op.rank] = (op.start, op)
        if members is None or not set(members) <= set(seen):
            if len(self.open) > MAX_OPEN_INSTANCES:
                self.open.pop(next(iter(self.open)))
            return
        del self.open[key]
        if len({o.signature for _, o in seen.values()}) > 1:
            calls = {r: o for r, (_, o) in seen.items()}
            self.s.mismatches.append(mismatch_text(op.pg, op.seq, calls))
            if len(self.s.mismatch_found) < 5:
                self.s.mismatch_found.append(mismatch_of(op.pg, op.seq, calls))
            return                      # not a straggler: they never were in one collective
        if op.splits is not None:
            uneven = splits_mismatch(op.pg, op.seq, {r: o for r, (_, o) in seen.items()})
            if uneven is not None and len(self.s.mismatch_found) < 5:
                self.s.mismatches.append(uneven.text)
                self.s.mismatch_found.append(uneven)
        starts = sorted((t, r) for r, (t, _) in seen.items())
        late = starts[-1][0] - starts[0][0]
        if len(starts) > 1:
            for _, r in starts:
                self.s.lateness.setdefault(r, Lateness()).collectives += 1
            last = self.s.lateness[starts[-1][1]]
            last.add(late, seen[starts[-1][1]][1])
            self.tiebreak += 1
            item = (late, self.tiebreak, Straggler(op.pg, op.seq, op.op, starts[-1][1], late))
            if len(self.worst) < STRAGGLERS:
                heapq.heappush(self.worst, item)
            elif late > self.worst[0][0]:
                heapq.heapreplace(self.worst, item)


def merge(run_path: str | Path, world: int | None = None, hostnames: dict[int, str] | None = None,
          out: str | Path | None = None) -> Summary:
    """Read every rank's trace records (streamed) and write trace.json; return what was seen."""
    run_path = Path(run_path)
    summary = Summary(path=Path(out) if out else run_path / TRACE_FILE)
    logs = record_sources(run_path)
    per_rank = max(MIN_PENDING_PER_RANK, MAX_PENDING_OPS // max(1, len(logs)))
    readers = [RankReader(paths, rank, summary, per_rank) for rank, paths in sorted(logs.items())]
    firsts = [t for t in (r.first_start() for r in readers) if t is not None]
    t0 = min(firsts) if firsts else 0
    summary.t0_ns = t0 if firsts else None
    groups: dict[str, list[int]] = {}
    with atomicfile.atomic_open(summary.path) as f:       # cut short: no trace.json, no .tmp
        f.write('{"traceEvents":[\n')
        m = _Merge(summary, f, hostnames or {}, t0)

        def tagged(reader: RankReader) -> Iterator[tuple[int, Op, RankReader]]:
            for op in reader:
                yield op.start, op, reader

        for _, op, reader in heapq.merge(*(tagged(r) for r in readers), key=lambda x: x[0]):
            for pg, members in reader.groups.items():
                groups.setdefault(pg, members)
            m.add(op, reader.groups.get(op.pg) or groups.get(op.pg))
        for reader in readers:
            for pg, members in reader.groups.items():
                groups.setdefault(pg, members)
            summary.group_timeouts.update(((reader.rank, pg), ms) for pg, ms in reader.timeouts.items())
        end = max([r.alive for r in readers] + [t0])
        summary.end_ns = end if firsts else None
        m.finish(end)
        summary.unmatched_sends = {key: Unreceived(m.last_send[key], n, m.received.get(key, 0), m.last_recv.get(key))
                                   for key, n in m.sent.items() if n > m.received.get(key, 0)}
        summary.send_sites = m.send_sites
        summary.stragglers = [s for _, _, s in sorted(m.worst, key=lambda x: (-x[0], x[1]))]
        expected = range(world) if world is not None else sorted(logs)
        summary.missing_ranks = [r for r in expected if summary.ranks.get(r) is None
                                 or summary.ranks[r].records == 0]
        silent = [r for r in expected if summary.ranks.get(r) is None or summary.ranks[r].ops == 0]
        summary.stuck, extra = _stuck_from_readers(readers, groups, silent)
        summary.mismatches.extend(x for x in extra if x not in summary.mismatches)
        summary.group_mismatch = odd_new_group(summary.calls) or local_group_out_of_step(summary.calls)
        f.write("\n],\n")
        f.write('"displayTimeUnit":"ms",\n"metadata":' + json.dumps(_metadata(summary), sort_keys=True)
                + "}\n")
    return summary


class _P2pPairs:
    """Each send paired with the receive that takes it (the k-th send from a rank to a peer
    on a group with the peer's k-th receive from it, in the order they began) and their
    sizes compared: a receive that takes another byte count than was sent is a mismatch
    gloo may complete without a word (a smaller message into a larger buffer) or abort
    on. The first MAX_PROBLEMS are kept; at most MAX_PENDING waiting per direction."""
    MAX_PENDING = 1000

    def __init__(self, summary: Summary):
        self.s = summary
        self.sends: dict[tuple[str, int, int], deque[Op]] = {}
        self.recvs: dict[tuple[str, int, int], deque[Op]] = {}

    def add(self, op: Op) -> None:
        sending = op.op in SENDS
        key = (op.pg, op.rank, op.peer) if sending else (op.pg, op.peer, op.rank)
        mine, theirs = (self.sends, self.recvs) if sending else (self.recvs, self.sends)
        waiting = theirs.get(key)
        if waiting:
            other = waiting.popleft()
            send, recv = (op, other) if sending else (other, op)
            if send.nbytes != recv.nbytes and len(self.s.mismatch_found) < MAX_PROBLEMS:
                self.s.mismatch_found.append(_p2p_mismatch(send, recv))
            return
        queue = mine.setdefault(key, deque())
        if len(queue) < self.MAX_PENDING:
            queue.append(op)


def _p2p_mismatch(send: Op, recv: Op) -> Mismatch:
    text = (f"rank {send.rank}'s {send.call} to rank {recv.rank} at {send.caller} sent {send.nbytes} bytes "
            f"({send.shape_text} {send.dtype or ''}) where rank {recv.rank}'s {recv.call} from rank {send.rank} "
            f"at {recv.caller} takes {recv.nbytes} ({recv.shape_text} {recv.dtype or ''}): p2p #{send.p2p} of "
            f"{send.pg} (the size differs)").replace(" )", ")")
    return Mismatch(pg=send.pg, seq=send.p2p or 0, ranks=sorted({send.rank, recv.rank}), rank=None,
                    op=send.call, caller=send.caller, differs=["size"],
                    calls={send.rank: send.where(), recv.rank: recv.where()},
                    unfinished=sorted(o.rank for o in (send, recv) if o.end is None), text=text)


def _metadata(s: Summary) -> dict[str, Any]:
    nodes: dict[str, dict] = {}
    for rank, info in sorted(s.ranks.items()):
        if info.records and isinstance(info.node, int) and str(info.node) not in nodes:
            nodes[str(info.node)] = {"first_rank": rank, "host": info.host,
                                     "clock_offset_ms": round(info.offset_ns / 1e6, 6),
                                     "rtt_ms": None if info.rtt_ns is None else round(info.rtt_ns / 1e6, 6)}
    return {"source": "labctl trace (workloads/_trace.py records, labctl/trace.py merge)",
            "time": "ts and dur in µs since t0_unix_ns (the run's first op, on rank 0's clock)",
            "t0_unix_ns": s.t0_ns,
            "end_us": None if s.end_ns is None or s.t0_ns is None else _us(s.end_ns - s.t0_ns),
            "threads": f"tid = rank + lane * {LANE_TID}: lane 0 is the rank's own, lanes 1.. hold the "
                       "ops that overlap it (async ops, DDP buckets, isend/irecv)",
            "lanes_by_rank": {str(r): n for r, n in sorted(s.lanes.items())},
            "clock": "every rank's wall clock plus its offset against rank 0, measured at init "
                     f"(NTP estimate over the store, best of {CLOCK_ROUNDS} round trips: off by at most "
                     "half its round trip, clock_rtt_ms_by_rank)",
            "clock_offsets_by_node": nodes,
            "clock_offsets_ms_by_rank": {str(r): round(i.offset_ns / 1e6, 6) for r, i in sorted(s.ranks.items())
                                         if i.records},
            "clock_rtt_ms_by_rank": {str(r): round((i.rtt_ns or 0) / 1e6, 6) for r, i in sorted(s.ranks.items())
                                     if i.records},
            "ops": s.ops, "flows": s.flows, "unfinished_ops": s.unfinished,
            "raised_ops": s.raised_count, "raised": s.raised,
            # the merge's own tables, so that no reader of trace.json recomputes them
            # (the page: labctl/html/timeline.py)
            "totals": [{"pg": pg, "op": op, "count": t.count, "bytes": t.nbytes, "unfinished": t.unfinished,
                        "total_ms": round(t.total_ns / 1e6, 3), "slowest_ms": round(t.slowest_ns / 1e6, 3),
                        "slowest_rank": t.slowest_rank} for (pg, op), t in sorted(s.totals.items())],
            "stragglers": [{"pg": x.pg, "seq": x.seq, "op": x.op, "rank": x.rank,
                            "late_ms": round(x.late_ns / 1e6, 3)} for x in s.stragglers],
            "missing_ranks": s.missing_ranks,
            "bad_records": [str(p) for p in s.problems] + ([f"... and {s.more_problems} more"]
                                                           if s.more_problems else [])}


def _stuck_from_readers(readers: list[RankReader], groups: dict[str, list[int]], silent: list[int]
                        ) -> tuple[list[Stuck], list[str]]:
    """Per group, each rank's last collective; a name that several groups share (DeviceMesh's
    `mesh_tp` for every tp group) is split by members and said with them (`mesh_tp[2, 3]`)."""
    declared: dict[str, set[tuple[int, ...]]] = {}
    for reader in readers:
        for pg, members in reader.groups.items():
            declared.setdefault(pg, set()).add(tuple(members))
    last: dict[str, dict[int, Op]] = {}
    named = dict(groups)
    for reader in readers:
        for pg, op in reader.last.items():
            members = reader.groups.get(pg)
            key = pg
            if members and len(declared.get(pg, ())) > 1:
                key = f"{pg}[{', '.join(map(str, members))}]"
                named[key] = list(members)
            last.setdefault(key, {})[reader.rank] = op
    return stuck_collectives(last, named, silent=silent)


