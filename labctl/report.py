"""Reports from a run folder: one table per question a learner asks.

Which rank is where (env)? Did every check pass, per workload? What failed,
on which rank, and where is its log? What was skipped and why? Measurement
tables (the `bench` workload) come from `labctl.bench`, loaded only when a
run has bench results.
"""
from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from typing import Any, Iterable

from .rundir import RunDir

ENV_COLUMNS = ("rank", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
               "hostname", "MASTER_ADDR", "MASTER_PORT", "backend", "device", "pid")


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """A Markdown table; cells are stringified, pipes escaped."""
    headers = list(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        cells = ["" if c is None else str(c).replace("|", "\\|").replace("\n", " ") for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def env_rows(results: list[dict]) -> list[dict]:
    rows = [r for r in results if r.get("workload") == "env" and r.get("name") == "env"]
    return sorted(rows, key=lambda r: r.get("rank", -1))


def workload_summary(results: list[dict]) -> list[dict]:
    by: dict[str, dict[str, Any]] = {}
    for r in results:
        w = r.get("workload", "?")
        s = by.setdefault(w, {"workload": w, "checks": 0, "passed": 0, "failed": 0,
                              "skipped": 0, "ranks": set(), "seconds": 0.0})
        if isinstance(r.get("rank"), int):
            s["ranks"].add(r["rank"])
        if r.get("name") == "workload_done":
            s["seconds"] = max(s["seconds"], float(r.get("seconds") or 0.0))
            continue
        s["checks"] += 1
        if r.get("skipped"):
            s["skipped"] += 1
        elif r.get("ok"):
            s["passed"] += 1
        else:
            s["failed"] += 1
    out = []
    for s in by.values():
        s["ranks"] = len(s["ranks"])
        out.append(s)
    return out


def skipped(results: list[dict]) -> list[dict]:
    groups: dict[tuple, list[int]] = defaultdict(list)
    for r in results:
        if r.get("skipped"):
            groups[(r.get("workload"), r.get("name"), r.get("reason"))].append(r.get("rank"))
    return [{"workload": w, "name": n, "reason": why, "ranks": sorted(x for x in ranks if x is not None)}
            for (w, n, why), ranks in groups.items()]


def _has_bench(results: list[dict]) -> bool:
    return any(r.get("workload") == "bench" for r in results)


def as_dict(run: RunDir) -> dict[str, Any]:
    results = run.results()
    data = {
        "status": run.meta,
        "ranks": env_rows(results),
        "workloads": workload_summary(results),
        "failed_checks": [r for r in results if not r.get("ok", False)],
        "skipped": skipped(results),
    }
    if _has_bench(results):
        from . import bench
        data["bench"] = bench.as_json(results)
    return data


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{len(ranks)} ranks"


def markdown(run: RunDir) -> str:
    m, results = run.meta, run.results()
    state = m.get("state", "?")
    parts = [
        f"# Lab {m.get('lab')}: {state.upper()}",
        "",
        f"run `{m.get('run_id')}` · backend {m.get('backend')} · launcher {m.get('launcher')} · "
        f"{m.get('dist_backend')} · {m.get('nodes')} node(s) x {m.get('nproc_per_node')} "
        f"process(es) = world size {m.get('world_size')}"
        + (f" · {m['seconds']:.1f} s" if isinstance(m.get("seconds"), (int, float)) else ""),
    ]
    if m.get("message"):
        parts += ["", f"**{m['message']}**"]

    envs = env_rows(results)
    if envs:
        parts += ["", "## Where every rank runs (workload env)", "",
                  table(ENV_COLUMNS, ([r.get(c) for c in ENV_COLUMNS] for r in envs))]

    summary = workload_summary(results)
    if summary:
        parts += ["", "## Checks per workload", "",
                  table(("workload", "ranks", "passed", "failed", "skipped", "seconds (slowest rank)"),
                        ((s["workload"], s["ranks"], s["passed"], s["failed"], s["skipped"],
                          f"{s['seconds']:.2f}") for s in summary))]

    if _has_bench(results):
        from . import bench
        parts += ["", bench.markdown(results)]

    skips = skipped(results)
    if skips:
        parts += ["", "## Skipped (not a failure)", "",
                  table(("workload", "check", "reason", "ranks"),
                        ((s["workload"], s["name"], s["reason"], _ranks_text(s["ranks"]))
                         for s in skips))]

    failed = [r for r in results if not r.get("ok", False)]
    if failed:
        parts += ["", "## Failed checks", "",
                  table(("workload", "check", "rank", "detail", "log"),
                        ((r.get("workload"), r.get("name"), r.get("rank"), r.get("detail", ""),
                          run.rank_log(r["rank"]) if isinstance(r.get("rank"), int) else "")
                         for r in failed[:50]))]
    codes = m.get("rank_exit_codes") or {}
    bad_nodes = [n for n in m.get("node_outcomes", []) if n.get("state") != "succeeded"]
    first = m.get("first_failure")
    if first:
        parts += ["", f"**First failure: {describe_failure(first)}** — log: "
                      f"{run.rank_log(first['rank']) if isinstance(first.get('rank'), int) else run.path}"]
    if codes or bad_nodes:
        parts += ["", "## Failed processes", ""]
        for rank, code in codes.items():
            why = " (stopped by its launcher after another failure)" if code in (-15, -9) else ""
            parts.append(f"- rank {rank} exited with code {code}{why}: {run.rank_log(int(rank))}")
        for n in bad_nodes:
            parts.append(f"- node {n['index']} ({n['hostname']}): {n['state']}, exit code "
                         f"{n['exit_code']}: {run.node_log(n['index'])}")
    if m.get("ranks_without_output") and m.get("state") != "passed":
        parts.append(f"- no output from rank(s) {_ranks_text(m['ranks_without_output'])}")
    parts += ["", f"Logs: {run.path}/nodes/ (per node), {run.path}/ranks/ (per rank); "
              f"results: {run.path}/results.jsonl", ""]
    return "\n".join(parts)


def describe_failure(first: dict) -> str:
    text = f"rank {first.get('rank')}"
    if first.get("node") is not None:
        text += f" on node {first['node']}"
    if first.get("check"):
        text += f" failed check {first['check']}"
    elif first.get("exit_code") is not None:
        text += f" exited with code {first['exit_code']}"
    return text


def as_csv(run: RunDir) -> str:
    """Every result as one CSV row (bench runs: the nccl-tests-style rows)."""
    results = run.results()
    if _has_bench(results):
        from . import bench
        return bench.csv(results)
    buf = io.StringIO()
    columns = ["workload", "name", "rank", "ok", "skipped", "detail", "reason"]
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in results:
        writer.writerow(r)
    return buf.getvalue()


def render(run: RunDir, fmt: str = "md") -> str:
    if fmt == "json":
        return json.dumps(as_dict(run), indent=2, default=str) + "\n"
    if fmt == "csv":
        return as_csv(run)
    return markdown(run)
