"""A workload as labctl sees it: one typed plugin, and one view model of its results.

Standard library only, and nothing here runs. Each `workloads/_report/<name>.py`
(torch-free) declares once what its workload offers, as `WORKLOAD = Workload(...)`;
labctl loads that by the workload's name (labctl/plugins.py) and knows no workload.

What a workload's results show is a list of views (`Heading`, `Text`, `Table`,
`Group`, `BeforeAfter`, `Messages`, `Lines`, `Matrix`; page only: `Gantt`, `Grid`): renderers that know no
workload draw them as report.md (labctl/draw.py), as the page (`View.as_dict`, the
JSON island's `workloads[].views`, drawn by labctl/html/report.js by `kind`) and as
CSV (`Csv`). A view's `show` says where it is drawn: "both" (the default), "md"
(report.md only) or "page" (report.html only), for a section that reads best
differently in each (a heat map on the page, a shaded table in report.md).
docs/report.md lists the kinds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence, Union

BOTH, MD, PAGE = "both", "md", "page"

Results = list  # list[dict]: the run's result records (results.jsonl, checked by workloads/_protocol/results.py)


# ---------------------------------------------------------------- the view model

@dataclass(frozen=True)
class Heading:
    """A heading in report.md (`level` #s); the page heads each workload's section itself."""
    kind: ClassVar[str] = "heading"
    text: str
    level: int = 2
    show: str = MD


@dataclass(frozen=True)
class Text:
    """A paragraph. Markdown's `**bold**` is kept in report.md; on the page the text comes
    without the marks and `strong` says which spans were bold ([start, end) in that text),
    so a verdict is as bold on the page as on the terminal."""
    kind: ClassVar[str] = "text"
    text: str
    id: str = ""
    show: str = BOTH

    def as_dict(self) -> dict[str, Any]:
        plain, strong = [], []
        for i, part in enumerate(self.text.split("**")):
            start = sum(map(len, plain))
            if i % 2 and part:
                strong.append([start, start + len(part)])
            plain.append(part)
        return {"kind": "text", "id": self.id, "text": "".join(plain), "strong": strong}


@dataclass(frozen=True)
class Table:
    """Rows under column names. In report.md the title is a heading of `level` #s (0: the
    title is the page's only), then the caption, then the table."""
    kind: ClassVar[str] = "table"
    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""
    id: str = ""
    show: str = BOTH
    level: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "table", "id": self.id, "title": self.title, "caption": self.caption,
                "columns": list(self.columns), "rows": [list(r) for r in self.rows]}


@dataclass(frozen=True)
class Group:
    """Views under one heading (a family of figures)."""
    kind: ClassVar[str] = "group"
    title: str
    views: Sequence["View"]
    caption: str = ""
    id: str = ""
    show: str = BOTH

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "group", "id": self.id, "title": self.title, "caption": self.caption,
                "views": [v.as_dict() for v in self.views if v.show != MD]}


@dataclass(frozen=True)
class BeforeAfter:
    """What every rank held before and after one call: `ranks` are dicts with rank,
    replica, before, after (a held tensor or None), group and ok (its check: True, False,
    or None when it has none); `facts` the call's op, root, reduce_op, async_op."""
    kind: ClassVar[str] = "before_after"
    call: str
    title: str
    ranks: Sequence[dict]
    caption: str = ""
    facts: dict = field(default_factory=dict)
    show: str = BOTH

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "before_after", "id": self.call, "call": self.call, "title": self.title,
                "caption": self.caption, "ranks": list(self.ranks), **self.facts}


@dataclass(frozen=True)
class Messages:
    """Point-to-point messages as arrows: each a dict with src, dst, hop, send_op, recv_op,
    sent and received (held tensors or None); `layout` "sequence" draws lifelines, "ring"
    places the ranks on a circle."""
    kind: ClassVar[str] = "messages"
    id: str
    title: str
    ranks: Sequence[int]
    messages: Sequence[dict]
    layout: str
    caption: str = ""
    show: str = BOTH

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "messages", "id": self.id, "title": self.title, "caption": self.caption,
                "ranks": list(self.ranks), "messages": list(self.messages), "layout": self.layout}


@dataclass(frozen=True)
class Lines:
    """A line chart: `x`/`y` are {label, log}; each series {name, points: [[x, y]], dash,
    width}; `ceiling` {y, label} a horizontal line (the measured link)."""
    kind: ClassVar[str] = "lines"
    id: str
    title: str
    x: dict
    y: dict
    series: Sequence[dict]
    caption: str = ""
    ceiling: dict | None = None
    show: str = BOTH

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "lines", "id": self.id, "title": self.title, "caption": self.caption,
                "x": self.x, "y": self.y, "series": list(self.series), "ceiling": self.ceiling}


@dataclass(frozen=True)
class Matrix:
    """A square heat map: row i sends to column j; `cells` the numbers that shade each
    cell (share of the largest; None: no value, e.g. the diagonal), `texts` what each cell
    says, `marked` the [i, j] cells ringed as bad (a slow pair)."""
    kind: ClassVar[str] = "matrix"
    id: str
    title: str
    labels: Sequence[str]
    cells: Sequence[Sequence[Any]]
    texts: Sequence[Sequence[str]]
    caption: str = ""
    marked: Sequence[Sequence[int]] = ()
    show: str = BOTH

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "matrix", "id": self.id, "title": self.title, "caption": self.caption,
                "labels": list(self.labels), "cells": [list(c) for c in self.cells],
                "texts": [list(t) for t in self.texts], "marked": [list(m) for m in self.marked]}


@dataclass(frozen=True)
class Gantt:
    """Boxes on a time axis, a row per lane (a pipeline stage): each row {label, boxes:
    [{begin, end, kind, label}]} in ms from the axis' 0, `kinds` {kind: its name in the
    legend}; the gaps are what the lane waited. Page only: report.md gets a table of the
    numbers beside it."""
    kind: ClassVar[str] = "gantt"
    id: str
    title: str
    rows: Sequence[dict]
    kinds: dict
    caption: str = ""
    show: str = PAGE

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "gantt", "id": self.id, "title": self.title, "caption": self.caption,
                "rows": list(self.rows), "kinds": dict(self.kinds)}


@dataclass(frozen=True)
class Grid:
    """The ranks as a grid of `columns` per row, drawn once per layer (a process group's
    name): each layer {name, groups: [[rank, ...]]}, the cells of one group one colour.
    Page only: report.md gets a table of the groups beside it."""
    kind: ClassVar[str] = "grid"
    id: str
    title: str
    ranks: Sequence[int]
    columns: int
    layers: Sequence[dict]
    caption: str = ""
    show: str = PAGE

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "grid", "id": self.id, "title": self.title, "caption": self.caption,
                "ranks": list(self.ranks), "columns": self.columns, "layers": list(self.layers)}


View = Union[Heading, Text, Table, Group, BeforeAfter, Messages, Lines, Matrix, Gantt, Grid]


@dataclass(frozen=True)
class Csv:
    """`labctl report --format csv` for a run of this workload: a header and rows."""
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]


# ---------------------------------------------------------------- the plugin

def csv_text(rows: list[dict], fields: list[str] | None = None) -> str:
    """Rows as a plugin's `--format csv` text: a header line (`fields`, else the first
    row's keys), then a line per row."""
    import csv
    import io
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields or list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


class InputError(ValueError):
    """What the user gave a plugin's verb cannot work (`labctl predict --link ...`): one
    line, which labctl says as it says a bad lab description (exit 2)."""


def _no_views(results: Results) -> list:
    return []


def _no_rule(*args: Any) -> None:
    return None


@dataclass(frozen=True)
class Workload:
    """What one workload offers labctl, declared once (`WORKLOAD` in its
    workloads/_report/<name>.py). Every field but `name` may be left out.

    views(results) -> [View]             its section of report.md and of the page
    head(results) -> [View]              a section before the checks per workload (env)
    data(results) -> dict                its key in `labctl report --format json`
    csv(results) -> Csv                  `labctl report --format csv` for runs it is in
    rank_rows(results) -> [dict]         per-rank records: "ranks" in the JSON report,
                                         where each rank ran on the page
    check_options(options, defaults)     raise ValueError("<field>: ...") (lab load time)
    check_lab(spec, options, defaults)   the same, for rules that need the whole lab
    check_placement(spec, shared_dir, options, defaults)
                                         the same, on where the nodes run: `shared_dir`
                                         the backend's `Placement.shared_dir`, never its name
    host                                 the name of its part on labctl's side
                                         (labctl/reports/hosts.py: "bench", "patterns"),
                                         which writes its files next to report.md, and
                                         answers `labctl compare A B` and `labctl predict`:
                                         a plugin describes, the host draws, writes and
                                         predicts
    brief                                False: its views are in report.md and on the page
                                         but not in what `labctl up` prints at the end
                                         (p2p, collectives, ddp: a table row per call)
    """
    name: str
    brief: bool = True
    views: Callable[[Results], list] = _no_views
    head: Callable[[Results], list] = _no_views
    data: Callable[[Results], dict] | None = None
    csv: Callable[[Results], Csv] | None = None
    rank_rows: Callable[[Results], list] | None = None
    check_options: Callable[[dict, dict], None] = _no_rule
    check_lab: Callable[[Any, dict, dict], None] = _no_rule
    check_placement: Callable[[Any, Any, dict, dict], None] = _no_rule
    host: str = ""
