"""A backend written outside labctl, in one module, registered with one line:

    monkeypatch.setitem(backends.REGISTRY, "subprocess", "subprocess_backend:SubprocessBackend")

Each node's processes are plain children of this process (no node guard, no
containers): threads pump their output into the node's log, each line prefixed
`[rank<N>]:` and closed by the exit line a direct-mode node writes. Nothing in
labctl names it, and the lifecycle contract (tests/test_lifecycle_contract.py)
holds it to the rules every backend keeps.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from labctl.backends.base import Action, Backend, BackendState, Bound, BoundRun, RunView, Stop
from labctl.backends.local.backend import free_port, kill_processes, processes_of_run
from labctl.outcome import NodeOutcome, NodeState, from_exit_code
from labctl.backends.local.placement import local_placement
from labctl.plan import LaunchPlan, Placement
from labctl.rundir import RunDir
from labctl.spec import LabSpec, ports_taken

STOP_S = 5.0


class SubprocessBackend(Backend):
    name = "subprocess"
    poll_interval = 0.05

    def placement(self, spec: LabSpec, run_folder: Path | None = None) -> Placement:
        script = str(Path(spec.script).resolve()) if spec.script else None
        return local_placement(spec, spec.rdzv_port or free_port(ports_taken(spec)), script_path=script,
                               run_folder=run_folder)

    def submit(self, plan: LaunchPlan, rundir: RunDir) -> BackendState:
        self.bind(BoundRun.of_plan(plan, Bound.STARTED, rundir))
        self.procs: dict[int, list[subprocess.Popen]] = {}
        self.pumps: list[threading.Thread] = []
        if plan.placement.shared_dir:
            Path(plan.placement.shared_dir).mkdir(parents=True, exist_ok=True)
        for node in plan.nodes:
            log = open(rundir.node_log(node.index), "ab")
            lock = threading.Lock()
            self.procs[node.index] = []
            for proc in node.processes:
                child = subprocess.Popen(
                    list(proc.argv), env={**os.environ, **dict(proc.env), "LAB_RUN_ID": plan.run_id},
                    cwd=rundir.workdir(node.index), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, start_new_session=True)
                self.procs[node.index].append(child)
                pump = threading.Thread(target=_pump, args=(child, proc.rank, log, lock), daemon=True)
                pump.start()
                self.pumps.append(pump)
        return self.for_record

    def describe(self, within: float = 0.0, joins: bool = False) -> RunView:
        time.sleep(within)
        return RunView(self._outcomes)

    def _outcomes(self) -> list[NodeOutcome]:
        out = []
        for index, hostname in self.run.hostnames.items():
            codes = [p.poll() for p in self.procs.get(index, [])]
            if not codes:
                out.append(NodeOutcome(index, hostname))
            elif any(c is None for c in codes):
                out.append(NodeOutcome(index, hostname, state=NodeState.RUNNING))
            else:
                code = next((c for c in codes if c != 0), 0)
                state, sig = from_exit_code(code)
                out.append(NodeOutcome(index, hostname, code, state, signal=sig))
        return out

    def signal(self, action: Action) -> list[str]:
        if not isinstance(action, Stop):
            return super().signal(action)
        children = [p for i in action.indices for p in self.procs[i] if p.poll() is None]
        for p in children:
            _signal_group(p, signal.SIGTERM)
        end = time.monotonic() + STOP_S
        for p in children:
            try:
                p.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()
        return []

    def stream(self, rundir: RunDir, strict: bool = False) -> list[NodeOutcome]:
        for pump in self.pumps:
            pump.join(timeout=STOP_S)
        return self._outcomes()

    def delete(self) -> str:
        if not self.bound:
            return ""
        left = kill_processes(processes_of_run(self.run.run_id))
        return f"killed {len(left)} process(es) left of the run" if left else ""


def _pump(child: subprocess.Popen, rank: int | None, log, lock: threading.Lock) -> None:
    """One process's output into its node's log, line by line, then its exit line."""
    prefix = f"[rank{rank}]:".encode() if rank is not None else b""
    for line in iter(child.stdout.readline, b""):
        with lock:
            log.write(prefix + line)
            log.flush()
    code = child.wait()
    if rank is not None:
        with lock:
            log.write(f"labctl: rank {rank} exited with code {code} at {time.time():.3f}\n".encode())
            log.flush()


def _signal_group(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except ProcessLookupError:
        pass
