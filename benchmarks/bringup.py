"""Bring-up overhead: wall time of `labctl up` vs. the same lab started by hand.

Both sides run the `barrier` workload (2 nodes x 2 processes by default),
alternating, `--reps` times each; the ratio of the medians is what `labctl
up` costs on top of what it starts (target <= 1.05). `labctl up` is timed as
a user sees it: a fresh CLI process, from start to the printed report (spec,
plan, run folder, preflight, polling, log collection and split, report).

By hand, per backend:

- local: the torchrun agents that `labctl render plan` lists (argv and env
  per node), started with subprocess, waited for.
- compose: the file `labctl render compose` prints for the same layout (it
  needs nothing else: no bind mount, no env file; the project is named by the
  file), run as `docker compose -f FILE -p PROJECT up --abort-on-container-exit`
  then `docker compose -f FILE -p PROJECT down -v`, timed together, through the
  same compose CLI labctl finds (`docker compose` or a v2 `docker-compose`).
  The engine's own events split each run in three: before the first container
  starts, the containers' life (torch: the same work on both sides, and what a
  busy machine stretches most), after the last one exits. labctl's extra is
  in the first and last parts.

    python benchmarks/bringup.py [--backend local|compose] [--reps 5] [--nodes 2]
        [--nproc-per-node 2] [--image labctl-cpu:latest]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from _harness import REPO, labctl, median, render_plan, run_by_hand, scratch, table

TARGET = 1.05
RUN_LABEL = "labctl.dev/run-id"


@dataclass
class Timed:
    """One run, on the wall clock (epoch seconds): launched, done, and its run id."""
    run_id: str
    launched: float
    done: float

    @property
    def seconds(self) -> float:
        return self.done - self.launched


class EngineEvents:
    """Container start/die events of labctl's runs (`docker events`) while the benchmark
    runs: when each run's first container started and its last one exited."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["docker", "events", "--filter", "type=container", "--filter", "event=start",
             "--filter", "event=die", "--filter", "label=app.kubernetes.io/part-of=labctl",
             "--format", f'{{{{.TimeNano}}}} {{{{.Action}}}} {{{{index .Actor.Attributes "{RUN_LABEL}"}}}}'],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def close(self) -> dict[str, tuple[float, float]]:
        """{run id: (first start, last exit)}, epoch seconds."""
        time.sleep(0.5)                       # the last die event on its way
        self.proc.terminate()
        out = self.proc.communicate()[0]
        starts: dict[str, list[float]] = {}
        dies: dict[str, list[float]] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3:
                (starts if parts[1] == "start" else dies).setdefault(parts[2], []).append(int(parts[0]) / 1e9)
        return {run: (min(starts[run]), max(dies[run])) for run in starts if run in dies}


def compose_by_hand(layout: list[str], folder: Path, rep: int) -> Timed:
    """Render the lab's compose file (not timed), then time `up --abort-on-container-exit`
    + `down -v` of it; every node's container must have exited with code 0."""
    from labctl.backends.compose.docker import compose_command

    done, _ = labctl("render", "compose", *layout)
    if done.returncode != 0:
        raise SystemExit(f"labctl render compose failed: {done.stderr.strip()[-2000:]}")
    path = folder / f"by-hand-{rep}.yaml"
    path.write_text(done.stdout)
    rendered = yaml.safe_load(done.stdout)
    project, services = rendered["name"], list(rendered["services"])
    run_id = next(iter(rendered["services"].values()))["labels"][RUN_LABEL]
    compose = [*compose_command(), "-f", str(path), "-p", project]
    launched = time.time()
    try:
        up = subprocess.run([*compose, "up", "--abort-on-container-exit"], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    finally:
        down = subprocess.run([*compose, "down", "-v"], cwd=REPO, capture_output=True, text=True,
                              timeout=600)
    ended = time.time()
    said = up.stdout + up.stderr
    lines = {line.strip() for line in re.split(r"[\r\n]+", re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", said))}
    bad = [s for s in services if f"{s}-1 exited with code 0" not in lines]
    if up.returncode != 0 or bad or down.returncode != 0:
        raise SystemExit(f"by-hand compose run failed (up exit {up.returncode}, down exit "
                         f"{down.returncode}, not exited with 0: {bad}): {said[-2000:]}{down.stderr[-500:]}")
    return Timed(run_id, launched, ended)


def _row(name: str, xs: list[float]) -> list[str]:
    return [name, f"{median(xs):.2f}", f"{min(xs):.2f}", f"{max(xs):.2f}", " ".join(f"{x:.2f}" for x in xs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "compose"), default="local")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--nodes", default="2")
    parser.add_argument("--nproc-per-node", default="2")
    parser.add_argument("--image", help="container image (compose; default: the lab's)")
    args = parser.parse_args()
    layout = ["--nodes", args.nodes, "--nproc-per-node", args.nproc_per_node, "--workload", "barrier"]
    compose = args.backend == "compose"
    if compose:
        layout += ["--backend", "compose"] + (["--image", args.image] if args.image else [])
    folder = scratch()
    lab_runs: list[Timed] = []
    hand_runs: list[Timed] = []
    outside_s: list[float] = []
    events = EngineEvents() if compose else None
    try:
        labctl("--help")                                  # warm the page cache once
        for i in range(args.reps):
            launched = time.time()
            done, seconds = labctl("up", *layout, "-q", "--out", str(folder / f"run-{i}"))
            if done.returncode != 0:
                raise SystemExit(f"labctl up failed: {done.stderr.strip()[-2000:]}")
            status = json.loads((folder / f"run-{i}" / "status.json").read_text())
            lab_runs.append(Timed(status["run_id"], launched, launched + seconds))
            # status.json "seconds" is the backend's part: the rest is CLI start, plan, run folder, report
            outside_s.append(seconds - status["seconds"])
            if compose:
                hand_runs.append(compose_by_hand(layout, folder, i))
            else:
                plan = render_plan(*layout)               # a fresh run id and free port each time
                hand_s = run_by_hand(plan)[0]
                hand_runs.append(Timed(plan["run_id"], 0.0, hand_s))
    finally:
        seen = events.close() if events else {}
        shutil.rmtree(folder, ignore_errors=True)
    lab_s = [r.seconds for r in lab_runs]
    hand_s = [r.seconds for r in hand_runs]
    ratio = median(lab_s) / median(hand_s)
    by_hand = ("`docker compose up --abort-on-container-exit` + `down -v` (same file)"
               if compose else "torchrun agents by hand (same argv/env)")
    print(f"## Bring-up: labctl up vs by hand ({args.nodes}x{args.nproc_per_node}, barrier workload, "
          f"{args.backend} backend, {args.reps} reps, alternating)\n")
    print(table(["", "median (s)", "min (s)", "max (s)", "all (s)"],
                [_row("labctl up (CLI, whole run)", lab_s), _row(by_hand, hand_s)]))
    if compose and all(r.run_id in seen for r in lab_runs + hand_runs):
        def parts(runs: list[Timed]) -> tuple[list[float], list[float], list[float]]:
            return ([seen[r.run_id][0] - r.launched for r in runs],
                    [seen[r.run_id][1] - seen[r.run_id][0] for r in runs],
                    [r.done - seen[r.run_id][1] for r in runs])
        (lh, lb, lt), (hh, hb, ht) = parts(lab_runs), parts(hand_runs)
        print("\nThe same runs split by the engine's events (medians, seconds):\n")
        print(table(["", "launch → first container started", "containers' life (torch)",
                     "last container exited → done", "before + after"], [
            ["labctl up", f"{median(lh):.2f}", f"{median(lb):.2f}", f"{median(lt):.2f}",
             f"{median([a + b for a, b in zip(lh, lt)]):.2f}"],
            ["by hand", f"{median(hh):.2f}", f"{median(hb):.2f}", f"{median(ht):.2f}",
             f"{median([a + b for a, b in zip(hh, ht)]):.2f}"],
        ]))
        extra = median([a + b for a, b in zip(lh, lt)]) - median([a + b for a, b in zip(hh, ht)])
        print(f"\nlabctl's own extra (before + after, medians): {extra:+.2f} s; with the containers' "
              f"life taken as equal on both sides, ratio = {(median(hand_s) + extra) / median(hand_s):.3f} "
              "(the torch part is what a busy machine stretches most)")
    verdict = "met" if ratio <= TARGET else "MISSED"
    inside = ("compose up, polling, log collection, compose down" if compose
              else "the local backend polls every 0.05 s (adds <= 0.05 s)")
    print(f"\nlabctl outside its backend (CLI start, spec, plan, preflight, run folder, log split, "
          f"report): median {median(outside_s):.3f} s; inside: {inside}")
    print(f"\nratio labctl/by-hand = {ratio:.3f} (target <= {TARGET}: {verdict}); "
          f"difference {median(lab_s) - median(hand_s):+.2f} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
