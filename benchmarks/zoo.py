"""The diagnosis zoo: run each case of benchmarks/zoo/ through the lab and through torch's
own tools, and score each tool's answer against the case's header.

    python benchmarks/zoo.py [--backend local|compose] [--cases a,b]
                             [--tools lab,fr_trace,dumps,detail,torchrun,debug_server]
                             [--out DIR] [--json FILE] [--zoo DIR] [--slack S] [--image I] [-v]

Tools (benchmarks/zoo/README.md says what each reads):
  lab       `labctl up --script CASE` (this checkout), status.json's first_failure (a run that
            passed: the trace's straggler or mismatch in status.json's `trace`)
  live      the same run's live diagnosis (status.json's `live`, said while the lab hung): its
            seconds are from the hang's start (the first rank's last op) to the answer
  fr_trace  torch's Flight Recorder analyzer (`python -m torch.distributed.flight_recorder.fr_trace`)
            on the pickle dumps the same lab run wrote (`--env LAB_FR_DUMP_DIR=<dir>`)
  dumps     `labctl diagnose <that dir> --format json`: the lab's matcher on the same torch
            dumps fr_trace reads (dumps only, none of the lab's own records)
  detail    `torchrun` with TORCH_DISTRIBUTED_DEBUG=DETAIL and TORCH_CPP_LOG_LEVEL=INFO (what
            `--debug` sets): the errors it prints
  torchrun  plain `python -m torch.distributed.run --standalone --nproc-per-node N CASE`, killed
            at the case's timeout: what a user sees without the lab
  debug_server  the same lab with `--debug-server` (torch's debug server on every rank), read
            as a user reads its stacks page: where every rank is in the script, and the odd
            one out (its periodic stacks dumps in the run folder: what the page showed)

Each cell of the table is three marks, culprit / op / line (✓ right, ✗ wrong or not said),
and the seconds from the fault to the answer: the tool's time from launch to its answer
less its time on the control case (a correct script: start-up and end), so about the time
past the fault, which every case makes within a second of the ranks joining.

Bad input (an unknown case or tool, a case without its header): one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from _zoo import (Answer, BadCase, Case, debug_server_answer, dumps_answer, frtrace_answer, lab_answer,  # noqa: E402
                  live_answer, load_case, score, stack_lines, torchrun_answer)
from labctl.tables import table  # noqa: E402

TOOLS = ("lab", "live", "fr_trace", "dumps", "detail", "torchrun", "debug_server")
ZOO = HERE / "zoo"
CONTROL = "control_pass"


class Refused(Exception):
    """Bad input: one line, exit 2."""


def case_files(zoo: Path, split: str) -> dict[str, Path]:
    """The cases of a split by name: dev, zoo/*.py; heldout, zoo/heldout/*.py (written apart
    from the fixes, run only at the end of a round); all, both."""
    folders = {"dev": [zoo], "heldout": [zoo / "heldout"], "all": [zoo, zoo / "heldout"]}[split]
    return {p.stem: p for folder in folders for p in sorted(folder.glob("*.py"))}


def select(zoo: Path, names: str | None, split: str = "dev") -> list[Case]:
    files = case_files(zoo, split)
    available = sorted(files)
    wanted = [n.strip() for n in names.split(",") if n.strip()] if names else available
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise Refused(f"unknown zoo case {unknown[0]!r} (the {split} cases in {zoo}: "
                      f"{', '.join(available) or 'none'})")
    try:
        return [load_case(files[n]) for n in wanted]
    except BadCase as exc:
        raise Refused(str(exc)) from None


def docker_answers() -> str | None:
    """None when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "no docker command on this machine"
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    return None if done.returncode == 0 else f"no Docker engine answers ({done.stderr.strip()[:120]})"


def _run(argv: list[str], timeout: float, env: dict[str, str], cwd: Path) -> tuple[str, float, bool]:
    """(output, seconds, killed at the timeout); the whole process group is ended either way."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, cwd=cwd, start_new_session=True)
    killed = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        killed = True
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    seconds = time.monotonic() - started
    _signal_group(proc.pid, signal.SIGKILL)          # whatever it left behind
    return out.decode(errors="replace"), seconds, killed


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


COMPOSE_START_S = 60                # --slack's default on compose: containers take that long to start here


def run_lab(case: Case, folder: Path, backend: str, image: str | None = None, slack: float = 0.0,
            debug_server: bool = False, on_hang: str = "report") -> tuple[dict | None, Path, float, str]:
    """One lab run (this checkout's labctl) with Flight Recorder dumps: (status.json, the
    dumps' folder, seconds, labctl's output)."""
    out, dumps = folder / "run", folder / "fr"
    # the deadline counts from the start: start-up (containers, a loaded machine) gets `slack` more
    timeout = case.timeout + slack
    argv = [sys.executable, "-m", "labctl.cli", "up", "--backend", backend, "--script", str(case.path),
            "--nodes", str(case.nodes), "--nproc-per-node", str(case.nproc), "--timeout", f"{timeout:g}",
            "--out", str(out), "-q", "--env", f"LAB_FR_DUMP_DIR={dumps}", "--env", "LAB_FR_DUMP_STACKS=1"]
    if image and backend == "compose":
        argv += ["--image", image]
    if debug_server:
        argv += ["--debug-server"]
    if on_hang != "report" and case.kind not in QUIET_KINDS:
        argv += ["--on-hang", on_hang]      # a healthy slow case runs on: stopping it would be a false alarm
    if case.faults:                     # a fault's time counts from every rank's init, however long start-up took
        argv += ["--fault-clock", "join"]
    for fault in case.faults:
        argv += ["--fault", fault]
    for link in case.links:
        argv += ["--link", link]
    if case.pg_timeout is not None:
        argv += ["--pg-timeout", f"{case.pg_timeout:g}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    output, seconds, _ = _run(argv, timeout + 180, env, REPO)
    try:
        status = json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        status = None
    return status, dumps, seconds, output


def run_frtrace(dumps: Path, folder: Path) -> tuple[str, float]:
    if not dumps.is_dir() or not any(dumps.glob("rank_*")):
        return "", 0.0
    argv = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(dumps), "-p", "rank_",
            "--allow-incomplete-ranks"]
    output, seconds, _ = _run(argv, 300, dict(os.environ), folder)
    return output, seconds


def run_dumps(dumps: Path, folder: Path) -> tuple[str, float]:
    """`labctl diagnose DIR --format json` (this checkout's) on the run's torch dumps."""
    if not dumps.is_dir() or not any(dumps.glob("rank_*")):
        return "", 0.0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "labctl.cli", "diagnose", str(dumps), "--format", "json"]
    output, seconds, _ = _run(argv, 120, env, folder)
    return output, seconds


def run_torchrun(case: Case, folder: Path, detail: bool, slack: float = 0.0) -> tuple[str, float, bool]:
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAB_", "TORCH_DISTRIBUTED_DEBUG"))}
    env.pop("PYTHONPATH", None)
    if detail:
        env.update(TORCH_DISTRIBUTED_DEBUG="DETAIL", TORCH_CPP_LOG_LEVEL="INFO")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(case.world),
            str(case.path)]
    return _run(argv, case.timeout + slack, env, folder)


def run_debug_server(case: Case, folder: Path, backend: str, image: str | None, slack: float) -> dict:
    """The same lab with torch's debug server (`--debug-server`), read as a user reads its
    stacks page: each rank's line in the case's script and the odd one out
    (`_zoo.debug_server_answer`), from its periodic dumps in the run folder
    (debug-server/stacks_*.txt: what the page showed then). The answer is the last dump's;
    its time, that of the first dump that already said it."""
    launched = time.time()
    status, _, seconds, output = run_lab(case, folder, backend, image, slack, debug_server=True)
    dumps = sorted((folder / "run" / "debug-server").glob("stacks_*.txt"), key=lambda p: p.stat().st_mtime)
    if not dumps:
        return {"answer": Answer(text="no stacks dump (the server did not start, or the lab ended first)"),
                "raw": output[-2000:]}
    source = case.path.read_text()
    answers = [(d, debug_server_answer(stack_lines(d.read_text(errors="replace"), case.path.name, case.world),
                                       source)) for d in dumps]
    last = answers[-1][1]
    first = next(d for d, a in answers if a.said == last.said)
    answer = Answer(last.culprits, last.op, last.line, last.text, first.stat().st_mtime - launched)
    return {"answer": answer, "raw": last.text}


def run_case(case: Case, tools: list[str], backend: str, folder: Path, verbose: bool,
             image: str | None = None, slack: float = 0.0, on_hang: str = "report") -> dict[str, dict]:
    """Each tool's answer (seconds: launch to answer, not yet less the control's)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = case.path.name
    found: dict[str, dict] = {}
    if "lab" in tools or "fr_trace" in tools or "live" in tools or "dumps" in tools:
        status, dumps, seconds, output = run_lab(case, folder / "lab", backend, image, slack, on_hang=on_hang)
        if "live" in tools:
            found["live"] = {"answer": live_answer(status, script), "raw": ((status or {}).get("live") or {})
                             .get("reason", "")}
        if "lab" in tools:
            answer = lab_answer(status, script, seconds) if status else \
                Answer(text=f"no status.json: {output.strip()[-200:]}", seconds=seconds)
            found["lab"] = {"answer": answer, "raw": output[-2000:]}
        if "fr_trace" in tools:
            said, more = run_frtrace(dumps, folder)
            answer = frtrace_answer(said, script, seconds + more) if said else \
                Answer(text="no Flight Recorder dump", seconds=None)
            found["fr_trace"] = {"answer": answer, "raw": said[-4000:]}
        if "dumps" in tools:
            said, more = run_dumps(dumps, folder)
            answer = dumps_answer(said, script, seconds + more) if said else \
                Answer(text="no Flight Recorder dump", seconds=None)
            found["dumps"] = {"answer": answer, "raw": said[-4000:]}
    if "debug_server" in tools:
        found["debug_server"] = run_debug_server(case, folder / "debug_server", backend, image, slack)
    for tool in ("detail", "torchrun"):
        if tool in tools:
            output, seconds, killed = run_torchrun(case, folder / tool, detail=tool == "detail", slack=slack)
            answer = torchrun_answer(output, script, seconds)
            if answer.silent and killed:
                answer = Answer(text=f"nothing said before the {case.timeout + slack:g} s timeout", seconds=None)
            found[tool] = {"answer": answer, "raw": output[-6000:]}
    if verbose:
        for tool, got in found.items():
            a = got["answer"]
            print(f"  {case.name} / {tool}: {score(case, a).marks()} culprits={list(a.culprits)} op={a.op} "
                  f"line={a.line} {a.seconds if a.seconds is None else round(a.seconds, 1)}s: {a.text[:160]}",
                  flush=True)
    return found


HANG_KINDS = ("hang", "deadlock", "timeout", "mismatch")
QUIET_KINDS = ("pass", "straggler")   # runs that pass: no live hang may be named (a stall that resumed is none)


def live_summary(cases: list[Case], results: dict[str, dict]) -> str:
    """The live answer on the cases that hang (their kind, or the lab's final answer says a
    hang), and its false alarms on the blameless ones: the issue's bars."""
    hangs, right, seconds, alarms, blameless = 0, 0, [], [], 0
    for case in cases:
        got = results.get(case.name, {}).get("found")
        if not got or "live" not in got:
            continue
        answer = got["live"]["answer"]
        if case.blameless or case.kind in QUIET_KINDS:     # healthy, if slow: the live answer must be silent
            blameless += 1
            if not answer.silent:
                alarms.append(case.name)
            continue
        final = (got.get("lab") or {}).get("answer")
        hung = case.kind in HANG_KINDS and (not answer.silent or "hang" in (final.text if final else ""))
        if not hung:
            continue
        hangs += 1
        right += score(case, answer).all
        if answer.seconds is not None:
            seconds.append(answer.seconds)
    seconds.sort()
    median = seconds[len(seconds) // 2] if seconds else float("nan")
    within = sum(1 for s in seconds if s <= 15)
    return (f"live: culprit, op and line right in {right}/{hangs} hang cases; answered in {len(seconds)}, "
            f"{within} within 15 s of the hang's start (median {median:.1f} s, max "
            f"{max(seconds) if seconds else float('nan'):.1f} s); false alarms on {len(alarms)}/{blameless} "
            f"cases that pass{': ' + ', '.join(alarms) if alarms else ''}")


def collective_summary(cases: list[Case], results: dict[str, dict], tools: list[str]) -> str:
    """torch's dumps on the collective cases (issue 50's bar: culprit and op right in 80 %):
    the hangs and mismatches whose op is a collective call (`Case.collective`)."""
    rows = []
    for tool in tools:
        for split in sorted({c.split for c in cases}):
            ran = [c for c in cases if c.split == split and c.collective and "found" in results.get(c.name, {})]
            right = sum(1 for c in ran if (v := score(c, results[c.name]["found"][tool]["answer"])).culprit and v.op)
            rows.append((tool, split, len(ran), f"{right}/{len(ran)} ({100 * right / len(ran):.0f} %)" if ran else "-"))
    return "\ntorch's dumps alone, the collective cases (hangs and mismatches whose op is a collective call):\n\n" \
        + table(("tool", "split", "cases", "culprit and op"), rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="local", choices=("local", "compose"))
    parser.add_argument("--cases", help="comma list of case names (default: every case of the split)")
    parser.add_argument("--split", default="dev", choices=("dev", "heldout", "all"),
                        help="dev: zoo/*.py (default); heldout: zoo/heldout/*.py, the cases written apart "
                        "from the fixes, run at the end of a round; all: both")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma list of {', '.join(TOOLS)}")
    parser.add_argument("--zoo", type=Path, default=ZOO, help="the cases' folder (default benchmarks/zoo)")
    parser.add_argument("--out", type=Path, help="where the runs go (default: a new temporary folder)")
    parser.add_argument("--json", type=Path, help="also write every answer and verdict here")
    parser.add_argument("--slack", type=float, help="seconds added to every case's timeout, for start-up "
                        f"(default: {COMPOSE_START_S} on compose, 0 on local; more on a loaded machine)")
    parser.add_argument("--image", help="the container image of compose labs (default: the lab's, labctl-cpu:latest)")
    parser.add_argument("--on-hang", choices=("report", "stop"), default="report",
                        help="report (default): a hang's lab runs to the case's deadline; stop: it ends once the "
                        "live watcher names the hang (~10 s in: the whole zoo in about half the time; the cases "
                        "that pass, kind pass or straggler, still run with report)")
    parser.add_argument("-v", "--verbose", action="store_true", help="each answer as it comes")
    args = parser.parse_args(argv)
    try:
        tools = [t.strip() for t in args.tools.split(",") if t.strip()]
        bad = [t for t in tools if t not in TOOLS]
        if bad or not tools:
            raise Refused(f"unknown tool {bad[0] if bad else args.tools!r} (tools: {', '.join(TOOLS)})")
        cases = select(args.zoo, args.cases, args.split)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    no_docker = docker_answers() if args.backend == "compose" else None
    if no_docker:
        print(f"note: the compose cases are not run: {no_docker}", file=sys.stderr)
    out = args.out or Path(tempfile.mkdtemp(prefix="labctl-zoo-"))
    print(f"runs in {out}", flush=True)
    control = next((c for c in cases if c.name == CONTROL), None)
    if control is None and (args.zoo / f"{CONTROL}.py").is_file():
        control = load_case(args.zoo / f"{CONTROL}.py")
    baseline: dict[str, float] = {}
    results: dict[str, dict] = {}
    order = ([control] if control else []) + [c for c in cases if c is not control]
    for case in order:
        skip = None
        if case.backend == "compose" and args.backend != "compose":
            skip = "compose-only: not run on the local backend"
        elif args.backend == "compose" and no_docker:
            skip = no_docker
        if skip:
            results[case.name] = {"case": case, "skipped": skip}
            print(f"{case.name}: skipped ({skip})", flush=True)
            continue
        started = time.monotonic()
        slack = args.slack if args.slack is not None else COMPOSE_START_S if args.backend == "compose" else 0.0
        found = run_case(case, tools, args.backend, out / case.name, args.verbose, args.image, slack, args.on_hang)
        if case is control:
            baseline = {t: g["answer"].seconds for t, g in found.items() if g["answer"].seconds is not None}
        results[case.name] = {"case": case, "found": found}
        marks = " ".join(f"{t} {score(case, g['answer']).marks()}" for t, g in found.items())
        print(f"{case.name}: {marks} ({time.monotonic() - started:.0f} s)", flush=True)
    shown = [c for c in cases]
    splits = sorted({c.split for c in shown})
    rows, totals = [], {(t, sp): [0, 0, 0, 0, 0] for t in tools for sp in splits}
    for case in shown:
        got = results.get(case.name, {})
        if "skipped" in got:
            rows.append((case.name, case.split, case.kind, *(["not run"] * len(tools))))
            continue
        cells = []
        for tool in tools:
            answer = got["found"][tool]["answer"]
            verdict = score(case, answer)
            base = 0.0 if tool == "live" else baseline.get(tool, 0.0)     # live: from the hang's start already
            after = None if answer.seconds is None else max(0.0, answer.seconds - base)
            if tool == "live" and not case.blameless and case.kind in QUIET_KINDS:
                cells.append("quiet ✓" if answer.silent else "alarm ✗")   # healthy: silence is right
                continue
            cells.append(f"{verdict.marks()} {'' if after is None else f'{after:.0f} s'}".strip())
            if case.name != CONTROL:
                t = totals[tool, case.split]
                t[0] += 1
                t[1] += verdict.culprit
                t[2] += verdict.op
                t[3] += verdict.line
                t[4] += verdict.all
        rows.append((case.name, case.split, case.kind, *cells))
    print()
    print(table(("case", "split", "kind", *tools), rows))
    print()
    print(table(("tool", "split", "cases", "culprit", "op", "line", "all three"),
                ((tool, split, n, *(f"{x}/{n} ({100 * x / n:.0f} %)" if n else "-" for x in (c, o, ln, a)))
                 for (tool, split), (n, c, o, ln, a) in totals.items())))
    print(f"\ncells: culprit / op / line (✓ right, ✗ wrong or not said), then seconds from the fault to the "
          f"answer (launch to answer, less the tool's time on {CONTROL}: "
          + ", ".join(f"{t} {s:.1f} s" for t, s in baseline.items() if t != "live")
          + "; live: seconds from the hang's start, the first rank's last op)")
    dumped = [t for t in ("dumps", "fr_trace") if t in tools]
    if dumped:
        print(collective_summary(cases, results, dumped))
    if "live" in tools:
        print(live_summary(cases, results))
    if args.json:
        data = {name: ({"skipped": r["skipped"]} if "skipped" in r else
                       {tool: {**asdict(g["answer"]), "verdict": asdict(score(r["case"], g["answer"])),
                               "raw": g["raw"]} for tool, g in r["found"].items()})
                for name, r in results.items()}
        args.json.write_text(json.dumps({"baseline": baseline, "cases": data}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
