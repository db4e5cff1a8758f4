"""Local backend: every node is a process tree on this machine, kept by a node guard.

Each node runs under `nodeguard.py` beside this module (in a session of its own, working
in `work/node-<i>/` of the run folder unless the spec says `workdir: invoking`,
with LAB_SHARED_DIR naming the run folder's `shared/`, which every node sees, in the plan),
which writes the node's output straight into `nodes/node-<i>.log`, keeps every
descendant in its tree (child subreaper), and stops the tree when labctl asks
(SIGTERM) or dies (the lifeline pipe reads EOF). So a lab never outlives
labctl, even when labctl is SIGKILLed, and the logs survive it.
"""
from __future__ import annotations

import errno
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import IO


from ... import procs
from ...errors import LabError
from ...faults import Fault, NotYet
from ...logs import JoinReader
from ...outcome import NodeOutcome, NodeState, from_exit_code
from ...plan import LaunchPlan, Placement
from ...runrecord import Leftover
from ...rundir import PLAN_FILE, SHARED_SUBDIR, SERVICES_SUBDIR, RunDir, node_exit_name, rank_logs_in
from ...spec import LabSpec, ports_taken
from ..base import (Action, Backend, BackendState, Bound, BoundRun, PreflightError, RunView,
                    dispatch)
from . import nodeguard
from .placement import local_placement
from workloads._protocol import Env, debug_server_missing
from workloads._protocol.ports import free_port

TERM_GRACE_S = 5.0         # SIGTERM, then SIGKILL
GUARD_EXIT_S = TERM_GRACE_S + 5.0
STACK_WAIT_S = 1.5         # after the stack signal, until every dump reached the node log


def port_taken(port: int) -> bool:
    """Whether something on this machine already listens on `port` (loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def visible_gpus() -> int:
    """NVIDIA devices this machine exposes, without importing torch."""
    return len(glob.glob("/dev/nvidia[0-9]*"))


def nccl_refusal(spec: LabSpec, gpus: int) -> str | None:
    """Why an nccl lab cannot run on this machine's `gpus`, or None.

    Local nodes share the machine's GPUs and every node's local rank k takes
    cuda:k, so with more than one node two ranks would share a GPU, which NCCL
    refuses (duplicate GPU): only one node can use them."""
    if gpus < spec.nproc_per_node:
        return (f"dist_backend nccl needs a GPU per worker ({spec.nproc_per_node} per node), "
                f"and this machine has {gpus}; use --dist-backend gloo (or auto)")
    if spec.nodes > 1:
        return (f"dist_backend nccl on the local backend runs one node only: the {spec.nodes} "
                f"nodes share this machine's {gpus} GPU(s) and each node's local rank k takes "
                "cuda:k, so two ranks would share a GPU (NCCL: duplicate GPU); use --nodes 1 "
                f"--nproc-per-node {min(gpus, spec.nodes * spec.nproc_per_node)}, gloo, or a "
                "container backend")
    return None


def processes_of_run(run_id: str) -> list[int]:
    """PIDs whose environment carries LAB_RUN_ID=<run_id>: guards, agents, workers."""
    return procs.with_env(Env.RUN_ID, run_id)


def _helper(*args: str) -> subprocess.CompletedProcess:
    """`python -m workloads._stacks ARGS` on this machine: the ranks' own helper, which the
    container backends run inside each container (stacks: SIGRTMIN+6 to every rank of the run;
    kill-rank: SIGKILL to one, exit 3 when it is not running yet)."""
    argv = [sys.executable, "-m", "workloads._stacks", *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", "timed out after 60 s")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _settled(logs: list[Path], before: list[int], longest: float, quiet: float = 0.3) -> None:
    """Wait until every node log has grown since `before` and then stayed the same for
    `quiet` seconds (the dumps are in), or `longest` seconds in all."""
    end = time.monotonic() + longest
    last, still_since = before, time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.05)
        now = [_size(p) for p in logs]
        if now != last:
            last, still_since = now, time.monotonic()
        elif all(a > b for a, b in zip(now, before)) and time.monotonic() - still_since >= quiet:
            return


def kill_processes(pids: list[int], grace: float = 2.0) -> list[dict]:
    """SIGTERM, then SIGKILL what is left; returns what was found (pid, command)."""
    found = [{"pid": pid, "command": procs.command_of(pid)} for pid in pids]
    for pid in pids:
        procs.send_signal(pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(procs.alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        procs.send_signal(pid, signal.SIGKILL)
    return found


def _from_status_file(path: Path, index: int, hostname: str, guard_code: int | None,
                      alive: bool = False) -> NodeOutcome:
    """A node's outcome from its guard's status file (exit code, who stopped it)."""
    try:
        status = json.loads(path.read_text())
        code = status["exit_code"]
    except (OSError, ValueError, KeyError):     # no file: the guard was killed, or still runs
        if guard_code is None:
            state = NodeState.RUNNING if alive else NodeState.LOST
            return NodeOutcome(index, hostname, state=state,
                               reason=None if alive else "no outcome recorded")
        state, sig = from_exit_code(guard_code)
        return NodeOutcome(index, hostname, guard_code, state, signal=sig)
    state, sig = from_exit_code(code)
    outcome = NodeOutcome(index, hostname, code, state, signal=sig)
    if status.get("stopped") and state is not NodeState.SUCCEEDED:
        outcome.state, outcome.reason = NodeState.STOPPED, status["stopped"]
    return outcome


class LocalBackend(Backend):
    name = "local"
    poll_interval = 0.05       # the end of a run is noticed this late
    live_logs = True           # the guards write node logs into the run folder as they go
    # No partition or delay: local nodes share this machine's one network namespace.
    fault_kinds = ("kill-rank", "kill-node", "stop-node")
    hears_joins = True         # the ranks' lines are in the run folder as they come

    @classmethod
    def shared_dir(cls, spec: LabSpec) -> str | None:
        """Always one: the run folder's `shared/` (its absolute path comes with the folder)."""
        return SHARED_SUBDIR

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.guards: dict[int, subprocess.Popen] = {}
        self.services: list[subprocess.Popen] = []      # plan.services: the replica store
        self.logs: list[IO[bytes]] = []
        self.lifeline_w: int | None = None
        self.joins = JoinReader()                       # the join fault clock's reader

    @classmethod
    def links_refusal(cls, spec: LabSpec) -> str | None:
        return ("the local backend cannot shape links: its nodes share this machine's "
                "loopback, and shaping lo (as root) would slow every program on the machine; "
                "use --backend compose (docs/network.md)")

    def placement(self, spec: LabSpec, run_folder: Path | None = None) -> Placement:
        script = str(Path(spec.script).resolve()) if spec.script else None
        if script and not Path(script).is_file():
            raise FileNotFoundError(f"script: no such file: {spec.script}")
        debug_port = (spec.debug_server.port or free_port()) if spec.debug_server is not None else None
        return local_placement(spec, spec.rdzv_port or free_port(ports_taken(spec)),
                               script_path=script, run_folder=run_folder,
                               debug_server_port=debug_port)

    def preflight(self, plan: LaunchPlan) -> None:
        spec = plan.spec
        refusal = nccl_refusal(spec, visible_gpus()) if spec.dist_backend == "nccl" else None
        if refusal:
            raise PreflightError(refusal)
        if port_taken(plan.placement.master_port):
            raise PreflightError(
                f"rendezvous port {plan.placement.master_port} on 127.0.0.1 is already in use "
                "(EADDRINUSE); choose another --rdzv-port or leave it out for a free one")
        if spec.debug_server is not None:
            missing = debug_server_missing()      # the ranks run this very Python
            if missing:
                raise PreflightError(
                    f"debug_server: torch's debug server needs {', '.join(missing)}, which this "
                    f"Python ({sys.executable}) lacks; pip install 'labctl[debug]' (or leave "
                    "--debug-server out)")
            port = plan.placement.debug_server_port
            if port is not None and port_taken(port):
                raise PreflightError(
                    f"debug server port {port} on this machine is already in use (EADDRINUSE); "
                    "choose another debug_server.port or leave it out for a free one")

    def debug_server_at(self, plan: LaunchPlan) -> str | None:
        port = plan.placement.debug_server_port
        return None if port is None else f"http://127.0.0.1:{port}"

    # ---- the run ---------------------------------------------------------------
    def submit(self, plan: LaunchPlan, rundir: RunDir) -> BackendState:
        """A node guard per node (the services first). The record holds this labctl, its
        host and every guard's pid (`labctl down` finds them), and whether the guards
        write the rank logs; `self.for_record` grows guard by guard."""
        self.bind(BoundRun.of_plan(plan, Bound.STARTED, rundir))
        self.folder = rundir
        read_end, self.lifeline_w = os.pipe()        # the write end never leaves labctl
        guards: dict[str, int] = {}
        self.for_record = BackendState({"controller_pid": os.getpid(), "host": socket.gethostname(),
                                   "guards": guards})
        try:
            # services (the replica store) first: they must be up before any node dials them
            for i, svc in enumerate(plan.services):
                (rundir.path / SERVICES_SUBDIR).mkdir(exist_ok=True)
                stem = rundir.path / SERVICES_SUBDIR / svc.hostname
                self.services.append(self._guard(rundir, read_end, ["--service", str(i)], stem.with_name(stem.name + ".log"),
                                                 stem.with_name(stem.name + ".exit.json"), rundir.path))
            if plan.placement.shared_dir:
                Path(plan.placement.shared_dir).mkdir(parents=True, exist_ok=True)
            ranks = [p.rank for node in plan.nodes for p in node.processes if p.rank is not None]
            # direct mode, each rank once (replicas repeat ranks: their logs are split as usual)
            by_guards = bool(ranks) and len(ranks) == len(set(ranks))
            self.for_record = replace(self.for_record, rank_logs_by_guards=by_guards)
            for node in plan.nodes:
                which = ["--node", str(node.index)]
                if by_guards:
                    which += ["--rank-logs", str(rundir.ranks_dir.resolve()),
                              "--own-log", str(rundir.guard_log(node.index).resolve())]
                self.guards[node.index] = self._guard(
                    rundir, read_end, which, rundir.node_log(node.index), self._status_file(node.index),
                    rundir.workdir(node.index))
                guards[str(node.index)] = self.guards[node.index].pid
        except OSError as exc:      # the run folder failed under us: say which and why
            if exc.errno in (errno.EADDRINUSE, errno.E2BIG, errno.ENOEXEC):
                raise
            raise rundir.storage_error(exc) from None
        finally:
            os.close(read_end)
        return self.for_record

    def _guard(self, rundir: RunDir, lifeline: int, which: list[str], log_path: Path, status_path: Path,
               cwd: Path) -> subprocess.Popen:
        """One node guard: `log_path` gets the output, `status_path` the outcome."""
        log = open(log_path, "ab")
        self.logs.append(log)
        return subprocess.Popen(
            [sys.executable, nodeguard.__file__, "--plan", str((rundir.path / PLAN_FILE).resolve()),
             *which, "--status", str(status_path.resolve()),
             "--lifeline", str(lifeline), "--grace", str(TERM_GRACE_S)],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, Env.RUN_ID: self.run.run_id},
            start_new_session=True, pass_fds=(lifeline,))

    def _status_file(self, index: int) -> Path:
        return (self.folder.nodes_dir / node_exit_name(index)).resolve()

    def _outcome(self, index: int, hostname: str) -> NodeOutcome:
        guard = self.guards.get(index)
        if guard is None:
            return NodeOutcome(index, hostname)
        if guard.poll() is None:
            return NodeOutcome(index, hostname, state=NodeState.RUNNING)
        return _from_status_file(self._status_file(index), index, hostname, guard.returncode)

    def describe(self, within: float = 0.0, joins: bool = False) -> RunView:
        time.sleep(within)
        return RunView(self._outcomes, self._alive, self._joined if joins else lambda: None)

    def _outcomes(self) -> list[NodeOutcome]:
        """The guards' exit status; for a run this instance did not start, their status
        files (or still running, while any process of the run is)."""
        if self.run.how is not Bound.STARTED:
            alive = self._alive()
            return [_from_status_file(self._status_file(i), i, h, None, alive)
                    for i, h in self.run.hostnames.items()]
        return [self._outcome(i, h) for i, h in self.run.hostnames.items()]

    def _joined(self) -> int:
        """The join lines in the node logs (direct mode: the rank logs the guards write)."""
        folder = self.folder
        logs = rank_logs_in(folder.ranks_dir) if self.for_record.rank_logs_by_guards else folder.node_logs()
        return self.joins.read([path for _, path in logs])

    def signal(self, action: Action) -> list[str]:
        return dispatch(self.name, action, stop=self._stop, stacks=self._take_stacks, begin=self._inject,
                        end=self._heal)

    def _stop(self, indices: tuple[int, ...]) -> None:
        for i in indices:
            procs.send_signal(self.guards[i].pid, signal.SIGTERM)
        end = time.monotonic() + GUARD_EXIT_S
        for i in indices:
            try:
                self.guards[i].wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.guards[i].kill()
                self.guards[i].wait()

    def stream(self, rundir: RunDir, strict: bool = False) -> list[NodeOutcome]:
        """Nothing to fetch: the guards write each node's log straight into the folder.
        For a run started here, note what they had to kill after the ranks ended."""
        if self.run.how is not Bound.STARTED:
            return self._outcomes()
        for guard in self.guards.values():
            try:
                guard.wait(timeout=GUARD_EXIT_S)
            except subprocess.TimeoutExpired:
                guard.kill()
                guard.wait()
        leftovers = []
        for index in self.run.hostnames:
            try:
                status = json.loads(self._status_file(index).read_text())
            except (OSError, ValueError):
                continue
            leftovers += [Leftover(index, item.get("pid"), item.get("command"))
                          for item in status.get("leftovers", [])]
        self.for_record = replace(self.for_record, leftovers=tuple(leftovers))
        return self._outcomes()

    def delete(self) -> str:
        """Stop the services, close the lifeline and sweep: nothing carrying this run's
        id may remain. A run this instance did not start: stop whatever of it still runs."""
        if not self.bound:
            return ""
        if self.run.how is not Bound.STARTED:
            return self._stop_leftovers()
        for svc in self.services:
            procs.send_signal(svc.pid, signal.SIGTERM)
        for svc in self.services:
            try:
                svc.wait(timeout=GUARD_EXIT_S)
            except subprocess.TimeoutExpired:
                svc.kill()
                svc.wait()
        for log in self.logs:
            log.close()
        if self.lifeline_w is not None:
            os.close(self.lifeline_w)
            self.lifeline_w = None
        escaped = kill_processes(processes_of_run(self.run.run_id))
        if escaped:
            self.for_record = replace(self.for_record, leftovers=(*(self.for_record.leftovers or ()), *(
                Leftover(None, item["pid"], item["command"]) for item in escaped)))
            return f"killed {len(escaped)} process(es) of the run that outlived their node"
        return ""

    # ---- the failure lab -------------------------------------------------------------
    def _take_stacks(self) -> list[str]:
        """The stack signal (SIGRTMIN+6) to every rank: the helper every backend runs in the node's context
        (`python -m workloads._stacks RUN_ID`, here on this machine); the dumps land in
        the node logs."""
        folder = getattr(self, "folder", None)
        logs = [folder.node_log(i) for i in self.run.hostnames] if folder is not None else []
        before = [_size(p) for p in logs]
        done = _helper(self.run.run_id)
        if logs:                          # faulthandler writes at once; torchrun's tee follows
            _settled(logs, before, STACK_WAIT_S)
        else:
            time.sleep(STACK_WAIT_S)
        ranks = sorted(int(pair.split(":")[0]) for pair in done.stdout.split() if ":" in pair)
        return [f"asked rank(s) {', '.join(map(str, ranks)) or 'none'} for their stacks"]

    def _tree(self, index: int) -> list[int]:
        """A node's guard and everything below it."""
        guard = self.guards[index].pid
        return [guard, *procs.descendants(guard)]

    def _inject(self, fault: Fault) -> str:
        if fault.kind == "kill-rank":
            done = _helper("kill-rank", self.run.run_id, str(fault.target))
            if done.returncode != 0:
                raise NotYet(f"rank {fault.target} is not running yet")
            return f"SIGKILL to rank {fault.target} (pid {done.stdout.strip()})"
        tree = self._tree(fault.target)
        if fault.kind == "kill-node":
            for pid in tree:
                procs.send_signal(pid, signal.SIGKILL)
            return f"SIGKILL to node {fault.target}'s {len(tree)} process(es) (guard pid {tree[0]})"
        if fault.kind == "stop-node":
            for pid in tree:
                procs.send_signal(pid, signal.SIGSTOP)
            return f"SIGSTOP to node {fault.target}'s {len(tree)} process(es)"
        raise LabError(f"the local backend cannot do {fault.kind}")

    def _heal(self, fault: Fault) -> str:
        if fault.kind == "stop-node":
            tree = self._tree(fault.target)
            for pid in tree:
                procs.send_signal(pid, signal.SIGCONT)
            return f"SIGCONT to node {fault.target}'s {len(tree)} process(es)"
        raise LabError(f"the local backend cannot end {fault.kind}")

    # ---- runs whose labctl is gone ------------------------------------------------
    def attach(self, target: RunDir | str) -> LaunchPlan | None:
        if isinstance(target, str):           # a run id: nothing on this machine names it
            return super().attach(target)
        self.bind(BoundRun.of_folder(target))
        self.folder = target
        return None

    def _alive(self) -> bool:
        return bool(processes_of_run(self.run.run_id))

    def _stop_leftovers(self) -> str:
        """Stop whatever of a run started elsewhere still runs; a truthful line on what was stopped."""
        run_id = self.run.run_id
        pids = processes_of_run(run_id)
        if not pids:
            return f"nothing running of run {run_id}"
        found = kill_processes(pids)
        left = [p for p in pids if procs.alive(p)]
        if left:
            raise LabError(f"could not stop {len(left)} process(es) of run {run_id}: "
                           f"pids {', '.join(map(str, left))}")
        return (f"stopped {len(found)} process(es) of run {run_id}: "
                + ", ".join(f"{p['pid']} ({p['command'][:60]})" for p in found[:8])
                + (" ..." if len(found) > 8 else ""))
