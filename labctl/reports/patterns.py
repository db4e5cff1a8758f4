"""`labctl predict` on a parallelism pattern's run: each variant's step at another world
size, over the lab's links. The model (the records read, the step scaled to N ranks, the
formula, a phase played) is the plugin's, workloads/_report/_patterncost.py; the host
reads the run folder, makes the links and draws the answer (docs/patterns.md).

The links: the run's `links:` with --link on top (each replaces the run's rule of the
same scope), each node's cable both ways, pair caps, latencies; ranks of one node share
its loopback. No per-message overhead (α) is added: a pattern run has no sweep to fit one
on (a bench run's `labctl predict` fits α and the links' efficiency); a link's latency
(`--link 10gbit,20us`) delays every message.
"""
from __future__ import annotations

import json
import math
from typing import Any

from workloads._protocol import links as linkmod
from workloads._protocol.plugin import InputError, csv_text
from workloads._protocol.results import MAX_TOTAL_NODES

from ..plugins import part
from ..tables import table
from .linkrates import pair_caps

cost = part("_patterncost")


# ---- the links --------------------------------------------------------------------------------
def _merged(run_links: Any, overrides: dict | None) -> dict:
    data: dict[str, Any] = {}
    raw = run_links.to_data() if run_links is not None else {}
    if isinstance(raw, dict):
        data = {k: v for k, v in raw.items() if v not in (None, {})}
    elif raw:
        data = {"default": raw}
    for key in ("default", "nodes", "pairs"):
        if overrides and overrides.get(key) not in (None, {}):
            if key == "default":
                data["default"] = overrides["default"]
            else:
                data[key] = {**{str(k): v for k, v in (data.get(key) or {}).items()},
                             **{str(k): v for k, v in overrides[key].items()}}
    return data


def network(run, nodes: int, per_node: int, overrides: dict | None):
    """The links at N ranks: (replay Network, what it was made of)."""
    from workloads._protocol.replay import LOOPBACK_Bps, Network

    try:
        run_links = run.spec.links
    except Exception:                    # noqa: BLE001 - a run folder whose spec cannot be read: no links
        run_links = None
    data = _merged(run_links, overrides)
    try:
        links = linkmod.parse(data, max(nodes, MAX_TOTAL_NODES)) if data else None
    except ValueError as exc:
        raise InputError(f"--link: {exc}") from None
    if links is None or not links.has_rate:
        raise InputError("no link rate to play the step over: the run's links are unshaped; give one, e.g. "
                         "labctl predict RUN --world-size 16 --link 10gbit (every node), --link 3=1gbit (node 3)")
    egress, ingress = [], []
    for i in range(nodes):
        rate = links.node(i).rate_bps
        egress.append(rate / 8 if rate else math.inf)
        ingress.append(rate / 8 if rate else math.inf)
    pair, latency = pair_caps(links, nodes)
    said = "; ".join(links.describe(nodes)) + (" (with --link)" if overrides else "")
    said += f"; ranks of one node: loopback {LOOPBACK_Bps / 1e9:g} GB/s; no per-message overhead (α = 0)"
    return Network(nodes, tuple(egress), tuple(ingress), pair, latency, per_node), said


# ---- labctl predict --------------------------------------------------------------------------
def _layout(run, n: int) -> int:
    """Ranks per node of the run."""
    try:
        per = int(run.spec.nproc_per_node)
    except Exception:                    # noqa: BLE001
        per = 1
    return per if per >= 1 and n % per == 0 else 1


def _summary(found: list[tuple[cost.Phase, cost.Played]]) -> str:
    """The step's ops at N in words, per group in the order first used: `on default_pg (16
    ranks): 4 all_gather, 3 reduce_scatter, 7,168 B in all`; sends: `120 sends of 128 B`."""
    where: dict[str, dict] = {}
    for phase, _ in found:
        if phase.schedule is not None:
            key = f"sends of {phase.size:,} B"
            got = where.setdefault(key, {"sends": 0})
            got["sends"] += len(phase.schedule.messages)
            continue
        k = sorted({len(g) for g in phase.groups})
        key = (f"on {phase.label} ({'/'.join(map(str, k))} ranks"
               + (f", {len(phase.groups)} groups at once" if len(phase.groups) > 1 else "") + ")")
        got = where.setdefault(key, {"ops": {}, "bytes": 0})
        got["ops"][phase.op] = got["ops"].get(phase.op, 0) + 1
        got["bytes"] += phase.size
    parts = []
    for key, got in where.items():
        if "sends" in got:
            parts.append(f"{got['sends']} {key}")
        else:
            ops = ", ".join(f"{c} {op}" for op, c in got["ops"].items())
            parts.append(f"{key}: {ops}; buffers {got['bytes']:,} B in all")
    return "; ".join(parts)


def predict(run, world_size: int, sizes: list[int] | None = None, fmt: str = "md",
            links: dict | None = None) -> str:
    """`labctl predict` on a pattern run: each variant's step at `world_size` ranks (see the
    module's text)."""
    from workloads._protocol import algorithms as registry

    if sizes:
        raise InputError("--size: a pattern's messages are its model's own sizes; leave --size out "
                         "(labctl predict RUN --world-size N)")
    results = run.results()
    found = cost.variants(results)
    if not found:
        raise InputError(f"{run.path}: its pattern records hold no op list (made before labctl recorded each "
                         "step's ops); run the pattern again")
    n = max(max(recs) + 1 for recs in found.values())
    n = max([n] + [int(r.get("ranks") or 0) for recs in found.values() for r in recs.values()])
    world = getattr(getattr(run, "record", None), "world_size", None)     # status.json's, bounded there
    if world is not None and n > world:     # the records' numbers are the lab's (records.py); this is the run's
        raise InputError(f"{run.path}: its pattern records say {n:,} ranks in a run of {world:,} "
                         "(status.json): they are not this run's; results.jsonl is damaged")
    big = world_size
    for (pattern, variant), recs in found.items():
        tp = int(recs[min(recs)].get("tp") or 1) if pattern == "mesh" else 1
        if big % tp:
            raise InputError(f"--world-size {big}: the mesh's tp is {tp}, so its world is a multiple of {tp}")
    family = registry.family_for(next((r.get("dist_backend") for r in results if r.get("dist_backend")), "gloo"))
    per = _layout(run, n)
    out_rows = []
    described = ""
    for at in (n, big):
        per_at = per if at % per == 0 else 1
        net, said = network(run, -(-at // per_at), per_at, links)
        if at == big:
            described = said
        cache: dict = {}
        for (pattern, variant), recs in found.items():
            steps = cost.phases(pattern, variant, recs, n, at)
            played = [(p, cost.play(p, net, family, at, cache)) for p in steps]
            row = next((x for x in out_rows if x["pattern"] == pattern and x["variant"] == variant), None)
            total = sum(x.seconds for _, x in played)
            if row is None:
                row = {"pattern": pattern, "variant": variant, "n": n, "time_us_at_run": round(total * 1e6, 3)}
                out_rows.append(row)
                continue
            sent = [sum(x.sent[r] for _, x in played) for r in range(at)]
            wire = [sum(x.wire[r] for _, x in played if x.wire) for r in range(at)]
            want, text = cost.formula(pattern, variant, recs, n, at)
            alpha, beta = sum(x.alpha for _, x in played), sum(x.beta for _, x in played)
            row.update({
                "world_size": at, "ranks_per_node": per_at, "ops": len(played), "step": _summary(played),
                "bytes_per_rank": round(max(sent), 1), "formula_bytes_per_rank": round(want, 1),
                "formula": text, "within_1pct": abs(max(sent) - want) <= 0.01 * max(want, 1.0),
                "gloo_bytes_per_rank": max(wire) if any(wire) else None,
                "time_us": round(total * 1e6, 3), "alpha_term_us": round(alpha * 1e6, 3),
                "beta_term_us": round(beta * 1e6, 3),
                "dominant": "latency (α)" if alpha > beta else "bandwidth (β)",
                "model": sorted({x.model for _, x in played})[0] if played else "",
                "phases": [{"op": p.op, "group": p.label, "group_size": max((len(g) for g in p.groups), default=at),
                            "groups": len(p.groups) or 1, "size_bytes": p.size,
                            "messages": len(p.schedule.messages) if p.schedule is not None else None,
                            "time_us": round(x.seconds * 1e6, 3)} for p, x in played]})
    if fmt == "json":
        return json.dumps({"run": str(run.path), "from_world_size": n, "world_size": big, "links": described,
                           "family": family, "rows": out_rows}, indent=2) + "\n"
    flat = [{k: v for k, v in r.items() if k != "phases"} for r in out_rows]
    if fmt == "csv":
        return csv_text(flat)
    head = (f"## One step's communication at world size {big} (from the run's {n}: {run.path})\n\n"
            f"Each variant's last step as its ranks issued it, scaled to {big} ranks by the pattern's rule; each "
            f"collective the algorithm {family} runs, replayed on its ranks over the links ({described}; "
            f"{per if big % per == 0 else 1} rank(s) per node), one op after another; pp and cp: their sends "
            "as one schedule. Bytes per rank: what the scaled ops send with the ring's share (the ranks' count; "
            "a middle rank for pp), beside the pattern's formula at that size; gloo sends: what gloo's own "
            "algorithms send (its reduce_scatter is an all_reduce). docs/patterns.md says how each pattern "
            "scales.\n\n")
    return head + table(
        ["pattern", "variant", f"the step at {big} ranks", "bytes per rank", "formula", f"time at {n} (us)",
         f"time at {big} (us)", "α term (us)", "β term (us)", "dominated by", "gloo sends (most, B)"],
        ([r["pattern"], r["variant"], r["step"], f"{r['bytes_per_rank']:,.0f}",
          f"{r['formula_bytes_per_rank']:,.0f} ({r['formula']})", f"{r['time_us_at_run']:,.1f}",
          f"{r['time_us']:,.1f}", f"{r['alpha_term_us']:,.1f}", f"{r['beta_term_us']:,.1f}", r["dominant"],
          "" if r["gloo_bytes_per_rank"] is None else f"{r['gloo_bytes_per_rank']:,}"] for r in out_rows)) + "\n"
