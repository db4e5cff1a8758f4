"""The lab's matcher on torch's own Flight Recorder dumps (issue 50; `labctl diagnose`): each
rank's entries as the trace's ops (labctl/trace/frdump.py), then the same stuck
collectives, mismatches and blame as a lab run's trace (labctl/trace/matcher.py), so a
job that never ran in the lab is told who, what and where in the lab's words. Standard
library only."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from workloads._protocol.ops import SENDS

from .frdump import Dump, ops_of
from .matcher import diagnosis, mismatch_of, stuck_collectives
from .model import Diagnosis, Mismatch, Op, RankInfo, Stuck, Summary, Unreceived


@dataclass
class Reading:
    """What the dumps say: who the others wait for, the call and its line (the lab's
    `Diagnosis`), the group and collective, and which ranks left no dump."""
    dumps: list[Dump]
    diagnosis: Diagnosis | None
    no_dump: list[int] = field(default_factory=list)
    stuck: Stuck | None = None      # the stuck collective the culprit is behind
    instead: Op | None = None       # where the culprit is instead of it: its newest op, never ended
    waited_at: str | None = None    # the line of the call the others wait in (one the culprit never made)

    @property
    def line(self) -> str | None:
        """Where: the culprit's own odd call; else the op it is in instead of the one the
        others wait in; else (it left no dump) the line the others wait at."""
        d = self.diagnosis
        for said in (d.caller if d else None, self.instead.caller if self.instead else None, self.waited_at):
            if said not in (None, "?"):
                return said
        return None


def _members(dumps: list[Dump], last: dict[str, dict[int, Op]], dumped: list[int], all_said: bool
             ) -> dict[str, list[int]]:
    """Each group's ranks: as its pg_config says (only those that dumped, unless `all_said`:
    a rank that could not dump must not look like one that never came), else every rank
    that dumped for the default group, else the ranks with entries in it."""
    config: dict[str, tuple[int, ...]] = {}
    for d in dumps:
        for g in d.groups.values():
            if g.ranks:
                config.setdefault(g.desc if g.desc and g.desc != "undefined" else f"pg{g.name}", g.ranks)
    out = {}
    for pg, by_rank in last.items():
        said = config.get(pg)
        if said:
            out[pg] = sorted(said) if all_said else sorted(set(said) & set(dumped))
        else:
            out[pg] = list(dumped) if pg == "default_pg" else sorted(by_rank)
    return out


def _mismatches(ops: dict[int, list[Op]], members: dict[str, list[int]]) -> list[Mismatch]:
    """Collectives every member entered with calls that differ, the first five (as the merge
    finds them)."""
    seen: dict[tuple[str, int], dict[int, Op]] = {}
    for rank, rank_ops in ops.items():
        for op in rank_ops:
            if op.seq is not None:
                seen.setdefault((op.pg, op.seq), {})[rank] = op
    found = []
    for (pg, seq), calls in sorted(seen.items(), key=lambda kv: min(o.start for o in kv[1].values())):
        if set(members.get(pg, [])) <= set(calls) and len({o.signature for o in calls.values()}) > 1:
            found.append(mismatch_of(pg, seq, calls))
            if len(found) == 5:
                break
    return found


def _summary(dumps: list[Dump], ops: dict[int, list[Op]], all_said: bool) -> Summary:
    dumped = sorted(ops)
    last: dict[str, dict[int, Op]] = {}
    for rank, rank_ops in ops.items():
        for op in rank_ops:
            if op.seq is not None:
                mine = last.setdefault(op.pg, {})
                if rank not in mine or op.seq >= mine[rank].seq:
                    mine[rank] = op
    members = _members(dumps, last, dumped, all_said)
    known = all(d.has_states for d in dumps)
    silent = [r for pg in members.values() for r in pg if r not in ops]
    stuck, texts = stuck_collectives(last, members, only_clear=not known, silent=sorted(set(silent)))
    found = _mismatches(ops, members)
    sites: dict[tuple[int, str], int] = {}
    whole = all(not d.entries or d.entries[0].record_id == 0 for d in dumps)   # no ring wrapped: counts are whole
    for r in dumped if whole else ():   # each rank's collectives per line, where the dumps carry stacks
        for op in ops[r]:
            if op.seq is not None and op.caller not in (None, "?"):
                sites[(r, op.caller)] = sites.get((r, op.caller), 0) + 1
    s = Summary(stuck=stuck, mismatch_found=found, ranks={r: RankInfo(r) for r in dumped}, collective_sites=sites,
                mismatches=[*texts, *(m.text for m in found if m.text not in texts)])
    if known:                       # p2p ops never ended (NCCL's say; gloo records none)
        s.blocked_p2p = [op for r in dumped for op in ops[r] if op.p2p is not None and op.end is None][:50]
        s.stuck_p2p = [f"rank {op.rank} waits in {op.op} {'to' if op.op in SENDS else 'from'} rank {op.peer} "
                       f"of {op.pg} at {op.caller}" for op in s.blocked_p2p[:10]]
        sends: dict[tuple[str, int, int], list[Op]] = {}
        for r in dumped:
            for op in ops[r]:
                if op.p2p is not None and op.peer is not None:
                    key = (op.pg, r, op.peer) if op.op in SENDS else (op.pg, op.peer, r)
                    sends.setdefault(key, []).append(op)
        for k, v in sends.items():
            sent, got = [o for o in v if o.op in SENDS], [o for o in v if o.op not in SENDS]
            if len(sent) > len(got):
                s.unmatched_sends[k] = Unreceived(sent[-1], len(sent), len(got), got[-1] if got else None)
    return s


def _went_ahead(made: Diagnosis, ops: dict[int, list[Op]]) -> Diagnosis | None:
    """The few ranks that went past where the rest stopped: ranks that entered no collective
    at all (no entry in any group) are held before their first one, in the same setup step
    (a store wait, a new group, a home-made barrier); where they outnumber the ranks that
    went on and wait, those are the odd ones, and their call is what the others never reached.
    None where the rest made any collective (they are somewhere else: the usual reading
    stands) or do not outnumber them."""
    if made.mismatch is not None or len(made.stuck) != 1:
        return None
    st = made.stuck[0]
    if not st.waiting or not st.missing or len(st.waiting) >= len(st.missing):
        return None
    if any(ops.get(r) for r in st.missing) or not all(r in ops for r in st.missing):
        return None                 # they made collectives (or left no dump): not held in setup
    callers = [st.calls.get(r, {}).get("caller") for r in st.waiting]
    caller = next((c for c in callers if c and c != "?"), None)
    inside = ", ".join(map(str, st.waiting))
    held = ", ".join(map(str, st.missing))
    text = (f"rank{'s' if len(st.waiting) > 1 else ''} {inside} went on alone to {st.said_op} (collective "
            f"#{st.seq} of {st.pg}) while rank{'s' if len(st.missing) > 1 else ''} {held} entered no "
            f"collective at all: they are held before their first (a setup step such as a store wait or a new "
            f"group, which rank {inside} went past; or p2p calls, which gloo's dumps do not hold)")
    return replace(made, rank=st.waiting[0] if len(st.waiting) == 1 else None, ranks=list(st.waiting),
                   op=st.call or st.op, caller=caller, text=text)


def read(dumps: list[Dump]) -> Reading:
    """The lab's diagnosis (labctl/trace/matcher.py) of one job's dumps. A group member that
    left no dump counts as absent, not as one that never came; only when the dumps that
    are there name no one does it count as one that never came (it ended, or died, before
    the collective the others wait in), and is said to have left no dump."""
    ops = {d.rank: ops_of(d) for d in dumps}
    said = set()
    for d in dumps:
        for g in d.groups.values():
            said.update(g.ranks)
    no_dump = sorted(said - set(ops))
    made = None
    for all_said in ((False, True) if no_dump else (False,)):
        s = _summary(dumps, ops, all_said)
        made = diagnosis(s)
        if made is not None and (made.rank is not None or made.ranks):
            break
    if made is None:
        return Reading(dumps, None, no_dump)
    ahead = _went_ahead(made, ops)
    if ahead is not None:
        return Reading(dumps, ahead, no_dump, made.stuck[0])
    who = made.rank if made.rank is not None else (made.ranks or [None])[0]
    behind = sorted((st for st in made.stuck if who in st.targets), key=lambda st: st.started)
    stuck = behind[0] if behind else (made.stuck[0] if made.stuck else None)
    waited = instead = None
    if stuck is not None:
        callers = [c.get("caller") for r, c in sorted(stuck.calls.items()) if r not in stuck.targets]
        waited = next((c for c in callers if c and c != "?"), None)
        # where it is instead: its newest op, when that is a stuck collective it waits in
        # itself (two groups used in other orders), not one the others left too
        mine = [op for op in ops.get(who, []) if op.end is None]
        held = {(st.pg, st.seq) for st in made.stuck if who in st.waiting}
        instead = mine[-1] if mine and who in stuck.missing and (mine[-1].pg, mine[-1].seq) in held else None
    text = made.text + (f" (no dump from rank {', '.join(map(str, no_dump))})" if no_dump else "")
    return Reading(dumps, replace(made, text=text, no_dump=no_dump), no_dump, stuck, instead, waited)
