"""The trace read by people (labctl/trace/): what `labctl trace RUN` prints, and the
report's timeline picture (trace-timeline.png, matplotlib optional)."""
from __future__ import annotations

import json
from pathlib import Path

from .. import atomicfile
from ..tables import human_bytes, table
from .loader import file_lines
from .matcher import blame, straggler
from .merge import LANE_TID, TRACE_FILE
from .model import STRAGGLERS, Summary


def _count(count: int, unfinished: int) -> str:
    """An op's count, with how many never finished (their time is in no total)."""
    return f"{count} ({unfinished} never finished)" if unfinished else str(count)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def text(summary: Summary) -> str:
    """What `labctl trace RUN` prints."""
    lines: list[str] = []
    for p in summary.problems:
        lines.append(f"warning: {p}")
    if summary.more_problems:
        lines.append(f"warning: ... and {summary.more_problems} more bad trace records")
    if summary.missing_ranks:
        lines.append("warning: no trace records from "
                     + ", ".join(f"rank {r}" for r in summary.missing_ranks))
    if summary.empty:
        lines.append("no trace records in any rank log (was the lab run with `trace: false` / --no-trace?)")
        return "\n".join(lines)
    if summary.cost_note:
        lines.append(f"note: {summary.cost_note}")
    lines += [f"{summary.ops} ops, {summary.flows} send→recv flows; timeline: {summary.path} "
              "(open it in https://ui.perfetto.dev or chrome://tracing)", "",
              "## Per process group and op", "",
              table(("pg", "op", "count", "bytes", "total ms", "slowest ms", "slowest on"),
                    ((pg, op, _count(t.count, t.unfinished), human_bytes(t.nbytes),
                      _ms(t.total_ns) if t.count > t.unfinished else "never finished",
                      _ms(t.slowest_ns) if t.count > t.unfinished else "-",
                      f"rank {t.slowest_rank}" if t.slowest_rank is not None else "")
                     for (pg, op), t in sorted(summary.totals.items())))]
    if summary.stragglers:
        lines += ["", "## Stragglers (per collective, the rank that arrived last; worst ten)", "",
                  table(("pg", "collective", "op", "last to arrive", "late by ms"),
                        ((s.pg, f"#{s.seq}", s.op, f"rank {s.rank}", _ms(s.late_ns))
                         for s in summary.stragglers))]
    late = sorted(((t.last, t.late_ns, r) for r, t in summary.lateness.items() if t.last), reverse=True)
    if late:
        found = straggler(summary)
        lines += ["", "## Stragglers per rank (how often each arrived last; worst ten)", ""]
        if found:
            lines += [f"**{found['text']}**", ""]
        lines.append(table(("rank", "arrived last", "of its collectives", "late by ms (mean)", "worst ms",
                            "most often at"),
                           ((f"rank {r}", n, summary.lateness[r].collectives, _ms(ns // n),
                             _ms(summary.lateness[r].worst_ns),
                             " at ".join(summary.lateness[r].most() or ()))
                            for n, ns, r in late[:STRAGGLERS])))
    if summary.stuck or summary.mismatches or summary.stuck_p2p:
        lines += ["", "## Stuck or mismatched collectives, unfinished p2p", ""]
        lead = blame(summary)[4]
        lines += [f"- {x}" for x in lead]
        lines += [f"- {s.describe()}" for s in summary.stuck]
        lines += [f"- {m}" for m in summary.mismatches if not any(m == s.mismatch for s in summary.stuck)]
        lines += [f"- {p}" for p in summary.stuck_p2p]
    if summary.raised:
        lines += ["", "## Ops that raised before torch issued them (not counted as collectives)", ""]
        lines += [f"- {r}" for r in summary.raised]
        if summary.raised_count > len(summary.raised):
            lines.append(f"- ... and {summary.raised_count - len(summary.raised)} more")
    return "\n".join(lines)


# ---------------------------------------------------------------- the report's timeline picture

TIMELINE_FILE = "trace-timeline.png"
TIMELINE_MAX_SLICES = 20_000        # a small picture: the first slices of a long trace
NO_TIMELINE = ("No timeline picture: matplotlib is not installed (plots are optional); "
               "add it with `pip install 'labctl[plot]'`.")


def _slices(trace_path: Path, limit: int) -> tuple[list[tuple[int, str, float, float]], int]:
    """(rank, op, start µs, duration µs) of the first `limit` complete slices, and how many
    there are. Streamed: merge() writes one event per line."""
    found: list[tuple[int, str, float, float]] = []
    total = 0
    with open(trace_path, "rb") as f:
        for raw, whole in file_lines(f):
            if not whole or (b'"ph":"X"' not in raw and b'"ph": "X"' not in raw):
                continue
            total += 1
            if len(found) >= limit:
                continue
            try:
                ev = json.loads(raw.rstrip().rstrip(b","))
                rank = (ev.get("args") or {}).get("rank")
                rank = rank if type(rank) is int else int(ev["tid"]) % LANE_TID
                found.append((rank, str(ev["name"]), float(ev["ts"]), float(ev["dur"])))
            except (ValueError, KeyError, TypeError):
                continue            # a damaged line: the picture goes on without it
    return found, total


def write_timeline(run_path: str | Path) -> Path | None:
    """trace-timeline.png next to trace.json: ranks as rows, each op a bar colored by op,
    time in ms from the first op. None: the trace has no op. LabError: no matplotlib."""
    run_path = Path(run_path)
    source = run_path / TRACE_FILE
    if not source.is_file():
        return None
    slices, total = _slices(source, TIMELINE_MAX_SLICES)
    if not slices:
        return None
    try:
        from matplotlib.figure import Figure
    except ImportError:
        from ..errors import LabError
        raise LabError(NO_TIMELINE) from None
    t0 = min(s[2] for s in slices)
    ranks = sorted({s[0] for s in slices})
    ops = sorted({s[1] for s in slices})
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
    color = {op: palette[i % len(palette)] for i, op in enumerate(ops)}
    fig = Figure(figsize=(10, 1.2 + 0.45 * len(ranks)), dpi=100)
    ax = fig.subplots()
    for op in ops:
        for rank in ranks:
            bars = [((s[2] - t0) / 1e3, max(s[3] / 1e3, 1e-3)) for s in slices if s[0] == rank and s[1] == op]
            if bars:
                ax.broken_barh(bars, (rank - 0.4, 0.8), facecolors=color[op])
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first op (ms)")
    shown = f"first {len(slices)} of {total} ops" if total > len(slices) else f"{total} ops"
    ax.set_title(f"communication timeline ({shown}; trace.json in ui.perfetto.dev has them all)",
                 fontsize=9)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=color[op], label=op) for op in ops], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    target = run_path / TIMELINE_FILE
    with atomicfile.atomic_open(target, "wb") as f:
        fig.savefig(f, format="png")
    return target
