"""Bench results as nccl-tests-style tables (Markdown/JSON/CSV), PNG plots, and run comparison.

The `bench` workload records one result per (op, size) from rank 0, plus a
`bench_env` record (versions, world layout, threads) and `link` records
(raw TCP throughput between nodes). Everything here reads those records; the
bandwidth math itself lives in `workloads._benchmath` (the workload needs it
inside nodes, where labctl may not be installed) and is re-exported here.
matplotlib is imported only by `write_plots`.
"""
from __future__ import annotations

import csv as _csv
import io
import json
from pathlib import Path
from typing import Any, Iterable

from workloads import _costmodel as cm
from workloads._benchmath import (  # noqa: F401  (re-exported: the one definition)
    COLLECTIVES, OPS, P2P, algbw_GBps, busbw_factor, busbw_GBps, percentile, sizes, validate_sweep,
)

from labctl.atomicfile import atomic_open
from labctl.errors import LabError
from labctl.tables import table as _table

ROW_FIELDS = ("op", "size_bytes", "count", "dtype", "time_us_median", "time_us_p99",
              "algbw_GBps", "busbw_GBps", "wrong", "ok")
FACTOR_TEXT = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
               "all_to_all": "(n-1)/n", "broadcast": "1", "reduce": "1", "pingpong": "1", "ring": "1"}
TIME_TEXT = {"pingpong": "one-way time = round trip / 2", "ring": "one step: send right, receive left"}
_BOOKKEEPING = ("workload", "name", "rank", "ok")


def _bench(results: Iterable[dict]) -> list[dict]:
    return [r for r in results if r.get("workload") == "bench"]


def rows(results: Iterable[dict]) -> list[dict]:
    """One row per (op, size, dtype), from the lowest rank that recorded it, in op then size order."""
    best: dict[tuple, dict] = {}
    for r in _bench(results):
        if r.get("name") not in OPS or "size_bytes" not in r:
            continue
        key = (r["name"], r["size_bytes"], r.get("dtype"))
        if key not in best or r.get("rank", 0) < best[key].get("rank", 0):
            best[key] = r
    order = {op: i for i, op in enumerate(OPS)}
    out = [{"op": r["name"], **{f: r.get(f) for f in ROW_FIELDS[1:]}, "world_size": r.get("world_size"),
            "iters": r.get("iters")} for r in best.values()]
    return sorted(out, key=lambda r: (order[r["op"]], r["size_bytes"], str(r["dtype"])))


def environment(results: Iterable[dict]) -> dict[str, Any]:
    envs = sorted((r for r in _bench(results) if r.get("name") == "bench_env"),
                  key=lambda r: r.get("rank", 0))
    return {k: v for k, v in envs[0].items() if k not in _BOOKKEEPING} if envs else {}


def links(results: Iterable[dict]) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k not in ("workload", "name")}
                   for r in _bench(results) if r.get("name") == "link" and r.get("ok")),
                  key=lambda r: (r.get("dst_node", 0), r.get("dst_rank", 0)))


def link_GBps(results: Iterable[dict]) -> float | None:
    """The slowest measured link: what the busiest collective can at best carry."""
    speeds = [r["GBps"] for r in links(results) if r.get("GBps")]
    return min(speeds) if speeds else None


def _num(x: Any, digits: int = 2) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def markdown(results: list[dict]) -> str:
    env, link, data = environment(results), link_GBps(results), rows(results)
    parts = ["## Bench (nccl-tests style)", ""]
    if env:
        keys = [k for k in env if env[k] not in (None, "")]
        parts += [_table(["setting", "value"], ([k, json.dumps(env[k]) if isinstance(env[k], list)
                                                 else env[k]] for k in keys)), ""]
    measured = links(results)
    if measured:
        parts += ["### Link: raw TCP throughput (bytes sent / time until the receiver confirmed)", "",
                  _table(["from node", "to node (rank)", "address", "bytes", "seconds", "GB/s"],
                         ([m.get("src_node"), f"{m.get('dst_node')} ({m.get('dst_rank')})", m.get("address"),
                           m.get("bytes"), _num(m.get("seconds"), 3), _num(m.get("GBps"), 3)]
                          for m in measured)), ""]
    if not data:
        parts.append("No bench measurements recorded.")
        return "\n".join(parts) + "\n"
    n = data[0].get("world_size")
    model = link_model(results)
    parts.append(f"GB/s = 1e9 bytes/s · time = slowest rank per iteration, median and p99 · "
                 f"algbw = size / median time · busbw = algbw x factor (n = {n})"
                 + (f" · model = the busbw the α–β model of the algorithm expects from "
                    f"{model.text} (below)" if model else "")
                 + (f" · % link = busbw / slowest link ({link:.3f} GB/s)" if link else ""))
    for op in OPS:
        mine = [r for r in data if r["op"] == op]
        if not mine:
            continue
        note = f"; {TIME_TEXT[op]}" if op in TIME_TEXT else ""
        parts += ["", f"### {op} (busbw factor {FACTOR_TEXT[op]}{note})", ""]
        headers = ["size (B)", "count (elements)", "type", "time median (us)", "time p99 (us)",
                   "algbw (GB/s)", "busbw (GB/s)"] + (["model (GB/s)", "busbw / model"] if model else []) \
            + (["% link"] if link else []) + ["#wrong"]
        parts.append(_table(headers, (
            [r["size_bytes"], r["count"], r["dtype"], _num(r["time_us_median"], 1),
             _num(r["time_us_p99"], 1), _num(r["algbw_GBps"], 3), _num(r["busbw_GBps"], 3)]
            + (_model_cells(r, model) if model else [])
            + ([_num(100 * r["busbw_GBps"] / link, 1)] if link else [])
            + [r["wrong"]]
            for r in mine)))
    parts += ["", cost_model_section(results)]
    if not plots_possible():
        parts += ["", NO_PLOT]
    return "\n".join(parts) + "\n"


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
            }}


def csv(results: list[dict]) -> str:
    """The nccl-tests-style rows, one per (op, size), plus the slowest link for reference."""
    buf = io.StringIO()
    writer = _csv.writer(buf, lineterminator="\n")
    link = link_GBps(results)
    writer.writerow([*ROW_FIELDS, "world_size", "link_GBps"])
    for r in rows(results):
        writer.writerow([r[f] for f in ROW_FIELDS] + [r["world_size"], link])
    return buf.getvalue()


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
    from labctl import links as linkmod
    from labctl.spec import MAX_TOTAL_NODES

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
    return [_num(expected, 4) if expected else "", ratio]


def _fit_dict(f: cm.Fit, model: LinkModel | None) -> dict[str, Any]:
    return {"algorithm": f.algorithm.name, "steps": f.algorithm.steps_text, "factor": f.algorithm.factor_text,
            "n": f.n, "alpha_s": f.alpha_s, "bandwidth_Bps": f.bandwidth_Bps, "rms_error": f.rms_error,
            "max_error": f.max_error, "points": f.points,
            "bandwidth_over_link": round(f.bandwidth_Bps / model.bandwidth_Bps, 4) if model else None}


def cost_model_section(results: list[dict]) -> str:
    """α, B and the fit's error per op: what `labctl predict` scales to other world sizes."""
    fitted, model = fits(results), link_model(results)
    name = model_name(results)
    head = [f"### Cost model: t = steps(n) α + factor(n) S / B, {name} algorithms "
            "(workloads/_costmodel.py)", ""]
    if not fitted:
        return "\n".join(head + ["No op has two sizes or more: nothing to fit."])
    n = next(iter(fitted.values())).n
    lines = head + [
        f"Fitted per op on this sweep (n = {n}; least squares, weights 1/t). B / link: "
        "how much of the link the op's algorithm reaches"
        + (f" (link: {model.bandwidth_Bps / 1e9:.4f} GB/s, {model.source})" if model else "")
        + ". `labctl predict RUN --world-size N` scales these to other world sizes.", "",
        _table(["op", "algorithm", "steps(n)", "factor(n)", "α (us)", "B (GB/s)", "B / link",
                "fit error rms / max", "sizes"],
               ([op, f.algorithm.name, f.algorithm.steps_text, f.algorithm.factor_text,
                 _num(f.alpha_s * 1e6, 0), _num(f.bandwidth_Bps / 1e9, 4),
                 _num(f.bandwidth_Bps / model.bandwidth_Bps, 2) if model else "",
                 f"{100 * f.rms_error:.1f} % / {100 * f.max_error:.1f} %", f.points]
                for op, f in sorted(fitted.items(), key=lambda kv: OPS.index(kv[0]))))]
    return "\n".join(lines)


def predict(run, world_size: int, sizes_: list[int] | None = None, fmt: str = "md") -> str:
    """`labctl predict`: each op's time at `world_size` ranks from the run's fitted α and B."""
    results = run.results()
    fitted = fits(results)
    if not fitted:
        raise LabError(f"{run.path}: no bench op with two sizes or more to fit "
                       "(make some with: labctl up --workload bench)")
    out = []
    for op, f in sorted(fitted.items(), key=lambda kv: OPS.index(kv[0])):
        wanted = sizes_ or sorted({r["size_bytes"] for r in rows(results) if r["op"] == op})
        for size in wanted:
            p = f.at(world_size, size)
            out.append({"op": op, "algorithm": f.algorithm.name, "fitted_n": f.n, "n": world_size,
                        "size_bytes": size, "time_us": round(p.seconds * 1e6, 3),
                        "alpha_term_us": round(p.alpha_term_s * 1e6, 3),
                        "beta_term_us": round(p.beta_term_s * 1e6, 3), "dominant": p.dominant,
                        "busbw_GBps": round(p.busbw_Bps(busbw_factor(op, world_size)) / 1e9, 6),
                        "alpha_s": f.alpha_s, "bandwidth_Bps": f.bandwidth_Bps})
    if fmt == "json":
        return json.dumps({"run": str(run.path), "world_size": world_size, "rows": out}, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = _csv.DictWriter(buf, fieldnames=list(out[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(out)
        return buf.getvalue()
    n0 = out[0]["fitted_n"]
    head = (f"## Predicted at world size {world_size} (fitted at n = {n0}: {run.path})\n\n"
            f"t = steps(n) α + factor(n) S / B with each op's α and B fitted on the run, "
            f"{model_name(results)} algorithms (workloads/_costmodel.py); the term that is larger "
            "dominates.\n\n")
    return head + _table(
        ["op", "algorithm", "size (B)", "time (us)", "α term (us)", "β term (us)", "dominated by",
         "busbw (GB/s)"],
        ([r["op"], r["algorithm"], r["size_bytes"], _num(r["time_us"], 1), _num(r["alpha_term_us"], 1),
          _num(r["beta_term_us"], 1), r["dominant"], _num(r["busbw_GBps"], 4)] for r in out)) + "\n"


# ---- comparing two runs ----------------------------------------------------
def comparison(run_a, run_b) -> list[dict]:
    """Rows present in both runs, with B/A ratios of median time and busbw."""
    a, b = _rows_or_error(run_a), _rows_or_error(run_b)
    b_by = {(r["op"], r["size_bytes"], r["dtype"]): r for r in b}
    out = []
    for r in a:
        other = b_by.get((r["op"], r["size_bytes"], r["dtype"]))
        if other is None:
            continue
        out.append({
            "op": r["op"], "size_bytes": r["size_bytes"], "dtype": r["dtype"],
            "time_us_a": r["time_us_median"], "time_us_b": other["time_us_median"],
            "time_ratio": _ratio(other["time_us_median"], r["time_us_median"]),
            "busbw_GBps_a": r["busbw_GBps"], "busbw_GBps_b": other["busbw_GBps"],
            "busbw_ratio": _ratio(other["busbw_GBps"], r["busbw_GBps"]),
        })
    if not out:
        raise LabError(f"{run_a.path} and {run_b.path} share no (op, size, dtype): A has "
                       f"{_what(a)}, B has {_what(b)}; rerun one with the other's bench options")
    return out


def _rows_or_error(run) -> list[dict]:
    found = rows(run.results())
    if not found:
        raise LabError(f"{run.path}: no bench results to compare "
                       f"(make some with: labctl up --workload bench)")
    return found


def _what(data: list[dict]) -> str:
    ops = sorted({r["op"] for r in data})
    sizes_ = sorted({r["size_bytes"] for r in data})
    return f"{'/'.join(ops)} at {sizes_[0]}..{sizes_[-1]} B"


def _ratio(b: float | None, a: float | None) -> float | None:
    return round(b / a, 4) if a and b is not None else None


COMPARE_FIELDS = ("op", "size_bytes", "dtype", "time_us_a", "time_us_b", "time_ratio",
                  "busbw_GBps_a", "busbw_GBps_b", "busbw_ratio")


def compare(run_a, run_b, fmt: str = "md") -> str:
    data = comparison(run_a, run_b)
    if fmt == "json":
        return json.dumps({"a": str(run_a.path), "b": str(run_b.path), "rows": data}, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = _csv.DictWriter(buf, fieldnames=COMPARE_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(data)
        return buf.getvalue()
    head = (f"## Bench comparison: B / A\n\nA = {run_a.path} ({_layout(run_a)})  \n"
            f"B = {run_b.path} ({_layout(run_b)})\n\n"
            "time ratio < 1: B is faster; busbw ratio > 1: B moves more data per second.\n\n")
    return head + _table(
        ["op", "size (B)", "type", "time A (us)", "time B (us)", "time B/A",
         "busbw A (GB/s)", "busbw B (GB/s)", "busbw B/A"],
        ([r["op"], r["size_bytes"], r["dtype"], _num(r["time_us_a"], 1), _num(r["time_us_b"], 1),
          _num(r["time_ratio"], 3), _num(r["busbw_GBps_a"], 3), _num(r["busbw_GBps_b"], 3),
          _num(r["busbw_ratio"], 3)] for r in data)) + "\n"


def _layout(run) -> str:
    m = run.record
    return f"{m.backend}, {m.dist_backend}, {m.nodes} node(s) x {m.nproc_per_node} process(es)"


# ---- plots -----------------------------------------------------------------
PLOTS = ("bench_busbw.png", "bench_latency.png")


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


def write_files(run) -> list[Path]:
    """The plots, when the run has bench rows; a missing matplotlib is a note, not an error."""
    return write_plots(run)


def write_plots(run) -> list[Path]:
    """busbw and median time vs size (log-2 x axis), one line per op, into the run folder."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise LabError(NO_PLOT) from None
    results = run.results()
    data, link = rows(results), link_GBps(results)
    if not data:
        return []
    n = data[0].get("world_size")
    written = []
    for name, field, label, log_y in (
            (PLOTS[0], "busbw_GBps", "busbw (GB/s)", False),
            (PLOTS[1], "time_us_median", "time, median (us)", True)):
        fig = Figure(figsize=(8, 5), dpi=100)
        ax = fig.subplots()
        for op in OPS:
            mine = [r for r in data if r["op"] == op and r.get(field) is not None]
            if mine:
                ax.plot([r["size_bytes"] for r in mine], [r[field] for r in mine], marker="o", label=op)
        if field == "busbw_GBps" and link:
            ax.axhline(link, linestyle="--", color="grey", label=f"TCP link {link:.2f} GB/s")
        ax.set_xscale("log", base=2)
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(label)
        ax.set_title(f"{run.record.lab}: {label} vs size ({_layout(run)}, n = {n})",
                     fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        target = Path(run.path) / name
        with atomic_open(target, "wb") as f:     # a signal mid-write leaves no half picture
            fig.savefig(f, format="png")
        written.append(target)
    return written


# ---- the run's page ----------------------------------------------------------
def page(results: list[dict]) -> list[dict]:
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
                     ceiling={"y": link, "label": f"slowest link {link:.3f} GB/s"} if link else None),
        _views.lines("bench-latency", "median time against size", {"label": "size (bytes)", "log": True},
                     {"label": "time, median of the slowest rank (µs)", "log": True}, series("time_us_median")),
    ]
    measured = links(results)
    if measured:
        views.append(_views.table("links: raw TCP throughput", ["from node", "to node (rank)", "address",
                                                               "bytes", "seconds", "GB/s"],
                                  ([m.get("src_node"), f"{m.get('dst_node')} ({m.get('dst_rank')})",
                                    m.get("address"), m.get("bytes"), _num(m.get("seconds"), 3),
                                    _num(m.get("GBps"), 3)] for m in measured), view_id="bench-links"))
    views.append(_views.table("measurements", ["op", "size (B)", "count", "type", "time median (µs)",
                                               "time p99 (µs)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"],
                              ([r["op"], r["size_bytes"], r["count"], r["dtype"], _num(r["time_us_median"], 1),
                                _num(r["time_us_p99"], 1), _num(r["algbw_GBps"], 3), _num(r["busbw_GBps"], 3),
                                r["wrong"]] for r in data), view_id="bench-rows"))
    return views
