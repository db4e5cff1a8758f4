"""The run folder's names, declared once (the layout: labctl/rundir.py's docstring).

Names only, no I/O beyond listing a folder: everything that reads or writes a run folder
names its files by these or by a RunDir's paths (rundir re-exports them), including the
modules below rundir (the run record, the trace's loader and merge, the log split).
records/ and debug-server/ are the ranks' own names (workloads/_protocol), the same on
both sides of a container's wall."""
from __future__ import annotations

from pathlib import Path

from workloads._protocol import DEBUG_SERVER_SUBDIR, RECORDS_SUBDIR

__all__ = ["SPEC_FILE", "PLAN_FILE", "STATUS_FILE", "RESULTS_FILE", "FAULTS_FILE", "REPORT_FILE", "PAGE_FILE",
           "TRACE_FILE", "WATCH_FILE", "NODES_SUBDIR", "RANKS_SUBDIR", "RENDERED_SUBDIR", "WORK_SUBDIR",
           "STACKS_SUBDIR", "EVENTS_SUBDIR", "LIVE_SUBDIR", "SHARED_SUBDIR", "SERVICES_SUBDIR",
           "TORCHRUN_LOGS_SUBDIR",
           "RECORDS_SUBDIR", "DEBUG_SERVER_SUBDIR", "node_log_name", "rank_log_name", "guard_log_name",
           "node_exit_name", "stack_file_name", "node_logs_in", "rank_logs_in", "stack_files_in"]

SPEC_FILE = "spec.yaml"
PLAN_FILE = "plan.json"
STATUS_FILE = "status.json"
RESULTS_FILE = "results.jsonl"
FAULTS_FILE = "faults.jsonl"
REPORT_FILE = "report.md"
PAGE_FILE = "report.html"
TRACE_FILE = "trace.json"           # every rank's ops, merged (labctl/trace/merge.py)
WATCH_FILE = "watch.json"           # the live watcher's latest diagnosis, under LIVE_SUBDIR
NODES_SUBDIR = "nodes"
RANKS_SUBDIR = "ranks"
RENDERED_SUBDIR = "rendered"
WORK_SUBDIR = "work"
STACKS_SUBDIR = "stacks"
EVENTS_SUBDIR = "events"
LIVE_SUBDIR = "live"                # the live watcher's copies and diagnosis (labctl/live/)
SHARED_SUBDIR = "shared"            # the local nodes' shared directory (LAB_SHARED_DIR)
SERVICES_SUBDIR = "services"        # the local backend's services: <host>.log, <host>.exit.json
# torchrun's --log-dir in the run folder (the local backend's placement sets it; the finish
# reads the workers' error files there, labctl/finish.py): node i's agent writes
# <dir>/node-<i>/<run id>_*/attempt_<n>/<local rank>/{error.json,stdout.log,stderr.log}
TORCHRUN_LOGS_SUBDIR = "torchrun"

_NODE, _RANK = "node-", "rank-"


def node_log_name(index: int) -> str:
    """`node-<i>.log`: node i's log, under NODES_SUBDIR."""
    return f"{_NODE}{index}.log"


def guard_log_name(index: int) -> str:
    """`node-<i>.guard.txt`: a local node guard's own lines, under NODES_SUBDIR."""
    return f"{_NODE}{index}.guard.txt"


def node_exit_name(index: int) -> str:
    """`node-<i>.exit.json`: a local node guard's outcome, under NODES_SUBDIR."""
    return f"{_NODE}{index}.exit.json"


def rank_log_name(rank: int) -> str:
    """`rank-<r>.log`: rank r's log, under RANKS_SUBDIR."""
    return f"{_RANK}{rank}.log"


def stack_file_name(rank: int) -> str:
    """`rank-<r>.txt`: rank r's last stack dump, under STACKS_SUBDIR."""
    return f"{_RANK}{rank}.txt"


def _numbered(folder: Path, prefix: str, suffix: str) -> list[tuple[int, Path]]:
    """The files `<prefix><n><suffix>` in `folder`, with each one's n, by n."""
    try:
        found = [p for p in folder.glob(f"{prefix}*{suffix}")] if folder.is_dir() else []
    except OSError:
        return []
    numbered = ((p.name[len(prefix):len(p.name) - len(suffix)], p) for p in found)
    return sorted((int(n), p) for n, p in numbered if n.isdigit())


def node_logs_in(folder: Path) -> list[tuple[int, Path]]:
    """The node logs `folder` (a run folder's NODES_SUBDIR) holds, with each one's index."""
    return _numbered(folder, _NODE, ".log")


def rank_logs_in(folder: Path) -> list[tuple[int, Path]]:
    """The rank logs `folder` (a run folder's RANKS_SUBDIR) holds, with each one's rank."""
    return _numbered(folder, _RANK, ".log")


def stack_files_in(folder: Path) -> list[tuple[int, Path]]:
    """The stack dumps `folder` (a run folder's STACKS_SUBDIR) holds, with each one's rank."""
    return _numbered(folder, _RANK, ".txt")
