"""The page's view vocabulary, for report hooks' `page(results)` (torch-free).

A hook returns a list of views; the page's script draws each by its `kind`, knowing
no workload. Values travel as `held` dicts (workloads/_common.py: shape, dtype, numel,
the first values) or lists of them (`len`, `list`). docs/report.md lists the kinds.
"""
from __future__ import annotations

from typing import Any, Iterable


def table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]], caption: str = "",
          view_id: str = "") -> dict:
    return {"kind": "table", "id": view_id, "title": title, "caption": caption,
            "columns": list(columns), "rows": [list(r) for r in rows]}


def group(title: str, views: list[dict], caption: str = "", view_id: str = "") -> dict:
    """Views under one heading (a family of figures)."""
    return {"kind": "group", "id": view_id, "title": title, "caption": caption, "views": views}


def before_after(call: str, title: str, ranks: list[dict], caption: str = "", **facts: Any) -> dict:
    """What every rank held before and after one call: `ranks` are dicts with rank,
    before, after (held or None) and ok (its check: True, False or None when it has none)."""
    return {"kind": "before_after", "id": call, "call": call, "title": title, "caption": caption,
            "ranks": ranks, **facts}


def messages(view_id: str, title: str, ranks: list[int], sent: list[dict], layout: str,
             caption: str = "") -> dict:
    """Point-to-point messages as arrows: each with src, dst, sent and received (held or
    None), op names, and a hop number when they follow one another (`layout`: "sequence"
    draws lifelines, "ring" places the ranks on a circle)."""
    return {"kind": "messages", "id": view_id, "title": title, "caption": caption, "ranks": ranks,
            "messages": sent, "layout": layout}


def lines(view_id: str, title: str, x: dict, y: dict, series: list[dict], caption: str = "",
          ceiling: dict | None = None) -> dict:
    """A line chart: `x`/`y` are {label, log}; each series {name, points: [[x, y]], dash,
    width}; `ceiling` {y, label} a horizontal line (the measured link)."""
    return {"kind": "lines", "id": view_id, "title": title, "caption": caption, "x": x, "y": y,
            "series": series, "ceiling": ceiling}


def matrix(view_id: str, title: str, labels: list[str], cells: list[list[Any]], texts: list[list[str]],
           caption: str = "", marked: list[list[int]] | None = None) -> dict:
    """A square heat map: row i sends to column j; `cells` the numbers that shade each cell
    (share of the largest; None: no value, e.g. the diagonal), `texts` what each cell
    says, `marked` the [i, j] cells ringed as bad (a slow pair)."""
    return {"kind": "matrix", "id": view_id, "title": title, "caption": caption, "labels": labels,
            "cells": cells, "texts": texts, "marked": marked or []}


def data_records(results: Iterable[dict], workload: str) -> list[dict]:
    """The workload's data records (what ranks held; workloads/_common.py `Context.show`)."""
    return [r for r in results if r.get("workload") == workload and r.get("name") == "data"]


def check_of(results: Iterable[dict], workload: str) -> dict[tuple[str, Any], dict]:
    """The workload's checks by (name, rank)."""
    return {(r.get("name"), r.get("rank")): r for r in results
            if r.get("workload") == workload and r.get("name") != "data"}
