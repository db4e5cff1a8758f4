"""One local node's keeper: runs the node's processes so that none outlives the lab.

The local backend starts every node as `python nodeguard.py --plan plan.json
--node I --lifeline FD --status FILE`, in a session of its own, with stdout on
the node's log file. The guard

- becomes a *child subreaper* (PR_SET_CHILD_SUBREAPER), so whatever a rank
  starts stays its descendant however it detaches (new session, double fork);
- starts the node's processes from the launch plan (one torchrun agent, or in
  direct mode each worker, its output prefixed `[rank<N>]:` and its exit
  logged in order: the same lines the container wrapper writes);
- watches the *lifeline*, the read end of a pipe whose only write end lives
  in labctl: when labctl dies by any signal (SIGKILL, the OOM killer, a closed
  terminal) the pipe reads EOF and the guard stops the whole tree;
- on SIGTERM (labctl stopping the node) sends SIGTERM to its processes, then
  SIGKILL to every descendant after the grace period;
- after the node's processes end, kills whatever they left behind and writes
  the outcome and those leftovers (pid, command) to the status file.

Run by path; besides the standard library it imports `labctl.procs` (its process
tree, with psutil), `labctl.runnames` (the rank logs' names) and `workloads._protocol`
(the node log's own lines), found from the folder that holds the labctl package.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

if not __package__:
    # run by path (python .../labctl/backends/local/nodeguard.py): find workloads next to
    # the labctl package this file belongs to (three folders up), and nothing in this
    # folder (a module name there could shadow the standard library's)
    _here = os.path.dirname(os.path.abspath(__file__))
    _root = os.path.dirname(os.path.dirname(os.path.dirname(_here)))
    sys.path[:] = [_root] + [p for p in sys.path if os.path.abspath(p or ".") != _here]
from labctl import procs  # noqa: E402
from labctl.runnames import rank_log_name  # noqa: E402
from workloads._protocol import AGENT_IDLE_LINE, EXIT_LINE_PREFIX, MAX_PIECE   # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
REAP_S = 0.05
LEFTOVER_TERM_S = 1.0
PUMP_READ = 1 << 16        # a worker's output is moved this much at most per write


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False          # not Linux: the lifeline and the final sweep still work


def _die_with_parent() -> None:
    """preexec for the node's processes: SIGKILL if the guard itself is killed."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Guard:
    def __init__(self, processes: list[dict], grace: float, lifeline: int | None,
                 rank_logs: str | None = None, own_log: str | None = None, agents: bool = False):
        self.grace, self.lifeline = grace, lifeline
        self.agents = agents                      # a node's launcher agents (not a service)
        self.idle_at_stop = False                 # an agent had no workers left when stopped
        self.out = sys.stdout.buffer
        # with rank_logs, each rank's output also goes, as it came, to rank_logs/rank-<r>.log,
        # and the guard's own lines to own_log: labctl need not split the node log afterwards
        self.rank_logs = rank_logs
        self.own_log = open(own_log, "ab", buffering=0) if own_log else None
        self.lock = threading.Lock()
        self.procs: list[tuple[subprocess.Popen, dict, threading.Thread | None]] = []
        self.codes: dict[int, int] = {}           # pid -> returncode (subprocess convention)
        self.stop_requested = False
        self.stop_reason = ""
        self.write_error: str | None = None       # the first failed write into the run folder
        self.kill_at: float | None = None
        # Every process first, then the pumps: preexec_fn is only safe before threads exist.
        started = [(self._start(proc), proc) for proc in processes]
        for popen, proc in started:
            pump = None
            if proc.get("rank") is not None:
                rank_log = (open(os.path.join(self.rank_logs, rank_log_name(proc["rank"])), "ab",
                                 buffering=0) if self.rank_logs else None)
                pump = threading.Thread(target=self._pump, daemon=True,
                                        args=(popen, f"[rank{proc['rank']}]:".encode(), rank_log))
                pump.start()
            self.procs.append((popen, proc, pump))

    @staticmethod
    def _start(proc: dict) -> subprocess.Popen:
        piped = proc.get("rank") is not None
        return subprocess.Popen(
            proc["argv"], env={**os.environ, **proc["env"]}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if piped else None,
            stderr=subprocess.STDOUT if piped else None,
            start_new_session=True, preexec_fn=_die_with_parent)

    def _pump(self, popen: subprocess.Popen, prefix: bytes, rank_log=None) -> None:
        """A worker's output into the node log, prefixed, whole lines only (another
        worker's lines never land inside one), a block at a time: what the pipe has
        (up to PUMP_READ), not a write per line, so the guard keeps up with a rank
        that prints GB/s. The rank's own log gets the bytes exactly as they came; only
        the node log ends a line longer than MAX_PIECE there (memory stays flat)."""
        assert popen.stdout is not None
        fd, rest = popen.stdout.fileno(), b""
        while True:
            data = os.read(fd, PUMP_READ)
            if not data:
                break
            if rank_log is not None:
                self._save(rank_log.write, data)
            data = rest + data if rest else data
            cut = data.rfind(b"\n") + 1
            if not cut and len(data) < MAX_PIECE:
                rest = data
                continue
            if not cut:
                cut = len(data)
            block, rest = data[:cut], data[cut:]
            self._lines(prefix, block)
        if rest:
            self._lines(prefix, rest)
        if rank_log is not None:
            self._save(rank_log.close)

    def _save(self, write, *args) -> None:
        """A write into the run folder; a full, read-only or deleted folder is noted
        once and the output dropped (labctl sees the folder's state and stops the lab):
        the worker must never block on a pipe nobody reads."""
        try:
            write(*args)
        except OSError as exc:
            if self.write_error is None:
                self.write_error = f"{exc.filename or 'the node log'}: {exc.strerror or exc}"

    def _lines(self, prefix: bytes, block: bytes) -> None:
        if block.endswith(b"\n"):
            block = block[:-1]
        with self.lock:
            self._save(self.out.write, prefix + block.replace(b"\n", b"\n" + prefix) + b"\n")
            self._save(self.out.flush)

    def _write(self, text: str) -> None:
        with self.lock:
            self._save(self.out.write, text.encode() + b"\n")
            self._save(self.out.flush)
            if self.own_log is not None:
                self._save(self.own_log.write, text.encode() + b"\n")

    def _reap(self) -> None:
        """Collect every ended child: our processes (their codes) and adopted orphans."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for popen, proc, pump in self.procs:
                if popen.pid == pid:
                    code = os.waitstatus_to_exitcode(status)
                    popen.returncode = code
                    self.codes[pid] = code
                    if proc.get("rank") is not None:
                        if pump is not None:
                            pump.join(timeout=2)      # its last output before its exit line
                        self._write(f"{EXIT_LINE_PREFIX}{proc['rank']} exited with code {code} "
                                    f"at {time.time():.3f}")

    def _running(self) -> list[subprocess.Popen]:
        return [p for p, _, _ in self.procs if p.pid not in self.codes]

    def request_stop(self, reason: str, grace: float | None = None) -> None:
        if self.stop_requested:
            return
        self.stop_requested, self.stop_reason = True, reason
        self.kill_at = time.monotonic() + (self.grace if grace is None else grace)
        if self.agents:                           # before SIGTERM makes it stop its workers
            self.idle_at_stop = any(proc.get("rank") is None
                                    and not procs.descendants(popen.pid)
                                    for popen, proc, _ in self.procs if popen.pid not in self.codes)
        for popen in self._running():
            _signal_group(popen.pid, signal.SIGTERM)

    def _say_if_idle_at_stop(self) -> None:
        """Said from the main loop: request_stop may run in a signal handler, which must
        not take the output lock."""
        if self.idle_at_stop:
            self.idle_at_stop = False
            self._write(AGENT_IDLE_LINE)

    def lifeline_cut(self) -> bool:
        if self.lifeline is None:
            return False
        try:
            ready, _, _ = select.select([self.lifeline], [], [], REAP_S)
        except InterruptedError:
            return False
        if ready and os.read(self.lifeline, 1) == b"":
            os.close(self.lifeline)
            self.lifeline = None
            return True
        return False

    def run(self) -> dict:
        while self._running():
            self._say_if_idle_at_stop()
            if self.lifeline_cut():
                self.request_stop("labctl is gone (lifeline closed)", grace=min(self.grace, 2.0))
            elif self.lifeline is None:
                time.sleep(REAP_S)
            self._reap()
            if self.kill_at is not None and time.monotonic() > self.kill_at:
                for pid in procs.descendants(os.getpid()):
                    procs.send_signal(pid, signal.SIGKILL)
                self.kill_at = None
        self._say_if_idle_at_stop()
        leftovers = self.sweep()
        codes = [self.codes.get(p.pid, p.returncode) for p, _, _ in self.procs]
        code = next((c for c in codes if c not in (0, None)), 0)
        return {"exit_code": code, "codes": codes, "leftovers": leftovers,
                "stopped": self.stop_reason or None, "write_error": self.write_error}

    def sweep(self) -> list[dict]:
        """Kill what the node's processes left behind; say what it was."""
        found = [{"pid": pid, "command": procs.command_of(pid)}
                 for pid in procs.descendants(os.getpid())]
        if found:
            for item in found:
                procs.send_signal(item["pid"], signal.SIGTERM)
            end = time.monotonic() + LEFTOVER_TERM_S
            while time.monotonic() < end and procs.descendants(os.getpid()):
                time.sleep(REAP_S)
                self._reap()
            for _ in range(20):             # new forks during the kill: repeat until none
                rest = procs.descendants(os.getpid())
                if not rest:
                    break
                for pid in rest:
                    procs.send_signal(pid, signal.SIGKILL)
                time.sleep(REAP_S)
                self._reap()
            for item in found:
                self._write(f"labctl: killed leftover process {item['pid']} ({item['command']}) "
                            "after the node's processes ended")
        self._reap()
        return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodeguard", description=__doc__)
    parser.add_argument("--plan", required=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--node", type=int, help="index into the plan's nodes")
    which.add_argument("--service", type=int, help="index into the plan's services")
    parser.add_argument("--status", required=True, help="where the outcome JSON goes")
    parser.add_argument("--lifeline", type=int, help="read end of labctl's lifeline pipe")
    parser.add_argument("--grace", type=float, default=5.0, help="SIGTERM, then SIGKILL after this")
    parser.add_argument("--rank-logs", help="folder for each rank's own log (direct mode)")
    parser.add_argument("--own-log", help="where the guard's own lines go too (with --rank-logs)")
    args = parser.parse_args(argv)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    with open(args.plan) as f:
        plan = json.load(f)
    node = plan["nodes"][args.node] if args.node is not None else plan["services"][args.service]
    # plan.json holds the node's shared env once (and its argv, when every process has
    # it); each process only what it adds (labctl.plan.process_dicts, stdlib-only twin)
    processes = [{**p, "argv": p.get("argv", node.get("argv")),
                  "env": {**node.get("env", {}), **p.get("env", {})}} for p in node["processes"]]
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # labctl decides what a Ctrl-C means
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    guard: Guard | None = None
    early: list[int] = []        # a SIGTERM while the guard starts its processes: kept, not lost

    def on_term(signum, frame):
        if guard is not None:
            guard.request_stop("stopped by labctl")
        else:
            early.append(signum)
    signal.signal(signal.SIGTERM, on_term)
    guard = Guard(processes, args.grace, args.lifeline, args.rank_logs, args.own_log,
                  agents=args.node is not None)
    if early:
        guard.request_stop("stopped by labctl")
    outcome = guard.run()
    tmp = args.status + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(outcome, f)
        os.replace(tmp, args.status)
    except OSError:                    # the run folder is full, read-only or gone
        try:
            os.unlink(tmp)
        except OSError:
            pass
    code = outcome["exit_code"]
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
