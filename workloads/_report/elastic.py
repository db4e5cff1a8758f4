"""The elastic workload's plugin: every attempt of every rank, and how long a restart took.

One row per (rank, attempt): the restart count torchrun gave the attempt
(TORCHELASTIC_RESTART_COUNT), its world size, the step it resumed from (the
newest checkpoint), the last step it is known to have reached and how it
ended. A rank number names a different process in every attempt: torchrun
re-assigns ranks at each rendezvous, and a world that shrank has fewer.
"""
from __future__ import annotations

from typing import Any

from workloads._protocol.plugin import Table, Text, Workload

def check_options(options: dict, defaults: dict) -> None:
    merged = {**defaults, **options}
    if merged["steps"] < 1:
        raise ValueError(f"steps: expected at least 1, given {merged['steps']}")
    if merged["checkpoint_every"] < 1:
        raise ValueError(f"checkpoint_every: expected at least 1 step, given {merged['checkpoint_every']}")
    if merged["step_sleep"] < 0:
        raise ValueError(f"step_sleep: expected seconds >= 0, given {merged['step_sleep']}")
    if (merged["crash_rank"] >= 0 or merged["crash_node"] >= 0) and not 0 <= merged["crash_at_step"] < merged["steps"]:
        raise ValueError(f"crash_at_step: expected a step between 0 and steps - 1 "
                         f"({merged['steps'] - 1}), given {merged['crash_at_step']}")


def check_placement(spec: Any, shared_dir: str | None, options: dict, defaults: dict) -> None:
    """The checkpoints need a directory every node sees (`Placement.shared_dir`) when
    there is more than one node."""
    if spec.nodes > 1 and shared_dir is None:
        raise ValueError(f"shared_volume: expected a directory every node sees for the elastic "
                         f"checkpoints of a {spec.nodes}-node {spec.backend} lab, given none "
                         "(example: shared_volume: {claim: lab-shared}; compose makes a volume "
                         "of that name, k8s mounts that ReadWriteMany claim)")


def check_lab(spec: Any, options: dict, defaults: dict) -> None:
    """Rules that need the whole lab: the world sizes and where a crash is aimed."""
    merged = {**defaults, **options}
    sizes = [k * spec.nproc_per_node for k in range(spec.fewest_nodes, spec.nodes + 1)]
    odd = [w for w in sizes if merged["global_batch"] % w]
    if odd:
        raise ValueError(f"workloads.elastic.options.global_batch: expected a multiple of every "
                         f"world size the lab may have ({', '.join(map(str, sizes))}), "
                         f"given {merged['global_batch']}")
    if merged["crash_rank"] >= spec.world_size:
        raise ValueError(f"workloads.elastic.options.crash_rank: expected a rank below the world "
                         f"size {spec.world_size} (or -1: no crash), given {merged['crash_rank']}")
    if merged["crash_node"] >= spec.nodes:
        raise ValueError(f"workloads.elastic.options.crash_node: expected a node below nodes "
                         f"({spec.nodes}) (or -1: no crash), given {merged['crash_node']}")
    if merged["crash_node"] >= 0 and spec.launcher != "torchrun":
        raise ValueError("workloads.elastic.options.crash_node: expected -1 with launcher direct "
                         f"(it kills the node's torchrun agent), given {merged['crash_node']}")


def _mine(results: list[dict]) -> list[dict]:
    return [r for r in results if r.get("workload") == "elastic"]


_PROGRESS = ("attempt", "checkpoint", "crash-injected", "attempt_done")


def attempts(results: list[dict]) -> list[dict]:
    """One row per worker process, in attempt order, then node, then local rank.

    `attempt` is labctl's count: the n-th process in this worker slot (node, local
    rank). torchrun's TORCHELASTIC_RESTART_COUNT is kept per node and does not count
    a restart the node's agent made to let others re-join (pytorch#135712), so
    after one failure the nodes of one world may report different counts.
    """
    rows: dict[tuple, dict] = {}
    for r in _mine(results):
        if r.get("name") not in _PROGRESS or r.get("pid") is None:
            continue
        key = (r.get("node"), r.get("local_rank"), r.get("pid"))
        row = rows.setdefault(key, {"node": key[0], "local_rank": key[1], "pid": key[2],
                                    "rank": r.get("rank"), "restart_count": r.get("restart_count"),
                                    "world_size": r.get("world_size"), "first_step": None,
                                    "last_step": None, "ended": "cut off", "started": None,
                                    "crashed": None, "loss": None})
        if r["name"] == "attempt":
            row.update(first_step=r.get("first_step"), started=r.get("time"),
                       spawned=r.get("process_started"))
            step = r.get("first_step")
        elif r["name"] == "checkpoint":
            step = r.get("step")
            row["loss"] = r.get("loss")
        elif r["name"] == "crash-injected":
            step = r.get("step")
            row["ended"] = f"crashed ({r.get('how')}, injected)"
            row["crashed"] = r.get("time")
        else:
            step = (r.get("first_step") or 0) + (r.get("steps_done") or 0)
            row["ended"], row["loss"] = "finished", r.get("loss")
        if step is not None and (row["last_step"] is None or step > row["last_step"]):
            row["last_step"] = step
    by_slot: dict[tuple, list[dict]] = {}
    for row in rows.values():
        by_slot.setdefault((row["node"], row["local_rank"]), []).append(row)
    for slot_rows in by_slot.values():
        slot_rows.sort(key=lambda x: x["started"] if x["started"] is not None else float("inf"))
        for n, row in enumerate(slot_rows):
            row["attempt"] = n
            done = row["last_step"] is not None and row["first_step"] is not None
            row["steps_done"] = row["last_step"] - row["first_step"] if done else None
    return sorted(rows.values(), key=lambda x: (x["attempt"], _num(x["node"]), _num(x["local_rank"])))


def _num(x: Any) -> float:
    return x if isinstance(x, (int, float)) else float("inf")


def restarts(rows: list[dict]) -> list[dict]:
    """Per attempt n >= 1 after an injected crash in attempt n-1: the seconds from the
    crash to the last rank of attempt n starting (its first step needs every rank)."""
    out = []
    for n in sorted({r["attempt"] for r in rows if r["attempt"] > 0}):
        crashes = [r["crashed"] for r in rows if r["attempt"] == n - 1 and r.get("crashed")]
        after = [r for r in rows if r["attempt"] == n and r.get("started")]
        if not crashes or not after:
            continue
        before = [r for r in rows if r["attempt"] == n - 1]
        spawned = [r["spawned"] for r in after if r.get("spawned")]
        out.append({"attempt": n, "seconds": round(max(r["started"] for r in after) - min(crashes), 3),
                    # torchrun's part: noticing, stopping, re-rendezvous, starting the last worker
                    "until_spawned": round(max(spawned) - min(crashes), 3) if spawned else None,
                    "world_size": [before[0]["world_size"], after[0]["world_size"]],
                    "resumed_step": after[0]["first_step"]})
    return out


def views(results: list[dict]) -> list:
    rows = attempts(results)
    if not rows:
        return []
    parts: list = [Table(
        "Elastic: attempts per rank",
        ("attempt", "node", "local rank", "rank", "restart", "world size", "resumed at step",
         "reached step", "steps done", "ended", "loss"),
        [(r["attempt"], r["node"], r["local_rank"], r["rank"], r["restart_count"], r["world_size"],
          r["first_step"], r["last_step"], "" if r["steps_done"] is None else r["steps_done"], r["ended"],
          "" if r["loss"] is None else f"{r['loss']:.4g}") for r in rows],
        "attempt = the n-th process of this worker slot (node, local rank) · restart = "
        "TORCHELASTIC_RESTART_COUNT, as the node's agent counts it · resumed at = the "
        "checkpoint's step · reached = the last step recorded (checkpoints, crash, end)",
        id="elastic-attempts", level=2)]
    for x in restarts(rows):
        before, after = x["world_size"]
        split = (f": {x['until_spawned']:.1f} s until torchrun had started the last new worker "
                 f"(noticed, stopped the group, re-rendezvous), the rest importing torch, joining "
                 f"and loading the checkpoint" if x.get("until_spawned") is not None else "")
        parts.append(Text(f"- attempt {x['attempt']}: {x['seconds']:.1f} s from the injected crash "
                          f"until every rank of attempt {x['attempt']} had started (resumed at step "
                          f"{x['resumed_step']}; world size {before} -> {after}){split}",
                          id=f"elastic-restart-{x['attempt']}"))
    return parts


def as_json(results: list[dict]) -> dict[str, Any]:
    rows = attempts(results)
    return {"attempts": rows, "restarts": restarts(rows)}


WORKLOAD = Workload("elastic", views=views, data=as_json, check_options=check_options,
                    check_lab=check_lab, check_placement=check_placement)
