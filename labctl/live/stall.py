"""When has a running lab stopped making progress? Pure functions over what the ranks'
records say now (issue 49; docs/diagnosis.md, "Live diagnosis").

Two rules, from the records alone:

1. **An op waits too long**: some rank has been inside an op for longer than that op's
   window (labctl/live/window.py: the floor, or a multiple of what its size costs over the
   lab's links) and has written nothing since it entered it (a rank that goes on writing
   records holds an async handle, it is not stuck). A collective some member never
   entered, a recv whose sender sends elsewhere, a partitioned node: all end here.
2. **Nothing moves**: no rank is inside an op and no rank has written a record for the
   floor. The records cannot tell a long compute phase from a lock that never opens, so
   this only asks for a look at the stacks; `judge_stacks` says from them whether it is a
   stall: ranks held in a call every rank must make (init_process_group, new_group) while
   others are elsewhere. Every rank at the same place two looks apart is not enough: a
   slow DataLoader warm-up on every rank looks just so (a store wait every rank sits in is
   named at the deadline). A rank still importing, or one with no stack yet, is not stuck.
3. **Every rank polls**: each rank has made one store call over and over (a home-made
   barrier: `store.add(key, 0)` or `get` in a loop) for the floor, and wrote nothing
   else. Nobody left can make the count: a stall, whatever their records' pace.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from ..torchsays import unreached_store

NS = 1_000_000_000


@dataclass(frozen=True)
class InFlight:
    """One op a rank has entered and not left, as the watcher sees it."""
    rank: int
    op: str
    call: str                       # the script's call (all_gather_object for its all_gather)
    pg: str
    seq: int | None                 # collective number in its group; None for p2p
    peer: int | None
    nbytes: int
    caller: str                     # file:line
    start_ns: int                   # on rank 0's clock (unix ns)
    members: int                    # ranks in its group

    @property
    def label(self) -> str:
        number = f"#{self.seq}" if self.seq is not None else "(p2p)"
        return f"{self.call} {number}"


@dataclass
class RankNow:
    """One rank as its records show it now."""
    rank: int
    ops: int = 0                    # ops begun
    inside: list[InFlight] = field(default_factory=list)
    last: InFlight | None = None    # the last op it began
    seen_ns: int | None = None      # its newest record's time (rank 0's clock); None: no record yet
    polling_ns: int | None = None   # since when it has repeated one store call and nothing else

    @property
    def innermost(self) -> InFlight | None:
        return max(self.inside, key=lambda o: o.start_ns) if self.inside else None


class Kind(enum.Enum):
    OP = "op"                       # an op waited past its window
    STILL = "still"                 # nothing moved: the stacks decide
    POLL = "poll"                   # every rank polls the store


@dataclass(frozen=True)
class Stall:
    kind: Kind
    since_ns: int                   # when the hang began: the stuck op's start, or the last record
    op: InFlight | None = None      # the op waited in past its window (Kind.OP)
    window_s: float = 0.0


def find(ranks: dict[int, RankNow], now_ns: int, floor_s: float,
         window_for: Callable[[InFlight], float], started_ns: int, world: int = 0) -> Stall | None:
    """The stall the records show now, or None. `started_ns`: when the lab started (a lab
    whose ranks have written nothing yet is measured from there); `world`: the ranks that
    must all be polling for rule 3."""
    floor = int(floor_s * NS)
    stuck: list[tuple[int, InFlight, float]] = []
    for now_rank in ranks.values():
        quiet_since = now_rank.seen_ns if now_rank.seen_ns is not None else started_ns
        for op in now_rank.inside:
            window = window_for(op)
            if now_ns - op.start_ns > window * NS and now_ns - quiet_since >= min(floor, int(window * NS)):
                stuck.append((op.start_ns, op, window))
    if stuck:
        start, op, window = min(stuck, key=lambda s: s[0])
        return Stall(Kind.OP, start, op, window)
    polling = [r.polling_ns for r in ranks.values() if r.polling_ns is not None and now_ns - r.polling_ns >= floor]
    if world and len(ranks) >= world and len(polling) == len(ranks):
        return Stall(Kind.POLL, max(polling), None, floor_s)
    if any(r.inside for r in ranks.values()):
        return None                 # inside ops, within their windows
    newest = max([r.seen_ns for r in ranks.values() if r.seen_ns is not None] or [started_ns])
    if now_ns - newest >= floor:
        return Stall(Kind.STILL, newest, None, floor_s)
    return None


SETTING_UP = ("<frozen importlib", "importlib/__init__.py")   # a rank still importing (torch takes seconds)


def judge_stacks(where: dict[int, dict], world: int, setup_calls: frozenset[str]) -> str | None:
    """From every rank's stack (stackdumps.where_stuck: file, line, function, call) at a look:
    why this is a stall (a sentence), or None."""
    if len(where) < world or any(not w.get("file") for w in where.values()):
        return None                 # a rank with no stack (not started, not Python): cannot say
    if any(w.get("importing") or str(w.get("file", "")).startswith(SETTING_UP) for w in where.values()):
        return None
    held = sorted(r for r, w in where.items() if w.get("call") in setup_calls)
    if held and len(held) < world:
        return (f"rank(s) {', '.join(map(str, held))} wait in {where[held[0]]['call']} "
                f"for rank(s) {', '.join(str(r) for r in sorted(set(where) - set(held)))}")
    if len(held) == world and all(where[r].get("call") == "init_process_group" for r in held):
        away = unreached_store({r: w["store_unreached"] for r, w in where.items() if w.get("store_unreached")}, held)
        if away:
            return (f"rank(s) {', '.join(map(str, away))} cannot reach the rendezvous store; every rank "
                    f"waits in init_process_group")
    return None
