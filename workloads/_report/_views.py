"""Builders of the view model (workloads/_protocol/plugin.py) for the workloads'
plugins, and the helpers they share to find their records (torch-free).

A plugin's `views(results)` returns a list of views; labctl draws them as report.md
(labctl/draw.py) and as the page (labctl/html/report.js draws each by its `kind`,
knowing no workload). Values travel as `held` dicts (workloads/_common.py: shape, dtype,
numel, the first values) or lists of them (`len`, `list`). docs/report.md lists the kinds.
"""
from __future__ import annotations

from typing import Any, Iterable

from workloads._protocol.plugin import BOTH, BeforeAfter, Group, Lines, Matrix, Messages, Table


def table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]], caption: str = "",
          view_id: str = "", show: str = BOTH, level: int = 0) -> Table:
    return Table(title, list(columns), [list(r) for r in rows], caption, view_id, show, level)


def group(title: str, views: list, caption: str = "", view_id: str = "") -> Group:
    """Views under one heading (a family of figures)."""
    return Group(title, views, caption, view_id)


def before_after(call: str, title: str, ranks: list[dict], caption: str = "", **facts: Any) -> BeforeAfter:
    """What every rank held before and after one call: `ranks` are dicts with rank,
    before, after (held or None) and ok (its check: True, False or None when it has none)."""
    return BeforeAfter(call, title, ranks, caption, facts)


def messages(view_id: str, title: str, ranks: list[int], sent: list[dict], layout: str,
             caption: str = "") -> Messages:
    """Point-to-point messages as arrows: each with src, dst, sent and received (held or
    None), op names, and a hop number when they follow one another (`layout`: "sequence"
    draws lifelines, "ring" places the ranks on a circle)."""
    return Messages(view_id, title, ranks, sent, layout, caption)


def lines(view_id: str, title: str, x: dict, y: dict, series: list[dict], caption: str = "",
          ceiling: dict | None = None, show: str = BOTH) -> Lines:
    """A line chart: `x`/`y` are {label, log}; each series {name, points: [[x, y]], dash,
    width}; `ceiling` {y, label} a horizontal line (the measured link)."""
    return Lines(view_id, title, x, y, series, caption, ceiling, show)


def matrix(view_id: str, title: str, labels: list[str], cells: list[list[Any]], texts: list[list[str]],
           caption: str = "", marked: list[list[int]] | None = None, show: str = BOTH) -> Matrix:
    """A square heat map: row i sends to column j; `cells` the numbers that shade each cell
    (share of the largest; None: no value, e.g. the diagonal), `texts` what each cell
    says, `marked` the [i, j] cells ringed as bad (a slow pair)."""
    return Matrix(view_id, title, labels, cells, texts, caption, marked or [], show)


def data_records(results: Iterable[dict], workload: str) -> list[dict]:
    """The workload's data records (what ranks held; workloads/_common.py `Context.show`)."""
    return [r for r in results if r.get("workload") == workload and r.get("name") == "data"]


def check_of(results: Iterable[dict], workload: str) -> dict[tuple[str, Any], dict]:
    """The workload's checks by (name, rank)."""
    return {(r.get("name"), r.get("rank")): r for r in results
            if r.get("workload") == workload and r.get("name") != "data"}
