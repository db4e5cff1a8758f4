"""The run folder: everything a run leaves behind, whatever its outcome.

    runs/<run_id>/
      spec.yaml            the resolved lab spec
      plan.json            every node's exact argv and env
      rendered/            compose.yaml or k8s.yaml (container backends)
      nodes/node-<i>.log   one log per node (stdout+stderr, as collected)
      nodes/node-<i>.guard.txt  a local direct-mode node guard's own lines (exits, leftovers)
      work/node-<i>/       a local node's working directory (files ranks write)
      ranks/rank-<r>.log   the same output split per global rank
      torchrun/node-<i>/   local torchrun: the agent's --log-dir (workers' error files, tee copies)
      results.jsonl        one JSON result per line (workload, name, rank, ok, ...)
      events/              backend events (Kubernetes), when there are any
      faults.jsonl         every injected fault that fired, when, and what was done
      status.json          the outcome, machine-readable
      report.md            the report printed at the end of `labctl up`
"""
from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import socket
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Iterator

import yaml

from workloads import _proc

from . import blame, logs
from .errors import LabError
from .outcome import NodeOutcome, RunState
from .plan import TORCHRUN_LOGS_SUBDIR, LaunchPlan
from .spec import LabSpec, dump, from_dict

__all__ = ["RunDir", "NodeOutcome", "StorageError"]
OPEN_RANK_LOGS = 256             # rank logs kept open at once while splitting
# A run folder on a disk with less free space than this is refused before the start
# (docs/failures.md); while the lab runs, under FULL_BYTES free counts as full.
MIN_FREE_BYTES = 1 << 20
FULL_BYTES = 256 << 10
# Kept free for the last status.json: removed (and so made available) just before the
# final write, so a run that filled its disk still says how it ended.
RESERVE_NAME = ".labctl-reserve"
RESERVE_BYTES = 64 << 10
_STORAGE_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ENOENT, errno.EIO, errno.EACCES)


class StorageError(LabError):
    """The run folder cannot be written (full, read-only, gone): the lab is stopped."""


class FolderRefused(LabError):
    """The run folder cannot hold a run (not empty, read-only, too little space): exit 2."""
    exit_code = 2


def storage_cause(exc: OSError) -> str:
    """`No space left on device` and the like, lower case, from an OSError."""
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


# status.json's fields that code reads, and the JSON type each must have when present
_STATUS_TYPES: dict[str, type | tuple[type, ...]] = {
    "state": str, "run_id": str, "lab": str, "backend": str, "launcher": str,
    "message": str, "nodes": int, "nproc_per_node": int, "world_size": int,
    "node_outcomes": list, "rank_exit_codes": dict, "rank_errors": dict, "failed_ranks": list,
    "ranks_without_output": list, "first_failure": dict, "faults": list, "leftovers": list,
    "notes": list, "stacks": dict, "checks": dict, "failed_checks": list, "controller": dict,
    "local": dict, "seconds": (int, float), "workdir": str,
}
_STATUS_ITEMS: dict[str, type] = {"node_outcomes": dict, "faults": dict, "leftovers": dict,
                                  "failed_checks": dict, "notes": str}
_JSON_NAMES = {str: "a string", int: "a number", float: "a number", list: "a list",
               dict: "an object", bool: "true/false"}


def status_damage(meta: Any) -> str | None:
    """What is wrong with a status.json's content (None: readable), in a few words."""
    if not isinstance(meta, dict):
        return f"expected a JSON object, found {_JSON_NAMES.get(type(meta), type(meta).__name__)}"
    for key, kind in _STATUS_TYPES.items():
        value = meta.get(key)
        if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
            pass
        else:
            want = _JSON_NAMES.get(kind if isinstance(kind, type) else kind[0], str(kind))
            return f"'{key}' should be {want}, found {_JSON_NAMES.get(type(value), type(value).__name__)}"
        item = _STATUS_ITEMS.get(key)
        if item and value is not None and not all(isinstance(x, item) for x in value):
            return f"'{key}' should hold only {_JSON_NAMES[item].split(' ', 1)[1]}s"
    if "state" in meta and meta["state"] not in {s.value for s in RunState}:
        return f"unknown state {meta['state'][:40]!r} (one of: {', '.join(RunState)})"
    for n in meta.get("node_outcomes") or []:
        if not isinstance(n.get("index"), int) or not isinstance(n.get("state"), str):
            return "a node outcome without its index or state"
    first = meta.get("first_failure") or {}
    errors = [first.get("error"), first.get("peer_error"), *(meta.get("rank_errors") or {}).values()]
    if not all(e is None or isinstance(e, dict) and isinstance(e.get("exception"), str)
               for e in errors):
        return "an error record without its exception"
    for f in meta.get("faults") or []:
        if not all(k in f for k in ("fault", "kind", "target", "phase", "did", "lab_s")):
            return "a fault record without its fault, kind, target, phase, did or lab_s"
    return None


def _free_bytes(path: Path) -> tuple[int, bool]:
    """(bytes a normal user may still write, read-only?) of the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, bool(st.f_flag & os.ST_RDONLY)


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (where a new folder would be made)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)


def folder_path(run_id: str, out: str | os.PathLike | None = None,
                root: str | os.PathLike = "runs") -> Path:
    """Where run `run_id`'s folder goes: `out`, else `<root>/<run id>`. Known before the
    plan, so a backend can name in the plan what lives in the folder (local: `shared/`)."""
    return Path(out) if out else Path(root) / run_id


@dataclass
class RunDir:
    path: Path
    meta: dict[str, Any] = field(default_factory=dict)
    _split: "LogSplit | None" = field(default=None, repr=False)
    _identity: tuple[int, int] | None = field(default=None, repr=False)   # (st_dev, st_ino)
    # Local direct-mode node guards wrote every rank log themselves, so LogSplit only reads
    # them for results (set by the backend that starts them); status.json keeps it as
    # `rank_logs_by_guards`, for a folder opened again.
    rank_logs_by_guards: bool = False

    # ---- creating -------------------------------------------------------
    @classmethod
    def create(cls, plan: LaunchPlan, out: str | os.PathLike | None = None,
               root: str | os.PathLike = "runs") -> "RunDir":
        """A new run folder; a folder that cannot hold a run is a refusal (FolderRefused)."""
        path = folder_path(plan.run_id, out, root)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise FolderRefused(f"run folder '{path}' exists and is not empty; "
                                "choose another --out")
        where = _existing(path)
        try:
            free, read_only = _free_bytes(where)
        except OSError as exc:
            raise FolderRefused(f"run folder '{path}': {storage_cause(exc)}") from None
        if read_only or not os.access(where, os.W_OK):
            raise FolderRefused(f"run folder '{path}': {where} is read-only; choose another --out")
        if free < MIN_FREE_BYTES:
            raise FolderRefused(f"run folder '{path}': only {free} bytes free on its disk "
                                f"(a run needs at least {MIN_FREE_BYTES >> 20} MiB); "
                                "free some space or choose another --out")
        try:
            run = cls._write_new(path, plan)
        except OSError as exc:
            raise FolderRefused(f"run folder '{path}': {storage_cause(exc)} while creating it; "
                                "choose another --out") from None
        return run

    @classmethod
    def _write_new(cls, path: Path, plan: LaunchPlan) -> "RunDir":
        for sub in ("nodes", "ranks", "rendered"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        (path / "spec.yaml").write_text(dump(plan.spec))
        (path / "plan.json").write_text(plan.to_json())
        (path / RESERVE_NAME).write_bytes(b"\0" * RESERVE_BYTES)
        st = os.stat(path)
        run = cls(path, _identity=(st.st_dev, st.st_ino))
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
        """An existing run folder; a damaged status.json is one clear error (exit 2)."""
        path = Path(path)
        if not (path / "status.json").is_file():
            raise FileNotFoundError(f"{path}: not a run folder (no status.json); "
                                    "runs live under runs/<lab>-<stamp>/")
        try:
            meta = json.loads((path / "status.json").read_bytes())
        except (ValueError, RecursionError) as exc:
            raise FolderRefused(f"{path}/status.json: unreadable ({str(exc)[:200]}); "
                                "the run folder is damaged") from None
        damage = status_damage(meta)
        if damage:
            raise FolderRefused(f"{path}/status.json: {damage}; the run folder is damaged")
        by_guards = meta.pop("rank_logs_by_guards", False) is True
        return cls(path, meta, rank_logs_by_guards=by_guards)

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

    def guard_log(self, index: int) -> Path:
        """A local direct-mode node guard's own lines (exits, leftovers), also in its node log."""
        return self.path / "nodes" / f"node-{index}.guard.txt"

    def rank_log(self, rank: int) -> Path:
        return self.path / "ranks" / f"rank-{rank}.log"

    def workdir(self, index: int) -> Path:
        """A local node's working directory, or the invoking one when the spec says so."""
        if self.meta.get("workdir") == "invoking":
            return Path.cwd()
        path = self.path / "work" / f"node-{index}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def iter_results(self, warn=_warn) -> Iterator[dict[str, Any]]:
        """results.jsonl one record at a time; a garbled line is skipped with one warning."""
        f = self.path / "results.jsonl"
        if not f.is_file():
            return
        with open(f, errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    if not isinstance(record, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    warn(f"{f}:{number}: skipped a garbled result line ({exc})")
                    continue
                yield record

    def results(self) -> list[dict[str, Any]]:
        return list(self.iter_results())

    # ---- the controller ---------------------------------------------------
    def controller_gone(self) -> bool:
        """A run still marked running whose labctl (on this machine) no longer exists."""
        if self.meta.get("state") != RunState.RUNNING.value:
            return False
        ctl = self.meta.get("controller") or {}
        if ctl.get("host") != socket.gethostname() or not ctl.get("pid"):
            return False
        st = _proc.stat(ctl["pid"])
        # gone, ended (a zombie has), or the pid now names another process
        return st is None or st.zombie or st.start_ticks != ctl.get("start_ticks")

    def effective_state(self) -> str:
        """The state as it is now: a run marked running whose labctl is gone is abandoned."""
        state = self.meta.get("state", "?")
        if self.controller_gone():
            return "abandoned"
        return state

    # ---- the folder's health (checked at every poll while the lab runs) -----
    def check_storage(self) -> None:
        """Raise StorageError when the folder was deleted (or replaced), its disk is
        read-only or full: a lab whose folder cannot take its logs is stopped at once."""
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is None or (self._identity and (st.st_dev, st.st_ino) != self._identity):
            raise StorageError(f"run folder '{self.path}' was deleted while the lab ran; "
                               "the lab was stopped")
        try:
            free, read_only = _free_bytes(self.path)
        except OSError as exc:
            raise self.storage_error(exc) from None
        if read_only:
            raise StorageError(f"run folder '{self.path}': read-only file system; "
                               "the lab was stopped")
        if free < FULL_BYTES:
            raise StorageError(f"run folder '{self.path}': no space left on device "
                               f"({free >> 10} KiB free); the lab was stopped")

    def storage_error(self, exc: OSError) -> LabError:
        """An OSError while writing the folder as one line naming the path and the cause."""
        if isinstance(exc, LabError):
            return exc
        if not self.path.is_dir():
            return StorageError(f"run folder '{self.path}' was deleted while the lab ran; "
                                "the lab was stopped")
        where = f"'{exc.filename}'" if exc.filename else f"run folder '{self.path}'"
        return StorageError(f"{where}: {storage_cause(exc)}; the lab was stopped")

    def release_reserve(self) -> None:
        """Free the space kept for the last status.json (a full disk then still takes it)."""
        try:
            (self.path / RESERVE_NAME).unlink()
        except OSError:
            pass

    def write_damaged(self, outcomes: list[NodeOutcome], message: str) -> None:
        """The end of a run whose folder failed: status.json (state error) where it can
        be written, nothing split or added; never raises."""
        self.release_reserve()
        self.meta.update({"state": RunState.ERROR.value, "ok": False, "finished": _now(),
                          "message": message, "node_outcomes": [n.to_dict() for n in outcomes]})
        try:
            self.write_status()
        except OSError:
            pass
        if self._split is not None:
            self._split.close()
            self._split = None

    # ---- writing --------------------------------------------------------
    def write_node_log(self, index: int, text: str) -> None:
        self.node_log(index).write_text(text)

    def write_rendered(self, name: str, text: str) -> Path:
        target = self.path / "rendered" / name
        target.write_text(text)
        return target

    def write_status(self) -> None:
        """status.json, replaced atomically; a failed write leaves no status.json.tmp."""
        tmp = self.path / "status.json.tmp"
        try:
            meta = {**self.meta, "rank_logs_by_guards": True} if self.rank_logs_by_guards else self.meta
            tmp.write_text(json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n")
            tmp.replace(self.path / "status.json")
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise

    def record_fault(self, record: dict[str, Any]) -> None:
        """One fired fault event: appended to faults.jsonl at once (it survives a crash of
        labctl) and kept in status.json for the report."""
        with open(self.path / "faults.jsonl", "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        self.meta.setdefault("faults", []).append(record)
        self.write_status()

    def note_controller(self) -> None:
        """Who runs this lab: lets `report`/`down` tell a live run from an abandoned one."""
        st = _proc.stat()
        self.meta["controller"] = {"pid": os.getpid(), "host": socket.gethostname(),
                                   "start_ticks": st.start_ticks if st else None}
        self.write_status()

    def follow_logs(self, indices: list[int], budget: int = 8 << 20) -> bool:
        """Split what the nodes wrote so far (at most `budget` bytes per node): the end
        of a run then only has the last bit left. For backends whose node logs grow
        in place during the run (local). False while some node's log is further ahead."""
        self.check_storage()
        try:
            if self._split is None:
                self._split = LogSplit(self, indices)
            return self._split.advance(budget)
        except OSError as exc:
            raise self.storage_error(exc) from None

    def split_logs(self, indices: list[int]) -> blame.Findings:
        """Every node log (the rest of it, when followed) split into rank logs and
        results.jsonl, plus what each rank's and agent's last exception was."""
        split = self._split if self._split is not None else LogSplit(self, indices)
        self._split = None
        return split.finish()

    def _write_stacks(self, dumps: dict[int, list[str]]) -> dict[str, dict]:
        """stacks/rank-<r>.txt for every rank that printed a stack dump; where each was."""
        if not dumps:
            return {}
        folder = self.path / "stacks"
        folder.mkdir(exist_ok=True)
        where = {}
        for rank, lines in sorted(dumps.items()):
            (folder / f"rank-{rank}.txt").write_text("\n".join(lines) + "\n")
            where[str(rank)] = logs.where_stuck(lines)
        return where

    def finalize(self, outcomes: list[NodeOutcome], state: str | RunState,
                 message: str = "") -> None:
        """Split node logs per rank, gather results, decide the run's state; write all down."""
        state = RunState(state)
        world = self.meta["world_size"]
        found = self.split_logs([n.index for n in outcomes])
        found.world = world
        for node in outcomes:                   # the workers' error files, where they are here
            log_dir = self.path / TORCHRUN_LOGS_SUBDIR / f"node-{node.index}"
            files, notes = blame.read_error_files(log_dir, node.index)
            found.add_error_files(files)
            if notes:
                self.meta.setdefault("notes", []).extend(notes)
            _drop_tee_copies(log_dir)
        for rank in range(world):               # a silent rank still has its (empty) log
            if not self.rank_log(rank).exists():
                self.rank_log(rank).touch()
        failed_ranks = found.failed_ranks
        stacks = self._write_stacks(found.stacks)
        silent = sorted(set(range(world)) - found.ranks)
        spec = self.spec
        state, why = blame.run_state(state, outcomes, found, spec.nodes, spec.fewest_nodes,
                                     bool(spec.workloads))
        message = message or why
        first = None
        fired = [f for f in self.meta.get("faults") or [] if f.get("phase") == "begin" and f.get("ok")]
        blame.blame_nodes(outcomes, fired, found)
        if state is not RunState.PASSED:
            first = blame.first_failure(outcomes, found)
            if fired and state is not RunState.INTERRUPTED:
                first = blame.fault_cause(first, outcomes, found, fired)
        comm = self.merge_trace(failed=state is not RunState.PASSED)
        if comm is not None:                    # the stuck/mismatched collective (issue 21)
            if first is None:                   # a hang: nobody failed, the deadline came
                first = blame.FirstFailure(comm.get("rank"), hang=True)
            first.collective = comm
        if first and not message:
            message = first.describe()
        self.meta.update({
            "state": state.value,
            "first_failure": first.to_dict() if first else None,
            "ok": state is RunState.PASSED,
            "finished": _now(),
            "message": message,
            "node_outcomes": [n.to_dict() for n in outcomes],
            "rank_exit_codes": {str(k): v for k, v in sorted(found.exit_codes.items())},
            "rank_errors": {str(k): v for k, v in sorted(found.errors.items())
                            if k in failed_ranks or (first and first.rank == k)},
            "failed_ranks": failed_ranks,
            "ranks_without_output": silent,
            **({"stacks": stacks} if stacks else {}),
            "checks": {"total": found.total, "failed": found.failed_count,
                       "skipped": found.skipped},
            "failed_checks": [
                {k: r.get(k) for k in ("workload", "name", "rank", "detail")} for r in found.failed
            ],
        })
        self.release_reserve()
        self.write_status()

    def merge_trace(self, failed: bool = False) -> dict | None:
        """trace.json from the rank logs when the lab recorded ops (labctl/trace.py); the
        stuck or mismatched collective when the run failed. A merge problem is a note, never
        a lost run."""
        from . import trace

        try:
            if not self.spec.trace:             # the Flight Recorder ring the ranks dumped at a hang
                return trace.flight_recorder(self.path, self.meta.get("world_size")) if failed else None
            hostnames = {n["index"]: n.get("hostname") for n in self.plan.get("nodes", [])}
            summary = trace.merge(self.path, world=self.meta.get("world_size"), hostnames=hostnames)
        except Exception as exc:        # noqa: BLE001 - the run's results matter more
            self.meta.setdefault("notes", []).append(f"trace: merge failed: {exc}")
            return None
        self.meta["trace"] = {"file": trace.TRACE_FILE, "ops": summary.ops,
                              "missing_ranks": summary.missing_ranks,
                              "bad_records": len(summary.problems) + summary.more_problems}
        if summary.cost_note:
            self.meta.setdefault("notes", []).append(f"trace: {summary.cost_note}")
        if not failed:
            return None
        # the trace names the stuck op; when it cannot (no rank left an op record), the
        # Flight Recorder entries the ranks dumped may
        return summary.diagnosis() or trace.flight_recorder(self.path, self.meta.get("world_size"))


def _drop_tee_copies(log_dir: Path) -> None:
    """torchrun's --tee also writes each worker's stdout and stderr under its --log-dir;
    the node log and ranks/ hold the same bytes, so once the run is read the copies go
    (a chatty lab would otherwise keep its output twice). The error files stay."""
    for copy in log_dir.glob("*/attempt_*/*/std*.log"):
        try:
            copy.unlink()
        except OSError:
            pass


class LogSplit:
    """One streaming pass over every node log, resumable: rank logs, results.jsonl,
    and the last exception of each rank and agent. Memory stays flat at any log size."""

    def __init__(self, run: RunDir, indices: list[int]):
        self.run, self.indices = run, indices
        self.open_logs: dict[int, Any] = {}
        self.found = blame.Findings()
        # Local direct-mode nodes: the guard wrote each rank's log itself as the output
        # came (and its own lines apart), so those are only read for results and errors,
        # not split out of the node log again: a GB-sized log costs about one read.
        self.guard_ranks: dict[int, list[int]] = {}
        if run.rank_logs_by_guards:
            for node in run.plan["nodes"]:
                ranks = [p["rank"] for p in node["processes"] if p.get("rank") is not None]
                if node["index"] in indices and ranks:
                    self.guard_ranks[node["index"]] = ranks
        kept = {run.rank_log(r) for ranks in self.guard_ranks.values() for r in ranks}
        for old in (run.path / "ranks").glob("rank-*.log"):
            if old not in kept:
                old.unlink()
        self.results = open(run.path / "results.jsonl", "w")
        self.readers = {i: logs.NodeLogReader(on_result=self._result_line) if i in self.guard_ranks
                        else logs.NodeLogReader(self._write, self._result_line) for i in indices}
        self.offsets: dict[Path, int] = {}

    def _rank_file(self, rank: int):
        f = self.open_logs.get(rank)
        if f is None:
            if len(self.open_logs) >= OPEN_RANK_LOGS:
                self.open_logs.pop(next(iter(self.open_logs))).close()
            f = self.open_logs[rank] = open(self.run.rank_log(rank), "ab")
        return f

    def _write(self, rank: int, data: bytes) -> None:
        """A rank's bytes as the node log held them, prefixes removed: straight to its log."""
        self._rank_file(rank).write(data)

    def _result_line(self, rank: int, line: str) -> None:
        """A line holding the result marker, decoded (undecodable bytes as U+FFFD)."""
        for record in logs.parse_results([line], rank=rank):
            self.results.write(json.dumps(record, sort_keys=True) + "\n")
            self.found.add_result(record)

    def advance(self, budget: int | None) -> bool:
        """Feed every node log from where the last call stopped; with a budget, only
        complete lines and at most about `budget` bytes per node. True when every
        log was read up to its end (its last line may still be being written)."""
        caught_up = True
        for index in self.indices:
            reader = self.readers[index]
            if index in self.guard_ranks:
                sources = [(self.run.guard_log(index), reader.feed_stream)]
                sources += [(self.run.rank_log(rank), partial(reader.feed_rank_stream, rank))
                            for rank in self.guard_ranks[index]]
            else:
                sources = [(self.run.node_log(index), reader.feed_stream)]
            for path, feed in sources:
                if not path.is_file():
                    continue
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    fed = feed(f, budget)
                self.offsets[path] = self.offsets.get(path, 0) + fed
                if budget is not None and fed >= budget:
                    caught_up = False
        # what was split so far is on disk while the lab runs (and after labctl is killed)
        for f in self.open_logs.values():
            f.flush()
        self.results.flush()
        return caught_up

    def close(self) -> None:
        """Close every file (a split given up on); what was written stays."""
        for f in [*self.open_logs.values(), self.results]:
            try:
                f.close()
            except OSError:
                pass
        self.open_logs.clear()

    def finish(self) -> blame.Findings:
        try:
            self.advance(None)
            for index in self.indices:
                if not self.run.node_log(index).is_file():
                    self.run.node_log(index).write_text("")
                reader = self.readers[index]
                reader.close()
                self.found.add_node(index, reader)
        finally:
            for f in self.open_logs.values():
                f.close()
            self.results.close()
        return self.found
