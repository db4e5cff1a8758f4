"""Local backend: every node is a process tree on this machine.

Each node runs its plan processes (one torchrun agent, or its workers in
direct mode) in a session of its own, so that stopping a node — on a failing
rank, the deadline or Ctrl-C — kills everything it started with one signal.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

from .. import logs
from ..plan import LaunchPlan, Placement, local_placement, ports_needed
from ..rundir import NodeOutcome, RunDir
from ..spec import LabSpec

FAILURE_GRACE_S = 8.0      # after the first failure, let the others notice and exit by themselves
TERM_GRACE_S = 5.0         # SIGTERM, then SIGKILL
POLL_S = 0.05              # how often node processes are checked: the end of a run is noticed this late


def free_port(span: int = 1) -> int:
    """A free loopback port; with span > 1, the first of `span` free consecutive ports
    (replicas and tcp:// init count their ports up from the rendezvous port)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if span == 1 or (port + span <= 65536 and all(_bindable(port + k) for k in range(1, span))):
            return port
    raise OSError(f"no {span} consecutive free ports found on 127.0.0.1")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def placement(spec: LabSpec) -> Placement:
    script = str(Path(spec.script).resolve()) if spec.script else None
    if script and not Path(script).is_file():
        raise FileNotFoundError(f"script: no such file: {spec.script}")
    return local_placement(spec, spec.rdzv_port or free_port(ports_needed(spec)), script_path=script)


class _Proc:
    """One started process and the thread copying its output into the node log."""

    def __init__(self, popen: subprocess.Popen, sink: TextIO, lock: threading.Lock,
                 prefix: str, rank: int | None):
        self.popen, self.sink, self.lock, self.rank = popen, sink, lock, rank
        self.exit_noted = False
        self.thread = threading.Thread(target=self._pump, args=(sink, lock, prefix), daemon=True)
        self.thread.start()

    def note_exit(self, code: int) -> None:
        """Direct-mode workers: log the exit in order, as the container wrapper does."""
        if self.rank is None or self.exit_noted:
            return
        self.exit_noted = True
        self.thread.join(timeout=2)          # its last output first
        with self.lock:
            self.sink.write(logs.exit_line(self.rank, code) + "\n")
            self.sink.flush()

    def _pump(self, sink: TextIO, lock: threading.Lock, prefix: str) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace")
            with lock:
                sink.write(prefix + line)
                sink.flush()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every process group, wait, then SIGKILL what is left (also orphans)."""
    for p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    # Kill the whole group even when its leader is gone: workers may outlive the agent.
    for p in procs:
        _signal_group(p, signal.SIGKILL)
        try:
            p.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def run(plan: LaunchPlan, rundir: RunDir, deadline: float,
        progress: Callable[[str], None] = lambda line: None) -> tuple[list[NodeOutcome], str, str]:
    """Start every node, wait for all or the first failure/deadline, stop everything.

    Returns (node outcomes, state, message) where state is passed|failed|timeout|interrupted.
    """
    started: list[tuple[int, _Proc]] = []
    sinks: list[TextIO] = []
    state, message = "passed", ""
    t0 = time.monotonic()
    exited: dict[int, float] = {}      # node index -> seconds when its first process ended
    # ---- [init-methods] plan.services (the replica store): started before every
    # node, stopped after all of them, never part of the outcome.
    services: list[subprocess.Popen] = []
    service_logs: list[TextIO] = []
    for svc in plan.services:
        (rundir.path / "services").mkdir(exist_ok=True)
        service_logs.append(open(rundir.path / "services" / f"{svc.hostname}.log", "w"))
        for proc in svc.processes:
            services.append(subprocess.Popen(
                list(proc.argv), env={**os.environ, **proc.env}, stdout=service_logs[-1],
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
    # ---- [/init-methods]
    try:
        for node in plan.nodes:
            sink = open(rundir.node_log(node.index), "w")
            sinks.append(sink)
            lock = threading.Lock()
            for proc in node.processes:
                popen = subprocess.Popen(
                    list(proc.argv), env={**os.environ, **proc.env},
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                prefix = logs.rank_prefix(proc.rank) if proc.rank is not None else ""
                started.append((node.index, _Proc(popen, sink, lock, prefix, proc.rank)))
        first_failure: float | None = None
        last_line = ""
        while True:
            codes = [p.popen.poll() for _, p in started]
            for (i, p), c in zip(started, codes):
                if c is not None and i not in exited:
                    exited[i] = round(time.monotonic() - t0, 3)
                if c is not None:
                    p.note_exit(c)
            if all(c is not None for c in codes):
                progress(f"[{time.monotonic() - t0:6.1f}s] {_progress_line(plan, started, codes)}")
                break
            if any(c not in (None, 0) for c in codes) and first_failure is None:
                first_failure = time.monotonic()
                bad = sorted({i for (i, _), c in zip(started, codes) if c not in (None, 0)})
                progress(f"node {', '.join(map(str, bad))} failed; stopping the lab")
            if first_failure is not None and time.monotonic() - first_failure > FAILURE_GRACE_S:
                break
            if time.monotonic() > deadline:
                state, message = "timeout", f"deadline of {plan.spec.timeout:g}s passed"
                progress(f"timeout: {message}; stopping the lab")
                break
            line = _progress_line(plan, started, codes)
            if line != last_line:
                progress(f"[{time.monotonic() - t0:6.1f}s] {line}")
                last_line = line
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        state, message = "interrupted", "interrupted (Ctrl-C)"
        progress("interrupted: stopping the lab")
    finally:
        stop_all([p.popen for _, p in started])
        for _, p in started:
            p.thread.join(timeout=5)
            if p.popen.returncode is not None:
                p.note_exit(p.popen.returncode)
        for sink in sinks:
            sink.close()
        # ---- [init-methods] the services go last
        stop_all(services)
        for log in service_logs:
            log.close()
        # ---- [/init-methods]

    outcomes = []
    for node in plan.nodes:
        codes = [p.popen.returncode for i, p in started if i == node.index]
        if len(codes) < len(node.processes):
            outcomes.append(NodeOutcome(node.index, node.hostname, None, "pending"))
            continue
        code = next((c for c in codes if c != 0), 0)
        if code == 0:
            node_state = "succeeded"
        elif code < 0:
            node_state, code = "killed", code
        else:
            node_state = "failed"
        outcomes.append(NodeOutcome(node.index, node.hostname, code, node_state,
                                    exited.get(node.index)))
    if state == "passed" and any(o.state != "succeeded" for o in outcomes):
        state = "failed"
    return outcomes, state, message


def _progress_line(plan: LaunchPlan, started, codes) -> str:
    parts = []
    for node in plan.nodes:
        mine = [c for (i, _), c in zip(started, codes) if i == node.index]
        if any(c is None for c in mine):
            status = "running"
        elif all(c == 0 for c in mine):
            status = "succeeded"
        else:
            status = "failed"
        parts.append(f"node-{node.index}: {status}")
    return "  ".join(parts)


def down(rundir: RunDir) -> str:
    """Local runs stop every process before `up` returns; there is nothing to delete."""
    return f"nothing to delete: {rundir.path.name} ran as local processes, all stopped when it ended"
