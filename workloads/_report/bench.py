"""Bench results as nccl-tests-style tables (Markdown/JSON/CSV), PNG plots, and run comparison.

The `bench` workload records one result per (op, size) from rank 0, plus a
`bench_env` record (versions, world layout, threads) and `link` records
(raw TCP throughput between nodes). Everything here reads those records; the
bandwidth math itself lives in `workloads._benchmath` (the workload needs it
inside nodes, where labctl may not be installed) and is re-exported here.
matplotlib is imported only by `write_plots`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from workloads import _costmodel as cm
from workloads._benchmath import (  # noqa: F401  (re-exported: the one definition)
    COLLECTIVES, OPS, P2P, algbw_GBps, busbw_factor, busbw_GBps, percentile, same_lab_spread, sizes,
    validate_sweep,
)

from labctl.atomicfile import atomic_open
from labctl.errors import LabError, Refused
from labctl.draw import csv as _draw_csv, markdown as _draw
from labctl.tables import table as _table
from workloads._protocol.plugin import MD, PAGE, Csv, Heading, InputError, Table, Text, Workload, csv_text

ROW_FIELDS = ("op", "size_bytes", "count", "dtype", "time_us_median", "time_us_p99",
              "algbw_GBps", "busbw_GBps", "wrong", "ok")
FACTOR_TEXT = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
               "all_to_all": "(n-1)/n", "broadcast": "1", "reduce": "1", "pingpong": "1", "ring": "1"}
TIME_TEXT = {"pingpong": "one-way time = round trip / 2", "ring": "one step: send right, receive left"}
_BOOKKEEPING = ("workload", "name", "rank", "ok")


def _bench(results: Iterable[dict]) -> list[dict]:
    return [r for r in results if r.get("workload") == "bench"]


def _measured(results: Iterable[dict]) -> dict[tuple, dict]:
    """(op, size, dtype) -> its record from the lowest rank that recorded it."""
    best: dict[tuple, dict] = {}
    for r in _bench(results):
        if r.get("name") not in OPS or "size_bytes" not in r:
            continue
        key = (r["name"], r["size_bytes"], r.get("dtype"))
        if key not in best or r.get("rank", 0) < best[key].get("rank", 0):
            best[key] = r
    return best


def rows(results: Iterable[dict]) -> list[dict]:
    """One row per (op, size, dtype), from the lowest rank that recorded it, in op then size order."""
    best = _measured(results)
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
                             m.get("bytes"), _num(m.get("seconds"), 3), _num(m.get("GBps"), 3)]
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
            [r["size_bytes"], r["count"], r["dtype"], _num(r["time_us_median"], 1),
             _num(r["time_us_p99"], 1), _num(r["algbw_GBps"], 3), _num(r["busbw_GBps"], 3)]
            + (_model_cells(r, model) if model else [])
            + ([_num(100 * r["busbw_GBps"] / link, 1)] if link else [])
            + [r["wrong"]]
            for r in mine], show=MD, level=3))
    views.append(Text(cost_model_section(results), show=MD))
    if not plots_possible():
        views.append(Text(NO_PLOT, show=MD))
    return views


TRACED_NOTE = ("Traced (the default): the recorder is in every timed call, which on a 2-core machine "
               "adds 10-30 % to the times of ops of 16 KiB and less (docs/bench.md); run with "
               "--no-trace to measure small-message latency.")


def views(results: list[dict]) -> list:
    """The section: report.md's tables, then the page's charts and tables."""
    return [*markdown_views(results), *page_views(results)]


def markdown(results: list[dict]) -> str:
    return _draw(markdown_views(results)) + "\n"


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


def csv(results: list[dict]) -> str:
    return _draw_csv(table(results))


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
    from labctl.record import MAX_TOTAL_NODES

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
    """α, B and the fit's error per op (the closed form; `labctl predict` replays instead)."""
    fitted, model = fits(results), link_model(results)
    name = model_name(results)
    head = [f"### Cost model: t = steps(n) α + factor(n) S / B, {name} algorithms "
            "(workloads/_costmodel.py)", ""]
    left = cm.unfitted(rows(results), algorithms(results))
    dropped = ["", "Not fitted: " + "; ".join(f"**{op}**: {why}" for op, why in left.items()) + "."] if left else []
    if not fitted:
        return "\n".join(head + ["No op could be fitted."] + dropped)
    n = next(iter(fitted.values())).n
    lines = head + [
        f"Fitted per op on this sweep (n = {n}; least squares, weights 1/t). B / link: "
        "how much of the link the op's algorithm reaches"
        + (f" (link: {model.bandwidth_Bps / 1e9:.4f} GB/s, {model.source})" if model else "")
        + ". `labctl predict RUN --world-size N` replays each op's own messages over the links instead.", "",
        _table(["op", "algorithm", "steps(n)", "factor(n)", "α (us)", "B (GB/s)", "B / link",
                "fit error rms / max", "sizes"],
               ([op, f.algorithm.name, f.algorithm.steps_text, f.algorithm.factor_text,
                 _num(f.alpha_s * 1e6, 0), _num(f.bandwidth_Bps / 1e9, 4),
                 _num(f.bandwidth_Bps / model.bandwidth_Bps, 2) if model else "",
                 f"{100 * f.rms_error:.1f} % / {100 * f.max_error:.1f} %", f.points]
                for op, f in sorted(fitted.items(), key=lambda kv: OPS.index(kv[0]))))] + dropped
    return "\n".join(lines)


# ---- `labctl predict`: each op's own messages replayed over the links ------------------
ITEMSIZE = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
            "int32": 4, "int": 4, "int64": 8, "int8": 1, "uint8": 1}
# What α and the links' efficiency are fitted on: the pingpong (one message each way, one
# pair: the cleanest measure of a message's cost and a link's rate), else every op.
CALIBRATE_ON = ("pingpong",)
REPLAY_MAX_RANKS = 64           # above: the closed form (gloo's ring all-reduce of 64 ranks: 16k messages, ~1 s)
# a call of more messages is not replayed, the closed form stands in (a message built and replayed
# costs about 45 µs here: gloo's ring all_reduce of 1 GiB at 64 ranks is 129,024 messages, 6 s)
REPLAY_MAX_MESSAGES = 50_000
SLOW_PAIR = 0.8                 # a measured pair below this x its nodes' rate is a pair cap of its own


def _pairs_measured(results: list[dict]) -> dict[tuple[int, int], float]:
    """The links workload's pair matrix in the same run: (src node, dst node) -> bytes/s."""
    return {(r["src_node"], r["dst_node"]): float(r["p2p_Bps"]) for r in results
            if r.get("workload") == "links" and r.get("name") == "pair" and r.get("p2p_Bps")}


def _links_data(raw: Any) -> dict[str, Any]:
    """A lab's `links:` value as {default, nodes, pairs} (keys as the file writes them)."""
    if raw is None or raw == {}:
        return {}
    if not isinstance(raw, dict):
        return {"default": raw}
    return {k: v for k, v in raw.items() if v is not None}


def links_for(results: list[dict], overrides: dict | None = None, nodes: int | None = None):
    """The run's `links:` with `--link` overrides on top (each replaces the run's rule of
    the same scope: the default, a node, a pair), parsed for a lab of `nodes` nodes; None
    when neither says anything."""
    from labctl import links as linkmod
    from labctl.record import MAX_TOTAL_NODES

    env = environment(results)
    try:
        data = _links_data(json.loads(env["links"])) if env.get("links") else {}
    except (ValueError, TypeError):
        data = {}
    if overrides:
        if "default" in overrides:
            data["default"] = overrides["default"]
        for section in ("nodes", "pairs"):
            if overrides.get(section):
                mine = {str(k): v for k, v in (data.get(section) or {}).items()}
                data[section] = {**mine, **{str(k): v for k, v in overrides[section].items()}}
    if not data:
        return None
    if overrides:
        try:
            linkmod.parse(overrides, nodes or MAX_TOTAL_NODES)
        except ValueError as exc:
            raise InputError(f"--link: {exc}") from None
    try:      # the run's own rules name nodes of the run; a smaller prediction leaves them out
        return linkmod.parse(data, MAX_TOTAL_NODES)
    except ValueError as exc:
        if overrides:
            raise InputError(f"--link: {exc}") from None
        return None


def replay_network(results: list[dict], nodes: int, ranks_per_node: int, overrides: dict | None = None):
    """The links the replay plays over, at their nominal rates (the fit scales them): a
    node's cable from the lab's `links:` (with --link overrides), else from the pair matrix
    the run measured (the links workload), else the slowest TCP link the bench measured;
    pair rules, and measured pairs well below their nodes' rate, as pair caps; the
    configured latencies. Returns (network, what it was made of)."""
    import math

    from workloads._protocol.replay import Network

    links = links_for(results, overrides, nodes)
    matrix = _pairs_measured(results)
    tcp = link_GBps(results)
    fallback = tcp * 1e9 if tcp else math.inf
    said = []
    egress, ingress = [], []
    for i in range(nodes):
        rate = links.node(i).rate_bps if links else None
        if rate:
            egress.append(rate / 8)
            ingress.append(rate / 8)
            continue
        out = [v for (a, b), v in matrix.items() if a == i]
        into = [v for (a, b), v in matrix.items() if b == i]
        egress.append(max(out) if out else fallback)
        ingress.append(max(into) if into else fallback)
    pair: dict[tuple[int, int], float] = {}
    latency: dict[tuple[int, int], float] = {}
    for a in range(nodes):
        for b in range(nodes):
            if a == b or links is None:
                continue
            rule = links.pair(a, b).rate_bps
            if rule:
                pair[(a, b)] = rule / 8
            delay = links.path(a, b).latency_us
            if delay:
                latency[(a, b)] = delay * 1e-6
    if matrix:
        nominal = {k: min(egress[k[0]], ingress[k[1]], pair.get(k, math.inf)) for k in matrix
                   if max(k) < nodes}
        ratios = sorted(matrix[k] / v for k, v in nominal.items() if math.isfinite(v) and v > 0)
        typical = ratios[len(ratios) // 2] if ratios else 1.0
        slow = {k: matrix[k] / typical for k, v in nominal.items()
                if math.isfinite(v) and matrix[k] < SLOW_PAIR * typical * v}
        pair.update(slow)
        said.append(f"the pair matrix measured ({len(matrix)} directions"
                    + (f"; slow: {', '.join(f'{a}->{b}' for a, b in sorted(slow))}" if slow else "") + ")")
    if links is not None and links.has_rate:
        said.insert(0, "links: " + "; ".join(links.describe(nodes)) + (" (with --link)" if overrides else ""))
    elif tcp and not matrix:
        said.append(f"the slowest TCP link measured ({tcp:.4f} GB/s)")
    if not any(math.isfinite(x) for x in egress + ingress + list(pair.values())):
        raise Refused("no link rate to replay over: the run's links are unshaped and it measured none "
                       "(shape them with --link RATE, or keep the bench's link test: option link: true)")
    return Network(nodes, tuple(egress), tuple(ingress), pair, latency, ranks_per_node), "; ".join(said)


def _layout_of(results: list[dict]) -> tuple[int, int]:
    """(world size, ranks per node) of the run's sweep."""
    env, data = environment(results), rows(results)
    world = int(data[0].get("world_size") or env.get("world_size") or 2) if data else int(env.get("world_size") or 2)
    nproc = int(env.get("nproc_per_node") or 1)
    return world, nproc if world % nproc == 0 else 1


def replay_fit(results: list[dict], overrides: dict | None = None, ops: tuple[str, ...] | None = None):
    """α and the links' efficiency, fitted on the run's own sweep by replaying it (the
    pingpong's rows, else every op's): (fit, network at the run's size, family, itemsize).
    A row whose call has more than REPLAY_MAX_MESSAGES messages is not replayed (a size
    or world a results line may name must not make the fit take minutes)."""
    from workloads._protocol import algorithms as registry
    from workloads._protocol.replay import fit as replay_fit_

    data = rows(results)
    if not data:
        raise LabError("no bench rows to fit (make some with: labctl up --workload bench)")
    world, nproc = _layout_of(results)
    net, _ = replay_network(results, -(-world // nproc), nproc, overrides=None)
    family = registry.family_for(environment(results).get("dist_backend"))
    itemsize = ITEMSIZE.get(str(data[0].get("dtype")), 4)
    wanted = ops if ops is not None else CALIBRATE_ON
    chosen = [r for r in data if r["op"] in wanted] if len({r["size_bytes"] for r in data
                                                            if r["op"] in wanted}) >= 2 else []
    chosen = chosen or data
    points, too_long = [], []
    with registry.at_most(REPLAY_MAX_MESSAGES):
        for r in chosen:
            if not r.get("time_us_median"):
                continue
            try:
                schedule = registry.algorithm(family, r["op"]).schedule(r["world_size"] or world, r["size_bytes"],
                                                                        itemsize)
            except registry.ScheduleTooLong:
                too_long.append(r)
                continue
            points.append((schedule, r["time_us_median"] / 1e6))
    names = sorted({r["op"] for r in chosen}, key=OPS.index)
    found = replay_fit_(points, net, f"{', '.join(names)} at n = {world}")
    if found is None:
        raise Refused("the run's sweep cannot be fitted: " + _unfittable(chosen, points, too_long))
    return found, family, itemsize


def _unfittable(chosen: list[dict], points: list, too_long: list[dict]) -> str:
    """Why the replay's fit found no α and efficiency, in the sweep's own numbers."""
    sizes = sorted({schedule.size for schedule, _ in points})
    if len(sizes) < 2:
        why = f"it needs two sizes or more of one op with a time, and it has {len(sizes)}"
        if too_long:
            why += (f" (left out: {len(too_long)} row(s) of more than {REPLAY_MAX_MESSAGES:,} messages to replay, "
                    f"from {min(r['size_bytes'] for r in too_long):,} B)")
        return why
    op = min({r["op"] for r in chosen}, key=OPS.index)
    times = sorted((r["size_bytes"], r["time_us_median"]) for r in chosen if r["op"] == op and r.get("time_us_median"))
    shown = ", ".join(f"{_size_text(s)} {t:,.0f} µs" for s, t in times)
    return (f"its times do not grow with the size as a link's would ({op}, the median by size: {shown}): "
            "the cost per message its small sizes give (α) is more than its largest sizes took, which leaves "
            "no rate for the link. That is timing noise (a loaded machine, the recorder in small ops); "
            "measure again (more iters, --no-trace, an idle machine)")


def _size_text(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def _sweep(run) -> tuple[list[dict], list[dict]]:
    """(results, rows) of the run's sweep as `labctl predict` reads them: the rows' numbers
    are the lab's own (workloads/_protocol/records.py checked them, once, where
    results.jsonl was read); here what only this run knows: its world (status.json's),
    which no row or environment of its sweep may exceed, and the environment that says
    which backend's algorithms ran. One line, exit 2, when the folder's records are not
    this run's."""
    results = run.results()
    data = rows(results)
    if not data:
        raise LabError(f"{run.path}: no bench op with two sizes or more to fit "
                       "(make some with: labctl up --workload bench)")
    env = environment(results)
    if not env:
        raise Refused(f"{run.path}: its bench rows have no usable bench_env record (the backend whose "
                      "algorithms ran, the layout): results.jsonl is damaged")
    world = run.record.world_size
    said = max([r["world_size"] or 0 for r in data] + [env.get("world_size") or 0])
    if said > world:
        raise Refused(f"{run.path}: its bench records say world size {said:,} in a run of {world:,} ranks "
                      "(status.json): they are not this run's; results.jsonl is damaged")
    return results, data


def predict(run, world_size: int, sizes_: list[int] | None = None, fmt: str = "md",
            links: dict | None = None) -> str:
    """`labctl predict`: each op at `world_size` ranks, its algorithm's own messages replayed
    over the links (the run's, or with --link overrides), α and the links' efficiency fitted
    on the run's sweep."""
    import math
    from dataclasses import replace

    from workloads._protocol import algorithms as registry
    from workloads._protocol.replay import expected

    results, data = _sweep(run)
    fitted, family, itemsize = replay_fit(results)
    world, nproc = _layout_of(results)
    nproc = nproc if world_size % nproc == 0 else 1
    base, described = replay_network(results, -(-world_size // nproc), nproc, links)
    net = replace(base.scaled(fitted.efficiency), alpha=fitted.alpha_s)
    link_Bps = net.slowest()
    out = []
    for op in [op for op in OPS if any(r["op"] == op for r in data)]:
        algo = registry.algorithm(family, op)
        wanted = sizes_ or sorted({r["size_bytes"] for r in data if r["op"] == op})
        for size in wanted:
            schedules, how = None, "closed form (too many ranks to replay)"
            if world_size <= REPLAY_MAX_RANKS:
                try:
                    with registry.at_most(REPLAY_MAX_MESSAGES):
                        schedules = algo.schedules(world_size, size, itemsize)
                except registry.ScheduleTooLong:
                    how = f"closed form (more than {REPLAY_MAX_MESSAGES:,} messages to replay)"
            if schedules is not None:
                played = expected(schedules, net)
                alpha_term, beta_term, result = played.alpha_term, played.beta_term, played.result
                how = "replay" if played.ways == 1 else f"replay, mean of {played.ways} ways the ranks may enter, by their odds"
                messages, critical = result.messages, len(result.critical)
                most = max(result.schedule.sent())
                seconds, fastest, slowest = played.seconds, played.fastest, played.slowest
            else:
                alpha_term = algo.steps(world_size) * fitted.alpha_s
                beta_term = algo.factor(world_size) * size / link_Bps if math.isfinite(link_Bps) else 0.0
                messages, critical, most = None, None, None
                seconds = fastest = slowest = alpha_term + beta_term
            out.append({"op": op, "algorithm": algo.name, "algorithm_key": algo.key, "fitted_n": world,
                        "n": world_size, "size_bytes": size, "time_us": round(seconds * 1e6, 3),
                        "fastest_us": round(fastest * 1e6, 3), "slowest_us": round(slowest * 1e6, 3),
                        "alpha_term_us": round(alpha_term * 1e6, 3), "beta_term_us": round(beta_term * 1e6, 3),
                        "dominant": "latency (α)" if alpha_term > beta_term else "bandwidth (β)",
                        "busbw_GBps": round(busbw_factor(op, world_size) * size / seconds / 1e9, 6)
                        if seconds > 0 else None,
                        "alpha_s": fitted.alpha_s, "efficiency": round(fitted.efficiency, 4),
                        "bandwidth_Bps": link_Bps, "model": how, "messages": messages,
                        "critical_path_messages": critical, "bytes_per_rank_max": most})
    if fmt == "json":
        return json.dumps({"run": str(run.path), "world_size": world_size, "links": described,
                           "fit": {"alpha_s": fitted.alpha_s, "efficiency": fitted.efficiency,
                                   "on": fitted.source, "rms_error": fitted.rms_error,
                                   "max_error": fitted.max_error, "points": fitted.points},
                           "rows": out}, indent=2) + "\n"
    if fmt == "csv":
        return csv_text(out)
    head = (f"## Predicted at world size {world_size} (fitted at n = {world}: {run.path})\n\n"
            f"Each op's own messages ({family} algorithms, workloads/_protocol/algorithms.py) replayed over "
            f"the links ({described or 'as measured'}; {nproc} rank(s) per node), every rate x "
            f"{fitted.efficiency:.3f} and α = {fitted.alpha_s * 1e6:.0f} us per message, both fitted on the "
            f"run's {fitted.source} (rms {100 * fitted.rms_error:.1f} %). β term: the replay without α and "
            "latency; α term: what they add; the larger dominates. An op that may go several ways by "
            "how the ranks enter it (gloo's all_to_all) is the mean of them by their odds, its fastest and slowest way "
            "beside it.\n\n")
    return head + _table(
        ["op", "algorithm", "size (B)", "time (us)", "fastest–slowest (us)", "α term (us)", "β term (us)",
         "dominated by", "busbw (GB/s)", "messages"],
        ([r["op"], r["algorithm"], r["size_bytes"], _num(r["time_us"], 1),
          f"{_num(r['fastest_us'], 1)}–{_num(r['slowest_us'], 1)}" if r["fastest_us"] != r["slowest_us"] else "",
          _num(r["alpha_term_us"], 1),
          _num(r["beta_term_us"], 1), r["dominant"], _num(r["busbw_GBps"], 4),
          r["messages"] if r["messages"] is not None else r["model"]] for r in out)) + "\n"


# ---- comparing two runs ----------------------------------------------------
def comparison(run_a, run_b) -> list[dict]:
    """Rows present in both runs, with B/A ratios of median time and busbw, and how far apart
    two runs of the same lab fall there (`same_lab_spread` of the two rows' iteration times,
    the `times_us` every bench row records): a time ratio inside it is noise (`noise`; None:
    a row with fewer than 6 iterations' times is not judged)."""
    results_a, results_b = _results_or_error(run_a), _results_or_error(run_b)
    a, b = rows(results_a), rows(results_b)
    times_a, times_b = _measured(results_a), _measured(results_b)
    b_by = {(r["op"], r["size_bytes"], r["dtype"]): r for r in b}
    out = []
    for r in a:
        key = (r["op"], r["size_bytes"], r["dtype"])
        other = b_by.get(key)
        if other is None:
            continue
        ratio = _ratio(other["time_us_median"], r["time_us_median"])
        spread = same_lab_spread(times_a[key].get("times_us") or [], times_b[key].get("times_us") or [])
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
    if not rows(results):
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
    head = (f"## Bench comparison: B / A\n\nA = {run_a.path} ({_layout(run_a)})  \n"
            f"B = {run_b.path} ({_layout(run_b)})\n\n"
            f"time ratio < 1: B is faster; busbw ratio > 1: B moves more data per second. {SPREAD_TEXT}\n\n"
            f"**{summary}**\n\n")
    return head + _table(
        ["op", "size (B)", "type", "time A (us)", "time B (us)", "time B/A", "same lab",
         "busbw A (GB/s)", "busbw B (GB/s)", "busbw B/A"],
        ([r["op"], r["size_bytes"], r["dtype"], _num(r["time_us_a"], 1), _num(r["time_us_b"], 1),
          _num(r["time_ratio"], 3) + (" noise" if r["noise"] else ""),
          f"{r['same_lab_low']:.2f}–{r['same_lab_high']:.2f}" if r["same_lab_low"] is not None else "",
          _num(r["busbw_GBps_a"], 3), _num(r["busbw_GBps_b"], 3),
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
    """The nccl-tests JSON files, then the plots, when the run has bench rows; a missing
    matplotlib is a note, not an error (the JSON files are written before it is said)."""
    written = write_nccl_tests(run)
    return written + write_plots(run)


# ---- nccl-tests' JSON (-J), one file per op --------------------------------------------
# The schema nccl-tests 2.19 writes (src/util.cu, JSON_FILE_VERSION 3; a copy of its shape:
# tests/golden/nccl-tests/all_reduce_perf.json). A file holds one program's run, so one op:
# bench-nccl-tests-<program>.json in the run folder, read by nccl-tests' own tools
# (tools/analyze_perf_json.py reads the per-iteration blocks).
NCCL_TESTS_VERSION = 3
NCCL_TESTS_FILE = "bench-nccl-tests-{program}.json"
NCCL_TYPES = {"float32": "float", "float": "float", "float16": "half", "half": "half", "bfloat16": "bfloat16",
              "float64": "double", "double": "double", "int32": "int32", "int": "int32", "int64": "int64",
              "int8": "int8", "uint8": "uint8"}
# What the bench times: torch's in-place call (all_reduce, broadcast, reduce write their input)
# or out-of-place (separate output); nccl-tests times both and writes both, null where not run.
IN_PLACE = ("all_reduce", "broadcast", "reduce")


def _nccl_stats(times_us: list[float]) -> dict[str, Any]:
    """nccl-tests' computeIterStats and writePerIterReport (src/util.cu), on microseconds."""
    import math

    xs = sorted(times_us)
    n = len(xs)
    avg = sum(xs) / n
    stdev = math.sqrt(sum((x - avg) ** 2 for x in xs) / n)
    at = lambda pct: xs[min(n - 1, (n * pct + 99) // 100 - 1)]     # noqa: E731  percentileIndex
    return {"skipped_iterations": 0, "min_us": xs[0], "max_us": xs[-1], "avg_us": avg, "p50_us": xs[n // 2],
            "p95_us": at(95), "p99_us": at(99), "stdev_us": stdev,
            "cv_pct": stdev / avg * 100.0 if avg > 0 else 0.0, "times_us": list(times_us)}


def _nccl_count(op: str, count: int, n: int) -> int:
    """nccl-tests' `count` column: the op's parameter count (per rank for the gathers)."""
    return count // n if op in ("all_gather", "reduce_scatter", "all_to_all") and n else count


def _nccl_time(seconds: str) -> str:
    """An ISO time (the run record's) as nccl-tests writes times: %Y-%m-%d %H:%M:%S."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(seconds).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError):
        return seconds or ""


def nccl_tests_documents(results: list[dict], started: str = "", ended: str = "") -> dict[str, dict]:
    """Each op's measurements as nccl-tests' JSON document for its program (-J), keyed by
    the program name. Times are nccl-tests': the mean over the timed iterations, from the
    per-iteration times the bench records (the bench's own tables use the median)."""
    env = environment(results)
    raw = [r for r in _bench(results) if r.get("name") in OPS and "size_bytes" in r and r.get("rank", 0) == 0]
    if not raw:
        return {}
    n = int(raw[0].get("world_size") or env.get("world_size") or 0)
    nccl = env.get("nccl")
    version = 0
    if nccl:
        x, y, z = (list(map(int, str(nccl).split(".")[:3])) + [0, 0, 0])[:3]
        version = x * 10000 + y * 100 + z if (x, y) >= (2, 9) else x * 1000 + y * 100 + z
    ranks = env.get("ranks") or [{"rank": r} for r in range(n)]
    devices = [{"rank": int(d.get("rank", i)), "group": 0, "pid": int(d.get("pid") or 0),
                "hostname": str(d.get("hostname") or (env.get("hostname") if i == 0 else "") or ""),
                "device": int(d.get("device", -1) if d.get("device") is not None else -1),
                "device_hex": "", "device_info": str(env.get("device") or "cpu")} for i, d in enumerate(ranks)]
    env_lines = [f"{k}={env[k]}" for k in ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME") if env.get(k) is not None]
    env_lines += [f"LAB_DIST_BACKEND={env['dist_backend']}"] if env.get("dist_backend") else []
    env_lines += [f"LAB_LINKS={env['links']}"] if env.get("links") else []
    docs: dict[str, dict] = {}
    for op in OPS:
        mine = sorted((r for r in raw if r["name"] == op), key=lambda r: r["size_bytes"])
        if not mine:
            continue
        program = registry_program(op)
        dtype = str(mine[0].get("dtype") or env.get("dtype") or "float32")
        args = [program, "-b", str(env.get("min_bytes", mine[0]["size_bytes"])),
                "-e", str(env.get("max_bytes", mine[-1]["size_bytes"])), "-f", str(env.get("factor", 2)),
                "-w", str(env.get("warmup_iters", 0)), "-n", str(mine[0].get("iters") or env.get("iters", 1)),
                "-d", NCCL_TYPES.get(dtype, dtype), "-g", "1", "-I", "1"]
        if op in ("all_reduce", "reduce_scatter", "reduce", "ring"):
            args += ["-o", "sum"]
        if op in ("broadcast", "reduce"):
            args += ["-r", "0"]
        args += ["-J", NCCL_TESTS_FILE.format(program=program)]
        results_out, wrong, busbws = [], 0, []
        for r in mine:
            times = r.get("times_us") or [r["time_us_median"]]
            stats = _nccl_stats(times)
            size = int(r["size_bytes"])
            avg_s = stats["avg_us"] / 1e6
            algbw = size / avg_s / 1e9 if avg_s > 0 else 0.0
            busbw = algbw * busbw_factor(op, n) if n else 0.0
            busbws.append(busbw)
            wrong += int(r.get("wrong") or 0)
            body = {"time": stats["avg_us"], "alg_bw": algbw, "bus_bw": busbw, "nwrong": float(r.get("wrong") or 0)}
            if r.get("rank_times_us"):
                stats[PROCESS_TIMES_KEY] = r["rank_times_us"]
            row: dict[str, Any] = {
                "size": size, "count": _nccl_count(op, int(r.get("count") or 0), n),
                "type": NCCL_TYPES.get(dtype, dtype),
                "redop": "sum" if op in ("all_reduce", "reduce_scatter", "reduce", "ring") else "none",
                "root": f"{0 if op in ('broadcast', 'reduce') else -1:6d}"}
            if op in IN_PLACE:
                row.update({"out_of_place": None, "in_place": body, "in_place_per_iter": stats})
            else:
                row.update({"out_of_place": body, "out_of_place_per_iter": stats, "in_place": None})
            row.update({"actual_iterations": len(times), "experiment_name": ""})
            results_out.append(row)
        docs[program] = {
            "version": NCCL_TESTS_VERSION, "start_time": _nccl_time(started) or str(env.get("start_time") or ""),
            "args": args, "env": env_lines, "nccl_version": version,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": int(env.get("min_bytes", mine[0]["size_bytes"])),
                       "maximum_bytes": int(env.get("max_bytes", mine[-1]["size_bytes"])),
                       "step_factor": int(env.get("factor", 2)), "warmup_iters": int(env.get("warmup_iters", 0)),
                       "iterations": int(mine[0].get("iters") or env.get("iters", 1)), "aggregated_iterations": 1,
                       "validation": 1, "graph": 0, "blocking_collectives": False, "per_iter_timing": True,
                       "per_iter_skip": 0, "parallel_init": False, "devices": devices},
            "results": results_out,
            "out_of_bounds": {"count": wrong, "okay": wrong == 0},
            "average_bus_bandwidth": {"bandwidth": sum(busbws) / len(busbws), "okay": "unchecked"},
            "errors": [],
            "end_time": _nccl_time(ended),
        }
    return docs


PROCESS_TIMES_KEY = "per_process_max_times_us"


def registry_program(op: str) -> str:
    from workloads._protocol.algorithms import NCCL_TESTS_PROGRAM

    return NCCL_TESTS_PROGRAM[op]


def write_nccl_tests(run) -> list[Path]:
    """bench-nccl-tests-<program>.json per op in the run folder (nccl-tests' -J schema)."""
    from datetime import datetime, timedelta

    record = run.record
    started = record.started or ""
    ended = ""
    try:
        if started and record.seconds is not None:
            ended = (datetime.fromisoformat(started) + timedelta(seconds=float(record.seconds))).isoformat()
    except (TypeError, ValueError):
        ended = ""
    written = []
    for program, doc in nccl_tests_documents(run.results(), started, ended).items():
        target = Path(run.path) / NCCL_TESTS_FILE.format(program=program)
        with atomic_open(target, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        written.append(target)
    return written


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
                                    m.get("address"), m.get("bytes"), _num(m.get("seconds"), 3),
                                    _num(m.get("GBps"), 3)] for m in measured), view_id="bench-links", show=PAGE))
    views.append(_views.table("measurements", ["op", "size (B)", "count", "type", "time median (µs)",
                                               "time p99 (µs)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"],
                              ([r["op"], r["size_bytes"], r["count"], r["dtype"], _num(r["time_us_median"], 1),
                                _num(r["time_us_p99"], 1), _num(r["algbw_GBps"], 3), _num(r["busbw_GBps"], 3),
                                r["wrong"]] for r in data), view_id="bench-rows", show=PAGE))
    return views


WORKLOAD = Workload("bench", views=views, data=as_json, csv=table, check_options=check_options,
                    write_files=write_files, compare=compare, predict=predict)
