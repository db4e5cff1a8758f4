"""Start a launch plan's processes on this machine, as the local backend does, for workload tests.

Services (the replica store) first, then every node's processes; each node's
output goes to a file (no pipe can fill up), direct-mode workers' lines get
the `[rank<N>]:` prefix the backends add. Results come back tagged with the
node's replica, so ranks that repeat in every replica stay apart.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from labctl import logs, plan as planmod
from labctl.backends.local.placement import local_placement
from labctl.backends.local.backend import free_port
from labctl.spec import from_dict, ports_taken

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 240


@dataclass
class LabRun:
    codes: list[int]                                    # one per node, in plan order
    results: list[dict]
    output: str
    service_codes: list[int | None] = field(default_factory=list)

    def named(self, workload: str, name: str) -> list[dict]:
        return [r for r in self.results if r.get("workload") == workload and r.get("name") == name]

    def failed(self) -> list[dict]:
        return [r for r in self.results if not r.get("ok")]


def local_plan(tmp_path: Path, **fields) -> planmod.LaunchPlan:
    spec = from_dict({"timeout": TIMEOUT_S, **fields})
    port = free_port(span=ports_taken(spec))
    placement = local_placement(spec, port, run_folder=tmp_path / "run")
    return planmod.plan(spec, placement, f"t{os.getpid()}-{tmp_path.name[-20:]}")


def run_plan(tmp_path: Path, the_plan: planmod.LaunchPlan, extra_env: dict | None = None) -> LabRun:
    """Run every process of the plan to its end (or TIMEOUT_S); return codes, results, output."""
    env0 = {**os.environ, **(extra_env or {})}
    services, procs = [], []      # (popen, log path, node, rank)
    if the_plan.placement.shared_dir:       # as the local backend makes it
        Path(the_plan.placement.shared_dir).mkdir(parents=True, exist_ok=True)
    try:
        for svc in the_plan.services:
            for i, proc in enumerate(svc.processes):
                log = tmp_path / f"service-{svc.hostname}-{i}.log"
                with open(log, "wb") as f:
                    services.append((subprocess.Popen(list(proc.argv), cwd=REPO, env={**env0, **proc.env},
                                                      stdout=f, stderr=subprocess.STDOUT,
                                                      start_new_session=True), log))
        for node in the_plan.nodes:
            for j, proc in enumerate(node.processes):
                log = tmp_path / f"node{node.index}-{j}.log"
                with open(log, "wb") as f:
                    procs.append((subprocess.Popen(list(proc.argv), cwd=REPO, env={**env0, **proc.env},
                                                   stdout=f, stderr=subprocess.STDOUT,
                                                   start_new_session=True), log, node, proc.rank))
        deadline = time.monotonic() + TIMEOUT_S
        while any(p.poll() is None for p, *_ in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for p, *_ in procs + services:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p, *_ in procs + services:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    timed_out = time.monotonic() >= deadline
    results, texts, codes = [], [], []
    for node in the_plan.nodes:
        mine = [(p, log, rank) for p, log, n, rank in procs if n is node]
        text = ""
        for p, log, rank in mine:
            raw = log.read_text(errors="replace")
            text += raw if rank is None else "".join(f"[rank{rank}]:{line}\n" for line in raw.splitlines())
        codes.append(next((p.returncode for p, _, _ in mine if p.returncode != 0), 0))
        for rank, lines in split_by_rank(text).items():
            for record in logs.parse_results(lines, rank):
                if the_plan.spec.replicas > 1:
                    assert record.get("replica", node.replica) == node.replica, record
                    record["replica"] = node.replica
                results.append(record)
        texts.append(f"==> node {node.index} ({node.hostname}) <==\n{text}")
    texts += [f"==> service {log.name} <==\n{log.read_text(errors='replace')}" for _, log in services]
    output = "\n".join(texts)
    assert not timed_out, f"lab did not finish within {TIMEOUT_S}s\n{output[-6000:]}"
    return LabRun(codes, results, output, [p.returncode for p, _ in services])


def split_by_rank(text: str) -> dict[int, list[str]]:
    """A node log's rank lines, grouped by rank, prefix removed: the reader labctl's run
    folder uses (logs.NodeLogReader, fed bytes as it is from a file)."""
    written: dict[int, bytearray] = {}
    reader = logs.NodeLogReader(lambda rank, data: written.setdefault(rank, bytearray()).extend(data))
    reader.feed_bytes(text.encode())
    reader.close()
    return {rank: data.decode(errors="replace").split("\n")[:-1] for rank, data in written.items()}

