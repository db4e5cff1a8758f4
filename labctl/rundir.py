"""The run folder: everything a run leaves behind, whatever its outcome. Storage only:
paths, files written whole, the run record (status.json) in and out. What a run's logs
mean is labctl/logs.py and blame.py, how it ended labctl/verdict.py, and the finish that
writes it all down labctl/finish.py.

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
      stacks/rank-<r>.txt  each rank's stack, when labctl asked for them (a hang)
      trace.json           every rank's ops (Chrome trace events), when traced
      status.json          the run record (labctl/runrecord.py), machine-readable
      report.md            the report printed at the end of `labctl up`
      report.html          the run's page (labctl/html)
"""
from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import socket
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

import yaml

from . import atomicfile, procs
from .errors import LabError
from .plan import LaunchPlan
from .runrecord import Controller, FiredFault, RecordDamaged, RunRecord, read_bounded
from .labchecks import out_refusal
from .spec import LabSpec, dump, from_dict
from . import runnames
from .runnames import (  # noqa: F401 (the run folder's names, re-exported)
    SPEC_FILE, PLAN_FILE, STATUS_FILE, RESULTS_FILE, FAULTS_FILE, REPORT_FILE, PAGE_FILE,
    TRACE_FILE, WATCH_FILE, NODES_SUBDIR, RANKS_SUBDIR, RENDERED_SUBDIR, WORK_SUBDIR, STACKS_SUBDIR,
    EVENTS_SUBDIR, LIVE_SUBDIR, SHARED_SUBDIR, SERVICES_SUBDIR, TORCHRUN_LOGS_SUBDIR, RECORDS_SUBDIR,
    DEBUG_SERVER_SUBDIR, node_log_name, rank_log_name, guard_log_name, node_exit_name, stack_file_name, node_logs_in, rank_logs_in, stack_files_in)
from workloads._protocol import records, results, visible

__all__ = ["RunDir", "StorageError", "FolderRefused", "PlannedNode"]
# The run folder's names: labctl/runnames.py, re-exported here.
__all__ += runnames.__all__


# A run folder on a disk with less free space than this is refused before the start
# (docs/failures.md); while the lab runs, under FULL_BYTES free counts as full.
MIN_FREE_BYTES = 1 << 20
FULL_BYTES = 256 << 10
# Kept free for the last status.json: removed (and so made available) just before the
# final write, so a run that filled its disk still says how it ended.
RESERVE_NAME = ".labctl-reserve"
RESERVE_BYTES = 64 << 10
_STORAGE_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ENOENT, errno.EIO, errno.EACCES)



class NotARunFolder(FileNotFoundError):
    """A path given as a run folder that has no status.json: bad input (exit 2)."""

class StorageError(LabError):
    """The run folder cannot be written (full, read-only, gone): the lab is stopped."""


class FolderRefused(LabError):
    """The run folder cannot hold a run (not empty, read-only, too little space): exit 2."""
    exit_code = 2


def storage_cause(exc: OSError) -> str:
    """`No space left on device` and the like, lower case, from an OSError."""
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


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


def now() -> str:
    """The time as status.json writes it (UTC, seconds)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _warn(text: str) -> None:
    print(f"warning: {visible(text)}", file=sys.stderr)     # a result line's text: shown, not obeyed


RUN_FILES = (STATUS_FILE, PLAN_FILE, RESULTS_FILE)


def is_run_folder(path: Path) -> bool:
    """What a run folder is, at least: a folder holding one of RUN_FILES (the page can be
    made from whatever such a folder holds)."""
    return any((path / name).is_file() for name in RUN_FILES)


def folder_path(run_id: str, out: str | os.PathLike | None = None,
                root: str | os.PathLike = "runs") -> Path:
    """Where run `run_id`'s folder goes: `out`, else `<root>/<run id>`. Known before the
    plan, so a backend can name in the plan what lives in the folder (local: `shared/`)."""
    return Path(out) if out else Path(root) / run_id


WARNED_RESULTS = 5                  # skipped result lines warned of one by one; the rest counted


def read_results(f: Path, warn=_warn, named: int | None = None) -> Iterator[dict[str, Any]]:
    """A results.jsonl one record at a time (none when it is missing); a garbled line, or
    a record whose known fields have the wrong type or are outside the lab's bounds
    (workloads/_protocol/results.py: checked there, once), is skipped with one warning
    each, or (`named`) the first `named` so and the rest in one line at the end. Also for
    a folder whose status.json cannot be read."""
    named = named if named is not None else 1 << 62
    if not f.is_file():
        return
    skipped = 0
    with open(f, errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                result = results.decode_result(line)
                damage = results.result_damage(result)
            except records.BadRecord as exc:
                result, damage = None, str(exc)
            if damage:
                skipped += 1
                if skipped <= named:
                    who = f"{results.result_who(result)}: " if result is not None else ""
                    warn(f"{f}:{number}: skipped {who}{damage}")
                continue
            yield result
    if skipped > named:
        warn(f"{f}: ... and {skipped - named:,} more result lines skipped (garbled, or a field "
             "of the wrong type or outside the lab's bounds: docs/limits.md)")


@dataclass(frozen=True)
class PlannedNode:
    """A node as plan.json has it: what the run folder's readers need of the plan."""
    index: int
    hostname: str
    ranks: tuple[int, ...]          # its processes' global ranks, when the plan fixes them (direct)


class InFolder:
    """A name in the run folder as a RunDir's attribute: `run.<attr>` is `run.path / name`,
    one line per name instead of a property each."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, run: "RunDir | None", owner: type | None = None) -> Path:
        if run is None:
            raise AttributeError(f"a run folder's {self.name}: ask a RunDir")
        return run.path / self.name


@dataclass
class RunDir:
    path: Path
    record: RunRecord
    _identity: tuple[int, int] | None = field(default=None, repr=False)   # (st_dev, st_ino)
    _results_warned: bool = field(default=False, repr=False)             # results() said what it skipped

    # ---- creating -------------------------------------------------------
    @classmethod
    def create(cls, plan: LaunchPlan, out: str | os.PathLike | None = None,
               root: str | os.PathLike = "runs") -> "RunDir":
        """A new run folder; a folder that cannot hold a run is a refusal (FolderRefused)."""
        path = folder_path(plan.run_id, out, root)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise FolderRefused(f"run folder '{path}' {out_refusal(path)}; choose another --out")
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
        cls._claim(path)
        for sub in (NODES_SUBDIR, RANKS_SUBDIR, RENDERED_SUBDIR):
            (path / sub).mkdir(parents=True, exist_ok=True)
        (path / SPEC_FILE).write_text(dump(plan.spec))
        (path / PLAN_FILE).write_text(plan.to_json())
        st = os.stat(path)
        spec = plan.spec
        record = RunRecord(plan.run_id, spec.name, spec.backend, spec.launcher, spec.dist_backend,
                           spec.nodes, spec.nproc_per_node, spec.world_size, started=now())
        run = cls(path, record, _identity=(st.st_dev, st.st_ino))
        run.__dict__["spec"] = spec
        run.save()
        return run

    @staticmethod
    def _claim(path: Path) -> None:
        """Make the folder ours, atomically: the reserve file created with O_EXCL is the
        claim, so of two labctls given the same --out at the same instant (both saw it
        empty) one wins and the other is refused, having written and deleted nothing of
        the winner's. Refused too when the folder filled between the look and the claim."""
        path.mkdir(parents=True, exist_ok=True)
        claim = path / RESERVE_NAME
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise FolderRefused(f"run folder '{path}' was just taken by another labctl run "
                                "(the same --out at the same time); choose another --out") from None
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)
        if set(os.listdir(path)) != {RESERVE_NAME}:      # another run's, whole, since the look
            claim.unlink()                               # ours alone: nothing of theirs
            raise FolderRefused(f"run folder '{path}' exists and is not empty; choose another --out")

    @classmethod
    def open(cls, path: str | os.PathLike) -> "RunDir":
        """An existing run folder; a damaged status.json is one clear error (exit 2)."""
        path = Path(path)
        if not (path / STATUS_FILE).is_file():
            raise NotARunFolder(f"{path}: not a run folder (no status.json); "
                                "runs live under runs/<lab>-<stamp>/")
        try:
            record = RunRecord.read(path / STATUS_FILE)
        except RecordDamaged as exc:
            raise FolderRefused(f"{path}/status.json: {exc}; the run folder is damaged") from None
        return cls(path, record)

    # ---- reading --------------------------------------------------------
    @cached_property
    def spec(self) -> LabSpec:
        """The lab as it ran (spec.yaml), read once."""
        return from_dict(yaml.safe_load((self.path / SPEC_FILE).read_text()) or {},
                         source=str(self.path / SPEC_FILE))

    @cached_property
    def planned_nodes(self) -> list[PlannedNode]:
        """plan.json's nodes (index, hostname, ranks), read once."""
        nodes = json.loads(read_bounded(self.path / PLAN_FILE, PLAN_FILE)).get("nodes", [])
        return [PlannedNode(n["index"], n.get("hostname") or "",
                            tuple(p["rank"] for p in n.get("processes", []) if p.get("rank") is not None))
                for n in nodes]

    @property
    def status(self) -> dict[str, Any]:
        """status.json's object: the record as it is written (for readers of JSON)."""
        return self.record.to_dict()

    @property
    def hostnames(self) -> dict[int, str]:
        return {n.index: n.hostname for n in self.planned_nodes}

    def node_log(self, index: int) -> Path:
        return self.nodes_dir / node_log_name(index)

    def guard_log(self, index: int) -> Path:
        """A local direct-mode node guard's own lines (exits, leftovers), also in its node log."""
        return self.nodes_dir / guard_log_name(index)

    def torchrun_logs(self, index: int) -> Path:
        """Node `index`'s torchrun --log-dir (local runs: the workers' error files)."""
        return self.path / TORCHRUN_LOGS_SUBDIR / f"node-{index}"

    def rank_log(self, rank: int) -> Path:
        return self.ranks_dir / rank_log_name(rank)

    def node_logs(self) -> list[tuple[int, Path]]:
        """The node logs the folder holds (node_log's names), with each one's index, by
        index."""
        return node_logs_in(self.nodes_dir)

    def stack_file(self, rank: int) -> Path:
        """A rank's last stack dump (write_stacks)."""
        return self.stacks_dir / stack_file_name(rank)

    def stack_files(self) -> list[tuple[int, Path]]:
        """The stack dumps the folder holds, by rank."""
        return stack_files_in(self.stacks_dir)

    # the folder's own files and folders, each `self.path / <its name>`
    results_path = InFolder(RESULTS_FILE)
    status_path = InFolder(STATUS_FILE)
    trace_path = InFolder(TRACE_FILE)
    report_path = InFolder(REPORT_FILE)       # the report printed at the end of `labctl up`
    page_path = InFolder(PAGE_FILE)           # the run's page (labctl/html)
    nodes_dir = InFolder(NODES_SUBDIR)
    ranks_dir = InFolder(RANKS_SUBDIR)
    stacks_dir = InFolder(STACKS_SUBDIR)
    events_dir = InFolder(EVENTS_SUBDIR)      # backend events (Kubernetes), when there are any

    def workdir(self, index: int) -> Path:
        """A local node's working directory, or the invoking one when the spec says so."""
        if self.record.workdir == "invoking":
            return Path.cwd()
        path = self.path / WORK_SUBDIR / f"node-{index}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def iter_results(self, warn=_warn) -> Iterator[dict[str, Any]]:
        """results.jsonl one record at a time; a garbled line is skipped, the first
        WARNED_RESULTS with a warning each, the rest counted in one."""
        return read_results(self.results_path, warn, WARNED_RESULTS)

    def results(self) -> list[dict[str, Any]]:
        """results.jsonl's usable records. What was skipped is warned of on the first read
        only: a command reads them once per section (`labctl report`: the tables, the
        nccl-tests files, the plots), and the same few warnings each time are noise."""
        warned = self._results_warned
        self._results_warned = True
        return list(self.iter_results(warn=(lambda text: None) if warned else _warn))

    # ---- the controller ---------------------------------------------------
    def controller_gone(self) -> bool:
        """A run still marked running whose labctl (on this machine) no longer exists:
        gone, ended (a zombie has), or its pid now names another process."""
        ctl = self.record.controller
        if self.record.ended or ctl is None or ctl.host != socket.gethostname() or not ctl.pid:
            return False
        return not isinstance(ctl.start_ticks, int) or \
            not procs.still_running(procs.Identity(ctl.pid, ctl.start_ticks))

    def note_controller(self) -> None:
        """Who runs this lab: lets `report`/`down` tell a live run from an abandoned one."""
        me = procs.identity()
        self.record.controller = Controller(os.getpid(), socket.gethostname(),
                                            me.start_ticks if me else None)
        self.save()

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

    # ---- writing --------------------------------------------------------
    def save(self) -> None:
        """status.json from the record, replaced atomically: a failed or cut write leaves
        the previous one and no temporary file beside it."""
        atomicfile.write_text(self.status_path, self.record.to_json())

    def write_node_log(self, index: int, text: str) -> None:
        self.node_log(index).write_text(text)

    def write_rendered(self, name: str, text: str) -> Path:
        target = self.path / RENDERED_SUBDIR / name
        target.write_text(text)
        return target

    def record_fault(self, fired: FiredFault) -> None:
        """One fired fault event: appended to faults.jsonl at once (it survives a crash of
        labctl) and kept in the record for the report."""
        with open(self.path / FAULTS_FILE, "a") as f:
            f.write(json.dumps(fired.to_dict(), sort_keys=True) + "\n")
        self.record.faults.append(fired)
        self.save()

    def write_stacks(self, dumps: dict[int, list[str]]) -> None:
        """stacks/rank-<r>.txt for every rank that printed a stack dump."""
        if not dumps:
            return
        self.stacks_dir.mkdir(exist_ok=True)
        for rank, lines in sorted(dumps.items()):
            atomicfile.write_text(self.stack_file(rank), "\n".join(lines) + "\n")
