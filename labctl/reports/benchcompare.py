"""`labctl compare A B` on two bench runs: the rows both have, B / A, and how far apart
two runs of the same lab fall there (the spread of each row's own iterations). The
host's part of the bench workload: its rows are the plugin's (workloads/_report/bench.py).
"""
from __future__ import annotations

import json

from workloads._protocol.plugin import csv_text

from ..errors import LabError
from ..plugins import part
from ..tables import table

bench = part("bench")


def comparison(run_a, run_b) -> list[dict]:
    """Rows present in both runs, with B/A ratios of median time and busbw, and how far apart
    two runs of the same lab fall there (`same_lab_spread` of the two rows' iteration times,
    the `times_us` every bench row records): a time ratio inside it is noise (`noise`; None:
    a row with fewer than 6 iterations' times is not judged)."""
    results_a, results_b = _results_or_error(run_a), _results_or_error(run_b)
    a, b = bench.rows(results_a), bench.rows(results_b)
    times_a, times_b = bench.measured_rows(results_a), bench.measured_rows(results_b)
    b_by = {(r["op"], r["size_bytes"], r["dtype"]): r for r in b}
    out = []
    for r in a:
        key = (r["op"], r["size_bytes"], r["dtype"])
        other = b_by.get(key)
        if other is None:
            continue
        ratio = _ratio(other["time_us_median"], r["time_us_median"])
        spread = bench.same_lab_spread(times_a[key].get("times_us") or [], times_b[key].get("times_us") or [])
        out.append({
            "op": r["op"], "size_bytes": r["size_bytes"], "dtype": r["dtype"],
            "time_us_a": r["time_us_median"], "time_us_b": other["time_us_median"],
            "time_ratio": ratio,
            "busbw_GBps_a": r["busbw_GBps"], "busbw_GBps_b": other["busbw_GBps"],
            "busbw_ratio": _ratio(other["busbw_GBps"], r["busbw_GBps"]),
            "same_lab_low": round(spread[0], 4) if spread else None,
            "same_lab_high": round(spread[1], 4) if spread else None,
            "noise": (spread[0] <= ratio <= spread[1]) if spread and ratio is not None else None,
        })
    if not out:
        raise LabError(f"{run_a.path} and {run_b.path} share no (op, size, dtype): A has "
                       f"{_what(a)}, B has {_what(b)}; rerun one with the other's bench options")
    return out


def _results_or_error(run) -> list[dict]:
    results = run.results()
    if not bench.rows(results):
        raise LabError(f"{run.path}: no bench results to compare "
                       f"(make some with: labctl up --workload bench)")
    return results


def _what(data: list[dict]) -> str:
    ops = sorted({r["op"] for r in data})
    sizes_ = sorted({r["size_bytes"] for r in data})
    return f"{'/'.join(ops)} at {sizes_[0]}..{sizes_[-1]} B"


def _ratio(b: float | None, a: float | None) -> float | None:
    return round(b / a, 4) if a and b is not None else None


COMPARE_FIELDS = ("op", "size_bytes", "dtype", "time_us_a", "time_us_b", "time_ratio",
                  "busbw_GBps_a", "busbw_GBps_b", "busbw_ratio", "same_lab_low", "same_lab_high", "noise")
SPREAD_TEXT = ("same lab: how far apart the medians of two runs of the same lab fall (about 95 % of them), from "
               "each run's own iterations (every bench row records each iteration's time: the band of its median, "
               "the two combined; docs/bench.md). A time ratio inside it is **noise**: these two runs cannot tell "
               "those rows apart; busbw's ratio is its inverse. The spread knows the noise inside each run only: a "
               "load that changed between the two runs (another job on the machine) is not in it.")


def compare(run_a, run_b, fmt: str = "md") -> str:
    data = comparison(run_a, run_b)
    if fmt == "json":
        return json.dumps({"a": str(run_a.path), "b": str(run_b.path), "rows": data}, indent=2) + "\n"
    if fmt == "csv":
        return csv_text(data, COMPARE_FIELDS)
    judged = [r for r in data if r["noise"] is not None]
    noise = sum(1 for r in judged if r["noise"])
    ratios = [r["time_ratio"] for r in data if r["time_ratio"] is not None]
    summary = (f"{noise} of {len(judged)} time ratios ({min(ratios):.2f} to {max(ratios):.2f} in all) are inside "
               "the spread of the same lab: noise." if judged else
               "No row of the two runs has 6 iterations' times or more (or they were recorded before `times_us`): "
               "no spread to judge the ratios by.")
    if len(judged) < len(data) and judged:
        summary += f" {len(data) - len(judged)} row(s) without 6 iterations' times or more are not judged."
    head = (f"## Bench comparison: B / A\n\nA = {run_a.path} ({layout(run_a)})  \n"
            f"B = {run_b.path} ({layout(run_b)})\n\n"
            f"time ratio < 1: B is faster; busbw ratio > 1: B moves more data per second. {SPREAD_TEXT}\n\n"
            f"**{summary}**\n\n")
    return head + table(
        ["op", "size (B)", "type", "time A (us)", "time B (us)", "time B/A", "same lab",
         "busbw A (GB/s)", "busbw B (GB/s)", "busbw B/A"],
        ([r["op"], r["size_bytes"], r["dtype"], bench.fixed(r["time_us_a"], 1), bench.fixed(r["time_us_b"], 1),
          bench.fixed(r["time_ratio"], 3) + (" noise" if r["noise"] else ""),
          f"{r['same_lab_low']:.2f}–{r['same_lab_high']:.2f}" if r["same_lab_low"] is not None else "",
          bench.fixed(r["busbw_GBps_a"], 3), bench.fixed(r["busbw_GBps_b"], 3),
          bench.fixed(r["busbw_ratio"], 3)] for r in data)) + "\n"


def layout(run) -> str:
    m = run.record
    return f"{m.backend}, {m.dist_backend}, {m.nodes} node(s) x {m.nproc_per_node} process(es)"

