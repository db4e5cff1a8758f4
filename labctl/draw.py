"""A workload's view model drawn as report.md and CSV, knowing no workload.

The views (workloads/_protocol/plugin.py) are drawn by kind: a table as a Markdown
table (labctl/tables.py), a chart as a table of its series, messages and the tensors
ranks held as tables of values. The page draws the same views itself
(`View.as_dict`, labctl/html/workload_views.js); `show` says which of the two a view is for.
"""
from __future__ import annotations

import csv as _csv
import io
from typing import Any, Iterable

from workloads._protocol.plugin import (MD, PAGE, BeforeAfter, Csv, Group, Heading, Lines, Matrix,
                                        Messages, Table, Text)

from .tables import table

HELD_VALUES = 8         # of a held tensor, in report.md (the page shows its 16)
FIGURE_RANKS = 4        # ranks drawn per call in report.md's summary of a family of calls


def page(views: Iterable[Any]) -> list[dict]:
    """The views the page draws, as the JSON island holds them."""
    return [v.as_dict() for v in views if v.show != MD]


def markdown(views: Iterable[Any]) -> str:
    """The views report.md draws, one block each, a blank line between blocks. Figures of
    calls (`BeforeAfter`) in a row, and groups of nothing but such figures in a row (the
    collectives' families), are one table: a row per call."""
    blocks: list[str] = []
    pending: list[tuple[str, BeforeAfter]] = []
    for view in views:
        if view.show == PAGE:
            continue
        figures = _figures(view)
        if figures is not None:
            pending += figures
            continue
        if pending:
            blocks.append(_calls(pending))
            pending = []
        blocks += [b for b in _blocks(view) if b]
    if pending:
        blocks.append(_calls(pending))
    return "\n\n".join(blocks)


def _figures(view: Any) -> list[tuple[str, BeforeAfter]] | None:
    """(its group's title, figure) for a figure of a call or a group of only those."""
    if isinstance(view, BeforeAfter):
        return [("", view)]
    if isinstance(view, Group) and view.views and all(
            isinstance(v, BeforeAfter) for v in view.views if v.show != PAGE):
        return [(view.title, v) for v in view.views if v.show != PAGE]
    return None


def _heading(title: str, level: int = 3) -> list[str]:
    return [f"{'#' * level} {title}"] if title and level else []


def _blocks(view: Any) -> list[str]:
    if isinstance(view, Heading):
        return _heading(view.text, view.level)
    if isinstance(view, Text):
        return [view.text]
    if isinstance(view, Table):
        return [*_heading(view.title, view.level), view.caption, table(view.columns, view.rows)]
    if isinstance(view, Group):
        return [*_heading(view.title), view.caption, markdown(view.views)]
    if isinstance(view, Messages):
        return [*_heading(view.title), view.caption, table(
            ("hop", "from", "to", "ops", "sent", "received", "arrived as sent"),
            (("" if m.get("hop") is None else m.get("hop"), m.get("src"), m.get("dst"),
              f"{m.get('send_op') or '—'} → {m.get('recv_op') or '—'}", held(m.get("sent")),
              held(m.get("received")), _same(m.get("sent"), m.get("received")))
             for m in view.messages))]
    if isinstance(view, Lines):
        return [*_heading(view.title), view.caption, table(
            ("series", "points", f"first {view.y.get('label', 'y')}", f"last {view.y.get('label', 'y')}",
             "min", "max"),
            ((s.get("name"), len(s.get("points") or []), *_ends(s.get("points") or []))
             for s in view.series))]
    if isinstance(view, Matrix):
        return [*_heading(view.title), view.caption, table(
            ("from \\ to", *view.labels), ([label, *texts] for label, texts in zip(view.labels, view.texts)))]
    raise TypeError(f"not a view: {type(view).__name__}")


def _calls(calls: list[tuple[str, BeforeAfter]]) -> str:
    """Figures of calls as one table: a row per call, the first ranks' values (the group
    each belongs to first, when they came in groups)."""
    grouped = any(group for group, _ in calls)
    rows = []
    for group, call in calls:
        ranks = list(call.ranks)
        checked = [r for r in ranks if r.get("ok") is not None]
        values = "; ".join(f"rank {r.get('rank')}: {held(r.get('before'))} → {held(r.get('after'))}"
                           for r in ranks[:FIGURE_RANKS])
        rows.append(([group] if grouped else []) + [
            call.title, len(ranks), f"{sum(1 for r in checked if r['ok'])}/{len(checked)}" if checked else "",
            values + (f"; ... ({len(ranks) - FIGURE_RANKS} more ranks)" if len(ranks) > FIGURE_RANKS else "")])
    return table((["of"] if grouped else []) + ["call", "ranks", "checks passed", "before → after"], rows)


def held(value: Any) -> str:
    """A held tensor (shape, dtype, numel, values) or a list of them, in a table cell."""
    if value is None:
        return "—"
    if isinstance(value, dict) and isinstance(value.get("list"), list):
        return "[" + ", ".join(held(v) for v in value["list"][:HELD_VALUES]) + \
            (", ...]" if (value.get("len") or 0) > min(len(value["list"]), HELD_VALUES) else "]")
    if isinstance(value, dict) and isinstance(value.get("values"), list):
        values = value["values"]
        numel = value.get("numel") if isinstance(value.get("numel"), int) else len(values)
        shown = ", ".join(_number(v) for v in values[:HELD_VALUES])
        return f"[{shown}{', ...' if numel > min(len(values), HELD_VALUES) else ''}]"
    return str(value)


def _number(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _same(sent: Any, received: Any) -> str:
    if sent is None or received is None:
        return ""
    return "yes" if (sent or {}).get("values") == (received or {}).get("values") else "no"


def _ends(points: list) -> tuple[str, str, str, str]:
    ys = [p[1] for p in points if isinstance(p, (list, tuple)) and len(p) == 2
          and isinstance(p[1], (int, float))]
    if not ys:
        return "", "", "", ""
    return _number(ys[0]), _number(ys[-1]), _number(min(ys)), _number(max(ys))


def csv(found: Csv) -> str:
    """A workload's CSV: its header, then its rows (None as an empty cell)."""
    buf = io.StringIO()
    writer = _csv.writer(buf, lineterminator="\n")
    writer.writerow(found.columns)
    writer.writerows(found.rows)
    return buf.getvalue()
