"""Stuck collectives, mismatches and blame (labctl/trace/): per process group where the
ranks stopped (`Stuck`), collectives whose ranks' calls differed, and who the others
wait for (the hang diagnosis status.json carries); the run's straggler. Functions over
the ops and the merge's `Summary`. Standard library only."""
from __future__ import annotations

from typing import Any

from workloads._protocol.ops import BLOCKING_P2P, DEFAULT_PG, DESTROY, RECVS, SENDS

from .branches import left_loop_early, singled_out
from .model import Diagnosis, Mismatch, Op, Stuck, Summary

STRAGGLER_SHARE = 0.75              # a rank last at this share of its collectives (at least
STRAGGLER_MIN = 4                   # this many), typically this late, is the run's straggler
STRAGGLER_NS = 20_000_000
STRAGGLER_SHARE_OF_WAIT = 0.8       # or: a rank that caused this share of all the waiting at collectives,
STRAGGLER_WAIT_NS = 1_000_000_000   # this much in all (its worst once left out), in many short waits


def _differs(seen: dict[int, Op]) -> list[str]:
    """What differs between the ranks' calls of one collective: the op, else the size (the
    element count) or the shape (the same count), the dtype; and the root."""
    ops = list(seen.values())
    what = []
    if len({o.op for o in ops}) > 1:
        what.append("op")
    else:
        if len({o.shape_text for o in ops}) > 1:
            counts = {None if o.shape is None else _count(o.shape) for o in ops}
            what.append("size" if len(counts) > 1 else "shape")
        if len({o.dtype for o in ops}) > 1:
            what.append("dtype")
    if all(o.root is not None for o in ops) and len({o.root for o in ops}) > 1:
        what.append("root")
    if len({o.reduce_op for o in ops}) > 1:
        what.append("reduce op")
    return what


def _count(shape: list[int]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def _groups_by_signature(seen: dict[int, Op]) -> list[tuple[str, list[int]]]:
    """Ranks grouped by what they called, the most common first, each group said by what
    tells it apart: the call and shape, with the dtype when the dtype differs and the root
    when the root does."""
    what = _differs(seen)
    said: dict[str, str] = {}
    by_signature: dict[str, list[int]] = {}
    for rank, o in sorted(seen.items()):
        by_signature.setdefault(o.signature, []).append(rank)
        text = o.label + (f" {o.dtype}" if "dtype" in what and o.dtype else "")
        text += f" with {o.reduce_op or 'SUM'}" if "reduce op" in what else ""
        said.setdefault(o.signature, text + (f" from root {o.root}" if "root" in what else ""))
    return sorted(((said[sig], ranks) for sig, ranks in by_signature.items()),
                  key=lambda kv: (-len(kv[1]), kv[1][0]))


def _odd_ranks(seen: dict[int, Op]) -> list[int]:
    """The ranks that called something else than the most of them; none when no call is
    the most common (two ranks that disagree: neither is the odd one)."""
    groups = _groups_by_signature(seen)
    if len(groups) < 2 or len(groups[0][1]) == len(groups[1][1]):
        return []
    return sorted(r for _, ranks in groups[1:] for r in ranks)


def _odd_or_singled_out(seen: dict[int, Op]) -> tuple[list[int], int | None]:
    """The odd ranks of calls that differ; where no call is the most common, the ranks of
    the call of the rank the script's branches single out (and that rank; branches.py)."""
    odd = _odd_ranks(seen)
    if odd or len({o.signature for o in seen.values()}) < 2:
        return odd, None
    one = singled_out({r: o.caller for r, o in seen.items()})
    if one is None:
        return [], None
    return [r for r, o in sorted(seen.items()) if o.signature == seen[one].signature], one


def mismatch_text(pg: str, seq: int, seen: dict[int, Op]) -> str:
    """"rank 1 called broadcast [1000] where rank 0 called all_reduce [1000], collective #4 of
    default_pg (the op differs)": the odd ranks are the fewer. With no odd one (two ranks),
    what each called and where: "rank 0 called all_reduce [1000] at a.py:7; rank 1 called
    all_reduce [12] at a.py:7, collective #1 of default_pg (the size differs; no rank is
    the odd one out)"."""
    ordered = _groups_by_signature(seen)
    what = _differs(seen)
    differs = f"the {' and the '.join(what)} differ{'s' if len(what) == 1 else ''}" if what else ""
    if _odd_ranks(seen):
        common_label, common_ranks = ordered[0]
        odd = "; ".join(f"rank {', '.join(map(str, ranks))} called {label}" for label, ranks in ordered[1:])
        return (f"{odd} where rank {common_ranks[0]} called {common_label}, collective #{seq} of {pg}"
                + (f" ({differs})" if differs else ""))
    each = "; ".join(f"rank {', '.join(map(str, ranks))} called {label}"
                     + (f" at {seen[ranks[0]].caller}" if seen[ranks[0]].caller not in ("", "?") else "")
                     for label, ranks in ordered)
    return f"{each}, collective #{seq} of {pg} ({differs + '; ' if differs else ''}no rank is the odd one out)"


def mismatch_of(pg: str, seq: int, seen: dict[int, Op]) -> Mismatch:
    """A mismatched collective as status.json gives it: the odd ranks (every rank when none
    is, unless the script's own branches single one out: branches.py), the call of the odd
    one and where it was made, what differs, the sentence."""
    odd, one = _odd_or_singled_out(seen)
    text = mismatch_text(pg, seq, seen) + (f"; the script's branches single out rank {one}" if one is not None else "")
    first = seen[odd[0]] if odd else None
    return Mismatch(pg=pg, seq=seq, ranks=odd or sorted(seen), rank=odd[0] if len(odd) == 1 else None,
                    op=first.call if first else None, caller=first.caller if first else None,
                    differs=_differs(seen), calls={r: o.where() for r, o in sorted(seen.items())},
                    unfinished=sorted(r for r, o in seen.items() if o.end is None), text=text)


def splits_mismatch(pg: str, seq: int, seen: dict[int, Op]) -> Mismatch | None:
    """all_to_all_single with uneven splits whose counts disagree: what the i-th member
    sends the j-th (its input split j) must be what the j-th expects from the i-th (its
    output split i); gloo moves the bytes it is told to and completes, with rows missing
    or garbage. The odd rank is in every disagreeing pair (none: two ranks, or several
    pairs apart). None: every rank's splits agree, or some rank gave none."""
    members = sorted(seen)                      # group ranks in the order of their global ranks
    if any(seen[r].splits is None for r in members):
        return None
    n = len(members)
    split = {r: seen[r].splits for r in members}
    if any(len(split[r][0]) != n or len(split[r][1]) != n for r in members):
        return None                             # torch refuses these itself
    pairs = [(a, b) for i, a in enumerate(members) for j, b in enumerate(members)
             if split[a][0][j] != split[b][1][i]]
    if not pairs:
        return None
    count: dict[int, int] = {}
    for a, b in pairs:
        for r in {a, b}:
            count[r] = count.get(r, 0) + 1
    odd = [r for r, c in count.items() if c == len(pairs)]
    in_every = len(odd) == 1
    odd = odd if in_every else _unlike_the_rest(split, {r for p in pairs for r in p})
    one = None if odd else singled_out({r: seen[r].caller for p in pairs for r in p})
    odd = odd or ([one] if one is not None else [])
    said = "; ".join(f"rank {a} sends rank {b} {split[a][0][members.index(b)]} where rank {b} expects "
                     f"{split[b][1][members.index(a)]} from it" for a, b in pairs[:4])
    first = seen[odd[0]] if odd else seen[pairs[0][1]]
    text = (f"{said}, {first.call} #{seq} of {pg} (the split sizes disagree"
            + (f"; the script's branches single out rank {one})" if one is not None
               else f"; rank {odd[0]} is in every disagreement)" if in_every
               else f"; rank {odd[0]}'s splits are unlike the others')" if odd else "; no rank is the odd one out)"))
    return Mismatch(pg=pg, seq=seq, ranks=odd or sorted({r for p in pairs for r in p}), rank=odd[0] if odd else None,
                    op=first.call, caller=first.caller, differs=["splits"],
                    calls={r: {**o.where(), "splits": o.splits} for r, o in sorted(seen.items())},
                    unfinished=sorted(r for r, o in seen.items() if o.end is None), text=text)


def _unlike_the_rest(split: dict[int, list[list[int]]], suspects: set[int]) -> list[int]:
    """The one rank of `suspects` whose input (or output) splits differ from those most of
    the ranks gave, where most gave the same ([2, 1, 1] where the others send [1, 1, 1]);
    none where no list is the most common (an MoE's splits all differ)."""
    for side in (0, 1):
        count: dict[tuple[int, ...], list[int]] = {}
        for r, sp in split.items():
            count.setdefault(tuple(sp[side]), []).append(r)
        ordered = sorted(count.values(), key=len, reverse=True)
        if len(ordered) > 1 and len(ordered[0]) >= 2 and len(ordered[0]) > len(ordered[1]):
            odd = sorted(r for ranks in ordered[1:] for r in ranks if r in suspects)
            if len(odd) == 1:
                return odd
    return []


def stuck_collectives(last: dict[str, dict[int, Op]], groups: dict[str, list[int]], only_clear: bool = False,
           silent: list[int] | None = None) -> tuple[list[Stuck], list[str]]:
    """Per process group with an op some rank never completed, or whose furthest collective
    ended (an error: a peer gone) without a member that recorded ops elsewhere: the furthest
    collective, who is inside it, who never entered it, and a mismatch at that sequence number.
    `only_clear`: name a group only for a missing rank or a mismatch (Flight Recorder
    entries on gloo never say whether an op completed). `silent`: ranks that wrote no op
    record at all (said so, not "last entered: none")."""
    found, mismatches = [], []
    for pg, by_rank in sorted(last.items()):
        members = groups.get(pg) or sorted(by_rank)
        top = max(op.seq for op in by_rank.values())
        inside = {r: op for r, op in by_rank.items() if op.seq == top}
        absent = [r for r in members if r not in inside and r not in (silent or [])]
        if all(op.end is not None for op in by_rank.values()) and not absent:
            continue                                # every rank left its last collective, all of them in it
        waiting = sorted(r for r, op in inside.items() if op.end is None)
        missing = sorted(r for r in members if r not in inside)
        mismatch = None
        if len({op.signature for op in inside.values()}) > 1:
            mismatch = mismatch_text(pg, top, inside)
            mismatches.append(mismatch)
        if (not waiting or only_clear) and not missing and not mismatch:
            continue
        odd, one = _odd_or_singled_out(inside) if mismatch else ([], None)
        if one is not None:
            mismatch += f"; the script's branches single out rank {one}"
            mismatches[-1] = mismatch
        common = [op for r, op in sorted(inside.items()) if r not in odd]
        any_op = (common or list(inside.values()))[0]
        targets = odd or ([] if mismatch else missing)
        found.append(Stuck(pg=pg, seq=top, op=any_op.op, waiting=waiting, missing=missing,
                           culprit=targets[0] if len(targets) == 1 else None,
                           last={r: f"#{op.seq} {op.label}" for r, op in by_rank.items()},
                           mismatch=mismatch, silent=[r for r in missing if r in (silent or [])],
                           call=any_op.call, calls={r: op.where() for r, op in inside.items()}, odd=odd,
                           started=min(op.start for op in inside.values())))
        if not only_clear:
            found += _held_behind(pg, top, by_rank, members, silent or [])
    return found, mismatches


def _held_behind(pg: str, top: int, by_rank: dict[int, Op], members: list[int], silent: list[int]) -> list[Stuck]:
    """The collectives of a group before its furthest that ranks are still inside, each with
    the members that never reached it: a broadcast's root still sending to a rank that
    never came, while a rank it already sent to waits in the next broadcast for both."""
    found = []
    for seq in sorted({op.seq for op in by_rank.values() if op.seq < top and op.end is None}):
        held = {r: op for r, op in by_rank.items() if op.seq == seq}
        behind = sorted(r for r in members if r not in by_rank or by_rank[r].seq < seq)
        if not behind:
            continue
        first = next(op for _, op in sorted(held.items()))
        found.append(Stuck(pg=pg, seq=seq, op=first.op, waiting=sorted(r for r, op in held.items() if op.end is None),
                           missing=behind, culprit=behind[0] if len(behind) == 1 else None,
                           last={r: f"#{op.seq} {op.label}" for r, op in by_rank.items()},
                           silent=[r for r in behind if r in silent], call=first.call,
                           calls={r: op.where() for r, op in held.items()},
                           started=min(op.start for op in held.values())))
    return found


def blame_stuck(stuck: list[Stuck], finished: frozenset[int] = frozenset()
                ) -> tuple[int | None, list[int], str | None, str | None]:
    """Who the stuck collectives wait for, across process groups: the rank the most ranks
    wait for (a rank that reduced in its subgroup first, while the three others wait for it
    in the world's collective, is the one; the rank it waits for in the subgroup is not).
    Several as many: no one culprit, all of them named. With the culprit (or the first of
    them), its call (the one it made that the others did not, or the one they wait in that
    it never entered) and its line when it made the call. (culprit, ranks, op, caller).
    Of ranks waited for alike, one whose records end with its own destroy of the group
    (`finished`: its script ran to its end) is not the one late: a rank alone in a group
    whose other member finished without ever using it called on the wrong group."""
    waited: dict[int, set[int]] = {}
    for st in stuck:
        for target in st.targets:
            waited.setdefault(target, set()).update(r for r in [*st.waiting, *st.calls] if r not in st.targets)
    if not waited:                      # a mismatch where no call is the most common: every rank in it
        st = next((st for st in stuck if st.calls), None)
        if st is None:
            return None, [], None, None
        ranks = sorted(st.calls)
        return None, ranks, st.calls[ranks[0]]["call"], None
    top = max(len(w) for w in waited.values())
    ranks = sorted(r for r, w in waited.items() if len(w) == top)
    ranks = [r for r in ranks if r not in finished] or ranks
    culprit = ranks[0] if len(ranks) == 1 else None
    st = min((st for st in stuck if ranks[0] in st.targets), key=lambda st: st.started)
    call = st.calls.get(ranks[0])
    if call is not None:                # it called something else
        return culprit, ranks, call["call"], call["caller"]
    elsewhere = next((other.calls[ranks[0]] for other in stuck if ranks[0] in other.calls), None)
    if culprit is not None and elsewhere is not None and elsewhere.get("caller"):
        return culprit, ranks, elsewhere["call"], elsewhere["caller"]     # it waits in another group's
    return culprit, ranks, st.call or st.op, None


def diagnosis(s: Summary) -> Diagnosis | None:
    """What status.json's first failure carries: the stuck collective per pg, and who
    is to blame (`rank`, or `ranks` when no one rank is), the call and its line."""
    if not s.stuck and not s.mismatches and not s.stuck_p2p and s.group_mismatch is None:
        return None
    culprit, ranks, op, caller, lead = blame(s)
    said = [st.describe() for st in s.stuck] or s.mismatches[:1]
    return Diagnosis(rank=culprit, ranks=ranks, op=op, caller=caller,
                     mismatch=s.group_mismatch or _left_in_a_mismatch(s),
                     stuck=list(s.stuck), mismatches=s.mismatches[:5], p2p=s.stuck_p2p[:10],
                     text="; ".join([*lead, *said, *s.stuck_p2p[:4]]))


def blame(s: Summary) -> tuple[int | None, list[int], str | None, str | None, list[str]]:
    """(culprit, ranks, op, caller, a sentence to lead with): a rank waiting to receive
    from a rank that sent to another one, which never received it, is waiting for a
    send to the wrong peer; else the stuck collectives' culprit (`blame_stuck`); else a
    completed mismatch's odd rank; else the ranks in blocking p2p ops that never ended
    (a deadlock: all of them). A collective of differing calls some rank never left
    (`_left_in_a_mismatch`) comes before the stuck collectives: they came after it; a
    new_group made with other members on some ranks (calls.odd_new_group) before all."""
    odd = s.group_mismatch
    if odd is not None:
        return odd.rank, odd.ranks, odd.op, odd.caller, [odd.text]
    for op in s.blocked_p2p:
        if op.op not in RECVS or op.peer is None:
            continue
        wrong = sorted(((dst, u) for (pg, src, dst), u in s.unmatched_sends.items()
                        if pg == op.pg and src == op.peer and dst != op.rank), key=lambda x: x[0])
        dropped = next(((dst, u) for dst, u in wrong if u.last_recv is not None), None)
        if dropped is not None:         # its peer all along, which took fewer than were sent: it skipped one
            dst, u = dropped
            recv = u.last_recv
            return dst, [dst], recv.call, recv.caller, [
                f"rank {dst} received {u.received} of the {u.sent} messages rank {op.peer} sent it (its last "
                f"receive at {recv.caller}); rank {op.peer}'s send at {u.send.caller} was never received, while "
                f"rank {op.rank} waits to receive from rank {op.peer} at {op.caller} (rank {dst} skipped a receive?)"]
        if wrong:
            dst, u = wrong[0]
            only_sent = _only_sent(s, op.pg, dst, op.peer) if u.received == 0 else None
            if only_sent is not None:      # it never receives from that peer at all: its send is the odd call
                return dst, [dst], only_sent[1], only_sent[2], [
                    f"rank {dst} only sent to rank {op.peer} ({only_sent[3]} at {only_sent[2]}) and never received "
                    f"from it: rank {op.peer}'s send to it at {u.send.caller} was never received, while rank "
                    f"{op.rank} waits to receive from rank {op.peer} at {op.caller} (rank {dst} posts a send where "
                    f"it should receive?)"]
            send = u.send
            caller = send.caller
            return op.peer, [op.peer], send.call, caller, [
                f"rank {op.peer} sent to rank {dst} at {caller}, and rank {dst} never received it, while "
                f"rank {op.rank} waits to receive from rank {op.peer} at {op.caller} (a send to the wrong peer?)"]
    skipped = _skipped_a_peer(s)
    if skipped is not None:
        return skipped
    wrong_source = _waits_on_the_wrong_source(s)
    if wrong_source is not None:
        return wrong_source
    left_in = _left_in_a_mismatch(s)
    if left_in:                     # a rank died or hangs inside it: what came after is its effect
        return left_in.rank, left_in.ranks, left_in.op, left_in.caller, [
            f"{left_in.text}; rank {', '.join(map(str, left_in.unfinished))} never left it"]
    torn_down = _destroyed_while_waited_in(s)
    if torn_down is not None:
        return torn_down
    if s.stuck:
        culprit, ranks, op, caller = blame_stuck(s.stuck, _finished(s))
        earlier = _mismatch_before(s, culprit)
        if earlier is not None:             # the odd call it made first is what the rest follows from
            return culprit, ranks, earlier.op, earlier.caller, [earlier.text]
        skipped = _skipped_a_call(s, culprit)
        if skipped is not None:
            return skipped
        fewer = _ran_fewer_iterations(s.stuck, culprit)
        if fewer is not None:
            return (culprit, ranks, *fewer)
        if ranks:
            return culprit, ranks, op, caller, []
    blocked = [op for op in s.blocked_p2p if op.op in BLOCKING_P2P] or s.blocked_p2p
    ranks = sorted({op.rank for op in blocked})
    if len(ranks) == 2 and (not s.mismatch_found or s.mismatch_found[0].rank is None):
        broke = _broke_its_pattern(s, blocked)      # ... before a p2p pair's sizes that differ with no odd one
        if broke is not None:
            return broke
    if s.mismatch_found:
        m = s.mismatch_found[0]
        return m.rank, m.ranks, m.op, m.caller, []
    if not ranks:
        return None, [], None, None, []
    if len(ranks) == 2:                 # two ranks blocked on each other: the one the script singles out
        one = singled_out({op.rank: op.caller for op in blocked if op.rank in ranks})
        ranks = [one] if one is not None else ranks
    mine = next(op for op in blocked if op.rank == ranks[0])
    culprit = ranks[0] if len(ranks) == 1 else None
    return culprit, ranks, mine.call, mine.caller, []


def _destroyed_while_waited_in(s: Summary) -> tuple[int | None, list[int], str | None, str | None, list[str]] | None:
    """A member that destroyed a group (destroy_process_group(group)) while another member
    waits in that group's collective, which the destroyer never entered: the destroy is the
    cause (an evaluator that closes its group when its own batches run out, on the rank whose
    shard ran out first). Not the default group (its destroy ends the script), nor a
    destroy made after the others entered (the last member's clean-up of a group it left)."""
    for st in s.stuck:
        if st.pg.startswith(DEFAULT_PG) or not st.waiting:
            continue
        for rank in st.missing:
            gone = next((op for op in s.calls.get(rank, []) if op.op == DESTROY and op.pg == st.pg), None)
            if gone is None:
                continue
            inside = ", ".join(map(str, st.waiting))
            return rank, [rank], DESTROY, gone.caller, [
                f"rank {rank} destroyed {st.pg} (destroy_process_group at {gone.caller}) while rank{'s' if len(st.waiting) > 1 else ''} "
                f"{inside} wait{'' if len(st.waiting) > 1 else 's'} in its {st.said_op} (collective #{st.seq} of {st.pg}), "
                f"which rank {rank} never entered"]
    return None


def _only_sent(s: Summary, pg: str, rank: int, peer: int) -> tuple | None:
    """The newest of `rank`'s p2p calls with `peer`, where every one it made (two or more)
    was a send: (number, call, caller, op). None: it received from `peer` too, or too few."""
    kept = sorted(s.p2p_calls.get((rank, pg, peer), []))
    if len(kept) < 2 or any(len(k) < 4 or k[3] not in SENDS for k in kept):
        return None
    return kept[-1]


def _period(lines: list[str]) -> int | None:
    """The shortest period (1 to 4) that `lines` repeats at least twice over, else None."""
    for p in range(1, 5):
        if len(lines) >= 2 * p and all(lines[i] == lines[i - p] for i in range(p, len(lines))):
            return p
    return None


def _broke_its_pattern(s: Summary, blocked: list[Op]
                       ) -> tuple[int | None, list[int], str | None, str | None, list[str]] | None:
    """Two ranks blocked on each other in p2p, where each had repeated one pattern of calls
    with the other (a pipeline's send of the activations, then of the mask): the one whose
    blocked op broke its own pattern, while the other's came where its pattern said, skipped
    the call its pattern said came next (a send made only when the batch was padded): it is
    the culprit, with that call and its line. None: both in step, both out, or too short a
    history to tell (two rounds at least)."""
    said = {}
    for op in blocked:
        kept = sorted(s.p2p_calls.get((op.rank, op.pg, op.peer), []))
        if not kept or kept[-1][0] != op.p2p:
            return None
        lines = [k[2] for k in kept[:-1]]
        period = _period(lines)
        if period is None:
            return None
        expected = kept[-1 - period]
        said[op.rank] = (expected, kept[-1], period)
    broke = [r for r, (expected, last, _) in said.items() if expected[2] != last[2]]
    if len(said) != 2 or len(broke) != 1:
        return None
    rank = broke[0]
    expected, last, period = said[rank]
    call, caller, instead = expected[1], expected[2], last[2]
    other = next(r for r in said if r != rank)
    pattern = ", ".join(k[2].rpartition(":")[2] for k in sorted(s.p2p_calls[(rank, blocked[0].pg, other)])[-1 - period:-1])
    return rank, [rank], call, caller, [
        f"rank {rank}'s p2p calls with rank {other} repeated lines {pattern} until its newest, from {instead} where "
        f"its pattern said {caller}, while rank {other}'s came where its own said: rank {rank} skipped its {call} "
        f"at {caller}"]


def _finished(s: Summary) -> frozenset[int]:
    """The ranks whose records end after their own destroy_process_group: their scripts ran
    to the end."""
    return frozenset(r for r, info in s.ranks.items()
                     if info.ended_at and not info.ended_at.get("inside") and info.ended_at.get("op") == DESTROY)


def _skipped_a_call(s: Summary, culprit: int | None
                    ) -> tuple[int | None, list[int], str | None, str | None, list[str]] | None:
    """The rank the most ranks wait for waits itself, in another group's collective, for
    ranks that wait in turn for it elsewhere (a cycle); of the two, the one that skipped a
    call is to blame: the ranks it waits for made fewer collectives from that line than it
    did and than every other rank did (an expert-parallel gradient norm all_reduced only
    when the rank had expert gradients: one rank skipped it and went on to the barrier the
    others then wait in for the rank held in the all_reduce). Not when the others made none
    there (the rank held made an extra call: it stays the one), nor with no other rank to
    tell which count is the usual one."""
    if culprit is None or not s.collective_sites:
        return None
    elsewhere = {r for st in s.stuck if culprit in st.targets for r in st.waiting}
    for st in s.stuck:
        mine = st.calls.get(culprit) or {}
        line = mine.get("caller")
        if culprit not in st.waiting or not line or line == "?" or not st.missing:
            continue
        made = s.collective_sites.get((culprit, line), 0)
        behind = [r for r in st.missing if r in elsewhere and s.collective_sites.get((r, line), 0) < made]
        others = [r for r in s.ranks if r != culprit and r not in st.missing]
        if not behind or not others or any(s.collective_sites.get((r, line), 0) != made for r in others):
            continue
        counts = ", ".join(f"rank {r} {s.collective_sites.get((r, line), 0)}" for r in behind)
        return (behind[0] if len(behind) == 1 else None, behind, mine.get("call"), line, [
            f"rank {', '.join(map(str, behind))} made fewer collectives from {line} ({counts}) than every other "
            f"rank ({made}): it skipped the {mine.get('call')} rank {culprit} waits in there "
            f"(collective #{st.seq} of {st.pg}), and waits for rank {culprit} elsewhere"])
    return None


def _ran_fewer_iterations(stuck: list[Stuck], culprit: int | None) -> tuple[str, str, list[str]] | None:
    """(op, caller, sentence) where the culprit of a stuck collective called something after
    the end of the loop the others are still in, waiting there: it ran fewer iterations
    (branches.left_loop_early), so the call it skipped is the one they wait in. None: not so."""
    if culprit is None:
        return None
    for st in stuck:
        mine = st.calls.get(culprit)
        theirs = next((c for r, c in sorted(st.calls.items()) if r not in st.targets), None)
        if mine is None or theirs is None or not mine.get("caller") or not theirs.get("caller"):
            continue
        loop = left_loop_early(mine["caller"], theirs["caller"])
        if loop is not None:
            return theirs["call"], theirs["caller"], [
                f"rank {culprit} left the loop at line {loop} before the others: it called {mine['call']} at "
                f"{mine['caller']} while they wait in {theirs['call']} at {theirs['caller']} (it ran fewer "
                "iterations: it skipped that call)"]
    return None


def _skipped_a_peer(s: Summary) -> tuple[int | None, list[int], str | None, str | None, list[str]] | None:
    """A rank waiting to receive from a peer that sent it fewer messages than it sent the
    others from one line, where every other rank sent every other rank alike from that line
    (an all-to-all exchange: an MoE dispatch, a round of counts): the peer skipped a send
    (nothing to route there, so no count either). None: no such receive."""
    for op in s.blocked_p2p:
        if op.op not in RECVS or op.peer is None:
            continue
        sender = op.peer
        for (pg, src, caller), site in s.send_sites.items():
            if pg != op.pg or src != sender:
                continue
            others = {r: o.sent for (g, r, c), o in s.send_sites.items() if g == pg and c == caller and r != sender}
            everyone = set(others) | {sender, op.rank}
            if len(everyone) < 3 or not any(op.rank in sent for sent in others.values()):
                continue
            alike = all(len({sent.get(d, 0) for d in everyone - {r}}) == 1 for r, sent in others.items())
            rest = [site.sent.get(d, 0) for d in everyone - {sender, op.rank}]
            if alike and rest and site.sent.get(op.rank, 0) < min(rest):
                send = site.send
                to = ", ".join(map(str, sorted(d for d in site.sent if d != op.rank)))
                return sender, [sender], send.call, send.caller, [
                    f"rank {sender} sent to rank(s) {to} at {send.caller} but not as often to rank {op.rank}, "
                    f"which waits to receive from it at {op.caller}; every other rank sent to every peer alike "
                    f"from that line (rank {sender} skipped a send?)"]
    return None


def _waits_on_the_wrong_source(s: Summary) -> tuple[int | None, list[int], str | None, str | None, list[str]] | None:
    """A rank waiting to receive from a peer that sent it nothing, while another rank's
    send to it was never received: the receiver named the wrong source (a stage index off
    by one, the wrong ring neighbour). None: no such receive."""
    for op in s.blocked_p2p:
        if op.op not in RECVS or op.peer is None:
            continue
        if any(pg == op.pg and src == op.peer and dst == op.rank for (pg, src, dst) in s.unmatched_sends):
            continue                # its peer did send to it: not the source that is wrong
        senders = sorted((src, u.send.caller) for (pg, src, dst), u in s.unmatched_sends.items()
                         if pg == op.pg and dst == op.rank and src != op.peer)
        if senders:
            src, caller = senders[0]
            return op.rank, [op.rank], op.call, op.caller, [
                f"rank {op.rank} waits to receive from rank {op.peer} at {op.caller}, which sent it nothing, "
                f"while rank {src}'s send to rank {op.rank} at {caller} was never received (the wrong source?)"]
    return None


def _mismatch_before(s: Summary, culprit: int | None) -> Mismatch | None:
    """A completed collective whose calls differed, with `culprit` its odd rank, before
    a stuck collective of the same group that the culprit never entered or never left:
    broadcast_object_list with lists of other lengths, where the odd rank then dies
    unpickling what it got and the others wait for it in the next all_reduce. The odd
    call is the cause; the stuck collective its effect."""
    if culprit is None:
        return None
    for m in s.mismatch_found:
        if m.rank == culprit and any(st.pg == m.pg and st.seq > m.seq and culprit in st.targets
                                        for st in s.stuck):
            return m
        # different ops at one number: every later collective of the group pairs calls that
        # were never meant to meet, and the hang is its effect, whoever it leaves waiting
        if m.rank is not None and "op" in m.differs and any(st.pg == m.pg and st.seq > m.seq for st in s.stuck):
            return m
    return None


def _left_in_a_mismatch(s: Summary) -> Mismatch | None:
    """The first collective every member entered with calls that differ, an odd rank
    among them, and a rank that never left it (gloo's size check aborted it there, or
    it hangs there): the cause of whatever the other ranks then wait in."""
    stuck = {(st.pg, st.seq) for st in s.stuck}       # said there already
    return next((m for m in s.mismatch_found if m.unfinished and m.rank is not None
                 and (m.pg, m.seq) not in stuck), None)


def straggler(s: Summary) -> dict[str, Any] | None:
    """The rank that arrived last at most of its collectives (STRAGGLER_SHARE of at least
    STRAGGLER_MIN), typically STRAGGLER_NS or more after the first; else the rank whose
    late arrivals made most of all the waiting (STRAGGLER_SHARE_OF_WAIT, STRAGGLER_WAIT_NS
    without its worst: extra work every step, before one of many collectives): status.json's
    `trace.straggler`. None: no rank stands out."""
    found = [(late.last, late.late_ns, rank) for rank, late in s.lateness.items()
             if late.last >= max(STRAGGLER_MIN, STRAGGLER_SHARE * late.collectives)
             and late.typical_ns >= STRAGGLER_NS]
    if found:
        rank = max(found)[2]
        late = s.lateness[rank]
        call, caller = late.most() or (None, None)
        mean = late.late_ns / late.last / 1e6
        return {"rank": rank, "ranks": [rank], "op": call, "caller": caller, "last": late.last,
                "of": late.collectives, "late_ms": round(mean, 3),
                "text": f"rank {rank} arrived last at {late.last} of {late.collectives} collectives, by "
                        f"{mean:.0f} ms on average (most often in {call} at {caller})"}
    total = sum(late.late_ns for late in s.lateness.values())
    rank, late = max(s.lateness.items(), key=lambda kv: kv[1].late_ns, default=(None, None))
    if late is None or not total or late.last < STRAGGLER_MIN or late.late_ns < STRAGGLER_SHARE_OF_WAIT * total \
            or late.late_ns - late.worst_ns < STRAGGLER_WAIT_NS:
        return None
    call, caller = late.most() or (None, None)
    return {"rank": rank, "ranks": [rank], "op": call, "caller": caller, "last": late.last,
            "of": late.collectives, "late_ms": round(late.late_ns / late.last / 1e6, 3),
            "text": f"rank {rank} kept the others waiting {late.late_ns / 1e9:.1f} s in all "
                    f"({100 * late.late_ns / total:.0f} % of all the waiting at collectives), arriving last at "
                    f"{late.last} of {late.collectives} (most often in {call} at {caller})"}


