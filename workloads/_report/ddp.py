"""The ddp workload's plugin: each rank's loss per step, the averaged loss against one
process on the whole batch, and whether the replicas agree (torch-free)."""
from __future__ import annotations

from workloads._protocol.plugin import Heading, Workload

from . import _views

RUNS = {"manual": "manual averaging (all_reduce SUM of every gradient, then / world size)",
        "ddp": "DistributedDataParallel (bucketed all_reduce during backward())"}


def views(results: list[dict]) -> list:
    records = [r for r in _views.data_records(results, "ddp") if r.get("op") == "train"]
    if not records:
        return []
    checks = _views.check_of(results, "ddp")
    views: list = [Heading("DDP: loss per step and replica agreement")]
    summary_rows = []
    for run, label in RUNS.items():
        mine = sorted((r for r in records if r.get("run") == run), key=lambda r: r.get("rank", 0))
        if not mine:
            continue
        every = mine[0].get("every") or 1
        series = [{"name": f"rank {r.get('rank')} (its slice)", "width": 1,
                   "points": [[i * every, v] for i, v in enumerate(r.get("local_loss") or [])]} for r in mine]
        series.append({"name": "mean over ranks", "width": 3,
                       "points": [[i * every, v] for i, v in enumerate(mine[0].get("mean_loss") or [])]})
        reference = next((r.get("reference_loss") for r in mine if r.get("reference_loss")), None)
        if reference:
            series.append({"name": "one process, whole batch", "width": 2, "dash": True,
                           "points": [[i * every, v] for i, v in enumerate(reference)]})
        views.append(_views.lines(f"ddp-loss-{run}", f"loss per step: {label}",
                                  {"label": "step", "log": False}, {"label": "MSE loss", "log": False},
                                  series, "Each rank trains on its own slice of every global batch; the mean "
                                          "of the slice losses is the global-batch loss."))
        rows = []
        for r in mine:
            same = checks.get((f"{run}-params-identical-on-all-ranks", r.get("rank")), {})
            single = checks.get((f"{run}-matches-single-process", r.get("rank")), {})
            values = (r.get("params") or {}).get("values") or []
            rows.append([r.get("rank"), f"{r.get('param_sum'):.9g}" if isinstance(r.get("param_sum"), float) else "",
                         ", ".join(f"{v:.6g}" for v in values[:6]) + (" ..." if len(values) > 6 else ""),
                         _yes(same.get("ok")), same.get("max_spread", r.get("max_spread")),
                         _yes(single.get("ok")), single.get("max_abs_diff")])
        views.append(_views.table(f"replica agreement: {run}", ["rank", "sum of parameters", "first parameters",
                                                                "identical on all ranks", "max spread",
                                                                "matches one process", "max abs diff"], rows,
                                  "After training, every rank must hold the same parameters (the elementwise "
                                  "MAX and MIN over ranks agree), equal to one process's on the whole batch.",
                                  view_id=f"ddp-replicas-{run}", level=3))
        final = checks.get((f"{run}-final-loss", mine[0].get("rank")), {})
        step = checks.get((f"{run}-step-time", mine[0].get("rank")), {})
        summary_rows.append([run, _num(final.get("value")), _num(step.get("value"), 6),
                             _yes(all(checks.get((f"{run}-params-identical-on-all-ranks", r.get("rank")), {}).get("ok")
                                      for r in mine)),
                             _yes(all(checks.get((f"{run}-matches-single-process", r.get("rank")), {}).get("ok")
                                      for r in mine))])
    if len(summary_rows) > 1:
        views.append(_views.table("manual averaging vs DDP", ["run", "final loss", "s per step",
                                                              "replicas agree", "matches one process"],
                                  summary_rows, "The same model, data and learning rate; only how the "
                                                "gradients are averaged differs.", view_id="ddp-compare", level=3))
    return views if len(views) > 1 else []


def _yes(ok) -> str:
    return "yes" if ok is True else "no" if ok is False else "?"


def _num(value, digits: int = 6) -> str:
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) else ""


WORKLOAD = Workload("ddp", views=views, brief=False)
