"""The live per-rank progress view of a running lab (issue 49): each rank's op count, the op
it is in and for how long, ops per second. On a terminal one block, redrawn in place; in a
log (no TTY) one line every EVERY_S seconds at most, and only when something changed, so a
long lab's log does not fill with it."""
from __future__ import annotations

import sys
from typing import TextIO

from .stall import NS, RankNow

EVERY_S = 10.0                       # a non-TTY line at most this often
MAX_ROWS = 12                        # ranks shown in the block (those waiting longest first)


def _span(ranks: list[int]) -> str:
    """"1-3", "0, 2", "4"."""
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


class View:
    def __init__(self, out: TextIO | None = None, tty: bool | None = None, every_s: float = EVERY_S):
        self.out = out or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.every_s = every_s
        self.drawn = 0                          # lines of the block on screen (TTY)
        self.last_line_at: float | None = None
        self.last_line = ""
        self.counts: dict[int, tuple[float, int]] = {}   # rank -> (when, ops) at the last rate
        self.rates: dict[int, float] = {}
        self.lines_written = 0

    # ---- what is said ------------------------------------------------------------
    def rows(self, ranks: dict[int, RankNow], now_ns: int) -> list[str]:
        order = sorted(ranks.values(), key=lambda r: (r.innermost.start_ns if r.innermost else now_ns, r.rank))
        rows = []
        for r in order[:MAX_ROWS]:
            rate = self.rates.get(r.rank, 0.0)
            op = r.innermost
            if op is not None:
                what = f"in {op.label} for {(now_ns - op.start_ns) / NS:.1f} s at {op.caller}"
            elif r.last is not None:
                what = f"between ops (last: {r.last.label} at {r.last.caller})"
            else:
                what = "no op yet"
            rows.append(f"  rank {r.rank:<3} {r.ops:>9,} ops {rate:>8.1f}/s  {what}")
        if len(order) > MAX_ROWS:
            rows.append(f"  ... {len(order) - MAX_ROWS} more rank(s)")
        return rows

    def summary(self, ranks: dict[int, RankNow], now_ns: int, elapsed_s: float) -> str:
        total = sum(r.ops for r in ranks.values())
        rate = sum(self.rates.values())
        waits = [r for r in ranks.values() if r.innermost is not None]
        text = f"[{elapsed_s:6.1f}s] live: {total:,} ops" + (f", {rate:,.0f} ops/s" if self.rates else "")
        if waits:
            longest = min(waits, key=lambda r: r.innermost.start_ns)
            op = longest.innermost
            inside = [r.rank for r in waits if r.innermost.pg == op.pg and r.innermost.seq == op.seq
                      and r.innermost.op == op.op]
            text += (f"; longest wait: rank{'s' if len(inside) > 1 else ''} {_span(inside)} in {op.label} "
                     f"for {(now_ns - op.start_ns) / NS:.1f} s")
            others = sorted(set(ranks) - set(inside))
            if others and op.seq is not None and len(inside) < op.members:
                text += f" (not in it: rank {_span(others)})"
        return text

    # ---- drawing -----------------------------------------------------------------
    def update_rates(self, ranks: dict[int, RankNow], now_s: float) -> None:
        for r in ranks.values():
            before = self.counts.get(r.rank)
            if before is None:
                self.counts[r.rank] = (now_s, r.ops)
            elif now_s - before[0] >= 1.0:
                self.rates[r.rank] = (r.ops - before[1]) / (now_s - before[0])
                self.counts[r.rank] = (now_s, r.ops)

    def show(self, ranks: dict[int, RankNow], now_ns: int, now_s: float, elapsed_s: float) -> None:
        self.update_rates(ranks, now_s)
        head = self.summary(ranks, now_ns, elapsed_s)
        if self.tty:
            self.clear()
            block = [head, *self.rows(ranks, now_ns)]
            self._write("\n".join(block) + "\n")
            self.drawn = len(block)
            return
        if not any(r.ops for r in ranks.values()):
            return                      # nothing recorded yet: start-up says enough
        changed = head.split("] ", 1)[-1] != self.last_line.split("] ", 1)[-1]
        if changed and (self.last_line_at is None or now_s - self.last_line_at >= self.every_s):
            self._write(head + "\n")
            self.last_line, self.last_line_at = head, now_s
            self.lines_written += 1

    def clear(self) -> None:
        """Take the block off the screen (before another line is printed, and at the end)."""
        if self.tty and self.drawn:
            self._write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0

    def say(self, text: str) -> None:
        """A line of its own (the live diagnosis), above the block."""
        self.clear()
        self._write(text.rstrip("\n") + "\n")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):    # the terminal went away: the lab goes on
            pass
