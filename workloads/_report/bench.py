"""The bench workload's plugin: its results as nccl-tests-style views (tables, charts),
JSON and CSV rows, and the α–β cost model's fit beside them.

The `bench` workload records one result per (op, size) from rank 0, plus a
`bench_env` record (versions, world layout, threads) and `link` records
(raw TCP throughput between nodes). Everything here reads those records; the
bandwidth math itself lives in `workloads._benchmath` (the workload needs it
inside nodes) and is re-exported here. What the host does with a run (no I/O here):
`labctl predict` (labctl/reports/benchpredict.py), `labctl compare`
(benchcompare.py), the nccl-tests JSON files and the plots (benchfiles.py).
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from workloads import _costmodel as cm
from workloads._benchmath import (  # noqa: F401  (re-exported: the one definition)
    COLLECTIVES, OPS, P2P, algbw_GBps, busbw_factor, busbw_GBps, percentile, same_lab_spread, sizes,
    validate_sweep,
)

from workloads._protocol import links as linkmod
from workloads._protocol.plugin import MD, PAGE, Csv, Heading, Table, Text, Workload
from workloads._protocol.results import MAX_TOTAL_NODES

ROW_FIELDS = ("op", "size_bytes", "count", "dtype", "time_us_median", "time_us_p99",
              "algbw_GBps", "busbw_GBps", "wrong", "ok")
FACTOR_TEXT = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
               "all_to_all": "(n-1)/n", "broadcast": "1", "reduce": "1", "pingpong": "1", "ring": "1"}
TIME_TEXT = {"pingpong": "one-way time = round trip / 2", "ring": "one step: send right, receive left"}
_BOOKKEEPING = ("workload", "name", "rank", "ok")


def bench_records(results: Iterable[dict]) -> list[dict]:
    """The bench's own records (labctl/reports/benchfiles.py reads the raw ones too)."""
    return [r for r in results if r.get("workload") == "bench"]


def measured_rows(results: Iterable[dict]) -> dict[tuple, dict]:
    """(op, size, dtype) -> its record from the lowest rank that recorded it (with its
    iterations' `times_us`, which `labctl compare` reads)."""
    best: dict[tuple, dict] = {}
    for r in bench_records(results):
        if r.get("name") not in OPS or "size_bytes" not in r:
            continue
        key = (r["name"], r["size_bytes"], r.get("dtype"))
        if key not in best or r.get("rank", 0) < best[key].get("rank", 0):
            best[key] = r
    return best


def rows(results: Iterable[dict]) -> list[dict]:
    """One row per (op, size, dtype), from the lowest rank that recorded it, in op then size order."""
    best = measured_rows(results)
    order = {op: i for i, op in enumerate(OPS)}
    out = [{"op": r["name"], **{f: r.get(f) for f in ROW_FIELDS[1:]}, "world_size": r.get("world_size"),
            "iters": r.get("iters")} for r in best.values()]
    return sorted(out, key=lambda r: (order[r["op"]], r["size_bytes"], str(r["dtype"])))


def environment(results: Iterable[dict]) -> dict[str, Any]:
    envs = sorted((r for r in bench_records(results) if r.get("name") == "bench_env"),
                  key=lambda r: r.get("rank", 0))
    return {k: v for k, v in envs[0].items() if k not in _BOOKKEEPING} if envs else {}


def links(results: Iterable[dict]) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k not in ("workload", "name")}
                   for r in bench_records(results) if r.get("name") == "link" and r.get("ok")),
                  key=lambda r: (r.get("dst_node", 0), r.get("dst_rank", 0)))


def link_GBps(results: Iterable[dict]) -> float | None:
    """The slowest measured link: what the busiest collective can at best carry."""
    speeds = [r["GBps"] for r in links(results) if r.get("GBps")]
    return min(speeds) if speeds else None


def fixed(x: Any, digits: int = 2) -> str:
    """A number as the tables show it (`digits` after the point; empty for none)."""
    return "" if x is None else f"{x:.{digits}f}"


def markdown_views(results: list[dict]) -> list:
    """report.md's part of the section: the settings, the link, a table per op with the
    model beside each row, the cost model's fit."""
    env, link, data = environment(results), link_GBps(results), rows(results)
    views: list = [Heading("Bench (nccl-tests style)")]
    if env:
        keys = [k for k in env if env[k] not in (None, "") and k != "ranks"]      # ranks: in the JSON
        views.append(Table("settings", ["setting", "value"], [[k, json.dumps(env[k]) if isinstance(env[k], list)
                                                                else env[k]] for k in keys],
                           id="bench-settings", show=MD))
    measured = links(results)
    if measured:
        views.append(Table("Link: raw TCP throughput (bytes sent / time until the receiver confirmed)",
                           ["from node", "to node (rank)", "address", "bytes", "seconds", "GB/s"],
                           [[m.get("src_node"), f"{m.get('dst_node')} ({m.get('dst_rank')})", m.get("address"),
                             m.get("bytes"), fixed(m.get("seconds"), 3), fixed(m.get("GBps"), 3)]
                            for m in measured], show=MD, level=3))
    if not data:
        views.append(Text("No bench measurements recorded.", show=MD))
        return views
    n = data[0].get("world_size")
    model = link_model(results)
    views.append(Text(f"GB/s = 1e9 bytes/s · time = slowest rank per iteration, median and p99 · "
                      f"algbw = size / median time · busbw = algbw x factor (n = {n})"
                      + (f" · model = the busbw the α–β model of the algorithm expects from "
                         f"{model.text} (below)" if model else "")
                      + (f" · % link = busbw / slowest link ({link:.3f} GB/s)" if link else ""), show=MD))
    if env.get("traced"):
        views.append(Text(TRACED_NOTE, show=MD))
    for op in OPS:
        mine = [r for r in data if r["op"] == op]
        if not mine:
            continue
        note = f"; {TIME_TEXT[op]}" if op in TIME_TEXT else ""
        headers = ["size (B)", "count (elements)", "type", "time median (us)", "time p99 (us)",
                   "algbw (GB/s)", "busbw (GB/s)"] + (["model (GB/s)", "busbw / model"] if model else []) \
            + (["% link"] if link else []) + ["#wrong"]
        views.append(Table(f"{op} (busbw factor {FACTOR_TEXT[op]}{note})", headers, [
            [r["size_bytes"], r["count"], r["dtype"], fixed(r["time_us_median"], 1),
             fixed(r["time_us_p99"], 1), fixed(r["algbw_GBps"], 3), fixed(r["busbw_GBps"], 3)]
            + (_model_cells(r, model) if model else [])
            + ([fixed(100 * r["busbw_GBps"] / link, 1)] if link else [])
            + [r["wrong"]]
            for r in mine], show=MD, level=3))
    views += cost_model_views(results)
    if not plots_possible():
        views.append(Text(NO_PLOT, show=MD))
    return views


TRACED_NOTE = ("Traced (the default): the recorder is in every timed call, which on a 2-core machine "
               "adds 10-30 % to the times of ops of 16 KiB and less (docs/bench.md); run with "
               "--no-trace to measure small-message latency.")


def views(results: list[dict]) -> list:
    """The section: report.md's tables, then the page's charts and tables."""
    return [*markdown_views(results), *page_views(results)]


# Plots are an extra (matplotlib pulls in numpy): a bare `pip install .` says so here.
NO_PLOT = ("No plot: matplotlib is not installed (plots are optional); "
           "add it with `pip install 'labctl[plot]'`.")


def plots_possible() -> bool:
    """matplotlib can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def as_json(results: list[dict]) -> dict[str, Any]:
    model = link_model(results)
    measured = link_model(results, use_configured=False)
    data = rows(results)
    for r in data:
        for key, m in (("model", model), ("measured_link_model", measured)):
            expected = m.busbw_GBps(r) if m else None
            r[f"{key}_busbw_GBps"] = round(expected, 6) if expected else None
        r["busbw_over_model"] = (round(r["busbw_GBps"] / r["model_busbw_GBps"], 4)
                                 if r.get("model_busbw_GBps") and r.get("busbw_GBps") is not None else None)
    fitted = fits(results)
    return {"environment": environment(results), "links": links(results),
            "link_GBps": link_GBps(results), "rows": data,
            "model": {
                "algorithms": model_name(results),
                "link": model.as_dict() if model else None,
                "measured_link": measured.as_dict() if measured else None,
                "configured_link_Bps": configured_Bps(results),
                "fits": {op: _fit_dict(f, model) for op, f in fitted.items()},
                "not_fitted": cm.unfitted(data, algorithms(results)),
            }}


def table(results: list[dict]) -> Csv:
    """The nccl-tests-style rows, one per (op, size), plus the slowest link for reference."""
    link = link_GBps(results)
    return Csv([*ROW_FIELDS, "world_size", "link_GBps"],
               [[r[f] for f in ROW_FIELDS] + [r["world_size"], link] for r in rows(results)])


# ---- the α–β cost model (workloads/_costmodel.py) ---------------------------------
def model_name(results: list[dict]) -> str:
    """Which algorithms the run's ops are modelled with: gloo's (measured) or nccl-tests'."""
    return "gloo" if environment(results).get("dist_backend") == "gloo" else "nccl"


def algorithms(results: list[dict]) -> dict[str, cm.Algorithm]:
    return cm.MODELS[model_name(results)]


def fits(results: list[dict]) -> dict[str, cm.Fit]:
    """α and B per op, fitted on this run's sweep (at its world size)."""
    return cm.fits(rows(results), algorithms(results))


def configured_Bps(results: list[dict]) -> float | None:
    """The slowest node-to-node rate the lab's `links:` configured (bytes/s), or None: every
    collective of the sweep crosses every node's link, so the slowest one bounds it (a
    pingpong crosses only its own pair's)."""
    env = environment(results)
    raw, nodes = env.get("links"), env.get("nodes")
    if not raw or not isinstance(nodes, int) or not 0 < nodes <= MAX_TOTAL_NODES:
        return None     # a record's node count is looped over twice: a lab's at most
    try:     # node keys count over replicas: any node of the largest lab is one
        configured = linkmod.parse(json.loads(raw), MAX_TOTAL_NODES)
    except (ValueError, TypeError):
        return None
    rates = [configured.path(a, b).rate_bps for a in range(int(nodes)) for b in range(int(nodes)) if a != b]
    known = [r for r in rates if r]
    return min(known) / 8 if known else None


class LinkModel:
    """α and B of the link a run's collectives cross, and the busbw the model expects."""

    def __init__(self, alpha_s: float, bandwidth_Bps: float, source: str, alpha_source: str, n: int,
                 model: dict[str, cm.Algorithm]):
        self.alpha_s, self.bandwidth_Bps, self.source, self.alpha_source, self.n, self.model = \
            alpha_s, bandwidth_Bps, source, alpha_source, n, model

    @property
    def text(self) -> str:
        return (f"B = {self.bandwidth_Bps / 1e9:.4f} GB/s ({self.source}) and "
                f"α = {self.alpha_s * 1e6:.0f} us ({self.alpha_source})")

    def busbw_GBps(self, row: dict) -> float | None:
        algo = self.model.get(row["op"])
        if algo is None or not row.get("size_bytes"):
            return None
        n = row.get("world_size") or self.n
        p = cm.predict(algo, self.alpha_s, self.bandwidth_Bps, n, row["size_bytes"])
        return p.busbw_Bps(busbw_factor(row["op"], n)) / 1e9

    def as_dict(self) -> dict[str, Any]:
        return {"alpha_s": self.alpha_s, "bandwidth_Bps": self.bandwidth_Bps, "source": self.source,
                "alpha_source": self.alpha_source}


def link_model(results: list[dict], use_configured: bool = True) -> LinkModel | None:
    """The link the model reads: B = the configured rate (the lab's `links:`), else the
    slowest raw TCP link measured; α = the pingpong fit's (one message, one way), else 0.
    None when the run has neither a configured nor a measured link. The model takes every
    link to be that one: where only some nodes are slow, an op whose busiest link is a
    fast one beats it (gloo's broadcast from an unshaped root; docs/network.md)."""
    data = rows(results)
    if not data:
        return None
    n = data[0].get("world_size") or 2
    configured = configured_Bps(results) if use_configured else None
    link = link_GBps(results)
    if configured:
        bandwidth, source = configured, f"the configured {configured * 8 / 1e6:g} Mbit/s"
    elif link:
        bandwidth, source = link * 1e9, "the slowest TCP link measured"
    else:
        return None
    pingpong = fits(results).get("pingpong")
    alpha = pingpong.alpha_s if pingpong else 0.0
    alpha_source = "the pingpong's fit" if pingpong else "no pingpong in the sweep"
    return LinkModel(alpha, bandwidth, source, alpha_source, n, algorithms(results))


def _model_cells(row: dict, model: LinkModel) -> list[str]:
    expected = model.busbw_GBps(row)
    ratio = f"{row['busbw_GBps'] / expected:.2f}" if expected and row.get("busbw_GBps") is not None else ""
    return [fixed(expected, 4) if expected else "", ratio]


def _fit_dict(f: cm.Fit, model: LinkModel | None) -> dict[str, Any]:
    return {"algorithm": f.algorithm.name, "steps": f.algorithm.steps_text, "factor": f.algorithm.factor_text,
            "n": f.n, "alpha_s": f.alpha_s, "bandwidth_Bps": f.bandwidth_Bps, "rms_error": f.rms_error,
            "max_error": f.max_error, "points": f.points,
            "bandwidth_over_link": round(f.bandwidth_Bps / model.bandwidth_Bps, 4) if model else None}


def cost_model_views(results: list[dict]) -> list:
    """α, B and the fit's error per op, for report.md (the closed form; `labctl predict`
    replays instead)."""
    fitted, model = fits(results), link_model(results)
    title = (f"Cost model: t = steps(n) α + factor(n) S / B, {model_name(results)} algorithms "
             "(workloads/_costmodel.py)")
    left = cm.unfitted(rows(results), algorithms(results))
    dropped = [Text("Not fitted: " + "; ".join(f"**{op}**: {why}" for op, why in left.items()) + ".",
                    show=MD)] if left else []
    if not fitted:
        return [Heading(title, 3), Text("No op could be fitted.", show=MD), *dropped]
    n = next(iter(fitted.values())).n
    caption = (f"Fitted per op on this sweep (n = {n}; least squares, weights 1/t). B / link: "
               "how much of the link the op's algorithm reaches"
               + (f" (link: {model.bandwidth_Bps / 1e9:.4f} GB/s, {model.source})" if model else "")
               + ". `labctl predict RUN --world-size N` replays each op's own messages over the links instead.")
    return [Table(title, ["op", "algorithm", "steps(n)", "factor(n)", "α (us)", "B (GB/s)", "B / link",
                          "fit error rms / max", "sizes"],
                  [[op, f.algorithm.name, f.algorithm.steps_text, f.algorithm.factor_text,
                    fixed(f.alpha_s * 1e6, 0), fixed(f.bandwidth_Bps / 1e9, 4),
                    fixed(f.bandwidth_Bps / model.bandwidth_Bps, 2) if model else "",
                    f"{100 * f.rms_error:.1f} % / {100 * f.max_error:.1f} %", f.points]
                   for op, f in sorted(fitted.items(), key=lambda kv: OPS.index(kv[0]))],
                  caption, show=MD, level=3), *dropped]


def check_options(options: dict, defaults: dict) -> None:
    """Unknown ops and impossible sweeps fail when the lab is loaded, not inside it."""
    ops = options.get("ops")
    for op in ([ops] if isinstance(ops, str) else ops or []):
        if op not in OPS:
            raise ValueError(f"ops: expected operations from: {', '.join(OPS)}, given {op!r}")
    merged = {**defaults, **options}
    try:
        validate_sweep(merged["min_bytes"], merged["max_bytes"], merged["factor"],
                       merged["iters"], merged["warmup_iters"])
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix("bench: ")) from None


# ---- the run's page ----------------------------------------------------------
def page_views(results: list[dict]) -> list:
    """busbw and median time against size, one line per op, the slowest measured link as
    the busbw ceiling: drawn by the page itself (SVG), so a bare install has the pictures."""
    from . import _views

    data = rows(results)
    if not data:
        return []
    link = link_GBps(results)
    ops = [op for op in OPS if any(r["op"] == op for r in data)]

    def series(field: str) -> list[dict]:
        return [{"name": op, "width": 2,
                 "points": [[r["size_bytes"], r[field]] for r in data if r["op"] == op and r.get(field)]}
                for op in ops]

    n = data[0].get("world_size")
    views = [
        _views.lines("bench-busbw", f"busbw against size (n = {n})", {"label": "size (bytes)", "log": True},
                     {"label": "busbw (GB/s)", "log": True}, series("busbw_GBps"),
                     "busbw = algbw x the op's factor (nccl-tests): comparable across ops and world sizes"
                     + ("; the line on top is the slowest link measured (raw TCP)" if link else
                        "; no link was measured (bench option link: true measures it)"),
                     ceiling={"y": link, "label": f"slowest link {link:.3f} GB/s"} if link else None,
                     show=PAGE),
        _views.lines("bench-latency", "median time against size", {"label": "size (bytes)", "log": True},
                     {"label": "time, median of the slowest rank (µs)", "log": True}, series("time_us_median"),
                     show=PAGE),
    ]
    measured = links(results)
    if measured:
        views.append(_views.table("links: raw TCP throughput", ["from node", "to node (rank)", "address",
                                                               "bytes", "seconds", "GB/s"],
                                  ([m.get("src_node"), f"{m.get('dst_node')} ({m.get('dst_rank')})",
                                    m.get("address"), m.get("bytes"), fixed(m.get("seconds"), 3),
                                    fixed(m.get("GBps"), 3)] for m in measured), view_id="bench-links", show=PAGE))
    views.append(_views.table("measurements", ["op", "size (B)", "count", "type", "time median (µs)",
                                               "time p99 (µs)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"],
                              ([r["op"], r["size_bytes"], r["count"], r["dtype"], fixed(r["time_us_median"], 1),
                                fixed(r["time_us_p99"], 1), fixed(r["algbw_GBps"], 3), fixed(r["busbw_GBps"], 3),
                                r["wrong"]] for r in data), view_id="bench-rows", show=PAGE))
    return views


WORKLOAD = Workload("bench", views=views, data=as_json, csv=table, check_options=check_options, host="bench")
