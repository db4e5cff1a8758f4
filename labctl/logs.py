"""Reading node log streams: split them per rank and pull out the result lines.

Every backend ends up with one text stream per node. torchrun tees each
worker's output with a `[rank<N>]:` prefix (plan.RANK_PREFIX_TEMPLATE), and
direct-mode backends add the same prefix themselves, so one parser serves all.
"""
from __future__ import annotations

import json
import re
from typing import Iterable

RESULT_MARKER = "@@labctl-result "       # must match workloads/_common.py
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")
# torchrun's failure summary: "rank      : 3 (local_rank: 1)" then "exitcode  : 1 (pid: 9)"
_TORCHRUN_FAILURE = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


_EXIT_LINE = re.compile(r"^labctl: rank (\d+) exited with code (-?\d+)$", re.M)


def rank_prefix(rank: int) -> str:
    return f"[rank{rank}]:"


def exit_line(rank: int, code: int) -> str:
    """What a direct-mode node writes when one of its workers ends (in the order they end)."""
    return f"labctl: rank {rank} exited with code {code}"


def worker_exits(text: str) -> list[tuple[int, int]]:
    """(rank, exit code) from direct-mode exit lines, in the order the workers ended."""
    return [(int(r), int(c)) for r, c in _EXIT_LINE.findall(text)]


_ANY_RANK_PREFIX = re.compile(r"\[rank(\d+)\]:")


def split_by_rank(text: str) -> dict[int, list[str]]:
    """Lines that carry a rank prefix, grouped by rank, prefix removed.

    torchrun's tee forwards whatever a worker has written so far, so a half
    line of rank A can be followed on the same output line by a line of rank B,
    and A's rest arrives later behind its own prefix. Such glued lines are cut
    where another rank's prefix starts and A's halves are joined again. (A
    worker's own `[rankA]:` inside its line — torch prints those — is kept.)
    """
    ranks: dict[int, list[str]] = {}
    unfinished: set[int] = set()
    for line in text.splitlines():
        m = _RANK_PREFIX.match(line)
        if not m:
            continue
        pieces = []              # (rank, text, ends_with_newline)
        rank, start = int(m.group(1)), m.end()
        for inner in _ANY_RANK_PREFIX.finditer(line, m.end()):
            if int(inner.group(1)) != rank:
                pieces.append((rank, line[start:inner.start()], False))
                rank, start = int(inner.group(1)), inner.end()
        pieces.append((rank, line[start:], True))
        for rank, piece, complete in pieces:
            lines = ranks.setdefault(rank, [])
            if rank in unfinished and lines:
                lines[-1] += piece
            else:
                lines.append(piece)
            (unfinished.discard if complete else unfinished.add)(rank)
    return ranks


def parse_results(lines: Iterable[str], rank: int | None = None) -> list[dict]:
    """The JSON records behind RESULT_MARKER; a garbled line becomes a failed record."""
    records = []
    for line in lines:
        at = line.find(RESULT_MARKER)
        if at < 0:
            continue
        payload = line[at + len(RESULT_MARKER):]
        try:
            record = json.loads(payload)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            record = {"workload": "labctl", "name": "unparsable_result_line", "ok": False,
                      "detail": payload[:200]}
        if rank is not None:
            record.setdefault("rank", rank)
        records.append(record)
    return records


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\s*\n(?:.*\n){0,3}?\s*rank\s*:\s*(\d+)")


def torchrun_root_cause(text: str) -> int | None:
    """The global rank torchrun names as this node's first observed failure, if any."""
    m = _ROOT_CAUSE.search(text)
    return int(m.group(1)) if m else None


def torchrun_failures(text: str) -> dict[int, int]:
    """{global rank: exit code} from torchrun's ChildFailedError summary in a node log."""
    return {int(r): int(code) for r, code in _TORCHRUN_FAILURE.findall(text)}
