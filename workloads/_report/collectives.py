"""The collectives workload's plugin: every call, every rank's tensors before and after
it, laid out per rank as the tutorials' figures are (the page; report.md: a row per call)
(torch-free)."""
from __future__ import annotations

from workloads._protocol.plugin import Heading, Text, Workload

from . import _views

# What each family of collectives does, in one line under its figures.
FAMILIES = {
    "broadcast": "the root's tensor overwrites every rank's",
    "scatter": "the root holds one block per rank; rank i receives block i",
    "gather": "the opposite of scatter: every rank's block lands, in rank order, on the root only",
    "all_reduce": "every rank ends with the reduction (SUM, PRODUCT, MIN, MAX, AVG) of all ranks' tensors",
    "reduce": "like all_reduce, but only the root's result is defined",
    "all_gather": "every rank ends with every rank's block, in rank order",
    "all_to_all": "rank i sends its j-th block to rank j: a transpose",
    "reduce_scatter": "like all_to_all, then the incoming blocks are summed",
    "barrier": "no data: returns on every rank once all ranks have entered it",
    "async": "async_op=True returns a work handle at once; the tensor is valid only after wait()",
    "subgroup": "an all_reduce inside dist.new_group: even ranks and odd ranks each reduce apart",
}
_SUFFIXES = ("_into_tensor", "_single", "_tensor")


def family(record: dict) -> str:
    if record.get("async_op"):
        return "async"
    if record.get("group") is not None:
        return "subgroup"
    op = str(record.get("op", "?"))
    for suffix in _SUFFIXES:
        if op.endswith(suffix) and op != suffix:
            op = op[: -len(suffix)]
    return op


def title(record: dict) -> str:
    parts = [str(record.get("op"))]
    if record.get("reduce_op"):
        parts.append(f"op={record['reduce_op']}")
    if record.get("root") is not None:
        parts.append(f"root {record['root']}")
    if record.get("async_op"):
        parts.append("async_op=True")
    return " · ".join(parts)


def views(results: list[dict]) -> list:
    records = _views.data_records(results, "collectives")
    if not records:
        return []
    checks = _views.check_of(results, "collectives")
    calls: dict[str, list[dict]] = {}           # in the order the calls first appear
    for r in records:
        calls.setdefault(str(r.get("call")), []).append(r)
    order = list(calls)
    families: dict[str, list[dict]] = {}
    for call in order:
        rows = calls[call]
        ranks = []
        for r in sorted(rows, key=lambda r: (r.get("replica", 0), r.get("rank", 0))):
            check = checks.get((call, r.get("rank")))
            ranks.append({"rank": r.get("rank"), "replica": r.get("replica"), "before": r.get("before"),
                          "after": r.get("after"), "group": r.get("group"),
                          "ok": None if check is None else bool(check.get("ok"))})
        head = rows[0]
        families.setdefault(family(head), []).append(_views.before_after(
            call, title(head), ranks, op=head.get("op"), root=head.get("root"),
            reduce_op=head.get("reduce_op"), async_op=bool(head.get("async_op"))))
    views = [_views.group(name, figures, FAMILIES.get(name, ""), view_id=f"family-{name}")
             for name, figures in families.items()]
    per_rank = len(records) / max(1, len({r.get("rank") for r in records}))
    note = (f"{len(order)} calls, {len(records)} data records ({per_rank:.0f} per rank); each tensor "
            "shows its first 16 values at most (shape and element count beside it). "
            "Before: what the rank passed in; after: what it held when the call returned "
            "(— where the call leaves nothing defined there). -1 fills a receive buffer before the "
            "call: no collective here produces it, so a block that never arrived shows.")
    return [Heading("Collectives: what every rank held before and after each call"),
            Text(note, id="collectives-note"), *views]


WORKLOAD = Workload("collectives", views=views, brief=False)
