"""One-element isend/irecv pairs between 2 ranks, µs per pair (and the main thread's CPU
and sleeps per pair, read from /proc: docs/trace.md "Why a small op costs more"): untraced, traced with this
checkout's recorder, and (optionally) traced with another checkout's, interleaved rounds,
each the best of 5 batches of 2,000 pairs (issue 36's p2p case, docs/trace.md "The
witness"). A fourth arm, untraced with wrappers that record nothing around the three
methods a recorder must see, is the floor of any recorder written in Python. The ranks run under torchrun and `python -m workloads._script`, as a local lab
does, the traced ones with a record folder (LAB_TRACE_DIR) as the local backend gives.

    python benchmarks/trace_p2p.py [--rounds 4] [--pin] [--ablate] [--other /path/to/another/checkout]

(`git worktree add /tmp/before36 92d7f37` gives the flusher recorder before issue 36.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAIRS = """
import os, sys, time, torch, torch.distributed as dist
if os.environ.get("LAB_PIN_CPUS"):                 # --pin: this rank's own CPUs, before gloo's threads exist
    os.sched_setaffinity(0, {int(c) for c in os.environ["LAB_PIN_CPUS"].split(";")[int(os.environ["LOCAL_RANK"])].split(",")})
if os.environ.get("P2P_NOOP_WRAPPERS"):
    # the floor of any recorder written in Python: the methods a recorder must see
    # (ProcessGroup.send/recv, Work.wait) replaced by wrappers that record nothing
    def wrap(cls, name):
        original = getattr(cls, name)
        def wrapper(self, *args, **kwargs):
            return original(self, *args, **kwargs)
        setattr(cls, name, wrapper)
    for cls, name in ((dist.ProcessGroup, "send"), (dist.ProcessGroup, "recv"), (dist.Work, "wait")):
        wrap(cls, name)
ABLATE = set(filter(None, os.environ.get("P2P_ABLATE", "").split(",")))
if ABLATE:                                         # --ablate: the recorder without some of its steps
    from workloads._trace import pyops, sink
    from workloads._trace.bound import T
    if "where" in ABLATE:                          # no frame walk to the caller
        pyops._where = lambda frame: (None, 0, None)
    if "toggle" in ABLATE:                         # autograd excluded once for the thread, not per op
        T.exclude(T.autograd, True)
    if "write" in ABLATE:                          # records go nowhere
        class _Nowhere:
            def write(self, data): pass
        sink.proc.sink = _Nowhere()
dist.init_process_group("gloo")
r = dist.get_rank(); peer = 1 - r
one = torch.ones(1)
def loop(n):
    for _ in range(n):
        for w in (dist.isend(one, peer), dist.irecv(torch.empty(1), peer)):
            w.wait()
def sleeps():                                      # the main thread's voluntary context switches
    with open("/proc/thread-self/status") as status:
        return next((int(x.split()[1]) for x in status if x.startswith("voluntary_ctxt_switches")), 0)
loop(500)
best = (1e9, 0.0, 0.0)
for _ in range(5):
    dist.barrier()
    t, cpu, slept = time.perf_counter(), time.thread_time(), sleeps()
    loop(2000)
    took = ((time.perf_counter() - t) / 2000 * 1e6, (time.thread_time() - cpu) / 2000 * 1e6, (sleeps() - slept) / 2000)
    best = min(best, took)
if r == 0:
    print("P2P", *best, file=sys.stderr, flush=True)
dist.destroy_process_group()
"""


def pin_cpus(ranks: int = 2) -> str:
    """--pin: rank r on CPUs 2+2r and 3+2r (its main thread and gloo's threads on cores of
    their own, none shared with the other rank or with CPUs 0-1 where the rest runs), so
    the ratio measures the recorder, not where the scheduler put the threads."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 + 2 * ranks:
        raise SystemExit(f"--pin needs at least {2 + 2 * ranks} CPUs; this machine lets us use {len(cpus)}")
    return ";".join(f"{cpus[2 + 2 * r]},{cpus[3 + 2 * r]}" for r in range(ranks))


def once(checkout: Path, traced: bool, script: Path, noop: bool = False, pin: str = "",
         ablate: str = "") -> tuple[float, float, float]:
    """(µs per pair, the main thread's CPU µs per pair, its sleeps per pair) of rank 0's
    fastest batch."""
    with tempfile.TemporaryDirectory() as records:
        env = {**os.environ, "LAB_PIN_CPUS": pin, "PYTHONPATH": str(checkout), "LAB_TRACE": "1" if traced else "0",
               "LAB_TRACE_DIR": records, "P2P_NOOP_WRAPPERS": "1" if noop else "", "P2P_ABLATE": ablate}
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                               "2", "-m", "workloads._script", str(script)], capture_output=True, text=True,
                              env=env, cwd=checkout, timeout=600)
    line = next((x for x in done.stderr.splitlines() if x.startswith("P2P ")), None)
    if line is None:
        raise SystemExit(f"the pair loop failed ({checkout}, traced={traced}):\n{done.stderr[-2000:]}")
    return tuple(float(x) for x in line.split()[1:4])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pin", action="store_true", help="each rank on two CPUs of its own (needs 6 CPUs)")
    parser.add_argument("--other", type=Path, help="another checkout whose recorder runs as a third arm")
    parser.add_argument("--ablate", action="store_true",
                        help="more traced arms, each without some of the recorder's steps (frame walk, "
                             "dispatch-key toggles, record writes): which of them the cost is")
    args = parser.parse_args()
    if args.other is not None and not ((args.other / "workloads" / "_trace.py").is_file()
                                       or (args.other / "workloads" / "_trace" / "__init__.py").is_file()):
        parser.error(f"--other {args.other}: not a labctl checkout (no workloads/_trace)")
    arms = [("untraced", REPO, False, False, ""),
            ("untraced, no-op Python wrappers on send/recv/wait (a Python recorder's floor)", REPO, False, True, ""),
            ("traced (this checkout)", REPO, True, False, "")]
    if args.other is not None:
        arms.append((f"traced ({args.other})", args.other, True, False, ""))
    if args.ablate:
        for steps in ("where", "toggle", "write", "where,toggle,write"):
            arms.append((f"traced without: {steps.replace(',', ', ')}", REPO, True, False, steps))
    pin = pin_cpus() if args.pin else ""
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name, *_ in arms}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "pairs.py"
        script.write_text(PAIRS)
        for _ in range(args.rounds):
            for name, checkout, traced, noop, ablate in arms:
                got[name].append(once(checkout, traced, script, noop, pin, ablate))
    base = statistics.median(w for w, _, _ in got["untraced"])
    print(f"(load {os.getloadavg()[0]:.1f} at the end{'; ranks pinned to CPUs ' + pin if pin else ''})\n")
    print("| arm | µs per pair, each round | median | / untraced | main thread's CPU µs per pair (median) "
          "| its sleeps per pair (median) |\n|---|---|---|---|---|---|")
    for name, values in got.items():
        median = statistics.median(w for w, _, _ in values)
        cpu = statistics.median(c for _, c, _ in values)
        slept = statistics.median(z for _, _, z in values)
        print(f"| {name} | {', '.join(f'{w:.1f}' for w, _, _ in values)} | {median:.1f} | {median / base:.3f} "
              f"| {cpu:.1f} | {slept:.2f} |")


if __name__ == "__main__":
    main()
