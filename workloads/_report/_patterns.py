"""What the parallelism workloads' plugins share (fsdp, tp, pp, cp, ep, mesh; torch-free).

Each pattern prints, per variant and rank, `<variant>-matches-single-process` (the largest
difference from ONE process, its tolerance, whether bitwise) and `<variant>-bytes-per-step`
(what the rank sent in a step, the formula's bytes and text): workloads/_patterns.py.
The section is one table, a row per variant: the check over every rank, the largest
difference, and the bytes per rank per step beside the formula's. `labctl predict RUN
--world-size N` plays each variant's step at N ranks over the links (the model:
_patterncost.py; the host's part: labctl/reports/patterns.py).
"""
from __future__ import annotations

from typing import Any, Callable

from workloads._protocol.plugin import Heading, Table, Text, Workload


MATCH, BYTES = "-matches-single-process", "-bytes-per-step"
COLUMNS = ("variant", "matches one process", "max diff", "tolerance", "bitwise", "bytes per rank per step",
           "formula", "within 1 %")


def rows(results: list[dict], workload: str) -> list[list[Any]]:
    """One row per variant, in the order the ranks printed them."""
    mine = [r for r in results if r.get("workload") == workload]
    variants = list(dict.fromkeys(r["name"][:-len(MATCH)] for r in mine if str(r.get("name")).endswith(MATCH)))
    out = []
    for v in variants:
        match = sorted((r for r in mine if r.get("name") == v + MATCH), key=lambda r: r.get("rank", 0))
        sent = sorted((r for r in mine if r.get("name") == v + BYTES), key=lambda r: r.get("rank", 0))
        if all(r.get("skipped") for r in match):
            out.append([v, f"skipped: {match[0].get('reason')}", "", "", "", "", "", ""])
            continue
        diffs = [r["max_diff"] for r in match if isinstance(r.get("max_diff"), (int, float))]
        text = sent[0].get("formula_text", "") if sent else ""
        out.append([v, _passed(match), f"{max(diffs):.3g}" if diffs else "",
                    _same(r.get("tolerance") for r in match), _yes(all(r.get("bitwise") for r in match)),
                    _per_rank(sent, "sent"), f"{_per_rank(sent, 'formula')} ({text})" if text else "",
                    _passed(sent)])
    return out


def section(workload: str, title: str, caption: str) -> Callable[[list[dict]], list]:
    def views(results: list[dict]) -> list:
        found = rows(results, workload)
        if not found:
            return []
        return [Heading(title), Text(caption, id=f"{workload}-about"),
                Table(f"{workload}: against one process, and the bytes", COLUMNS, found, id=f"{workload}-checks",
                      level=3)]
    return views


def plugin(workload: str, title: str, caption: str, options: dict[str, tuple[str, ...]] | None = None,
           world_multiples: tuple[str, ...] = (), rule: Callable[[dict, int], None] | None = None,
           views: Callable[[list[dict]], list] | None = None) -> Workload:
    """The pattern's plugin: its section, its variant names checked at lab load, and the
    sizes that must split evenly over the lab's ranks (`world_multiples`: options that must
    be multiples of the world size; `rule(options, world size)` raises ValueError; `views`:
    the pattern's own, in place of `section`'s table alone)."""
    def check_options(given: dict, defaults: dict) -> None:
        for key, known in (options or {}).items():
            value = given.get(key)
            if value is None or value == "all":
                continue
            names = [v.strip() for v in str(value).split(",") if v.strip()]
            bad = [v for v in names if v not in known]
            if bad or not names:
                raise ValueError(f"{key}: expected all, or one or more of {', '.join(known)} (comma-separated), "
                                 f"given {value!r}")
    def check_lab(spec: Any, given: dict, defaults: dict) -> None:
        merged, n = {**defaults, **given}, spec.world_size
        for key in world_multiples:
            if isinstance(merged.get(key), int) and merged[key] % n:
                raise ValueError(f"workloads.{workload}.options.{key}: expected a multiple of the world size "
                                 f"{n} (it is split over the ranks), given {merged[key]}")
        if rule is not None:
            rule(merged, n)
    return Workload(workload, views=views or section(workload, title, caption), check_options=check_options,
                    check_lab=check_lab, host="patterns")


def _passed(records: list[dict]) -> str:
    ok = sum(1 for r in records if r.get("ok"))
    return f"{'yes' if records and ok == len(records) else 'NO'} ({ok}/{len(records)} ranks)" if records else ""


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def _same(values) -> str:
    found = sorted({v for v in values if v is not None})
    return ", ".join(f"{v:g}" for v in found)


def _per_rank(records: list[dict], key: str) -> str:
    """One number when every rank sent the same, else each rank's."""
    values = [r.get(key) for r in records]
    if not values:
        return ""
    if len(set(values)) == 1:
        return f"{values[0]:,.0f} B" if isinstance(values[0], (int, float)) else ""
    return ", ".join(f"r{r.get('rank')} {r.get(key):,.0f}" for r in records if isinstance(r.get(key), (int, float))) + " B"
