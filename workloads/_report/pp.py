"""The pp workload's plugin: pipeline schedules against one process, bytes vs the formula,
and the measured schedule: each stage's forwards and backwards as a Gantt chart, and the
bubble measured from them beside (p-1)/(m+p-1) (torch-free; the checks are in workloads/pp.py)."""
from __future__ import annotations

from dataclasses import dataclass

from workloads._protocol import DATA
from workloads._protocol.plugin import MD, Gantt, Table, Text

from . import _patterns

TOLERANCE_POINTS = 5.0              # the bar: measured within 5 points of the formula
SCHEDULE = "-schedule"


@dataclass(frozen=True)
class Bubble:
    """One step's bubble: each lane's idle share of the step's span, and their mean."""
    span: float
    idle: dict[int, float]           # lane -> idle / span

    @property
    def mean(self) -> float:
        return sum(self.idle.values()) / len(self.idle) if self.idle else 0.0


def bubble(lanes: dict[int, list[tuple[float, float]]]) -> Bubble:
    """The bubble of one step from each lane's busy [begin, end] intervals: the span is the
    first begin to the last end over every lane (the step as the pipeline sees it), a lane's
    idle time is the span less the union of its intervals. Pure, so it is tested by hand."""
    spans = [iv for ivs in lanes.values() for iv in ivs]
    if not spans:
        return Bubble(0.0, {})
    lo, hi = min(b for b, _ in spans), max(e for _, e in spans)
    span = hi - lo
    idle = {}
    for lane, ivs in lanes.items():
        busy, reach = 0.0, lo
        for b, e in sorted(ivs):
            b = max(b, reach)
            if e > b:
                busy, reach = busy + e - b, e
        idle[lane] = 1.0 - busy / span if span > 0 else 0.0
    return Bubble(span, idle)


def formula(p: int, m: int, v: int = 1) -> float:
    """GPipe's and 1F1B's bubble (p-1)/(m+p-1); interleaved over v stages a rank,
    (p-1)/(v m + p-1): the ramp up and down of p stages, over the step's slots."""
    return (p - 1) / (v * m + p - 1)


def schedules(results: list[dict]) -> dict[str, list[dict]]:
    """Each schedule's timing records (`<schedule>-schedule`), by rank, in the order printed."""
    out: dict[str, list[dict]] = {}
    for r in results:
        if r.get("workload") == "pp" and r.get("name") == DATA and str(r.get("call", "")).endswith(SCHEDULE):
            out.setdefault(r["call"][:-len(SCHEDULE)], []).append(r)
    return {k: sorted(v, key=lambda r: r.get("rank", 0)) for k, v in out.items()}


def _lanes(records: list[dict], step: int) -> dict[int, list[tuple[float, float]]]:
    return {r["rank"]: [(iv[4], iv[5]) for iv in r.get("intervals") or [] if iv[0] == step] for r in records}


def measured(records: list[dict]) -> tuple[float, list[float]]:
    """The mean bubble over the steps after the first (it learns the shapes), and each step's."""
    steps = sorted({iv[0] for r in records for iv in r.get("intervals") or []})
    per = [bubble(_lanes(records, s)).mean for s in steps]
    kept = per[1:] if len(per) > 1 else per
    return (sum(kept) / len(kept) if kept else 0.0), per


def _rows(found: dict[str, list[dict]]) -> list[list]:
    rows = []
    for name, records in found.items():
        first = records[0]
        p, m, v = first.get("ranks", len(records)), first.get("microbatches", 0), first.get("stages_per_rank", 1)
        mean, per = measured(records)
        theory = formula(p, m, v)
        text = f"(p-1)/(m+p-1) = {p - 1}/{m + p - 1}" if v == 1 else f"(p-1)/(v m+p-1), v = {v}: {p - 1}/{v * m + p - 1}"
        rows.append([name, p, m, f"{first.get('compute_ms', 0):g} / {2 * first.get('compute_ms', 0):g}",
                     f"{100 * mean:.1f} %", ", ".join(f"{100 * b:.1f}" for b in per), f"{text} = {100 * theory:.1f} %",
                     "yes" if abs(mean - theory) * 100 <= TOLERANCE_POINTS else "no"])
    return rows


def _gantt(name: str, records: list[dict]) -> tuple[Gantt, Table]:
    """The last step, a row per rank: its boxes in ms from the step's first begin."""
    step = max((iv[0] for r in records for iv in r.get("intervals") or []), default=0)
    mine = {r["rank"]: [iv for iv in r.get("intervals") or [] if iv[0] == step] for r in records}
    lo = min((iv[4] for ivs in mine.values() for iv in ivs), default=0)
    two = any(r.get("stages_per_rank", 1) > 1 for r in records)
    found = bubble({k: [(iv[4], iv[5]) for iv in ivs] for k, ivs in mine.items()})
    rows, table = [], []
    for rank, ivs in mine.items():
        ivs = sorted(ivs, key=lambda iv: iv[4])
        label = lambda iv: f"{iv[3]}{iv[2]}" + (f" s{iv[1]}" if two else "")   # noqa: E731
        stages = sorted({iv[1] for iv in ivs})
        rows.append({"label": f"rank {rank} (stage {', '.join(map(str, stages))})",
                     "boxes": [{"begin": round((iv[4] - lo) / 1000, 3), "end": round((iv[5] - lo) / 1000, 3),
                                "kind": iv[3], "label": label(iv)} for iv in ivs]})
        busy = sum(iv[5] - iv[4] for iv in ivs) / 1000
        table.append([rank, ", ".join(map(str, stages)), " ".join(label(iv) for iv in ivs), f"{busy:.1f}",
                      f"{100 * found.idle.get(rank, 0):.1f} %"])
    caption = (f"Step {step + 1}, a row per rank; F forward, B backward of microbatch k (s: the stage); the gaps are "
               f"the bubble: {100 * found.mean:.1f} % of the {found.span / 1000:.1f} ms span on average.")
    return (Gantt(f"pp-gantt-{name}", f"{name}: the measured schedule", rows,
                  {"F": "forward", "B": "backward"}, caption),
            Table(f"{name}: the measured schedule (step {step + 1})", ("rank", "stages", "in order", "busy ms",
                  "idle"), table, caption, id=f"pp-order-{name}", show=MD, level=3))


def _views(results: list[dict]) -> list:
    views = _patterns.section("pp", "PP: pipeline parallel", CAPTION)(results)
    found = schedules(results)
    if not views or not found:
        return views
    views += [Text("Each stage's work is a fixed sleep standing for its compute (compute_ms forward, twice that "
                   "backward), so the bubble measured is the schedule's, not the shared CPU's; the span is the "
                   "step's first forward to its last backward over every rank (one wall clock: one machine, or "
                   "clocks in sync), a rank's idle time the span less its boxes.", id="pp-bubble-about"),
              Table("pp: the measured bubble against the formula", ("schedule", "stages p", "microbatches m",
                    "F / B ms", "measured bubble", "per step %", "formula", f"within {TOLERANCE_POINTS:g} points"),
                    _rows(found), "The mean over the steps after the first (that one learns the shapes).",
                    id="pp-bubble", level=3)]
    for name, records in found.items():
        views += list(_gantt(name, records))
    return views


def _rule(options: dict, world: int) -> None:
    if options["microbatches"] < 1 or options["batch"] % options["microbatches"]:
        raise ValueError(f"workloads.pp.options.batch: expected a multiple of microbatches "
                         f"({options['microbatches']}), given {options['batch']}")
    if not 0 <= options.get("compute_ms", 0) <= 1000:
        raise ValueError(f"workloads.pp.options.compute_ms: expected 0 to 1000, given {options['compute_ms']}")


CAPTION = ("Each stage sends every microbatch's activation to the next stage and its input's gradient to the "
           "previous one: (stages sending forward + backward on the rank) x M x A per step, the first step's "
           "shape exchange left out. The end ranks send half what the middle ones do.")
WORKLOAD = _patterns.plugin("pp", "PP: pipeline parallel", CAPTION, {"schedule": ("gpipe", "1f1b", "interleaved")},
                            rule=_rule, views=_views)
