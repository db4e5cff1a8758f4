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
from pathlib import Path

import yaml

from _harness import REPO, labctl, median, render_plan, run_by_hand, scratch, table

TARGET = 1.05


def compose_by_hand(layout: list[str], folder: Path, rep: int) -> float:
    """Render the lab's compose file (not timed), then time `up --abort-on-container-exit`
    + `down -v` of it; every node's container must have exited with code 0."""
    from labctl.backends.compose import compose_command

    done, _ = labctl("render", "compose", *layout)
    if done.returncode != 0:
        raise SystemExit(f"labctl render compose failed: {done.stderr.strip()[-2000:]}")
    path = folder / f"by-hand-{rep}.yaml"
    path.write_text(done.stdout)
    rendered = yaml.safe_load(done.stdout)
    project, services = rendered["name"], list(rendered["services"])
    compose = [*compose_command(), "-f", str(path), "-p", project]
    started = time.perf_counter()
    try:
        up = subprocess.run([*compose, "up", "--abort-on-container-exit"], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    finally:
        down = subprocess.run([*compose, "down", "-v"], cwd=REPO, capture_output=True, text=True,
                              timeout=600)
    seconds = time.perf_counter() - started
    said = up.stdout + up.stderr
    lines = {line.strip() for line in re.split(r"[\r\n]+", re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", said))}
    bad = [s for s in services if f"{s}-1 exited with code 0" not in lines]
    if up.returncode != 0 or bad or down.returncode != 0:
        raise SystemExit(f"by-hand compose run failed (up exit {up.returncode}, down exit "
                         f"{down.returncode}, not exited with 0: {bad}): {said[-2000:]}{down.stderr[-500:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "compose"), default="local")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--nodes", default="2")
    parser.add_argument("--nproc-per-node", default="2")
    parser.add_argument("--image", help="container image (compose; default: the lab's)")
    args = parser.parse_args()
    layout = ["--nodes", args.nodes, "--nproc-per-node", args.nproc_per_node, "--workload", "barrier"]
    if args.backend == "compose":
        layout += ["--backend", "compose"] + (["--image", args.image] if args.image else [])
    folder = scratch()
    lab_s, hand_s, outside_s = [], [], []
    try:
        labctl("--help")                                  # warm the page cache once
        for i in range(args.reps):
            done, seconds = labctl("up", *layout, "-q", "--out", str(folder / f"run-{i}"))
            if done.returncode != 0:
                raise SystemExit(f"labctl up failed: {done.stderr.strip()[-2000:]}")
            lab_s.append(seconds)
            # status.json "seconds" is the backend's part: the rest is CLI start, plan, run folder, report
            backend_s = json.loads((folder / f"run-{i}" / "status.json").read_text())["seconds"]
            outside_s.append(seconds - backend_s)
            if args.backend == "compose":
                hand_s.append(compose_by_hand(layout, folder, i))
            else:
                plan = render_plan(*layout)               # a fresh run id and free port each time
                hand_s.append(run_by_hand(plan)[0])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ratio = median(lab_s) / median(hand_s)
    by_hand = ("`docker compose up --abort-on-container-exit` + `down -v` (same file)"
               if args.backend == "compose" else "torchrun agents by hand (same argv/env)")
    print(f"## Bring-up: labctl up vs by hand ({args.nodes}x{args.nproc_per_node}, barrier workload, "
          f"{args.backend} backend, {args.reps} reps, alternating)\n")
    print(table(["", "median (s)", "min (s)", "max (s)", "all (s)"], [
        ["labctl up (CLI, whole run)", f"{median(lab_s):.2f}", f"{min(lab_s):.2f}", f"{max(lab_s):.2f}",
         " ".join(f"{x:.2f}" for x in lab_s)],
        [by_hand, f"{median(hand_s):.2f}", f"{min(hand_s):.2f}", f"{max(hand_s):.2f}",
         " ".join(f"{x:.2f}" for x in hand_s)],
    ]))
    verdict = "met" if ratio <= TARGET else "MISSED"
    inside = ("compose up, polling, log collection, compose down" if args.backend == "compose"
              else "the local backend polls every 0.05 s (adds <= 0.05 s)")
    print(f"\nlabctl outside its backend (CLI start, spec, plan, preflight, run folder, log split, "
          f"report): "
          f"median {median(outside_s):.3f} s; inside: {inside}")
    print(f"\nratio labctl/by-hand = {ratio:.3f} (target <= {TARGET}: {verdict}); "
          f"difference {median(lab_s) - median(hand_s):+.2f} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
