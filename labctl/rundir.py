"""The run folder: everything a run leaves behind, whatever its outcome.

    runs/<run_id>/
      spec.yaml            the resolved lab spec
      plan.json            every node's exact argv and env
      rendered/            compose.yaml or k8s.yaml (container backends)
      nodes/node-<i>.log   one log per node (stdout+stderr, as collected)
      ranks/rank-<r>.log   the same output split per global rank
      results.jsonl        one JSON result per line (workload, name, rank, ok, ...)
      events/              backend events (Kubernetes), when there are any
      status.json          the outcome, machine-readable
      report.md            the report printed at the end of `labctl up`
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import logs
from .errors import LabError
from .plan import LaunchPlan
from .spec import LabSpec, dump, from_dict

STATES = ("running", "passed", "failed", "timeout", "interrupted", "error")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class NodeOutcome:
    """How one node's processes ended, as the backend saw it."""
    index: int
    hostname: str
    exit_code: int | None          # None: killed by labctl or never started
    state: str                     # succeeded | failed | killed | pending
    exited_s: float | None = None  # seconds after start when it ended, when the backend knows


@dataclass
class RunDir:
    path: Path
    meta: dict[str, Any] = field(default_factory=dict)

    # ---- creating -------------------------------------------------------
    @classmethod
    def create(cls, plan: LaunchPlan, out: str | os.PathLike | None = None,
               root: str | os.PathLike = "runs") -> "RunDir":
        path = Path(out) if out else Path(root) / plan.run_id
        if path.exists() and any(path.iterdir()):
            raise FileExistsError(f"run folder {path} exists and is not empty; "
                                  "choose another --out")
        for sub in ("nodes", "ranks", "rendered"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        (path / "spec.yaml").write_text(dump(plan.spec))
        (path / "plan.json").write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
        run = cls(path)
        run.meta = {
            "run_id": plan.run_id, "lab": plan.spec.name, "backend": plan.spec.backend,
            "launcher": plan.spec.launcher, "dist_backend": plan.spec.dist_backend,
            "nodes": plan.spec.nodes, "nproc_per_node": plan.spec.nproc_per_node,
            "world_size": plan.spec.world_size, "state": "running", "started": _now(),
        }
        run.write_status()
        return run

    @classmethod
    def open(cls, path: str | os.PathLike) -> "RunDir":
        path = Path(path)
        if not (path / "status.json").is_file():
            raise FileNotFoundError(f"{path}: not a run folder (no status.json); "
                                    "runs live under runs/<lab>-<stamp>/")
        try:
            return cls(path, json.loads((path / "status.json").read_text()))
        except ValueError as exc:
            raise LabError(f"{path}/status.json: unreadable ({exc}); "
                           "the run folder is damaged") from None

    # ---- reading --------------------------------------------------------
    @property
    def spec(self) -> LabSpec:
        return from_dict(yaml.safe_load((self.path / "spec.yaml").read_text()) or {},
                         source=str(self.path / "spec.yaml"))

    @property
    def plan(self) -> dict[str, Any]:
        return json.loads((self.path / "plan.json").read_text())

    def node_log(self, index: int) -> Path:
        return self.path / "nodes" / f"node-{index}.log"

    def rank_log(self, rank: int) -> Path:
        return self.path / "ranks" / f"rank-{rank}.log"

    def results(self) -> list[dict[str, Any]]:
        f = self.path / "results.jsonl"
        if not f.is_file():
            return []
        return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]

    # ---- writing --------------------------------------------------------
    def write_node_log(self, index: int, text: str) -> None:
        self.node_log(index).write_text(text)

    def write_rendered(self, name: str, text: str) -> Path:
        target = self.path / "rendered" / name
        target.write_text(text)
        return target

    def write_status(self) -> None:
        tmp = self.path / "status.json.tmp"
        tmp.write_text(json.dumps(self.meta, indent=2, sort_keys=False) + "\n")
        tmp.replace(self.path / "status.json")

    def finalize(self, outcomes: list[NodeOutcome], state: str, message: str = "") -> None:
        """Split node logs per rank, gather results, decide the run's state; write all down."""
        assert state in STATES
        world = self.meta["world_size"]
        rank_lines: dict[int, list[str]] = {}
        exit_codes: dict[int, int] = {}
        root_causes: dict[int, int] = {}       # node index -> rank torchrun blamed first
        for node in outcomes:
            f = self.node_log(node.index)
            text = f.read_text(errors="replace") if f.is_file() else ""
            if not f.is_file():
                f.write_text("")
            for rank, lines in logs.split_by_rank(text).items():
                rank_lines.setdefault(rank, []).extend(lines)
            exit_codes.update(logs.torchrun_failures(text))
            exits = logs.worker_exits(text)
            exit_codes.update((r, c) for r, c in exits if c != 0)
            cause = logs.torchrun_root_cause(text)
            if cause is None:
                cause = next((r for r, c in exits if c != 0), None)
            if cause is not None:
                root_causes[node.index] = cause
        results: list[dict[str, Any]] = []
        for rank in sorted(rank_lines):
            self.rank_log(rank).write_text("\n".join(rank_lines[rank]) + "\n")
            results.extend(logs.parse_results(rank_lines[rank], rank=rank))
        with open(self.path / "results.jsonl", "w") as f:
            for record in results:
                f.write(json.dumps(record, sort_keys=True) + "\n")

        failed_checks = [r for r in results if not r.get("ok", False)]
        failed_ranks = sorted({r["rank"] for r in failed_checks if isinstance(r.get("rank"), int)}
                              | set(exit_codes))
        finished = {r["rank"] for r in results if r.get("name") == "workload_done"}
        silent = sorted(set(range(world)) - set(rank_lines))
        failed_nodes = [n for n in outcomes if n.state != "succeeded"]
        if state == "passed" and (failed_checks or failed_nodes or exit_codes):
            state = "failed"
        if state == "passed" and self.spec.workloads and finished != set(range(world)):
            state = "failed"
            message = message or "some ranks never finished their workloads"
        self.meta.update({
            "state": state,
            "first_failure": _first_failure(outcomes, root_causes, exit_codes, failed_checks),
            "ok": state == "passed",
            "finished": _now(),
            "message": message,
            "node_outcomes": [vars(n) for n in outcomes],
            "rank_exit_codes": {str(k): v for k, v in sorted(exit_codes.items())},
            "failed_ranks": failed_ranks,
            "ranks_without_output": silent,
            "checks": {"total": len(results), "failed": len(failed_checks),
                       "skipped": sum(1 for r in results if r.get("skipped"))},
            "failed_checks": [
                {k: r.get(k) for k in ("workload", "name", "rank", "detail")} for r in failed_checks
            ][:50],
        })
        self.write_status()


def _first_failure(outcomes: list[NodeOutcome], root_causes: dict[int, int],
                   exit_codes: dict[int, int], failed_checks: list[dict]) -> dict | None:
    """The rank that failed first: the root cause on the node that failed earliest.

    When one rank dies its peers fail too (closed connections) or are stopped
    (negative exit codes); naming the first one saves the reader a log hunt.
    """
    failed = [n for n in outcomes if n.state in ("failed", "killed")]
    failed.sort(key=lambda n: (n.exited_s is None, n.exited_s or 0.0, n.state != "failed"))
    for node in failed:
        if node.index in root_causes:
            rank = root_causes[node.index]
            return {"rank": rank, "node": node.index, "exit_code": exit_codes.get(rank)}
    positive = sorted((r, c) for r, c in exit_codes.items() if c > 0)
    if positive:
        return {"rank": positive[0][0], "node": None, "exit_code": positive[0][1]}
    if failed_checks:
        r = failed_checks[0]
        return {"rank": r.get("rank"), "node": None, "exit_code": None,
                "check": f"{r.get('workload')}/{r.get('name')}"}
    return None
