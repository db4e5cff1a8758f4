"""The verdict's rules for ranks held in the store (issue 50): a hang whose ranks wait in
`store.get`/`wait` or poll `store.add` is named by who wrote, deleted, reset or never set
the key they wait on. Functions of the evidence (`verdict.Evidence`'s calls and where each
rank's records end), each returning the first failure it names or None; labctl/verdict.py
applies them."""
from __future__ import annotations

import re

from workloads._protocol.ops import STORE_OPS, STORE_READS

from . import blame
from .runrecord import FirstFailure
from .trace import branches


def deleted_before_it_was_read(first: FirstFailure, found: blame.Findings, ended_at: dict[int, dict],
                                deleted: dict[str, tuple[int, str]]) -> FirstFailure | None:
    """A rank held in (or timed out of) a store read of a key another rank's script had
    deleted: the delete is the cause, its rank the first failure (the reader its victim).
    None: no such read."""
    reader = first.rank
    ended = ended_at.get(reader) if reader is not None else None
    if not ended or ended.get("op") not in STORE_READS or first.fault or first.left_early:
        return None
    keys = [k.strip() for k in str(ended.get("key") or "").split(",")]
    hit = next(((k, deleted[k]) for k in keys if k in deleted and deleted[k][0] != reader), None)
    if hit is None:
        return None
    key, (rank, caller) = hit
    said = dict(first.error) if first.error else {
        "exception": f"held in {ended['op']}({key!r}) at {ended.get('caller')}, a key rank {rank} had deleted"}
    return FirstFailure(rank, blame.node_of_rank(rank, found), found.exit_codes.get(rank), peer_rank=reader,
                        peer_error=said, blamed_for="deleted it", op="store.delete_key", caller=caller,
                        collective=first.collective)


def never_added(first: FirstFailure, found: blame.Findings, ended_at: dict[int, dict],
                 added: dict[str, tuple[list[int], str]], world: int | None) -> FirstFailure | None:
    """A hang whose blamed ranks poll a store counter (their last call a read of a key they
    added to: a home-made barrier) that some ranks never added to: those ranks are the
    cause, with the add they skipped, at the line the others made it. None: no such key."""
    blamed = _blamed(first)
    if not first.hang or not blamed or not world:
        return None
    keys = {str((ended_at.get(r) or {}).get("key") or "") for r in blamed
            if (ended_at.get(r) or {}).get("op") in STORE_READS}
    if len(keys) != 1 or next(iter(keys)) not in added:
        return None
    adders, caller = added[next(iter(keys))]
    skipped = [r for r in range(world) if r not in adders]
    if not skipped or not set(blamed) <= set(adders):
        return None
    one = skipped[0] if len(skipped) == 1 else None
    return FirstFailure(one, blame.node_of_rank(one, found) if one is not None else None, None,
                        ranks=skipped if one is None else None, hang=True, collective=first.collective,
                        op="store.add", caller=caller)


def _blamed(first: FirstFailure) -> list[int]:
    """The ranks a first failure blames: its ranks, its rank, else its diagnosis' ranks."""
    return list(first.ranks or []) or ([first.rank] if first.rank is not None else []) \
        or list(first.collective.ranks if first.collective is not None else [])


def store_writer(first: FirstFailure, found: blame.Findings, ended_at: dict[int, dict],
                  set_keys: dict[str, tuple[int, str]], world: int | None) -> FirstFailure | None:
    """A hang whose blamed ranks are held by a store read of one key, the others waiting
    for them: the key's writer is the cause. A rank that set the key while the readers poll
    on (their reads return, the value is not the one they wait for): its store.set. No rank
    set it, and the script has one set of that key, on a line the other ranks have gone
    past (a set skipped in a branch): those ranks, with that line. None: not so, or the
    writers have not reached the set yet (a deadlock of the read and what comes before)."""
    blamed = _blamed(first)
    if not first.hang or not blamed or not world:
        return None
    reads = [ended_at.get(r) or {} for r in blamed]
    keys = {str(e.get("key") or "") for e in reads}
    if any(e.get("op") not in STORE_READS for e in reads) or len(keys) != 1 or "" in keys:
        return None
    key = keys.pop()
    if key in set_keys:
        rank, caller = set_keys[key]
        if rank in blamed or any(e.get("inside") for e in reads):
            return None                 # a read still blocked on a key that was set: another store
        return FirstFailure(rank, blame.node_of_rank(rank, found), None, hang=True, collective=first.collective,
                            op="store.set", caller=caller)
    file = str(reads[0].get("caller") or "").rpartition(":")[0]
    line = branches.set_line(file, key) if file else None
    writers = [r for r in range(world) if r not in blamed]
    past = [r for r in writers if _line_in(ended_at.get(r), file) > (line or 0)]
    if line is None or not writers or past != writers:
        return None
    one = writers[0] if len(writers) == 1 else None
    return FirstFailure(one, blame.node_of_rank(one, found) if one is not None else None, None,
                        ranks=writers if one is None else None, hang=True, collective=first.collective,
                        op="store.set", caller=f"{file}:{line}")


def _line_in(ended: dict | None, file: str) -> int:
    """The line of `file` a rank's records end at (0: elsewhere, or none)."""
    at, _, line = str((ended or {}).get("caller") or "").rpartition(":")
    return int(line) if at == file and line.isdigit() else 0


def polls_apart(found: blame.Findings, ended_at: dict[int, dict], world: int | None) -> FirstFailure | None:
    """A hang in which every rank's last call is a store call (a home-made barrier: add,
    then poll or wait) but not on one key: the ranks on the key fewest share counted or
    waited apart from the rest (an epoch in the key one rank has wrong). They are the
    cause, with their call. None: not every rank ended in the store, one key, or no
    single smallest party."""
    if not world or any(r not in ended_at for r in range(world)):
        return None
    parties: dict[str, list[int]] = {}
    for r in range(world):
        ended = ended_at[r]
        if ended.get("op") not in STORE_OPS or not ended.get("key"):
            return None
        parties.setdefault(str(ended["key"]), []).append(r)
    if len(parties) < 2:
        return None
    sizes = sorted(len(p) for p in parties.values())
    if sizes[0] == sizes[1]:
        return None                    # no one party fewer than every other: cannot say which is odd
    odd = min(parties.values(), key=len)
    one = odd[0] if len(odd) == 1 else None
    ended = ended_at[odd[0]]
    return FirstFailure(one, blame.node_of_rank(one, found) if one is not None else None, None,
                        ranks=odd if one is None else None, hang=True, op=ended["op"], caller=ended.get("caller"))


def counter_reset(found: blame.Findings, ended_at: dict[int, dict], resets: dict[str, tuple[int, str]],
                   world: int | None) -> FirstFailure | None:
    """A hang in which every rank's last call is a store call on one key, a counter one rank
    set after other ranks had added to it (calls.reset_keys): the set erased their counts,
    and the count they poll for never comes. That rank is the cause, with its set. None:
    not so."""
    if not world or any(r not in ended_at for r in range(world)):
        return None
    keys = {str(ended_at[r].get("key") or "") for r in range(world)}
    if len(keys) != 1 or any(ended_at[r].get("op") not in STORE_OPS for r in range(world)):
        return None
    key = keys.pop()
    if key not in resets:
        return None
    rank, caller = resets[key]
    return FirstFailure(rank, blame.node_of_rank(rank, found), None, hang=True, op="store.set", caller=caller)


def elected_never_set(found: blame.Findings, ended_at: dict[int, dict], elected: dict[str, tuple[int, str]],
                       set_keys: dict[str, tuple[int, str]], world: int | None) -> FirstFailure | None:
    """A hang in which every rank waits in a store read of one key that no rank set, after
    the ranks held an election (store.compare_set of one key: calls.elections): the rank
    that won it was to set the key, and never did (it did not see itself elected: a
    result compared as str where the store returns bytes). That rank, with its
    compare_set. None: not so, or several elections."""
    if not world or any(r not in ended_at for r in range(world)):
        return None
    reads = [ended_at[r] for r in range(world)]
    keys = {str(e.get("key") or "") for e in reads}
    if len(keys) != 1 or "" in keys or any(e.get("op") not in STORE_READS or not e.get("inside") for e in reads):
        return None
    if keys.pop() in set_keys or len(elected) != 1:
        return None
    (rank, caller), = elected.values()
    return FirstFailure(rank, blame.node_of_rank(rank, found), None, hang=True, op="store.compare_set",
                        caller=caller)


_RANKED_KEY = re.compile(r"(.*?)(\d+)")


def waits_for_its_own_key(found: blame.Findings, ended_at: dict[int, dict], set_keys: dict[str, tuple[int, str]],
                           world: int | None) -> FirstFailure | None:
    """A hang in which every rank waits in a store read, and the keys nobody set are each
    one rank's by the pattern of those that were (`count/0` set by rank 0, `count/1` by
    rank 1: `count/2` is rank 2's), that rank itself among the readers: it waits for a key
    only it will set (its branch reads before it publishes). That rank, with its read.
    None: not so, a key of no one rank's, or several owners."""
    if not world or any(r not in ended_at for r in range(world)):
        return None
    reads = [ended_at[r] for r in range(world)]
    if any(e.get("op") not in STORE_READS or not e.get("inside") for e in reads):
        return None
    prefixes = set()
    for key, (rank, _) in set_keys.items():
        m = _RANKED_KEY.fullmatch(key)
        if m is None or int(m.group(2)) != rank:
            return None                 # a key set that does not name its setter: no pattern
        prefixes.add(m.group(1))
    waited = {k.strip() for e in reads for k in str(e.get("key") or "").split(", ") if k.strip()}
    owners = set()
    for key in waited - set(set_keys):
        m = _RANKED_KEY.fullmatch(key)
        if m is None or m.group(1) not in prefixes or int(m.group(2)) >= world:
            return None
        owners.add(int(m.group(2)))
    if len(owners) != 1:
        return None
    owner = owners.pop()
    ended = ended_at[owner]
    return FirstFailure(owner, blame.node_of_rank(owner, found), None, hang=True, op=ended["op"],
                        caller=ended.get("caller"))
