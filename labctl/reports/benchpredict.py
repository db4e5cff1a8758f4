"""`labctl predict` on a bench run: each op at another world size, its algorithm's own
messages replayed over the links (the run's, or with --link overrides), α and the links'
efficiency fitted on the run's sweep. The host's part of the bench workload: its rows
and environment are the plugin's (workloads/_report/bench.py), the replay and the
algorithms the protocol's (workloads/_protocol/replay.py, algorithms.py).
"""
from __future__ import annotations

import json
from typing import Any

from workloads._protocol import links as linkmod
from workloads._protocol.plugin import InputError, csv_text
from workloads._protocol.results import MAX_TOTAL_NODES
from workloads._protocol.schedules import ScheduleTooLong, at_most

from ..errors import LabError, Refused
from ..plugins import part
from ..tables import table
from .linkrates import pair_caps

bench = part("bench")

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


def links_data(raw: Any) -> dict[str, Any]:
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
    env = bench.environment(results)
    try:
        data = links_data(json.loads(env["links"])) if env.get("links") else {}
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
    tcp = bench.link_GBps(results)
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
    pair, latency = pair_caps(links, nodes)
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
    env, data = bench.environment(results), bench.rows(results)
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

    data = bench.rows(results)
    if not data:
        raise LabError("no bench rows to fit (make some with: labctl up --workload bench)")
    world, nproc = _layout_of(results)
    net, _ = replay_network(results, -(-world // nproc), nproc, overrides=None)
    family = registry.family_for(bench.environment(results).get("dist_backend"))
    itemsize = ITEMSIZE.get(str(data[0].get("dtype")), 4)
    wanted = ops if ops is not None else CALIBRATE_ON
    chosen = [r for r in data if r["op"] in wanted] if len({r["size_bytes"] for r in data
                                                            if r["op"] in wanted}) >= 2 else []
    chosen = chosen or data
    points, too_long = [], []
    with at_most(REPLAY_MAX_MESSAGES):
        for r in chosen:
            if not r.get("time_us_median"):
                continue
            try:
                schedule = registry.algorithm(family, r["op"]).schedule(r["world_size"] or world, r["size_bytes"],
                                                                        itemsize)
            except ScheduleTooLong:
                too_long.append(r)
                continue
            points.append((schedule, r["time_us_median"] / 1e6))
    names = sorted({r["op"] for r in chosen}, key=bench.OPS.index)
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
    op = min({r["op"] for r in chosen}, key=bench.OPS.index)
    times = sorted((r["size_bytes"], r["time_us_median"]) for r in chosen if r["op"] == op and r.get("time_us_median"))
    shown = ", ".join(f"{linkmod.human_size(s)} {t:,.0f} µs" for s, t in times)
    return (f"its times do not grow with the size as a link's would ({op}, the median by size: {shown}): "
            "the cost per message its small sizes give (α) is more than its largest sizes took, which leaves "
            "no rate for the link. That is timing noise (a loaded machine, the recorder in small ops); "
            "measure again (more iters, --no-trace, an idle machine)")


def _sweep(run) -> tuple[list[dict], list[dict]]:
    """(results, rows) of the run's sweep as `labctl predict` reads them: the rows' numbers
    are the lab's own (workloads/_protocol/records.py checked them, once, where
    results.jsonl was read); here what only this run knows: its world (status.json's),
    which no row or environment of its sweep may exceed, and the environment that says
    which backend's algorithms ran. One line, exit 2, when the folder's records are not
    this run's."""
    results = run.results()
    data = bench.rows(results)
    if not data:
        raise LabError(f"{run.path}: no bench op with two sizes or more to fit "
                       "(make some with: labctl up --workload bench)")
    env = bench.environment(results)
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
    for op in [op for op in bench.OPS if any(r["op"] == op for r in data)]:
        algo = registry.algorithm(family, op)
        wanted = sizes_ or sorted({r["size_bytes"] for r in data if r["op"] == op})
        for size in wanted:
            schedules, how = None, "closed form (too many ranks to replay)"
            if world_size <= REPLAY_MAX_RANKS:
                try:
                    with at_most(REPLAY_MAX_MESSAGES):
                        schedules = algo.schedules(world_size, size, itemsize)
                except ScheduleTooLong:
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
                        "busbw_GBps": round(bench.busbw_factor(op, world_size) * size / seconds / 1e9, 6)
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
    return head + table(
        ["op", "algorithm", "size (B)", "time (us)", "fastest–slowest (us)", "α term (us)", "β term (us)",
         "dominated by", "busbw (GB/s)", "messages"],
        ([r["op"], r["algorithm"], r["size_bytes"], bench.fixed(r["time_us"], 1),
          f"{bench.fixed(r['fastest_us'], 1)}–{bench.fixed(r['slowest_us'], 1)}" if r["fastest_us"] != r["slowest_us"] else "",
          bench.fixed(r["alpha_term_us"], 1),
          bench.fixed(r["beta_term_us"], 1), r["dominant"], bench.fixed(r["busbw_GBps"], 4),
          r["messages"] if r["messages"] is not None else r["model"]] for r in out)) + "\n"
