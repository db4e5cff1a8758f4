"""torch's own words that name the rank at fault (issue 50). Some of torch's checks already
know who is to blame and say it in the error they raise on *another* rank: a monitored
barrier's timeout names the ranks that never arrived; DDP's constructor names the process
whose parameters differ; TORCH_DISTRIBUTED_DEBUG=DETAIL's check names the rank running
another collective. The rank that raised first is then a victim and the rank named the
cause. Pure functions over the ranks' errors (blame.Findings.errors); standard library only."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_MONITORED = re.compile(r"Ranks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier")
_DDP_COUNT = re.compile(r"DDP expects same model across all ranks, but Rank \d+ has \d+ params, "
                        r"while rank (?P<other>\d+) has inconsistent")
_DDP_SIZES = re.compile(r"\[(?P<me>\d+)\]: params\[\d+\] in this process with (?:sizes|strides) .*"
                        r"appears not to match (?:sizes|strides) of the same param in process (?P<ref>\d+)")
_DETAIL = re.compile(r"Detected mismatch between collectives on ranks\. Rank (?P<me>\d+) is running "
                     r"collective: .*?, but Rank (?P<other>\d+) is running collective")

MONITORED_BARRIER = "monitored_barrier"
DDP = "DistributedDataParallel"


@dataclass(frozen=True)
class Named:
    """The ranks torch's own check named as the cause, the rank whose error said it, and
    the call the check belongs to (None: the trace names it better)."""
    ranks: tuple[int, ...]
    by: int
    op: str | None
    text: str


def _votes(hits: dict[int, list[int]]) -> tuple[int, ...]:
    """The ranks named most often (by the most ranks)."""
    count = Counter(r for named in hits.values() for r in set(named))
    if not count:
        return ()
    top = max(count.values())
    return tuple(sorted(r for r, n in count.items() if n == top))


def named_culprits(errors: dict[int, dict], world: int | None) -> Named | None:
    """What torch's own checks said of who is at fault, from every rank's last error (its
    `exception` line); None: no check named anyone."""
    texts = {r: str((e or {}).get("exception") or "") for r, e in sorted(errors.items())}
    for rank, text in texts.items():
        m = _MONITORED.search(text)
        if m:
            ranks = tuple(sorted(int(x) for x in m.group("ranks").split(",")))
            return Named(ranks, rank, MONITORED_BARRIER, text)
    counts = {r: [int(m.group("other"))] for r, t in texts.items() if (m := _DDP_COUNT.search(t))}
    if counts:
        by = min(counts)
        return Named(_votes(counts), by, DDP, texts[by])
    sizes = {r: int(m.group("me")) for r, t in texts.items() if (m := _DDP_SIZES.search(t))}
    if sizes:
        raisers = tuple(sorted(set(sizes.values())))
        ref = 0
        # each rank compares its parameters with rank 0's: when most ranks differ from it, rank 0 is the odd one
        ranks = (ref,) if world and ref not in raisers and len(raisers) > (world - 1) / 2 and world > 2 else raisers
        by = min(sizes)
        return Named(ranks, by, DDP, texts[by])
    detail = {r: [int(m.group("other"))] for r, t in texts.items() if (m := _DETAIL.search(t))}
    if detail:
        by = min(detail)
        return Named(_votes(detail), by, None, texts[by])
    return None


# torch's warning while a rank retries the rendezvous store (TCPStore.cpp, socket.cpp):
# "TCP client failed to connect/validate to host 127.0.0.1:29533 - retrying ...",
# "The client socket has failed to connect to [localhost]:29500 (errno: 111 ...)"
STORE_UNREACHED_HINT = b"failed to connect"
_STORE_UNREACHED = re.compile(r"failed to connect(?:/validate)? to (?:host )?\[?(?P<host>[^\]\s]+?)\]?:(?P<port>\d+)\b")


def store_unreached(line: str) -> str | None:
    """The store endpoint ("host:port") a rank's log line says it cannot reach, else None."""
    m = _STORE_UNREACHED.search(line)
    return f"{m.group('host')}:{m.group('port')}" if m else None


def unreached_store(unreached: dict[int, str], held: list[int]) -> list[int]:
    """Of ranks all held in init_process_group, those that told they cannot reach the
    rendezvous store: the others reached it and wait for them. Empty when none did, or
    every held rank did (then no rank is the odd one: the store itself is away)."""
    failing = sorted(r for r in held if r in unreached)
    return failing if failing and len(failing) < len(held) else []
