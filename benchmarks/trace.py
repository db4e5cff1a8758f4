"""What tracing (on by default; workloads/_trace/) costs, printed as tables (issue 30's
bars; docs/trace.md, "What it costs").

Every comparison runs the same lab twice, traced (the default) and with --no-trace, as a
pair; the pairs are interleaved and their order alternates (traced first, then untraced
first), and what counts is the median of the pairs' ratios: on a shared 2-core machine a
single pair spreads 0.5-1.1. Each pair is printed with the machine's load (1-minute load
average) when it ran.

1. bench all_reduce busbw, traced/untraced, at 1 MiB and 64 MiB: the lab's own `bench`
   workload (1 node x 2 processes, busbw from the median op time; bar >= 0.97); and
   ("bench") the bench's own times at 1 and 16 KiB (all_reduce, broadcast, pingpong).
2. a loop of 20,000 all_reduces of 4 KiB, timed inside the script (bar <= 1.05x), a loop
   of 20,000 one-element isend/irecv pairs (bar <= 1.10x), and a DDP training step, the median of 30 steps of a 3-layer MLP in 1 MiB buckets (bar <=
   1.03x): one `--script` lab per run.
3. the recorder's CPU time per op: one rank, process CPU time (every thread) per 1-float op, traced minus untraced: an op issued from Python (dist.all_reduce)
   and one issued by torch's C++ (a functional all_reduce, waited on).
4. the candidate mechanisms, µs per 1-float all_reduce on one rank (the fastest batch of
   300, arms interleaved): what the choice in docs/trace.md rests on.
5. records and merge: N small all_reduces per rank through `labctl up`: run time, records'
   size in the record files, trace.json size, merge time and peak memory (flat: streamed).

    python benchmarks/trace.py                   # everything, 5 pairs
    python benchmarks/trace.py --pairs 7 --only cost
    python benchmarks/trace.py --only cost --pin      # ranks on CPUs of their own (>= 6 CPUs)
    python benchmarks/trace.py --only cpu,candidates
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _harness import REPO, labctl, table, write_lab  # noqa: E402
from trace_p2p import pin_cpus  # noqa: E402

SECTIONS = ("busbw", "bench", "cost", "cpu", "candidates", "merge")


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def pairs(run_once, n: int) -> list[tuple[dict, dict, str]]:
    """n pairs of (traced, untraced) results, the order alternating; each with the load."""
    out = []
    for i in range(n):
        order = (True, False) if i % 2 == 0 else (False, True)
        got, before = {}, load()
        for traced in order:
            got[traced] = run_once(traced)
        out.append((got[True], got[False], f"{before}-{load()}"))
    return out


def up(tmp: Path, traced: bool, *args: str) -> Path:
    out = Path(tempfile.mkdtemp(dir=tmp))
    done, _ = labctl("up", *args, "--out", str(out / "run"), *([] if traced else ["--no-trace"]), "-q",
                     timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"labctl up failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return out / "run"


# ---------------------------------------------------------------- 1. busbw through the bench workload

def busbw_table(tmp: Path, n: int, iters: int) -> str:
    lab = write_lab(tmp, name="tracecost", nodes=1, nproc_per_node=2, timeout=1800,
                    workloads=[{"name": "bench", "options": {
                        "ops": ["all_reduce"], "min_bytes": 1 << 20, "max_bytes": 64 << 20, "factor": 64,
                        "warmup_iters": 3, "iters": iters, "link": False}}])

    def once(traced: bool) -> dict[int, float]:
        run = up(tmp, traced, "-f", str(lab))
        rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
        return {r["size_bytes"]: r["busbw_GBps"] for r in rows if r.get("name") == "all_reduce"}

    results = pairs(once, n)
    rows = []
    for size in (1 << 20, 64 << 20):
        ratios = [on[size] / off[size] for on, off, _ in results]
        for i, ((on, off, lo), ratio) in enumerate(zip(results, ratios), 1):
            rows.append((f"{size >> 20} MiB", i, f"{off[size]:.3f}", f"{on[size]:.3f}", f"{ratio:.3f}", lo))
        rows.append((f"{size >> 20} MiB", "median", "", "", f"**{statistics.median(ratios):.3f}**", ""))
    return table(("size", "pair", "busbw untraced GB/s", "traced GB/s", "traced/untraced (bar >= 0.97)",
                  "load"), rows)


# ---------------------------------------------------------------- 2. a loop of small ops, a DDP step

COST_SCRIPT = """
import json, os, statistics, sys, time, torch, torch.distributed as dist
if os.environ.get("LAB_PIN_CPUS"):                 # --pin: this rank's own CPUs, before gloo's threads exist
    os.sched_setaffinity(0, {{int(c) for c in os.environ["LAB_PIN_CPUS"].split(";")[int(os.environ["LOCAL_RANK"])].split(",")}})
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1024)                                 # 4 KiB
for _ in range(500):
    dist.all_reduce(t)
dist.barrier()
started = time.perf_counter()
for _ in range({ops}):
    dist.all_reduce(t)
dist.barrier()
loop = time.perf_counter() - started
one, peer = torch.ones(1), 1 - rank                  # one-element isend/irecv pairs
for _ in range(500):
    for w in (dist.isend(one, peer), dist.irecv(torch.empty(1), peer)):
        w.wait()
dist.barrier()
started = time.perf_counter()
for _ in range({ops}):
    for w in (dist.isend(one, peer), dist.irecv(torch.empty(1), peer)):
        w.wait()
dist.barrier()
p2p = time.perf_counter() - started
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
steps, cpus = [], []
for i in range({steps} + 5):
    dist.barrier()
    started, cpu = time.perf_counter(), time.process_time()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()
    if i >= 5:
        steps.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)      # the process's CPU, every thread: what the recorder adds
step = torch.tensor([statistics.median(steps), statistics.median(cpus)], dtype=torch.float64)
dist.all_reduce(step, op=dist.ReduceOp.MAX)
if rank == 0:
    print("TRACECOST " + json.dumps({{"loop_s": loop, "p2p_s": p2p, "step_s": float(step[0]),
                                      "step_cpu_s": float(step[1])}}), flush=True)
dist.destroy_process_group()
"""


def cost_table(tmp: Path, n: int, ops: int, steps: int, pin: str = "") -> str:
    script = tmp / "cost.py"
    script.write_text(COST_SCRIPT.format(ops=ops, steps=steps))

    def once(traced: bool) -> dict:
        run = up(tmp, traced, "--script", str(script), "--nodes", "1", "--nproc-per-node", "2",
                 "--timeout", "1800", *(["--env", f"LAB_PIN_CPUS={pin}"] if pin else []))
        line = next(x for x in (run / "ranks" / "rank-0.log").read_text().splitlines() if "TRACECOST " in x)
        return json.loads(line.split("TRACECOST ", 1)[1])

    results = pairs(once, n)
    rows = []
    for key, what, bar in (("loop_s", f"{ops} all_reduces of 4 KiB, s", "<= 1.05"),
                           ("p2p_s", f"{ops} one-element isend/irecv pairs, s", "<= 1.10"),
                           ("step_s", f"DDP step (median of {steps}), ms", "<= 1.03"),
                           ("step_cpu_s", f"DDP step's process CPU (median of {steps}), ms", "stated")):
        scale = 1000 if key.startswith("step") else 1
        ratios = [on[key] / off[key] for on, off, _ in results]
        for i, ((on, off, lo), ratio) in enumerate(zip(results, ratios), 1):
            rows.append((what, i, f"{off[key] * scale:.3f}", f"{on[key] * scale:.3f}", f"{ratio:.3f}", lo))
        rows.append((what, "median", "", "", f"**{statistics.median(ratios):.3f}** (bar {bar})", ""))
    return table(("case", "pair", "untraced", "traced", "traced/untraced", "load"), rows)


# ---------------------------------------------------------------- 1b. the bench's small sizes

BENCH_SMALL = {"ops": ["all_reduce", "broadcast", "pingpong"], "min_bytes": 1024, "max_bytes": 16384,
               "factor": 16, "iters": 400, "warmup_iters": 10, "link": False}


def bench_small_table(tmp: Path, n: int) -> str:
    """The bench's own times at 1 and 16 KiB, traced/untraced (1 node x 2, 400 timed calls
    per size): what the recorder adds to a timed call of the bench. Per op and size, each
    run's median time and the ratio of the runs' medians."""
    lab = write_lab(tmp, name="bench-small", nodes=1, nproc_per_node=2, timeout=900,
                    workloads=[{"name": "bench", "options": BENCH_SMALL}])

    def once(traced: bool) -> dict:
        out = Path(tempfile.mkdtemp(dir=tmp)) / "run"
        done, _ = labctl("up", "-f", str(lab), "--out", str(out), "-q", *([] if traced else ["--no-trace"]),
                         timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"labctl up failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        rows = (json.loads(x) for x in (out / "results.jsonl").read_text().splitlines())
        return {(r["name"], r["size_bytes"]): r["time_us_median"] for r in rows if "time_us_median" in r}

    results = pairs(once, n)
    out = []
    for key in sorted(results[0][0]):
        on = [traced[key] for traced, _, _ in results]
        off = [untraced[key] for _, untraced, _ in results]
        out.append((key[0], key[1], ", ".join(f"{x:.0f}" for x in off), ", ".join(f"{x:.0f}" for x in on),
                    f"**{statistics.median(on) / statistics.median(off):.3f}**"))
    loads = ", ".join(lo for _, _, lo in results)
    return table(("op", "bytes", "untraced µs (each run)", "traced µs (each run)", "traced/untraced"), out) + \
        f"\n\nloads: {loads}"


# ---------------------------------------------------------------- 3. CPU time per op

CPU_WORKER = """
import os, sys, tempfile, time
if os.environ.get("LAB_TRACE") == "1":
    from workloads import _trace
    _trace.install()
import torch, torch.distributed as dist
import torch.distributed._functional_collectives as funcol
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
t, g = torch.ones(1), dist.group.WORLD
python = lambda: dist.all_reduce(t)
cpp = lambda: funcol.wait_tensor(funcol.all_reduce(t, "sum", g))
out = []
for fn in (python, cpp):
    for _ in range(2000):
        fn()
    best = 1e9
    for _ in range(10):
        started = time.process_time()
        for _ in range({ops}):
            fn()
        best = min(best, (time.process_time() - started) / {ops} * 1e6)
    out.append(best)
print(*out, file=sys.stderr)
"""


def cpu_table(n: int, ops: int = 3000) -> str:
    """Process CPU time per op (µs), every thread counted, the cheapest of 10 batches per job."""
    def once(traced: bool) -> list[float]:
        with tempfile.TemporaryDirectory() as tmp:
            with open(Path(tmp) / "out.log", "w") as f:     # the records go to a file, as a node log's
                done = subprocess.run([sys.executable, "-c", CPU_WORKER.format(ops=ops)], stdout=f,
                                      stderr=subprocess.PIPE, text=True, timeout=900, cwd=REPO,
                                      env={**os.environ, "PYTHONPATH": str(REPO), "LAB_TRACE": str(int(traced)),
                                           "LAB_TRACE_DIR": tmp})   # the local backend's sink
        return [float(x) for x in done.stderr.split()[-2:]]

    results = pairs(once, n)
    rows = []
    for i, label in enumerate(("dist.all_reduce (issued from Python)",
                               "functional all_reduce + wait (issued from C++)")):
        diffs = [on[i] - off[i] for on, off, _ in results]
        rows.append((label, f"{statistics.median(off[i] for _, off, _ in results):.1f}",
                     f"{statistics.median(on[i] for on, _, _ in results):.1f}", f"**{statistics.median(diffs):.1f}**",
                     ", ".join(f"{d:.1f}" for d in diffs)))
    return table(("op (1 float, one rank)", "CPU µs/op untraced", "traced", "recorder µs/op (median)",
                  "per pair"), rows) + f"\n\n(load {load()})"


# ---------------------------------------------------------------- 4. the candidate mechanisms

CANDIDATE = """
import os, sys, tempfile, time
arm = sys.argv[1]
if arm.startswith("recorder"):
    os.environ["LAB_TRACE"] = "1"
    if arm != "recorder-stream":
        os.environ["LAB_TRACE_DIR"] = tempfile.mkdtemp()
    from workloads import _trace
    _trace.install()
    if arm == "recorder-append":           # the file sink's lines through write(2) on an O_APPEND file
        class Append:
            def __init__(self):
                self.fd = os.open(os.path.join(os.environ["LAB_TRACE_DIR"], "append.rec"),
                                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            def write(self, data):
                os.write(self.fd, data)
            def flush(self):
                pass
        from workloads._trace import sink
        sink.proc.sink = Append()
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
t = torch.ones(1)
PG, Work = torch._C._distributed_c10d.ProcessGroup, torch._C._distributed_c10d.Work
if arm == "recorder-kernel-only":          # every op through the Autograd-key kernel
    PG.allreduce = PG.__dict__["allreduce"].__wrapped__
if arm == "bare-kernel":                   # a Python kernel at the Autograd key that only redispatches
    lib = torch.library.Library("c10d", "IMPL")
    op, after = torch.ops.c10d.allreduce_.default, torch._C._after_autograd_keyset
    lib.impl("allreduce_", lambda ks, *a: op._handle.redispatch_boxed(ks & after, *a), "Autograd", with_keyset=True)
if arm == "future-callback":               # completion from the work's future, per op
    original = PG.__dict__["allreduce"]
    def allreduce(self, *a, **k):
        work = original(self, *a, **k)
        work.get_future().add_done_callback(lambda f: time.time_ns())
        return work
    PG.allreduce = allreduce
if arm == "profiler":
    from torch.profiler import ProfilerActivity, profile
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    prof.__enter__()
for _ in range(3000):
    dist.all_reduce(t)
best = 1e9
for _ in range(30):
    started = time.perf_counter()
    for _ in range(300):
        dist.all_reduce(t)
    best = min(best, (time.perf_counter() - started) / 300 * 1e6)
print(best, file=sys.stderr, flush=True)
os._exit(0)
"""
ARMS = {"untraced": "torch.distributed as is",
        "recorder": "this recorder, an op issued from Python (ProcessGroup method wrapper + Work.wait), "
                    "records into a memory-mapped file (the local backend's sink)",
        "recorder-stream": "the same, records waiting in memory for a thread that writes them to the log "
                           "every 0.15 s (the containers' sink)",
        "recorder-append": "the same, each record written with write(2) to an O_APPEND file",
        "recorder-kernel-only": "this recorder's Autograd-key kernel for every op (+ future callback)",
        "bare-kernel": "a Python kernel at the c10d op's Autograd key, redispatch only",
        "future-callback": "Work.get_future().add_done_callback per op (completion on gloo)",
        "fr-off": "Flight Recorder ring off (TORCH_FR_BUFFER_SIZE=0)",
        "fr-2000": "Flight Recorder ring of 2000 (labctl's default, tracing on or off)",
        "profiler": "torch.profiler, CPU activity, record_shapes (record_param_comms events)"}


def candidates_table(rounds: int = 3) -> str:
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for arm in ARMS:
                env = {**os.environ, "PYTHONPATH": str(REPO), "LAB_TRACE": "0",
                       "TORCH_FR_BUFFER_SIZE": "2000" if arm == "fr-2000" else "0"}
                env.pop("LAB_TRACE_DIR", None)
                with open(Path(tmp) / "out.log", "w") as f:
                    done = subprocess.run([sys.executable, "-c", CANDIDATE, arm], stdout=f, stderr=subprocess.PIPE,
                                          text=True, timeout=900, cwd=REPO, env=env)
                times[arm].append(float(done.stderr.split()[-1]))
    base = min(times["untraced"])
    rows = [(arm, what, f"{min(times[arm]):.1f}", f"{min(times[arm]) - base:+.1f}")
            for arm, what in ARMS.items()]
    return table(("arm", "what", "µs per all_reduce (fastest batch)", "vs untraced"), rows) \
        + f"\n\n({rounds} jobs per arm, arms interleaved; load {load()})"


# ---------------------------------------------------------------- 5. records and the merge

SMALL = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
for _ in range({ops}):
    dist.all_reduce(t)
dist.destroy_process_group()
"""

MERGE = """
import json, resource, sys, time
from labctl import trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
s = trace.merge(sys.argv[1], world=int(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - started, "ops": s.ops,
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "base_kib": base}))
"""


def merge_table(tmp: Path, ops: int, nproc: int = 2) -> str:
    rows = []
    for n, traced in ((ops, False), (ops, True), (max(1, ops // 10), True)):
        script = tmp / f"small-{n}.py"
        script.write_text(SMALL.format(ops=n))
        started = time.perf_counter()
        run = up(tmp, traced, "--script", str(script), "--nodes", "1", "--nproc-per-node", str(nproc),
                 "--timeout", "1800")
        seconds = time.perf_counter() - started
        if not traced:
            rows.append((n, "off", f"{seconds:.1f}", "", "", "", ""))
            continue
        record_bytes = sum(p.stat().st_size for p in (run / "records").glob("*.rec"))
        merged = subprocess.run([sys.executable, "-c", MERGE, str(run), str(nproc)], capture_output=True,
                                text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        m = json.loads(merged.stdout)
        rows.append((n, "on", f"{seconds:.1f}", f"{record_bytes / 1e6:.1f}",
                     f"{(run / 'trace.json').stat().st_size / 1e6:.1f}", f"{m['seconds']:.2f}",
                     f"{m['peak_kib'] / 1024:.1f} ({m['base_kib'] / 1024:.1f})"))
    return table(("ops per rank", "trace", "labctl up s", "records MB (record files)", "trace.json MB",
                  "merge s", "merge peak RSS MiB (after imports)"), rows) + f"\n\n(load {load()})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5, help="traced/untraced pairs per comparison (>= 5)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--iters", type=int, default=20, help="bench iterations per size")
    parser.add_argument("--ops", type=int, default=20_000, help="the small-op loop's length")
    parser.add_argument("--steps", type=int, default=30, help="DDP steps timed")
    parser.add_argument("--merge-ops", type=int, default=100_000)
    parser.add_argument("--pin", action="store_true",
                        help="cost: each rank on two CPUs of its own (needs 6 CPUs; benchmarks/trace_p2p.py)")
    args = parser.parse_args()
    pin = pin_cpus() if args.pin else ""
    only = set(args.only.split(","))
    print(f"(machine: {os.cpu_count()} CPUs, load {load()} at the start"
          f"{'; cost: ranks pinned to CPUs ' + pin if pin else ''})\n")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "busbw" in only:
            print("## bench all_reduce busbw, traced/untraced (1 node x 2, interleaved pairs)\n")
            print(busbw_table(tmp, args.pairs, args.iters) + "\n", flush=True)
        if "bench" in only:
            print("## the bench's times at small sizes, traced/untraced (1 node x 2, interleaved pairs)\n")
            print(bench_small_table(tmp, args.pairs) + "\n", flush=True)
        if "cost" in only:
            print(f"## {args.ops} small all_reduces and a DDP step, traced/untraced (1 node x 2)\n")
            print(cost_table(tmp, args.pairs, args.ops, args.steps, pin) + "\n", flush=True)
        if "cpu" in only:
            print("## the recorder's CPU time per op (one rank, every thread)\n")
            print(cpu_table(args.pairs) + "\n", flush=True)
        if "candidates" in only:
            print("## the candidate mechanisms, µs per op (one rank)\n")
            print(candidates_table() + "\n", flush=True)
        if "merge" in only:
            print(f"## {args.merge_ops} small all_reduces per rank: run time, records, merge\n")
            print(merge_table(tmp, args.merge_ops) + "\n", flush=True)


if __name__ == "__main__":
    main()
