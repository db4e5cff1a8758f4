"""`page_data(run folder) -> dict`: everything the run's page shows, read in one place.

The page's script reads only this dict (the JSON island), so how a run is stored
(the run record, labctl/runrecord.py, as status.json) is known here and nowhere else in
the page. Every read is guarded: a damaged or missing file becomes a line in `problems`
and the rest of the page is still made, never a traceback.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
from pathlib import Path
from typing import Any, Callable

import yaml

from .. import logs, report, stackdumps, tracebacks
from ..outcome import NodeState, RunState
from ..plan import rendezvous_of
from ..runrecord import RunRecord, read_bounded
from ..rundir import PLAN_FILE, RESULTS_FILE, SPEC_FILE, STATUS_FILE, TRACE_FILE, RunDir, read_results
from ..limits import MAX_FILE_BYTES
from ..verdict import as_seen_now
from .timeline import read as read_trace, stragglers, totals
from workloads._protocol import Env, one_line

SCHEMA = 1
MAX_QUOTE_LINES = 60                # lines of the first failure's traceback quoted
MAX_STACK_CHARS = 20_000            # of each rank's stack dump
MAX_STACK_RANKS = 64
MAX_FAILED_CHECKS = 50
TAIL_BYTES = 256 << 10              # of a rank log, read for its last traceback
NODE_LOG_HEAD = 4 << 20             # bytes of each node log read for which ranks ran there


class _Problems(list):
    """What is missing or damaged, one line each, named on the page."""

    def guard(self, what: str, read: Callable[[], Any], default: Any = None) -> Any:
        try:
            return read()
        except Exception as exc:        # noqa: BLE001 - the page must be written whatever is damaged
            self.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
            return default


def page_data(run_path: str | Path) -> dict[str, Any]:
    """The JSON island of `run_path`'s report.html (docs/report.md has its shape)."""
    path = Path(run_path)
    problems = _Problems()
    # the typed record, or None when status.json is missing or damaged (named in problems)
    raw = problems.guard(STATUS_FILE, lambda: _json_object(path / STATUS_FILE), {}) or {}
    record: RunRecord | None = problems.guard(STATUS_FILE, lambda: RunRecord.from_dict(raw), None) \
        if raw else None
    run = RunDir(path, record)      # the folder's names (its record may be None)
    plan = problems.guard(PLAN_FILE, lambda: _json_object(path / PLAN_FILE), {}) or {}
    spec = problems.guard(SPEC_FILE, lambda: _yaml_object(path / SPEC_FILE), {}) or {}
    results = problems.guard(RESULTS_FILE, lambda: _results(path, problems), []) or []
    state = problems.guard("the run's state", lambda: as_seen_now(
        record, run.controller_gone()).value, None) if record is not None else None
    state = state or "?"
    # bounded as a lab's by the record's own check (a damaged 10^30 looped for ever)
    world = record.world_size if record is not None else None
    trace_path = run.trace_path
    timeline = problems.guard(TRACE_FILE, lambda: read_trace(trace_path), None) \
        if trace_path.is_file() else None
    trace_nodes = timeline.rank_nodes() if timeline is not None else {}
    log_nodes = problems.guard("the node logs", lambda: ranks_in_node_logs(path), {}) or {}
    topology = problems.guard("the topology", lambda: _topology(record, plan, results, trace_nodes, log_nodes), None)

    data: dict[str, Any] = {
        "schema": SCHEMA,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "run": problems.guard("the run's facts", lambda: _facts(path, record, plan, spec, state, results), {}),
        "failure": problems.guard("the first failure", lambda: _failure(run), None),
        "live": problems.guard("the live diagnosis", lambda: _live(record), None),
        "topology": topology,
        "checks": problems.guard("the checks", lambda: _checks(results), None),
        "workloads": problems.guard("the workloads' sections", lambda: _workloads(results, problems, path),
                                    []),
        "timeline": None, "totals": None, "stragglers": None,
        "hang": problems.guard("the hang", lambda: _hang(run, topology), None),
        "logs": problems.guard("the logs", lambda: _logs(run, world, problems), None),
        "notes": [str(n) for n in record.notes] if record is not None else [],
        "problems": problems,
    }
    if timeline is not None:
        problems.extend(timeline.problems)
        data["timeline"] = problems.guard("the timeline", timeline.to_dict, None)
        data["totals"] = problems.guard("the per-op totals", lambda: totals(timeline), None)
        data["stragglers"] = problems.guard("the stragglers", lambda: stragglers(timeline), None)
        missing = timeline.metadata.get("missing_ranks") if isinstance(timeline.metadata, dict) else None
        if isinstance(missing, list) and missing:
            problems.append("trace.json: no trace records from rank " + ", ".join(map(str, missing)))
    elif not trace_path.is_file() and (spec.get("trace") or record is not None and record.trace is not None):
        problems.append("trace.json is missing: the lab was traced but no timeline was written")
    return data


# ---------------------------------------------------------------- reading the folder

def _json_object(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError("missing")
    value = json.loads(read_bounded(path, path.name))
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _yaml_object(path: Path) -> dict:
    """A YAML mapping of the run folder (spec.yaml), read no further than a lab file may
    be (limits.MAX_FILE_BYTES: a GB-sized one is a damaged folder, named as such)."""
    if not path.is_file():
        return {}
    data = read_bounded(path, "lab description", MAX_FILE_BYTES)
    value = yaml.safe_load(data.decode(errors="replace"))
    return value if isinstance(value, dict) else {}


def _results(path: Path, problems: _Problems) -> list[dict]:
    if not (path / RESULTS_FILE).is_file():
        problems.append(f"{RESULTS_FILE} is missing: no checks or data to show")
        return []
    garbled: list[str] = []
    results = list(read_results(path / RESULTS_FILE, warn=garbled.append))
    if garbled:
        problems.extend(garbled[:10])
        if len(garbled) > 10:
            problems.append(f"... and {len(garbled) - 10} more result lines skipped (garbled or with "
                            "a field of the wrong type)")
    return results


# ---------------------------------------------------------------- sections

_FACTS = ("run_id", "lab", "backend", "launcher", "dist_backend", "nodes", "nproc_per_node", "world_size",
          "started", "finished", "seconds", "message", "signal", "checks")


def _facts(path: Path, record: RunRecord | None, plan: dict, spec: dict, state: str, results: list) -> dict:
    facts: dict[str, Any] = dict.fromkeys(_FACTS)
    if record is not None:
        facts.update({k: getattr(record, k) for k in _FACTS})
        facts["checks"] = dataclasses.asdict(record.checks) if record.checks is not None else None
        # an unfinished record has said nothing yet (status.json has no message)
        facts["message"] = record.message if record.message or record.finished is not None else None
    recorded = record.state.value if record is not None else None
    said_ok = record is not None and record.finished is not None and record.ok   # `ok` once it ended
    facts.update({"state": state, "ok": said_ok, "path": str(path.resolve()),
                  "recorded_state": recorded if recorded != state else None,
                  "replicas": plan.get("replicas") or spec.get("replicas") or 1,
                  "trace": bool(spec.get("trace")),
                  "timeout": spec.get("timeout"), "pg_timeout": spec.get("pg_timeout")})
    script = spec.get("script")
    if script:
        facts["script"] = {"path": str(script), "args": [str(a) for a in spec.get("script_args") or []]}
    workloads = [w.get("name") if isinstance(w, dict) else str(w) for w in spec.get("workloads") or []]
    facts["workloads"] = [w for w in workloads if w] or sorted({r.get("workload") for r in results
                                                               if isinstance(r.get("workload"), str)})
    facts["init_method"] = _first_env(plan).get(Env.INIT_METHOD)
    return facts


def _failure(run: RunDir) -> dict | None:
    record: RunRecord | None = run.record
    if record is None:
        return None
    failure = record.first_failure
    if failure is None:
        if record.state in (RunState.PASSED, RunState.RUNNING):
            return None
        return {"text": record.message or f"the run ended {record.state.value}", "rank": None, "quote": None}
    out: dict[str, Any] = {"text": failure.describe(), "rank": failure.rank, "node": failure.node,
                           "exit_code": failure.exit_code, "signal": failure.signal,
                           "error": failure.error, "check": failure.check, "hang": failure.hang,
                           "fault": failure.fault, "left_early": failure.left_early,
                           "symptom_rank": failure.symptom_rank,
                           "peer_error": failure.peer_error, "peer_rank": failure.peer_rank}
    quote_rank = failure.symptom_rank if failure.left_early and failure.symptom_rank is not None else failure.rank
    if isinstance(quote_rank, int):
        log = run.rank_log(quote_rank)
        out["log"] = str(log)
        out["quote"] = last_traceback(log) if log.is_file() else None
        out["quote_rank"] = quote_rank
    error = failure.error or failure.peer_error
    if isinstance(error, dict) and error.get("file") and isinstance(error.get("line"), int):
        out["code"] = _source_line(Path(error["file"]), error["line"])
    return out


def _live(record: RunRecord | None) -> dict | None:
    """What the live watcher said while the lab hung (labctl/live/), with how long after
    the hang began, and whether the final diagnosis confirmed it."""
    if record is None or record.live is None:
        return None
    return {**record.live.to_dict(), "after_s": record.live.after_s}


def last_traceback(log: Path) -> list[str] | None:
    """The last Python traceback in a rank log's last TAIL_BYTES (tracebacks.last_traceback: from
    its header to the exception line), at most MAX_QUOTE_LINES, the innermost kept; None
    when the log holds none."""
    with open(log, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        text = f.read().decode(errors="replace")
    block = tracebacks.last_traceback(text.splitlines())
    if block is None:
        return None
    block = fold_lab_frames(block)
    if len(block) > MAX_QUOTE_LINES:
        block = block[:1] + [f"  ... ({len(block) - MAX_QUOTE_LINES} lines left out)"] + block[-(MAX_QUOTE_LINES - 2):]
    return block


# A frame of a traceback (`  File "x.py", line 3, in f`) or of a faulthandler dump
# (`  File "x.py", line 3 in f`); the lab's own: its runner and recorder, the private
# modules of the workloads package (workloads/_script.py, _record.py, _trace/...), and the
# runpy frames the runner starts the script through.
_FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]*)", line \d+')
_LAB_FILE = re.compile(r"(^|/)workloads/_[^/]+")
_RUNPY = re.compile(r"^<frozen runpy>$|(^|/)runpy\.py$")
_FOLDED = re.compile(r"^\s*… \d+ lab frames?$")
_THREADING = re.compile(r'File "[^"]*(^|/)threading\.py", line')


def fold_lab_frames(lines: list[str]) -> list[str]:
    """A traceback's or a stack dump's lines with each run of the lab's own frames (and the
    runpy frames beside them) folded into one line, `… N lab frames`: what is left is the
    user's code and the libraries it called. A frame's source line and its ^^^ marks go
    with it; a run of runpy frames with no lab frame in it is the user's and is kept."""
    items: list[tuple[str, list[str]]] = []
    for line in lines:
        m = _FRAME.match(line)
        if m:
            file = m.group("file")
            kind = "lab" if _LAB_FILE.search(file) else "runpy" if _RUNPY.search(file) else "frame"
            items.append((kind, [line]))
        elif items and items[-1][0] != "other" and line.startswith("    "):
            items[-1][1].append(line)       # the frame's source line, its ^^^ marks
        else:
            items.append(("other", [line]))
    out: list[str] = []
    i = 0
    while i < len(items):
        if items[i][0] not in ("lab", "runpy"):
            out.extend(items[i][1])
            i += 1
            continue
        j = i
        while j < len(items) and items[j][0] in ("lab", "runpy"):
            j += 1
        run = items[i:j]
        if any(kind == "lab" for kind, _ in run):
            m = _FRAME.match(run[0][1][0])
            indent = m.group("indent") if m else "  "
            out.append(f"{indent}… {len(run)} lab frame{'' if len(run) == 1 else 's'}")
        else:
            out.extend(line for _, block in run for line in block)
        i = j
    return out


def _source_line(file: Path, line: int) -> str | None:
    try:
        if file.is_file() and file.stat().st_size < (4 << 20):
            lines = file.read_text(errors="replace").splitlines()
            return lines[line - 1].strip() if 0 < line <= len(lines) else None
    except OSError:
        return None
    return None


def ranks_in_node_logs(path: Path) -> dict[int, int]:
    """rank -> node, from the `[rankN]:` prefix each rank's lines carry in its node's log
    (the first NODE_LOG_HEAD bytes of each: enough for every rank that printed early).
    Under torchrun's c10d rendezvous, which node gets ranks 0-1 is the rendezvous's choice."""
    found: dict[int, int] = {}
    for index, log in RunDir(path, None).node_logs():      # type: ignore[arg-type]
        with open(log, "rb") as f:
            head = f.read(NODE_LOG_HEAD)
        for rank in logs.ranks_in(head):
            found.setdefault(rank, index)
    return found


def _topology(record: RunRecord | None, plan: dict, results: list[dict], trace_nodes: dict[int, int],
              log_nodes: dict[int, int]) -> dict:
    """Nodes (hostname, address), the ranks in them, the store each replica meets at."""
    record = record or _NO_RECORD
    nproc = record.nproc_per_node       # None, or bounded as a lab's (record.status_damage)
    outcomes = {o.index: o for o in record.node_outcomes}
    exit_codes = record.rank_exit_codes
    failed = set(record.failed_ranks)
    silent = set(record.ranks_without_output)
    first = record.first_failure.rank if record.first_failure is not None else None
    rows = report.rank_rows(results)                # the env workload's: where each rank ran
    by_key = {(r.get("replica", 0), r.get("rank")): r for r in rows if isinstance(r.get("rank"), int)}
    nodes, replicas = [], {}
    source = "env workload" if rows else None
    plan_nodes = [n for n in plan.get("nodes") or [] if isinstance(n, dict)]
    for node in plan_nodes:
        env = node.get("env") or {}
        index = node.get("index")
        replica = int(env.get("REPLICA_ID", 0) or 0)
        endpoint, hosts_store = rendezvous_of(node.get("argv") or [])
        outcome = outcomes.get(index)
        ranks = []
        planned = [p for p in node.get("processes") or [] if isinstance(p, dict) and p.get("rank") is not None]
        mine = [r for (rep, _), r in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1]))
                if rep == replica and r.get("node", r.get("NODE_RANK")) == int(env.get("NODE_RANK", -1))]
        if mine:
            ranks = [{"rank": r["rank"], "local_rank": r.get("LOCAL_RANK"), "group_rank": r.get("GROUP_RANK"),
                      "pid": r.get("pid"), "device": r.get("device"), "host": r.get("hostname"),
                      "address": r.get("address"), "master": _join(r.get("MASTER_ADDR"), r.get("MASTER_PORT"))}
                     for r in mine]
        elif planned:
            source = source or "launch plan"
            ranks = [{"rank": p["rank"], "local_rank": _int((p.get("env") or {}).get("LOCAL_RANK"))}
                     for p in planned]
        elif log_nodes and replica == 0 and index in log_nodes.values():
            # the node's own log carries each of its ranks' lines: what the node ran (trace.json
            # names a rank's node by its GROUP_RANK, the rendezvous's order, which under
            # torchrun need not be the node's index)
            source = source or "the node logs (each rank's [rankN]: lines; LOCAL_RANK: its place there)"
            here = sorted(r for r, n in log_nodes.items() if n == index)
            ranks = [{"rank": r, "local_rank": i} for i, r in enumerate(here)]
        elif trace_nodes and replica == 0 and index in trace_nodes.values():
            source = source or "trace.json (the node each rank's records came from; LOCAL_RANK: its place there)"
            here = sorted(r for r, n in trace_nodes.items() if n == index)
            ranks = [{"rank": r, "local_rank": i} for i, r in enumerate(here)]
        elif nproc and isinstance(env.get("NODE_RANK"), str) and env["NODE_RANK"].isdigit():
            source = source or "assumed: torchrun numbers ranks node by node"
            base = int(env["NODE_RANK"]) * nproc
            ranks = [{"rank": base + i, "local_rank": i} for i in range(nproc)]
        for r in ranks:
            r["exit_code"] = exit_codes.get(r["rank"])
            r["failed"] = r["rank"] in failed
            r["silent"] = r["rank"] in silent
            r["first_failure"] = r["rank"] == first
        entry = {"index": index, "hostname": node.get("hostname"), "replica": replica,
                 **({"state": outcome.state.value, "exit_code": outcome.exit_code, "signal": outcome.signal or None,
                     "reason": outcome.reason or None} if outcome is not None
                    else dict.fromkeys(("state", "exit_code", "signal", "reason"))),
                 "hosts": sorted({r["host"] for r in ranks if r.get("host")}),
                 "addresses": sorted({r["address"] for r in ranks if r.get("address")}),
                 "ranks": ranks, "hosts_store": hosts_store}
        nodes.append(entry)
        rep = replicas.setdefault(replica, {"id": replica, "nodes": [], "store": None, "store_kind": None,
                                            "store_node": None})
        rep["nodes"].append(index)
        if endpoint and rep["store"] is None:
            rep["store"], rep["store_kind"] = endpoint, "c10d rendezvous store (torchrun --rdzv-endpoint), hosted by the agent of"
        if hosts_store:
            rep["store_node"] = index
        if rep["store"] is None and env.get("MASTER_ADDR"):
            rep["store"] = _join(env.get("MASTER_ADDR"), env.get("MASTER_PORT"))
            rep["store_kind"] = "TCPStore at MASTER_ADDR:MASTER_PORT, hosted by rank 0 on"
    for rep in replicas.values():
        if rep["store_node"] is None and rep["nodes"]:
            rep["store_node"] = rep["nodes"][0]
    first_env = _first_env(plan)
    shared_store = _join(first_env.get("REPLICA_STORE_ADDR"), first_env.get("REPLICA_STORE_PORT"))
    return {"nodes": nodes, "replicas": [replicas[k] for k in sorted(replicas)],
            "replica_store": shared_store, "init_method": first_env.get(Env.INIT_METHOD),
            "rank_source": source, "services": [s.get("hostname") for s in plan.get("services") or []
                                                 if isinstance(s, dict)]}


# what a folder without a readable status.json says: nothing
_NO_RECORD = RunRecord("", "", "", "", "", None, None, None)    # type: ignore[arg-type]


def _first_env(plan: dict) -> dict:
    """The environment the plan's first node shares with its processes (the init method,
    the replica store)."""
    node = next((n for n in plan.get("nodes") or [] if isinstance(n, dict)), {})
    return node.get("env") or {}


def _join(addr: Any, port: Any) -> str | None:
    return f"{addr}:{port}" if addr and port else None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _checks(results: list[dict]) -> dict:
    failed = [r for r in results if not r.get("ok", False)]
    return {"per_workload": report.workload_summary(results),
            "failed": [{k: r.get(k) for k in ("workload", "name", "rank", "detail")} for r in failed[:MAX_FAILED_CHECKS]],
            "failed_total": len(failed), "skipped": report.skipped(results)}


def _workloads(results: list[dict], problems: _Problems, path: Path) -> list[dict]:
    """Each workload's section: its views (report.page_sections) and its step's
    communication from trace.json (report.step_views), one guard each."""
    sections = []
    steps = problems.guard("one step's communication", lambda: report.step_views(path, results), {}) or {}
    for name, views in report.page_sections(results, steps):
        drawn = problems.guard(f"workload {name}'s section", views, None)
        if drawn:
            sections.append({"workload": name, "views": drawn})
    return sections


def _hang(run: RunDir, topology: dict | None = None) -> dict | None:
    """Where the collectives stopped and each rank's stack, when the run has either."""
    record: RunRecord | None = run.record
    first = record.first_failure if record is not None else None
    collective = first.collective.to_dict() if first is not None and first.collective is not None else None
    if collective and record is not None:
        for stuck in collective.get("stuck") or []:
            stuck.update(_how_ranks_left(stuck, record, topology))
    where = record.stacks if record is not None else {}
    files = run.stack_files()
    if not collective and not files:
        return None
    stacks = []
    for rank, file in files[:MAX_STACK_RANKS]:
        text = file.read_text(errors="replace")
        stacks.append({"rank": rank, "where": where.get(rank),
                       "threads": _threads(text[:MAX_STACK_CHARS]), "cut": len(text) > MAX_STACK_CHARS})
    # a lab that passed stopped nowhere: its stacks are the live watcher's looks while it
    # seemed not to move (a slow start), not where it hung
    looked = record is not None and record.state is RunState.PASSED and not collective
    return {"collective": collective, "stacks": stacks, "more_stacks": max(0, len(files) - MAX_STACK_RANKS),
            "looked": looked}


def _how_ranks_left(stuck: dict, record: RunRecord, topology: dict | None) -> dict:
    """What became of the ranks of a stuck collective, beyond who is inside and who never
    came: `killed` (rank -> why): a rank inside it whose process was killed there (its node
    killed or lost: a kill-node fault, the OOM killer; a kill-rank fault at it), so not
    waiting; `left` (rank -> its error, or ""): a rank that entered it and left it, either
    as the trace says (its op ended) or with the error its log shows raised at that very
    call (the peers of a killed node: gloo's "Connection closed by peer"), which the trace
    records as never finished."""
    node_of = {r["rank"]: n for n in (topology or {}).get("nodes") or [] for r in n.get("ranks") or []
               if isinstance(r.get("rank"), int)}
    killed_ranks = {f.target: f"killed by fault {f.fault}" for f in record.faults
                    if f.kind == "kill-rank" and f.phase == "begin" and f.ok}
    calls = stuck.get("calls") or {}

    def raised_here(rank: int) -> str | None:
        """The rank's error, when it was raised at its call of this collective."""
        error = record.rank_errors.get(rank)
        if not isinstance(error, dict) or not error.get("exception"):
            return None
        call = calls.get(str(rank)) or {}
        at = f"{error.get('file')}:{error.get('line')}"
        return _short(one_line(str(error["exception"]))) if call.get("caller") == at else None

    killed: dict[str, str] = {}
    left: dict[str, str] = {}
    for rank in stuck.get("waiting") or []:
        node = node_of.get(rank)
        if rank in killed_ranks:
            killed[str(rank)] = killed_ranks[rank]
        elif node is not None and node.get("state") in (NodeState.KILLED.value, NodeState.LOST.value):
            killed[str(rank)] = f"node {node['index']} " + (node.get("reason") or node["state"])
        elif (error := raised_here(rank)) is not None:
            left[str(rank)] = error
    seq = stuck.get("seq")
    inside = set(stuck.get("waiting") or []) | set(stuck.get("missing") or [])
    for key, last in (stuck.get("last") or {}).items():
        if key.isdigit() and int(key) not in inside and isinstance(last, str) and last.startswith(f"#{seq} "):
            error = record.rank_errors.get(int(key))
            text = error.get("exception") if isinstance(error, dict) else None
            left[key] = _short(one_line(str(text))) if text else ""
    return {"killed": killed, "left": dict(sorted(left.items(), key=lambda kv: int(kv[0])))}


def _short(text: str, most: int = 120) -> str:
    """An error as a chip's line: its first sentence, at most `most` characters (…), without
    the C++ source place torch's errors begin with ([/__w/pytorch/.../pair.cc:553])."""
    text = re.sub(r"\[[^\]\s]*\.(?:cc|cpp|c|h|hpp):\d+\]\s*", "", text)
    m = re.search(r"[.!?](\s|$)", text)
    text = text[:m.end()].strip() if m else text
    return text if len(text) <= most else text[:most - 1].rstrip() + "…"


def _threads(text: str) -> list[dict]:
    """A faulthandler dump's threads (stackdumps.dump_threads), the current (main) thread first."""
    threads = [{"name": header.rstrip(":"), "current": header.startswith("Current"),
                "frames": fold_lab_frames([line.rstrip() for line in lines if line.strip()])}
               for header, lines in stackdumps.dump_threads(text.splitlines())]
    for thread in threads:          # a thread the lab started (its recorder's): nothing of the user's
        thread["lab"] = bool(thread["frames"]) and not thread["current"] and all(
            _FOLDED.match(f) or _THREADING.search(f) for f in thread["frames"]) \
            and any(_FOLDED.match(f) for f in thread["frames"])
    threads.sort(key=lambda t: not t["current"])
    return threads


def _logs(run: RunDir, world: int | None, problems: _Problems) -> dict:
    """Where each log is, and which are missing (a rank or node log the run should have)."""
    record: RunRecord | None = run.record
    ranks = []
    for rank in range(world or 0):
        log = run.rank_log(rank)
        if log.is_file():
            ranks.append({"rank": rank, "path": str(log), "bytes": log.stat().st_size})
        else:
            ranks.append({"rank": rank, "path": str(log), "bytes": None})
    missing = [r["rank"] for r in ranks if r["bytes"] is None]
    if missing and record is not None and record.ended:
        named = ", ".join(str(run.rank_log(r).relative_to(run.path)) for r in missing[:20])
        problems.append(f"rank logs missing: {named}" + (f" and {len(missing) - 20} more" if len(missing) > 20 else ""))
    nodes = sorted(str(p) for _, p in run.node_logs())
    return {"ranks": ranks[:256], "nodes": nodes[:256], "results": str(run.results_path),
            "report_md": str(run.report_path)}
