"""The calls that are no op of a group (workloads/_trace/calls.py records them), read for
what they say of a failure (issue 50): every member must create a group alike, so the
ranks whose k-th new_group named other members than the rest are the cause of what
followed (a rank held in the new group's rendezvous, a collective of a group the others do
not have); a rank whose group was destroyed by its own call raises "not initialized" at its
next collective, and the destroy is the cause. Functions over the merge's calls; standard
library only."""
from __future__ import annotations

from typing import Any

from workloads._protocol.ops import DESTROY, LOCAL_SYNC

from .model import Hazard, Mismatch, Op, RankInfo

_UNINITIALIZED = ("has not been initialized", "not initialized", "Invalid process group", "destroyed")


def odd_new_group(calls: dict[int, list[Op]], world: int | None = None) -> Mismatch | None:
    """The first new_group (by its order on each rank) whose member lists differ across the
    ranks that made it: the ranks of the rarer lists are the odd ones (every rank that made it,
    where no list is the most common), with the call the script made (new_subgroups, which
    makes its groups with new_group). None: every rank's lists agree."""
    made: dict[int, list[Op]] = {r: [o for o in ops if o.op == "new_group" and o.key != LOCAL_SYNC]
                                 for r, ops in calls.items()}
    deepest = max((len(v) for v in made.values()), default=0)
    for k in range(deepest):
        seen = {r: ops[k] for r, ops in made.items() if len(ops) > k}
        if len(seen) < 2:
            continue
        lists: dict[tuple[int, ...] | None, list[int]] = {}
        for rank, op in sorted(seen.items()):
            key = None if op.members is None else tuple(sorted(op.members))
            lists.setdefault(key, []).append(rank)
        if len(lists) < 2:
            continue
        ordered = sorted(lists.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        top = len(ordered[0][1])
        common = ordered[0][0] if sum(1 for _, rs in ordered if len(rs) == top) == 1 else None
        odd = sorted(r for key, rs in ordered for r in rs if common is None or key != common)
        if common is None:
            odd = sorted(seen)
        first = seen[odd[0]]

        def said(key: tuple[int, ...] | None) -> str:
            return "every rank" if key is None else "[" + ", ".join(map(str, key)) + "]"
        made_by = "" if first.call == "new_group" else f" (made by {first.call})"
        text = (f"new_group #{k + 1}{made_by} was called with other members on different ranks: "
                + "; ".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} "
                            f"with {said(key)} (at {seen[rs[0]].caller})" for key, rs in ordered)
                + f"; every rank must call new_group with the same ranks, in the same order")
        return Mismatch(pg=first.pg, seq=k + 1, ranks=odd, rank=odd[0] if len(odd) == 1 else None,
                        op=first.call, caller=first.caller, differs=["members"],
                        calls={r: {"op": "new_group", "call": op.call, "members": op.members,
                                   "caller": op.caller} for r, op in sorted(seen.items())},
                        unfinished=sorted(r for r, op in seen.items() if op.end is None), text=text)
    return None


def local_group_out_of_step(calls: dict[int, list[Op]]) -> Mismatch | None:
    """The first group made with use_local_synchronization=True (by its members alone) whose
    members had made different numbers of groups before it: torch names such a group after
    its ranks and the number of groups the rank already has, so members that made other
    numbers wait for each other in new_group for ever. The odd ones: the members whose
    number the fewest share; two against each other, the one that made a group before it
    that no other member made (a group of its own). None: every member in step."""
    order: dict[tuple[int, ...], dict[int, tuple[int, Op]]] = {}
    before: dict[int, list[tuple[int, ...] | None]] = {}
    for rank, ops in calls.items():
        groups = [o for o in ops if o.op == "new_group"]
        before[rank] = [tuple(sorted(o.members)) if o.members is not None else None for o in groups]
        for i, op in enumerate(groups):
            if op.key == LOCAL_SYNC and op.members is not None:
                order.setdefault(tuple(sorted(op.members)), {}).setdefault(rank, (i, op))
    for members, seen in sorted(order.items(), key=lambda kv: min(op.start for _, op in kv[1].values())):
        counts: dict[int, list[int]] = {}
        for rank, (i, _) in sorted(seen.items()):
            counts.setdefault(i, []).append(rank)
        if len(counts) < 2:
            continue
        fewest = min(len(rs) for rs in counts.values())
        odd = sorted(r for rs in counts.values() if len(rs) == fewest for r in rs)
        if len(counts) == 2 and fewest * 2 == len(seen):       # a tie: the one with a group of its own before
            own = [r for r in odd if any(g not in before[o][:seen[o][0]] for g in before[r][:seen[r][0]]
                                         for o in seen if o != r)]
            odd = own if len(own) == 1 else odd
        first = seen[odd[0]][1]
        said = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} after {i} group"
                         f"{'' if i == 1 else 's'}" for i, rs in sorted(counts.items()))
        text = (f"new_group({list(members)}, use_local_synchronization=True) was made by its members after "
                f"different numbers of groups ({said}; at {first.caller}): torch names such a group after its "
                f"ranks and the groups each rank already has, so its members never meet")
        return Mismatch(pg=first.pg, seq=seen[odd[0]][0] + 1, ranks=odd, rank=odd[0] if len(odd) == 1 else None,
                        op=first.call, caller=first.caller, differs=["order"],
                        calls={r: {"op": "new_group", "call": op.call, "members": op.members, "caller": op.caller}
                               for r, (_, op) in sorted(seen.items())},
                        unfinished=sorted(r for r, (_, op) in seen.items() if op.end is None), text=text)
    return None


def _first(calls: dict[int, list[Op]], name: str) -> tuple[int, Op] | None:
    """(rank, call) of the earliest call named `name` on any rank."""
    found = min(((op.start, rank, op) for rank, ops in calls.items() for op in ops if op.op == name),
                key=lambda x: (x[0], x[1]), default=None)
    return (found[1], found[2]) if found is not None else None


def _hazard(calls: dict[int, list[Op]], name: str, default: str, say: Any) -> Hazard | None:
    """The earliest call `name` on any rank as a Hazard: its rank, the call it marks (its key,
    else `default`), its line, and `say(rank, what, caller)`'s sentence."""
    if (first := _first(calls, name)) is None:
        return None
    rank, op = first
    what = op.key or default
    return Hazard(rank=rank, op=what, caller=op.caller, text=say(rank, what, op.caller))


def not_a_member(calls: dict[int, list[Op]]) -> Hazard | None:
    """The first collective a rank called on a group it is not a member of (torch returned
    at once: the rank took no part, its tensors are as they were)."""
    return _hazard(calls, "not_a_member", "a collective", lambda rank, what, caller:
                   f"rank {rank} called {what} at {caller} on a group it is not a member of: torch returned "
                   f"at once, and the rank took no part (its tensors are as they were; build the group with "
                   f"every rank that calls it, or call it only on its members)")


def read_before_wait(calls: dict[int, list[Op]]) -> Hazard | None:
    """The first line that read a receive's buffer before the receive was waited on."""
    return _hazard(calls, "read_before_wait", "irecv", lambda rank, what, caller:
                   f"rank {rank} read the buffer of its {what} at {caller} before waiting on the {what}'s "
                   f"work: what it read may not have arrived yet (call work.wait() first)")


def aliased_outputs(calls: dict[int, list[Op]]) -> Hazard | None:
    """The first collective whose output list held one tensor in two slots: each rank's data
    was written into that one tensor in turn, and every slot shows the last."""
    return _hazard(calls, "aliased_outputs", "a collective", lambda rank, what, caller:
                   f"rank {rank}'s {what} at {caller} wrote into an output list that holds one tensor in "
                   f"several slots (`[t] * n` makes one tensor, not n): every slot shows the last rank's data "
                   f"(make one tensor per slot: [torch.zeros_like(t) for _ in range(n)])")


def not_contiguous(calls: dict[int, list[Op]]) -> Hazard | None:
    """The first collective given a tensor that is not contiguous (a column of a table,
    `table[:, 0]`): where torch lets it pass (gloo's broadcast), the bytes sent are the
    storage's as it lies, and the others receive other elements."""
    return _hazard(calls, "not_contiguous", "a collective", lambda rank, what, caller:
                   f"rank {rank}'s {what} at {caller} was given a tensor that is not contiguous (a strided "
                   f"view such as a column of a table): where torch lets it pass, the storage is sent as it lies "
                   f"and the other ranks get other elements (pass `.contiguous()`, and copy the result back)")


def pickled_by(calls: dict[int, list[Op]]) -> dict[int, set[str]]:
    """rank -> the classes its object collectives' objects named (`module.qualname`)."""
    return {rank: {name for op in ops if op.op == "pickled" for name in (op.key or "").split() if name != "-"}
            for rank, ops in calls.items() if any(op.op == "pickled" for op in ops)}


def wrote_into_a_copy(calls: dict[int, list[Op]]) -> Hazard | None:
    """The first collective that wrote its result into a copy its line made and dropped
    (`dist.all_reduce(counts.float())` where `.float()` copied): the rank kept its own values."""
    return _hazard(calls, "into_a_copy", "a collective", lambda rank, what, caller:
                   f"rank {rank}'s {what} at {caller} wrote its result into a copy the line made of its "
                   f"tensor (a `.float()`, `.to()`, `.contiguous()` that copied on this rank) and dropped: the "
                   f"rank kept its own values (pass the tensor itself, or keep the copy and use it)")


def swapped_senders(calls: dict[int, list[Op]], ranks: dict[int, RankInfo]) -> Hazard | None:
    """A rank whose receives from any source, at two or more lines that drop who sent each
    (`dist.recv(t)` returns the sender's rank, and the line threw it away), got their
    messages out of rank order: a script that reads them as if in rank order has them
    swapped. None: no such rank (in order, one line, or the sender kept)."""
    for rank, ops in sorted(calls.items()):
        dropped = {op.caller for op in ops if op.op == "sender_dropped"}
        info = ranks.get(rank)
        if not dropped or info is None:
            continue
        first: dict[str, int] = {}
        for caller, peer in info.anysource:
            if caller in dropped:
                first.setdefault(caller, peer)
        peers = list(first.values())
        if len(peers) >= 2 and peers != sorted(peers):
            lines = ", ".join(c.rpartition(":")[2] for c in first)
            at = next(iter(first))
            return Hazard(rank=rank, op="recv", caller=at,
                          text=f"rank {rank} received from any source at lines {lines} of {at.rpartition(':')[0]}, "
                               f"and each line drops who sent it (recv returns the sender's rank): the messages "
                               f"came from ranks {', '.join(map(str, peers))} in that order, so code that takes "
                               f"them in rank order has them swapped (pass src=, or keep what recv returns)")
    return None


def says_uninitialized(error: str | None) -> bool:
    """An error that says the group it used is gone or was never made."""
    return bool(error) and any(s in error for s in _UNINITIALIZED)


def deleted_keys(calls: dict[int, list[Op]]) -> dict[str, tuple[int, str]]:
    """key -> (rank, caller) of the first store.delete_key of each key the script deleted."""
    found: dict[str, tuple[int, str]] = {}
    for rank, ops in sorted(calls.items()):
        for op in ops:
            if op.op == "store.delete_key" and op.key and op.end is not None:
                if op.key not in found or op.start < found[op.key][2]:
                    found[op.key] = (rank, op.caller, op.start)
    return {k: (r, c) for k, (r, c, _) in found.items()}


def set_keys(calls: dict[int, list[Op]]) -> dict[str, tuple[int, str]]:
    """key -> (rank, caller) of the last store.set of each key the script set."""
    found: dict[str, tuple[int, str, int]] = {}
    for rank, ops in sorted(calls.items()):
        for op in ops:
            if op.op == "store.set" and op.key and op.end is not None:
                if op.key not in found or op.start > found[op.key][2]:
                    found[op.key] = (rank, op.caller, op.start)
    return {k: (r, c) for k, (r, c, _) in found.items()}


def elections(calls: dict[int, list[Op]]) -> dict[str, tuple[int, str]]:
    """key -> (rank, caller) of the first store.compare_set of a key that two or more ranks
    compare_set: a leader election, which the first caller wins (the store serializes
    them, and only the first finds the key still unset)."""
    found: dict[str, list[tuple[int, int, str]]] = {}
    for rank, ops in sorted(calls.items()):
        for op in ops:
            if op.op == "store.compare_set" and op.key:
                found.setdefault(op.key, []).append((op.start, rank, op.caller))
    return {k: (min(v)[1], min(v)[2]) for k, v in found.items() if len({r for _, r, _ in v}) > 1}


def reset_keys(calls: dict[int, list[Op]]) -> dict[str, tuple[int, str]]:
    """key -> (rank, caller) of a store.set of a counter after another rank's store.add to it
    had returned: the set erased that rank's count (a "ready" counter reset by a rank that
    came late)."""
    found: dict[str, tuple[int, str, int]] = {}
    adds = [(rank, op) for rank, ops in calls.items() for op in ops
            if op.op == "store.add" and op.key and op.end is not None]
    for rank, ops in sorted(calls.items()):
        for op in ops:
            if op.op != "store.set" or not op.key or (op.key in found and found[op.key][2] <= op.start):
                continue
            if any(r != rank and a.key == op.key and a.end <= op.start for r, a in adds):
                found[op.key] = (rank, op.caller, op.start)
    return {k: (r, c) for k, (r, c, _) in found.items()}


def added_keys(calls: dict[int, list[Op]]) -> dict[str, tuple[list[int], str]]:
    """key -> (the ranks whose script added to it, where the first of them did): a counter on
    the store (a home-made barrier: add, then poll get until it reaches the world)."""
    found: dict[str, tuple[set[int], str]] = {}
    for rank, ops in sorted(calls.items()):
        for op in ops:
            if op.op == "store.add" and op.key and op.end is not None:
                ranks, caller = found.setdefault(op.key, (set(), op.caller))
                ranks.add(rank)
    return {k: (sorted(r), c) for k, (r, c) in found.items()}


def destroyed_at(calls: dict[int, list[Op]]) -> dict[int, str]:
    """rank -> where it last called destroy_process_group."""
    return {rank: op.caller for rank, ops in calls.items() if (op := destroyed_before(ops)) is not None}


def destroyed_before(calls: list[Op], before_ns: int | None = None) -> Op | None:
    """The rank's last destroy_process_group call (before `before_ns`, when given)."""
    found = [o for o in calls if o.op == DESTROY and (before_ns is None or o.start <= before_ns)]
    return found[-1] if found else None
