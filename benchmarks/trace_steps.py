"""What each step of the recorder's C fast path costs inside a real ping-pong of
one-element isend/irecv pairs (issue 36; docs/trace.md, "The C fast path"): a copy of
this checkout's workloads/ with workloads/_tracefast.c built with -DLAB_PROF (TSC cycles
summed per step), 2 ranks under torchrun as a local lab runs them, rank 0's steps in µs
per call. The steps run where they run in a lab, with the caches as gloo's ops leave
them; a `timeit` of the same code would show its hot cost instead.

    python benchmarks/trace_steps.py [--pairs 10000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEPS = {1: "the route (the group's, cached)", 2: "the input tensor: dtype, shape, requires_grad",
         3: "peer or root; reduce op", 4: "the op's name and the call site's frame",
         5: "the op's number and the group's count", 6: "the call site and the B record",
         7: "autograd's key excluded", 9: "autograd's key let back", 10: "the work kept for its wait"}
WAIT_STEPS = {12: "the E record (Work.wait, after torch's wait returned)"}
LOOP = """
import sys, time, torch, torch.distributed as dist
from workloads import _tracefast
dist.init_process_group("gloo")
r = dist.get_rank(); peer = 1 - r
one = torch.ones(1)
def loop(n):
    for _ in range(n):
        for w in (dist.isend(one, peer), dist.irecv(torch.empty(1), peer)):
            w.wait()
loop(500)
calls0, waits0, sums0, _ = _tracefast.prof()
started = time.perf_counter()
loop({pairs})
took = (time.perf_counter() - started) / {pairs} * 1e6
calls, waits, sums, per_us = _tracefast.prof()
if r == 0:
    print("STEPS", calls - calls0, waits - waits0, per_us, took, *(b - a for a, b in zip(sums0, sums)), flush=True)
dist.destroy_process_group()
"""


def build(into: Path) -> None:
    """workloads/ copied into `into`, its fast path built there with -DLAB_PROF."""
    shutil.copytree(REPO / "workloads", into / "workloads",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    target = into / "workloads" / ("_tracefast" + sysconfig.get_config_var("EXT_SUFFIX"))
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    done = subprocess.run([*compiler, "-O2", "-DLAB_PROF", "-shared", "-fPIC",
                           f"-I{sysconfig.get_paths()['include']}", str(into / "workloads" / "_tracefast.c"),
                           "-o", str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"could not build the fast path with -DLAB_PROF:\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=10_000)
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root)
        script = root / "loop.py"
        script.write_text(LOOP.format(pairs=args.pairs))
        env = {**os.environ, "PYTHONPATH": str(root), "LAB_TRACE": "1", "LAB_TRACE_DIR": str(root / "records"),
               "LAB_TRACE_FAST": "1"}
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                               "2", "-m", "workloads._script", str(script)], capture_output=True, text=True,
                              env=env, cwd=root, timeout=900)
    line = next((x for x in done.stdout.splitlines() if x.startswith("STEPS ")), None)
    if line is None:
        raise SystemExit(f"the pair loop failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    calls, waits, per_us, took, *sums = (float(x) for x in line.split()[1:])
    print(f"(load {os.getloadavg()[0]:.1f} at the end; {args.pairs} pairs, {took:.1f} µs per pair; "
          f"{calls:.0f} op calls, {waits:.0f} waits in rank 0)\n")
    print("| step | µs per call |\n|---|---|")
    total = 0.0
    for index, name in STEPS.items():
        us = sums[index] / calls / per_us
        total += us
        print(f"| {name} | {us:.3f} |")
    print(f"| **an op call, all steps** | **{total:.3f}** |")
    for index, name in WAIT_STEPS.items():
        us = sums[index] / waits / per_us
        print(f"| {name} | {us:.3f} |")
    print(f"| torch's own: the op's call / its wait (not the recorder's) | {sums[8] / calls / per_us:.1f} / "
          f"{sums[11] / waits / per_us:.1f} |")


if __name__ == "__main__":
    main()
