"""Reports from a run folder: one table per question a learner asks.

Which rank is where (env)? Did every check pass, per workload? What failed,
on which rank, why (the exception and where it was raised), and where is its
log? What was skipped and why? What had to be killed? A workload adds its own
sections through its plugin (`workloads/_report/<name>.py`), and its files, comparison
and prediction through the host part the plugin names (labctl/reports/hosts.py); the
core names no workload.
"""
from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from workloads._protocol import DATA, WORKLOAD_DONE, visible
from workloads._protocol.plugin import InputError, Workload

from . import draw, stepcomm
from .outcome import NodeState, RunState, signal_name
from .runrecord import RunRecord, where as _where
from .verdict import as_seen_now
from .errors import LabError, Refused
from .faults import parse as parse_fault
from .plugins import plugin
from .reports import hosts
from .rundir import PAGE_FILE, RunDir
from .spec import SpecError
from .tables import table  # noqa: F401  (re-exported: report.table is the table format)


def hooks_for(results: list[dict]) -> list[tuple[str, Workload]]:
    """The plugins of the workloads present in these results, in the order they first appear."""
    seen: list[str] = []
    for r in results:
        w = r.get("workload")
        if isinstance(w, str) and w not in seen:
            seen.append(w)
    return [(w, p) for w in seen if (p := plugin(w)) is not None]


def write_files(run: RunDir, note: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Files the run's workloads add next to report.md (plots); a failure is a note."""
    written: list[Path] = []
    for _, workload in hooks_for(run.results()):
        write = hosts.of(workload).write_files
        if write is not None:
            try:
                written += write(run)
            except LabError as exc:
                note(f"note: {exc}")
    return written


def compare(run_a: RunDir, run_b: RunDir, fmt: str = "md") -> str:
    """`labctl compare`: the first workload of run A that knows how to compare."""
    for _, workload in hooks_for(run_a.results()):
        answer = hosts.of(workload).compare
        if answer is not None:
            return answer(run_a, run_b, fmt)
    raise Refused(f"{run_a.path}: nothing to compare: none of its workloads has comparable "
                   "measurements (make some with: labctl up --workload bench)")

def predict(run: RunDir, world_size: int, sizes: list[int] | None = None, fmt: str = "md",
            links: dict | None = None) -> str:
    """`labctl predict`: the first workload of the run that can scale its measurements
    to another world size (bench: each op's messages replayed over the links; `links`: the
    --link overrides, as the lab file's `links:` mapping)."""
    for _, workload in hooks_for(run.results()):
        scale = hosts.of(workload).predict
        if scale is not None:
            try:
                return scale(run, world_size, sizes, fmt, **({"links": links} if links else {}))
            except InputError as exc:
                raise SpecError(str(exc)) from None
    raise LabError(f"{run.path}: nothing to predict from: none of its workloads fits a cost "
                   "model (make a sweep with: labctl up --workload bench)")


def rank_rows(results: list[dict]) -> list[dict]:
    """Per-rank records (where each rank runs) from the workloads that have them."""
    return [row for _, workload in hooks_for(results) if workload.rank_rows is not None
            for row in workload.rank_rows(results)]


def page_sections(results: list[dict], extra: dict[str, list] | None = None
                  ) -> list[tuple[str, Callable[[], list[dict]]]]:
    """Each workload's section of the page, to be drawn (its views, as the JSON island
    holds them): the same view model report.md draws (`extra`: as in `_sections`)."""
    return [(name, lambda w=workload, n=name: draw.page([*w.head(results), *w.views(results),
                                                         *(extra or {}).get(n, [])]))
            for name, workload in hooks_for(results)]


def step_views(run_path: Path, results: list[dict]) -> dict[str, list]:
    """One step's communication per workload, from trace.json (labctl/stepcomm.py); a
    damaged trace costs that section, never the report."""
    try:
        return stepcomm.views(run_path, results)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def workload_summary(results: list[dict]) -> list[dict]:
    by: dict[str, dict[str, Any]] = {}
    for r in results:
        if r.get("name") == DATA:               # what a rank held, not a check
            continue
        w = r.get("workload", "?")
        s = by.setdefault(w, {"workload": w, "checks": 0, "passed": 0, "failed": 0,
                              "skipped": 0, "ranks": set(), "seconds": 0.0})
        if isinstance(r.get("rank"), int):
            s["ranks"].add(r["rank"])
        if r.get("name") == WORKLOAD_DONE:
            s["seconds"] = max(s["seconds"], float(r.get("seconds") or 0.0))
            continue
        s["checks"] += 1
        if r.get("skipped"):
            s["skipped"] += 1
        elif r.get("ok"):
            s["passed"] += 1
        else:
            s["failed"] += 1
    out = []
    for s in by.values():
        s["ranks"] = len(s["ranks"])
        out.append(s)
    return out


def skipped(results: list[dict]) -> list[dict]:
    groups: dict[tuple, list[int]] = defaultdict(list)
    for r in results:
        if r.get("skipped"):
            groups[(r.get("workload"), r.get("name"), r.get("reason"))].append(r.get("rank"))
    return [{"workload": w, "name": n, "reason": why, "ranks": sorted(x for x in ranks if x is not None)}
            for (w, n, why), ranks in groups.items()]


def as_dict(run: RunDir) -> dict[str, Any]:
    results = run.results()
    status = run.record.to_dict()
    state = seen_now(run)
    if state.value != status.get("state"):      # as the Markdown report: abandoned, not running
        status["recorded_state"], status["state"] = status.get("state"), state.value
    data = {
        "status": status,
        "ranks": rank_rows(results),
        "workloads": workload_summary(results),
        "failed_checks": [r for r in results if not r.get("ok", False)],
        "skipped": skipped(results),
    }
    for name, workload in hooks_for(results):
        if workload.data is not None:
            data[name] = workload.data(results)
    return data


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{len(ranks)} ranks"


def _sections(results: list[dict], head: bool = False, brief: bool = False,
              extra: dict[str, list] | None = None) -> list[str]:
    """Each workload's views (`head`: its head, before the checks per workload), drawn as
    Markdown, a blank line before each. `brief`: what `labctl up` prints, without the
    sections of workloads that draw a table row per call (said in one line instead);
    `extra`: views read elsewhere than the results, by workload (one step's communication)."""
    parts: list[str] = []
    left_out = []
    for name, workload in hooks_for(results):
        if brief and not head and not workload.brief:
            left_out.append(name)
            continue
        section = draw.markdown(workload.head(results) if head else
                                [*workload.views(results), *(extra or {}).get(name, [])])
        if section:
            parts += ["", section]
    if left_out:
        parts += ["", f"What every rank held before and after each call ({', '.join(left_out)}): "
                      "report.md and report.html."]
    return parts


def seen_now(run: RunDir) -> RunState:
    """The run's state as it stands now (verdict.as_seen_now: abandoned when its labctl
    is gone)."""
    return as_seen_now(run.record, run.controller_gone())


def markdown(run: RunDir, brief: bool = False) -> str:
    """report.md; `brief`: what `labctl up` prints at the end (the workloads that draw a
    table row per call are named, not drawn)."""
    m, results = run.record, run.results()
    state = seen_now(run)
    parts = [
        f"# Lab {m.lab}: {state.value.upper()}",
        "",
        f"run `{m.run_id}` · backend {m.backend} · launcher {m.launcher} · "
        f"{m.dist_backend} · {m.nodes} node(s) x {m.nproc_per_node} "
        f"process(es) = world size {m.world_size}"
        + (f" · {m.seconds:.1f} s" if isinstance(m.seconds, (int, float)) else ""),
    ]
    if m.message:
        parts += ["", f"**{m.message}**"]

    parts += _sections(results, head=True)

    summary = workload_summary(results)
    if summary:
        parts += ["", "## Checks per workload", "",
                  table(("workload", "ranks", "passed", "failed", "skipped", "seconds (slowest rank)"),
                        ((s["workload"], s["ranks"], s["passed"], s["failed"], s["skipped"],
                          f"{s['seconds']:.2f}") for s in summary))]

    parts += _sections(results, brief=brief, extra=None if brief else step_views(run.path, results))

    skips = skipped(results)
    if skips:
        parts += ["", "## Skipped (not a failure)", "",
                  table(("workload", "check", "reason", "ranks"),
                        ((s["workload"], s["name"], s["reason"], _ranks_text(s["ranks"]))
                         for s in skips))]

    failed = [r for r in results if not r.get("ok", False)]
    if failed:
        parts += ["", "## Failed checks", "",
                  table(("workload", "check", "rank", "detail", "log"),
                        ((r.get("workload"), r.get("name"), r.get("rank"), r.get("detail", ""),
                          run.rank_log(r["rank"]) if isinstance(r.get("rank"), int) else "")
                         for r in failed[:50]))]
    codes, errors = m.rank_exit_codes, m.rank_errors
    bad_nodes = [n for n in m.node_outcomes if n.state is not NodeState.SUCCEEDED]
    first = m.first_failure
    if first is not None:
        log = run.rank_log(first.rank) if isinstance(first.rank, int) else (
            run.node_log(first.node) if isinstance(first.node, int) else run.path)
        parts += ["", f"**First failure: {first.describe()}** — log: {log}"]
        if first.left_early and first.error:
            parts.append(f"- what the others saw: rank {first.symptom_rank}: "
                         f"`{first.error.get('exception')}`")
        if first.collective is not None and first.collective.text:
            parts.append(f"- where the collectives stopped: {first.collective.text}")
        if first.peer_error:
            parts.append(f"- what the others saw: rank {first.peer_rank}: "
                         f"`{first.peer_error.get('exception')}`")
    if m.live is not None:
        parts += ["", live_line(m.live, m.ended)]
    if m.faults:
        parts += ["", "## Faults and what the nodes did", "", fault_timeline(m)]
    if codes or bad_nodes:
        parts += ["", "## Failed processes", ""]
        killed = {f.target: f.fault for f in m.faults if f.began and _kills_a_rank(f.fault)}
        # the first failure's own rank(s) were not stopped after another failure: they were it
        itself = set() if first is None or first.hang else \
            {first.rank, *(first.ranks or [])} - {None}
        for rank, code in codes.items():
            why = " (stopped by its launcher after another failure)" if code in (-15, -9) else ""
            if rank in itself and code < 0:
                why = f" (killed by {signal_name(-code)}: the first failure)"
            if rank in killed and code == -9:
                why = f" (killed by fault {killed[rank]})"
            err = errors.get(rank)
            cause = f" — `{err['exception']}`{_where(err)}" if err else ""
            parts.append(f"- rank {rank} exited with code {code}{why}{cause}: "
                         f"{run.rank_log(int(rank))}")
        for n in bad_nodes:
            how = n.state.value + (f" by {n.signal}" if n.signal else "")
            how += f", exit code {n.exit_code}" if n.exit_code is not None else ""
            how += f" ({n.reason})" if n.reason else ""
            parts.append(f"- node {n.index} ({n.hostname}): {how}: {run.node_log(n.index)}")
    if m.ranks_without_output and not m.ok:
        parts.append(f"- no output from rank(s) {_ranks_text(m.ranks_without_output)}")
    if m.stacks and not m.ok:           # a run that passed: the live watcher's look at a slow start, no finding
        parts += ["", "## Where each rank was (its stack when labctl asked)", "",
                  stacks_table({str(r): w for r, w in m.stacks.items()}, run,
                               {str(r): c for r, c in m.rank_exit_codes.items()})]
    leftovers = m.leftovers or []
    if leftovers:
        parts += ["", "## Processes killed after the ranks ended", "",
                  "A rank started these and left them behind (a real node would keep them "
                  "running); labctl killed them with their node.", "",
                  table(("node", "pid", "command"),
                        ((x.node, x.pid, x.command) for x in leftovers[:50]))]
    for note in m.notes:
        parts.append(f"- note: {note}")
    if m.trace is not None and m.trace.ops:
        parts.append(f"- communication timeline: {run.path / m.trace.file} "
                     f"({m.trace.ops} ops; `labctl trace {run.path}`; open in ui.perfetto.dev)")
        from .trace import TIMELINE_FILE
        picture = run.path / TIMELINE_FILE
        if picture.is_file():           # `labctl trace RUN --png` draws it
            parts.append(f"- timeline picture: {picture}")
    parts += ["", f"Logs: {run.nodes_dir}/ (per node), {run.ranks_dir}/ (per rank); "
              f"results: {run.results_path}"]
    if (run.path / PAGE_FILE).is_file():
        parts.append(f"Page: {run.path / PAGE_FILE} (open it in a browser; it needs no network)")
    parts.append("")
    # a rank's text (its exception, a check's detail, a hook's table of its records) is
    # shown, not obeyed, wherever report.md is read: a terminal, `cat`, a Markdown viewer
    return visible("\n".join(parts), keep="\n\t")


def fault_timeline(m: RunRecord) -> str:
    """Injected faults and each node's end on one clock (seconds after labctl started the lab)."""
    rows = []
    for f in m.faults:
        lasts = parse_fault(f.fault).duration is not None
        what = f"fault {f.fault}" + (" begins" if f.phase == "begin" and lasts else
                                     " ends" if f.phase == "end" else "")
        detail = f.did + (f" ({f.note})" if f.note else "")
        rows.append((f.lab_s, 0, what, detail))
    for n in m.node_outcomes:
        if n.exited_s is None:
            continue
        how = n.state.value + (f" by {n.signal}" if n.signal else "")
        how += f", exit code {n.exit_code}" if n.exit_code not in (None, 0) else ""
        rows.append((n.exited_s, 1, f"node {n.index} ended", how + (f" ({n.reason})" if n.reason else "")))
    rows.sort(key=lambda r: (r[0], r[1]))
    first = m.faults[0] if m.faults else None
    clock = first.lab_s - first.fired_s if first is not None else None
    since = "every rank had joined" if first is not None and first.clock == "join" else \
        "every node was running"
    caption = ("Seconds after labctl started the lab" + (f"; {since} at {clock:.1f} s "
               "(the faults' T counts from there)" if clock is not None else "") + ".\n\n")
    return caption + table(("t (s)", "event", "detail"), ((f"{t:.1f}", what, d) for t, _, what, d in rows))


def live_line(live, ended: bool) -> str:
    """The live watcher's answer (labctl/live/), said while the lab hung, and at the end
    whether the final diagnosis confirmed it."""
    head = f"**Live diagnosis, {live.after_s:.1f} s after the hang began:** {live.text}"
    if live.resumed_at is not None:
        head += f" (the ranks moved again {live.resumed_at - live.since:.0f} s after it began)"
    if live.verdict:
        head += f" — {live.verdict} by the final diagnosis" if live.verdict == "confirmed" else \
            f" — the final diagnosis {live.verdict}"
    elif not ended:
        head += " — the lab still runs"
    return head


def stacks_table(where: dict[str, dict], run: RunDir, codes: dict | None = None) -> str:
    """rank · state · innermost frame in the user's or workload's code · torch.distributed call."""
    codes = codes or {}
    rows = []
    for rank, w in sorted(where.items(), key=lambda kv: int(kv[0])):
        state = f"exited {codes[rank]}" if rank in codes else "running when asked"
        frame = f"{w['file']}:{w['line']} in {w['function']}" if w.get("file") else "(no frame in user code)"
        rows.append((rank, state, frame, w.get("call") or "", run.stack_file(int(rank))))
    return table(("rank", "state", "where (innermost frame in your code)", "in torch.distributed",
                  "stack"), rows)


def _kills_a_rank(text: str) -> bool:
    fault = parse_fault(text)
    return fault.kills and not fault.node_fault


def as_csv(run: RunDir) -> str:
    """Every result as one CSV row (bench runs: the nccl-tests-style rows)."""
    results = run.results()
    for _, workload in hooks_for(results):
        if workload.csv is not None:
            return draw.csv(workload.csv(results))
    buf = io.StringIO()
    columns = ["workload", "name", "rank", "ok", "skipped", "detail", "reason"]
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in results:
        writer.writerow(r)
    return buf.getvalue()


def render(run: RunDir, fmt: str = "md") -> str:
    if fmt == "json":
        return json.dumps(as_dict(run), indent=2, default=str) + "\n"
    if fmt == "csv":
        return as_csv(run)
    return markdown(run)
