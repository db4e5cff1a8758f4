"""Issues 21 and 30: every op torch issues on a process group, on one timeline (trace.json),
on by default; the stragglers named; at a hang the stuck collective named without --debug.
Real labs (local, 1 or 2 nodes) for the recording and merge, with the scripts users write
(DDP, FSDP2, functional collectives, silenced stdout, their own comm hooks); hand-made
rank logs for bad input. Every trace.json made here passes tests/chrome_trace.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import chrome_trace
import trace_entry_points
from conftest import REPO, assert_nothing_left, labctl, labctl_in_background
from labctl import trace
from workloads._protocol.ports import free_port

STRAGGLER_S = 1.0

MIX = f"""
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
t = torch.ones(1000)
dist.broadcast(t, src=0)                             # line 6
if r == 3:
    time.sleep({STRAGGLER_S})                        # the straggler
dist.all_reduce(t)                                   # line 9
if r % 2 == 0:
    dist.send(t, dst=r + 1)
else:
    dist.recv(t, src=r - 1)
work = dist.all_reduce(t, async_op=True)
work.wait()
ops = [dist.P2POp(dist.isend, t, (r + 1) % w), dist.P2POp(dist.irecv, torch.zeros(1000), (r - 1) % w)]
for q in dist.batch_isend_irecv(ops):
    q.wait()
sub = dist.new_group([0, 1])
if r in (0, 1):
    dist.all_reduce(torch.ones(10, dtype=torch.float64), group=sub, op=dist.ReduceOp.MAX)
out = [torch.zeros(1000) for _ in range(w)]
dist.all_gather(out, t)
dist.barrier()
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
ddp(torch.ones(3, 4)).sum().backward()               # DDP's gradient all_reduce (C++ Reducer)
dist.destroy_process_group()
"""
BACKWARD_LINE = MIX.splitlines().index(next(x for x in MIX.splitlines() if "backward()" in x)) + 1
DDP_LINE = BACKWARD_LINE - 1

# ranks 0 and 1 disagree at collective #3 of their group; rank 3 never enters #3 of its
# group. Ranks 1-3 silence their stdout, rank 0 points it at a file of its own: the
# records must reach the lab all the same (they went through sys.stdout before)
HANG = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
sys.stdout = open("mine.txt", "w") if r == 0 else open(os.devnull, "w")
a, b = dist.new_group([0, 1]), dist.new_group([2, 3])
mine = a if r < 2 else b
t = torch.ones(1000)
for _ in range(2):
    dist.all_reduce(t, group=mine)
print("entering the hang", flush=True)
if r == 1:
    dist.broadcast(t, src=0, group=a)
elif r == 3:
    time.sleep(600)
else:
    dist.all_reduce(t, group=mine)
"""


def _events(out: Path) -> tuple[list[dict], dict]:
    data = json.loads((out / "trace.json").read_text())
    return data["traceEvents"], data["metadata"]


def _ops(events: list[dict]) -> list[dict]:
    """Every op drawn: X slices (on any of a rank's threads), async begins, instants."""
    return [e for e in events if e["ph"] in ("X", "b", "i")]


def _of_rank(events: list[dict], rank: int) -> list[dict]:
    return sorted((e for e in _ops(events) if e["args"]["rank"] == rank), key=lambda e: e["ts"])


def _well_formed(out: Path) -> None:
    assert chrome_trace.check(out / "trace.json") == []


@pytest.fixture(scope="module")
def mix_run(tmp_path_factory):
    """The 2x2 op mix, with no trace flag: tracing is on by default."""
    folder = tmp_path_factory.mktemp("trace")
    script = folder / "mix.py"
    script.write_text(MIX)
    out = folder / "run"
    done = labctl("up", "--script", str(script), "--nodes", "2", "--nproc-per-node", "2", "--out", str(out),
                  timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, script


def test_a_known_op_mix_gives_the_expected_slices_flows_and_straggler(mix_run):
    out, script = mix_run
    events, meta = _events(out)
    _well_formed(out)
    slices = [e for e in events if e["ph"] == "X"]
    per_rank = {r: [e["name"] for e in _of_rank(events, r)] for r in range(4)}
    calls = {r: [n for n in names if n in ("new_group", "destroy_process_group")] for r, names in per_rank.items()}
    per_rank = {r: [n for n in names if n not in ("new_group", "destroy_process_group")]
                for r, names in per_rank.items()}
    common = ["broadcast", "all_reduce", None, "all_reduce", "isend", "irecv"]
    for r in range(4):
        assert calls[r][:1] == ["new_group"], (r, calls[r])      # a call, drawn beside the ops
        want = [("send" if r % 2 == 0 else "recv") if x is None else x for x in common]
        want += ["all_reduce"] if r in (0, 1) else []
        want += ["all_gather", "barrier"]
        want += ["all_gather", "broadcast", "broadcast", "all_reduce"]   # DDP: made, then one step
        assert per_rank[r] == want, (r, per_rank[r])
    # a process per node, a thread per rank (more for ops that overlap: isend/irecv here)
    names = {(e["name"], e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    assert names[("process_name", 0, None)] == "node 0 (lab-0)"
    assert names[("process_name", 1, None)] == "node 1 (lab-1)"
    assert {names[("thread_name", r // 2, r)] for r in range(4)} == {f"rank {r}" for r in range(4)}
    assert all(e["tid"] % trace.LANE_TID == e["args"]["rank"] for e in slices)
    # args of one slice: where it came from, what it moved
    first = next(e for e in slices if e["args"]["rank"] == 2 and e["name"] == "all_reduce")
    assert first["args"] == {"rank": 2, "pg": "default_pg", "seq": 2, "bytes": 4000, "dtype": "float32",
                             "shape": [1000], "caller": f"{script}:9", "reduce": "SUM"}
    bcast = next(e for e in slices if e["args"]["rank"] == 1 and e["name"] == "broadcast")
    assert bcast["args"]["root"] == 0 and bcast["args"]["seq"] == 1
    sub = next(e for e in slices if e["args"]["rank"] == 1 and e["cat"] != "default_pg")
    assert sub["args"]["seq"] == 1 and sub["args"]["bytes"] == 80 and sub["args"]["dtype"] == "float64"
    assert sub["args"]["reduce"] == "MAX"               # what gloo never checks across ranks
    # send -> recv flows: 0->1, 2->3 (send/recv) and r->r+1 (batch isend/irecv), each s with one f
    starts = {e["id"]: e["tid"] % trace.LANE_TID for e in events if e["ph"] == "s"}
    ends = {e["id"]: e["tid"] % trace.LANE_TID for e in events if e["ph"] == "f"}
    assert sorted((starts[i], ends.get(i)) for i in starts) == sorted(
        [(0, 1), (2, 3)] + [(r, (r + 1) % 4) for r in range(4)])
    # the straggler: rank 3 entered all_reduce #2 late, the others paid for it inside it
    second = {e["args"]["rank"]: e for e in slices if e["args"]["seq"] == 2 and e["cat"] == "default_pg"}
    for r in (0, 1, 2):
        assert (second[3]["ts"] - second[r]["ts"]) / 1e6 >= STRAGGLER_S * 0.9
        assert second[r]["dur"] / 1e6 >= STRAGGLER_S * 0.9
    assert second[3]["dur"] / 1e6 < STRAGGLER_S * 0.5
    # times are µs since the run's first op: small, >= 0, the origin in the metadata
    assert min(e["ts"] for e in slices) == 0 and max(e["ts"] for e in slices) < 600e6
    assert isinstance(meta["t0_unix_ns"], int) and meta["t0_unix_ns"] > 1.6e18
    # clocks on one host: the same clock, so each estimate is off by no more than half its
    # round trip (under 1 ms on a quiet machine; a loaded one stretches the round trips)
    offsets, rtts = meta["clock_offsets_ms_by_rank"], meta["clock_rtt_ms_by_rank"]
    assert set(offsets) == {"0", "1", "2", "3"} and offsets["0"] == 0, offsets
    assert all(abs(offsets[r]) <= max(1.0, rtts[r] / 2 + 0.05) for r in offsets), (offsets, rtts)
    assert meta["missing_ranks"] == [] and meta["bad_records"] == [] and meta["unfinished_ops"] == 0
    status = json.loads((out / "status.json").read_text())
    assert status["trace"]["ops"] == len([e for e in slices if e["name"] not in ("new_group", "destroy_process_group")])
    # DDP: its construction and its gradient all-reduce, issued by torch's C++ (the Reducer),
    # recorded where torch issues them, callers the lines that made the model and called backward()
    made = [e for e in slices if e["args"]["caller"] == f"{script}:{DDP_LINE}"]
    assert sorted(e["name"] for e in made) == sorted(["all_gather", "broadcast", "broadcast"] * 4), made
    grads = [e for e in slices if e["name"] == "all_reduce" and e["args"]["caller"] == f"{script}:{BACKWARD_LINE}"]
    assert sorted(e["args"]["rank"] for e in grads) == [0, 1, 2, 3], grads
    assert all(e["args"]["bytes"] == (4 * 2 + 2) * 4 and e["args"]["via"] == "c++" for e in grads), grads
    # no timeline picture unless asked (report.html draws the timeline; matplotlib costs 0.7 s)
    assert not (out / trace.TIMELINE_FILE).exists()
    assert "timeline picture" not in (out / "report.md").read_text()

    shown = labctl("trace", str(out), "--png", timeout=120)
    assert shown.returncode == 0, shown.stderr
    # the timeline picture, asked for (the dev venv has the plot extra)
    assert (out / trace.TIMELINE_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"timeline picture: {out / trace.TIMELINE_FILE}" in shown.stdout
    table = shown.stdout.split("## Stragglers")[1]
    worst = table.splitlines()[4]                  # caption, blank, header, rule, worst row
    assert "| default_pg | #2 | all_reduce | rank 3 |" in worst, table
    assert "| default_pg | send | 2 |" in shown.stdout


# What users' scripts do, on 3 ranks (world size 3: dividing by it is inexact, so a
# recorder that changed how DDP reduces would change the last bits): DDP with one bucket
# per parameter after the first step, DDP with unused parameters, DDP with a comm hook of
# its own registered after a warm-up forward, an async work checked as dist.Work,
# dist.all_reduce pickled, FSDP2 (fully_shard on CPU/gloo), functional collectives;
# rank 0 points its stdout at a file of its own, the others silence theirs, and rank 0
# writes a broken record (bytes 1e309) into the log.
USERS = """
import json, os, pickle, sys
import torch, torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import fully_shard

out_dir = sys.argv[1]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
sys.stdout = open(os.path.join(out_dir, "rank0-stdout.txt"), "w") if r == 0 else open(os.devnull, "w")
print("rank", r, "starts", flush=True)
if r == 0:
    os.write(1, b'@@labctl-trace {"k":"S","s":999999,"op":"x","pg":"default_pg","kind":"c","bytes":1e309}\\n')


def params_bytes(module):
    return b"".join(bytes(p.detach().contiguous().flatten().view(torch.uint8).tolist()) for p in module.parameters())


torch.manual_seed(0)
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2)),
                                                bucket_cap_mb=1e-5)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
buckets = []
for step in range(3):
    dist.barrier()                                                    # DDP BARRIER
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(100 * step + r))
    opt.zero_grad()
    ddp(x).square().sum().backward()                                  # DDP STEP
    opt.step()
    buckets.append(sorted(b.buffer().nbytes for b in ddp.reducer._get_zeros_like_grad_buckets()))
dist.barrier()
with open(os.path.join(out_dir, f"ddp-{r}.bin"), "wb") as f:
    f.write(params_bytes(ddp))


class Unused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.a(x)


unused = torch.nn.parallel.DistributedDataParallel(Unused(), find_unused_parameters=True)
for step in range(2):
    dist.barrier()                                                    # UNUSED BARRIER
    unused(torch.ones(2, 8)).sum().backward()                          # UNUSED STEP
dist.barrier()
hooked = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
hooked(torch.ones(1, 4))                                               # a warm-up forward
hooked.register_comm_hook(None, default_hooks.allreduce_hook)          # then a hook of its own
hooked(torch.ones(1, 4)).sum().backward()                              # HOOKED STEP
work = dist.all_reduce(torch.ones(1), async_op=True)
assert isinstance(work, dist.Work), type(work)
work.wait()
assert pickle.loads(pickle.dumps(dist.all_reduce)) is dist.all_reduce
dist.barrier()
sharded = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Linear(12, 3))
for layer in sharded:
    fully_shard(layer)
fully_shard(sharded)
dist.barrier()
sharded(torch.ones(2, 6)).sum().backward()                             # FSDP STEP
dist.barrier()
gathered = funcol.all_gather_tensor(torch.ones(6), 0, dist.group.WORLD)                  # FUNCOL GATHER
scattered = funcol.reduce_scatter_tensor(torch.ones(6 * w), "sum", 0, dist.group.WORLD)   # FUNCOL SCATTER
gathered, scattered = (t.wait() if hasattr(t, "wait") else t for t in (gathered, scattered))
assert gathered.shape == (6 * w,) and scattered.shape == (6,)


def compiled_step(x):
    y = x * 2
    dist.all_reduce(y)                                                 # COMPILED ALL_REDUCE
    return y + 1


assert torch.compile(compiled_step, backend="eager")(torch.ones(3)).tolist() == [2.0 * w + 1] * 3
if r == 0:
    with open(os.path.join(out_dir, "buckets.json"), "w") as f:
        json.dump(buckets, f)
print("rank", r, "done", flush=True)
dist.destroy_process_group()
"""


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(USERS.splitlines(), 1) if marker in line)


@pytest.fixture(scope="module")
def users_runs(tmp_path_factory, hang_run):
    """USERS on 1 node x 3 processes, traced (--trace, the default) and with --no-trace.
    (hang_run: the hang lab is started first and waits for its deadline meanwhile.)"""
    folder = tmp_path_factory.mktemp("users")
    script = folder / "users.py"
    script.write_text(USERS)
    runs = {}
    for traced in (True, False):
        data = folder / ("traced" if traced else "untraced")
        data.mkdir()
        out = folder / f"run-{data.name}"
        done = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "3", "--out", str(out),
                      "--trace" if traced else "--no-trace", "--", str(data), timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        runs[traced] = (out, data)
    return runs, script


def test_ddp_traced_and_untraced_ends_with_bitwise_identical_parameters(users_runs):
    """Tracing changes no bit of what DDP computes: torch's own all-reduce per bucket runs,
    no comm hook is put in its place (the first recorder's hook divided before summing)."""
    runs, _ = users_runs
    (_, traced), (untraced_run, untraced) = runs[True], runs[False]
    for rank in range(3):
        a, b = (traced / f"ddp-{rank}.bin").read_bytes(), (untraced / f"ddp-{rank}.bin").read_bytes()
        assert len(a) == (8 * 4 + 4 + 4 * 2 + 2) * 4 and a == b, rank
    assert not (untraced_run / "trace.json").exists()


def _steps(ops: list[dict], boundary_line: int) -> list[list[dict]]:
    """A rank's ops cut into steps at the barriers of `boundary_line` (sorted by start)."""
    steps: list[list[dict]] = []
    for e in ops:
        if e["name"] == "barrier" and e["args"]["caller"].endswith(f":{boundary_line}"):
            steps.append([])
        elif steps:
            steps[-1].append(e)
    return steps


def test_ddp_trace_holds_one_all_reduce_per_bucket_per_step_and_the_unused_map(users_runs):
    runs, script = users_runs
    out, data = runs[True]
    _well_formed(out)
    events, meta = _events(out)
    buckets = json.loads((data / "buckets.json").read_text())
    assert buckets[0] == [184] and len(buckets[1]) > 1        # one bucket, then one per parameter (or so)
    step, unused = _line_of("# DDP STEP"), _line_of("# UNUSED STEP")
    for rank in range(3):
        ops = _of_rank(events, rank)
        per_step = [[e for e in s if e["name"] == "all_reduce" and e["args"]["caller"] == f"{script}:{step}"]
                    for s in _steps(ops, _line_of("# DDP BARRIER"))][:3]
        assert [sorted(e["args"]["bytes"] for e in s) for s in per_step] == buckets, (rank, per_step)
        assert all(e["args"]["via"] == "c++" and e["args"]["dtype"] == "float32" for s in per_step for e in s)
        # find_unused_parameters=True: the gradients (a.weight, a.bias, b.weight, b.bias: 288 B)
        # and the unused-parameter map (an int32 per parameter: 16 B) each step
        per_step = [[e for e in s if e["name"] == "all_reduce" and e["args"]["caller"] == f"{script}:{unused}"]
                    for s in _steps(ops, _line_of("# UNUSED BARRIER"))][:2]
        assert [sorted((e["args"]["bytes"], e["args"]["dtype"]) for e in s) for s in per_step] == \
            [[(16, "int32"), (288, "float32")]] * 2, (rank, per_step)
        # the comm hook the script registered: its all_reduce is recorded as a script's is, at
        # the backward's line, and named all_reduce: the backward called the hook, not the line
        hook = [e for e in ops if e["args"]["caller"] == f"{script}:{_line_of('# HOOKED STEP')}"]
        assert [(e["name"], e["args"]["bytes"], e["args"].get("api"), e["args"].get("via")) for e in hook] == \
            [("all_reduce", (4 * 2 + 2) * 4, None, None)], hook
    assert meta["unfinished_ops"] == 0


def test_fsdp2_and_functional_collectives_show_their_sizes(users_runs):
    """fully_shard on CPU/gloo all-gathers each layer's shard (its parameters over 3 ranks)
    before forward and backward, and reduce-scatters the whole layer's gradients; the
    functional collectives show theirs: ops FSDP2 issues through torch.distributed and ops
    torch's C++ issues (functional collectives) recorded alike."""
    runs, script = users_runs
    out, _ = runs[True]
    events, _ = _events(out)
    first, second = (6 * 12 + 12) * 4, (12 * 3 + 3) * 4          # the layers' parameter bytes
    fsdp, gather, scatter = (f"{script}:{_line_of(m)}" for m in ("# FSDP STEP", "# FUNCOL GATHER",
                                                                 "# FUNCOL SCATTER"))
    for rank in range(3):
        ops = _of_rank(events, rank)
        mine = [e for e in ops if e["args"]["caller"] == fsdp]
        gathers = sorted(e["args"]["bytes"] for e in mine if "all_gather" in e["name"])
        scatters = sorted(e["args"]["bytes"] for e in mine if "reduce_scatter" in e["name"])
        assert gathers == sorted([first // 3, second // 3] * 2) and scatters == sorted([first, second]), mine
        g = [e for e in ops if e["args"]["caller"] == gather]
        s = [e for e in ops if e["args"]["caller"] == scatter]
        assert [("all_gather" in e["name"], e["args"]["bytes"], e["args"]["via"]) for e in g] == [(True, 24, "c++")]
        assert [("reduce_scatter" in e["name"], e["args"]["bytes"]) for e in s] == [(True, 6 * 3 * 4)]
        assert not any(e["args"].get("unfinished") for e in g + s)
        # under torch.compile the op's line is the script's (its FX node's), not the graph's
        # generated code's (<eval_with_key>.1:7) nor dynamo's frame's (the def line)
        compiled = f"{script}:{_line_of('# COMPILED ALL_REDUCE')}"
        assert [e["name"] for e in ops if e["args"]["caller"] == compiled] == ["all_reduce"], \
            sorted({e["args"]["caller"] for e in ops})


def test_records_reach_the_lab_whatever_a_script_does_to_stdout(users_runs):
    """Rank 0 pointed sys.stdout at its own file, ranks 1 and 2 at /dev/null: every rank's
    records are in the trace, and rank 0's file holds what it printed and nothing else."""
    runs, _ = users_runs
    out, data = runs[True]
    events, meta = _events(out)
    assert meta["missing_ranks"] == [] and all(len(_of_rank(events, r)) > 30 for r in range(3))
    assert (data / "rank0-stdout.txt").read_text() == "rank 0 starts\nrank 0 done\n"


def test_a_record_a_script_prints_is_its_output_not_a_record(users_runs):
    """Rank 0 prints a line that looks like a record (bytes 1e309, JSON's infinity) to its
    stdout. Its records are in its record file, so that line is its output: in its log,
    not in the trace, not a bad record (before, the log was the records' channel and a
    script could forge one); `labctl trace` reads the folder back the same."""
    runs, _ = users_runs
    out, _ = runs[True]
    _, meta = _events(out)
    assert _record_line(out, 0, "1e309") > 0
    assert meta["bad_records"] == [], meta["bad_records"]
    shown = labctl("trace", str(out), timeout=120)
    assert shown.returncode == 0 and "Traceback" not in shown.stdout + shown.stderr
    assert "1e309" not in shown.stdout and "unusable" not in shown.stdout
    _well_formed(out)


def test_a_bad_record_in_a_record_file_is_named_with_its_file_and_line_and_a_torn_one_as_torn(tmp_path):
    """A record file is read as the merge reads a log: a bad record named by file and line,
    the rest merged; the zeros past what a rank wrote are not lines; a last record cut
    short by the rank's death (zeros inside it) is named as torn."""
    run = tmp_path / "run"
    (run / "records").mkdir(parents=True)
    site = {"k": "S", "s": 1, "op": "all_reduce", "pg": "default_pg", "kind": "c", "bytes": 4,
            "dtype": "float32", "shape": [1], "caller": "job.py:3"}
    body = (_lines({"k": "H", "v": 2, "t0": 1_000_000, "pid": 7}, site) + "@@labctl-trace B 1 1 1 10\n"
            + "@@labctl-trace E 1 20\n" + _lines({**site, "s": 2, "bytes": 1e309}) + "@@labctl-trace B 2 1 2 30\n")
    (run / "records" / "rank-0.0000000000001000000.7.0000.rec").write_bytes(
        body.encode() + b"@@labctl-trace E 2 4\0\0" + b"\0" * 4096)
    summary = trace.merge(run, world=1)
    problems = [str(p) for p in summary.problems]
    name = run / "records" / "rank-0.0000000000001000000.7.0000.rec"
    assert problems == [f"{name}:5: trace record with an unusable bytes: inf",
                        f"{name}:7: rank 0's last record was cut short (the rank died while writing it): skipped"]
    assert summary.ops == 2 and summary.unfinished == 1 and summary.torn == [0]
    trace.trim_record_files(run)
    assert name.read_bytes().endswith(b"@@labctl-trace E 2 4"), "cut to what was written"


def _record_line(out: Path, rank: int, needle: str) -> int:
    lines = (out / "ranks" / f"rank-{rank}.log").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def test_every_entry_point_of_torch_is_recorded_or_named(tmp_path):
    """The public collective and p2p entry points of the installed torch (torch.distributed,
    functional collectives, ProcessGroup's methods: tests/trace_entry_points.py finds them
    in torch), each called once on 2 ranks: every one left a finished record at its line,
    or is named as issuing no op; and every c10d dispatcher op torch registers carries the
    recorder's kernel. A torch that adds an entry point fails here until it is called or named."""
    found = trace_entry_points.entry_points()
    named = set(trace_entry_points.CALLS) | set(trace_entry_points.NOT_OPS) | set(trace_entry_points.NOT_ON_GLOO)
    assert found - named == set(), "entry points neither called nor named: " + ", ".join(sorted(found - named))
    assert set(trace_entry_points.CALLS) <= found, sorted(set(trace_entry_points.CALLS) - found)
    script = tmp_path / "entry_points.py"
    script.write_text(trace_entry_points.script())
    out, info = tmp_path / "run", tmp_path / "info.json"
    done = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "2", "--out", str(out),
                  "--", str(info), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _well_formed(out)
    events, meta = _events(out)
    written = json.loads(info.read_text())
    by_line: dict[int, list[dict]] = {}
    for e in _ops(events):
        path, _, line = e["args"]["caller"].rpartition(":")
        if path == str(script):
            by_line.setdefault(int(line), []).append(e)
    for name, line in written["lines"].items():
        ops = by_line.get(line, [])
        assert {e["args"]["rank"] for e in ops} == {0, 1}, (name, ops)
        assert all(e["ph"] == "X" for e in ops), (name, ops)
    unfinished = [e["args"]["caller"] for e in _ops(events) if e["args"].get("unfinished")]
    assert len(unfinished) <= 2, unfinished          # funcol.reduce_scatter_tensor_inplace: see docs/trace.md
    # recv from any source: the sender, known at its end
    anysource = by_line[written["lines"]["ProcessGroup.recv_anysource"]]
    assert [(e["args"]["rank"], e["name"], e["args"]["peer"]) for e in anysource
            if e["args"]["rank"] == 0] == [(0, "recv", 1)]
    import torch

    registered = {full[len("c10d::"):] for full in torch._C._dispatch_get_registrations_for_dispatch_key("CPU")
                  if full.startswith("c10d::")} - {"check_for_nan"}
    assert set(written["kernels"]) == registered and all(written["kernels"].values()), written["kernels"]


FAILS_IN_A_COLLECTIVE = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    dist.all_gather_into_tensor(torch.zeros(3), torch.ones(2))   # line 6: gloo's C++ raises: 3 != 2 x 2
dist.barrier()
"""


@pytest.fixture(scope="module")
def hang_run(tmp_path_factory):
    """The hang lab (HANG on 2 nodes x 2 processes, --timeout 30, Flight Recorder dumps to
    a folder of its own), started in the background: once its ranks are in the hang it only
    waits for its deadline, so users_runs (which asks for this fixture first) runs its two
    labs in that wait, and the hang test, placed after the users' tests and the entry
    points' lab (which runs in the rest of the wait), reads a finished run. Output goes to files, not pipes: nobody reads a pipe meanwhile, and a full one
    would stall the lab."""
    folder = tmp_path_factory.mktemp("hang")
    script = folder / "hang.py"
    script.write_text(HANG)
    out, dumps = folder / "run", folder / "fr"
    with labctl_in_background(folder, "up", "--script", str(script), "--nodes", "2", "--nproc-per-node", "2",
                              "--timeout", "30", "--out", str(out), "--env", f"LAB_FR_DUMP_DIR={dumps}") as (proc, stdout, _):
        yield proc, script, out, dumps, stdout


@pytest.mark.slow
def test_a_hang_names_the_mismatch_and_the_rank_that_never_came_as_torchfrtrace_names_it(hang_run):
    """The report names the mismatch and the missing rank from the trace records, though
    ranks 1-3 silenced their stdout and rank 0 pointed it at a file of its own (the
    records go to a descriptor taken before the script ran: that file holds none of them).
    The ops the ranks hang in reach to the end of the trace, unfinished, with their
    callers. At the same deadline every rank also dumps its Flight Recorder ring (a byte on
    its FIFO wakes a dump thread: the main thread is blocked in gloo), which is what a lab
    with tracing off is diagnosed from: labctl's reading of those dumps and torch's own
    analyzer (torchfrtrace) on the pickle dumps of the same hang say the same."""
    proc, script, out, dumps, stdout = hang_run
    assert proc.wait(timeout=600) == 1
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "timeout"
    comm = status["first_failure"]["collective"]
    # two ranks that disagree: neither is the odd one, each call is said with its line
    lines = HANG.splitlines()
    mismatch = (f"rank 0 called all_reduce [1000] at {script}:{len(lines) - lines[::-1].index('    dist.all_reduce(t, group=mine)')}; "
                f"rank 1 called broadcast [1000] at {script}:{lines.index('    dist.broadcast(t, src=0, group=a)') + 1}, "
                "collective #3 of pg1 (the op differs; no rank is the odd one out)")
    assert any(mismatch in s["text"] for s in comm["stuck"]), comm
    # rank 3, the one rank waited for in pg2, and rank 1, whose broadcast the script's
    # `if r == 1:` singles out in pg1 (torchfrtrace's "Culprit rank 1" below): two bugs, both named
    assert (comm["rank"], comm["ranks"], status["first_failure"]["rank"]) == (None, [1, 3], None), comm
    assert any(s["text"].endswith("the script's branches single out rank 1") for s in comm["stuck"]), comm
    missing = next(s for s in comm["stuck"] if s["missing"])
    assert missing["missing"] == [3] and missing["waiting"] == [2] and missing["seq"] == 3
    assert missing["last"]["3"] == "#2 all_reduce [1000]"
    assert "which rank 3 never entered" in missing["text"]
    report = (out / "report.md").read_text()
    assert mismatch in report and "rank 3 never entered" in report
    # rank 0 writes it in its node's folder: c10d's rendezvous decides which node that is
    (own,) = [p.read_text() for p in (out / "work").glob("node-*/mine.txt")]
    assert "entering the hang" in own and "@@labctl" not in own
    # the ops they hang in: to the end of the trace, marked, with the line they were called at
    _well_formed(out)
    events, meta = _events(out)
    stuck = {e["args"]["rank"]: e for e in _ops(events) if e["args"].get("unfinished")}
    assert sorted(stuck) == [0, 1, 2], stuck
    lines = HANG.splitlines()
    for rank, op, line in ((0, "all_reduce", "    dist.all_reduce(t, group=mine)"),
                           (1, "broadcast", "    dist.broadcast(t, src=0, group=a)"),
                           (2, "all_reduce", "    dist.all_reduce(t, group=mine)")):
        e = stuck[rank]
        at = len(lines) - lines[::-1].index(line)                 # the last such line: the one it hangs in
        assert e["ph"] == "X" and e["name"] == op and e["args"]["caller"] == f"{script}:{at}", e
        assert e["ts"] + e["dur"] == pytest.approx(meta["end_us"], abs=0.002) and e["dur"] > 1e6, e
    # the stacks are still taken (by the same thread), and name the user's lines: the
    # deadline's stacks under torchrun (tests/test_stacks.py has the direct launcher's)
    assert status["stacks"]["1"]["call"] == "broadcast" and status["stacks"]["3"]["file"] == str(script)
    assert all("most recent call first" in (out / "stacks" / f"rank-{r}.txt").read_text() for r in range(4))
    assert status["stacks"]["3"]["line"] == HANG.splitlines().index("    time.sleep(600)") + 1
    assert "Where each rank was" in stdout.read_text()
    assert_nothing_left(status["run_id"])

    fr = trace.flight_recorder(out, world=4).to_dict()        # what a lab with tracing off reports
    assert fr is not None and fr["source"] == "flight recorder", fr
    by_pg = {s["pg"]: s for s in fr["stuck"]}
    assert by_pg["pg1"]["mismatch"] == ("rank 0 called all_reduce [1000]; rank 1 called broadcast [1000], "
                                        "collective #3 of pg1 (the op differs; no rank is the odd one out)")
    assert by_pg["pg2"]["missing"] == [3] and by_pg["pg2"]["seq"] == 3
    assert "rank 2 waits in all_reduce (collective #3 of pg2) which rank 3 never entered" in fr["text"]
    analyzer = Path(sys.executable).parent / "torchfrtrace"
    said = subprocess.run([str(analyzer), str(dumps), "-p", "rank_"], capture_output=True, text=True,
                          timeout=300)
    assert said.returncode == 0, said.stderr
    blocks = (said.stdout + said.stderr).split("collective stack trace")
    missing = next(b for b in blocks if "missing ranks" in b)
    assert "sequence number: 3" in missing and "missing ranks: {3}" in missing \
        and "expected ranks: {2, 3}" in missing
    mismatch = next(b for b in blocks if "COLLECTIVE_TYPE_MISMATCH" in b)
    assert "sequence number: 3" in mismatch and "Culprit rank 1" in mismatch \
        and "'broadcast'" in mismatch and "expected ranks: {0, 1}" in mismatch


def test_a_failing_rank_names_its_own_line_not_the_recorder(tmp_path):
    """The recorder stands between the script's call and torch's C++: an error raised
    there is located at the script's line (it read workloads/_trace.py:407)."""
    script = tmp_path / "fails.py"
    script.write_text(FAILS_IN_A_COLLECTIVE)
    out = tmp_path / "run"
    done = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "2", "--timeout", "300",
                  "--trace", "--out", str(out), timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    first = json.loads((out / "status.json").read_text())["first_failure"]
    assert first["rank"] == 1 and first["error"]["file"] == str(script) and first["error"]["line"] == 6, first
    assert f"at {script}:6" in done.stdout
    _well_formed(out)


DIES_RIGHT_AFTER = """
import os, signal, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
if dist.get_rank() == 2:
    os.kill(os.getpid(), signal.SIGKILL)   # right after #1: a flusher would not have run yet
dist.all_reduce(t)
"""


def test_a_rank_killed_right_after_an_op_is_said_to_have_entered_it(tmp_path):
    """Rank 2 is killed right after collective #1. The others wait in #2: the report says
    rank 2's last collective was #1 (its records are written before the op, into a file
    that outlives it; with a flusher thread they died with it and the report could only
    say it "left no op record")."""
    script = tmp_path / "dies.py"
    script.write_text(DIES_RIGHT_AFTER)
    out = tmp_path / "run"
    done = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "3", "--timeout", "300",
                  "--trace", "--out", str(out), timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    comm = json.loads((out / "status.json").read_text())["first_failure"]["collective"]
    text = comm["text"]
    assert "last entered: none" not in text and "last entered: rank 2: none" not in text, text
    assert "which rank 2 never entered (last entered: rank 2: #1 all_reduce [4])" in text, text
    assert comm["stuck"][0]["no_records"] == []
    _well_formed(out)


KILLED_IN_DUMP = """
import os, sys, torch.distributed as dist
from workloads._trace import fr as _trace
dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + "/store", rank=0, world_size=1)
_trace.os.replace = lambda *a: os._exit(9)      # SIGKILL's effect: killed once written, before its rename
_trace.dump_flight_recorder()
"""


def test_a_dump_cut_short_leaves_nothing_torchfrtrace_takes_for_a_rank(tmp_path):
    """A rank dumps its ring at the deadline and again on SIGTERM; a SIGKILL during the
    second write must not leave a file whose name holds torchfrtrace's prefix ("rank_"):
    torchfrtrace reads every such file and stops on it (seen in CI: 'rank_3.tmp')."""
    dumps = tmp_path / "fr"
    done = subprocess.run([sys.executable, "-c", KILLED_IN_DUMP, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1],
                          env={**os.environ, "LAB_FR_DUMP_DIR": str(dumps)})
    assert done.returncode == 9, done.stderr
    left = [p.name for p in dumps.iterdir()]
    assert left and not [name for name in left if "rank_" in name], left


FLUSHER_AT_EXIT = """
import atexit, threading
def after_the_tracer():           # registered first: runs after the tracer's own exit handler
    alive = [t.name for t in threading.enumerate() if t.name == "labctl-trace-flush"]
    print("flusher alive at finalization:", alive, flush=True)
    _trace._write({"k": "M", "rank": 1})   # an op in a later exit handler: still written
atexit.register(after_the_tracer)
from workloads import _trace
_trace._write({"k": "M", "rank": 0})
"""


BACKPROP_THROUGH = """
import os, sys, tempfile, warnings
if os.environ["LAB_TRACE"] == "1":
    from workloads import _trace
    _trace.install()
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
x = torch.ones(3, requires_grad=True)
y = x * 2
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    dist.all_reduce(y)
    y.sum().backward()
print(x.grad.tolist(), [str(w.message).split(": ", 1)[1][:40] for w in caught if "c10d" in str(w.message)])
"""


def test_a_script_that_backpropagates_through_a_collective_is_warned_as_untraced(tmp_path):
    """torch warns when backward reaches a c10d op (its autograd fallback); a traced op is
    entered below autograd, so the recorder gives that warning itself: same gradient,
    same warning."""
    said = {}
    for traced in ("0", "1"):
        done = subprocess.run([sys.executable, "-c", BACKPROP_THROUGH], capture_output=True, text=True,
                              timeout=120, cwd=REPO, env={**os.environ, "LAB_TRACE": traced})
        assert done.returncode == 0, done.stderr
        said[traced] = [x for x in done.stdout.splitlines() if not x.startswith(trace.MARKER)][-1]
    assert said["1"] == said["0"] == "[2.0, 2.0, 2.0] ['an autograd kernel was not registered to']", said


OPS_ON_TENSORS_THAT_REQUIRE_GRAD = """
import os, tempfile, warnings
if os.environ["LAB_TRACE"] == "1":
    from workloads import _trace
    _trace.install()
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
param = torch.nn.Parameter(torch.ones(3))
y = param * 2
for _ in range(3000):
    dist.broadcast(param, 0)
    dist.all_reduce(y)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y.sum().backward()
print("hooks", len(param._backward_hooks or {}), len(y._backward_hooks or {}), param.grad.tolist(),
      any("autograd kernel was not registered" in str(w.message) for w in caught))
"""


def test_ops_on_tensors_that_require_grad_add_no_hook_to_them(tmp_path):
    """Issue 52 item 9: 3,000 traced broadcasts of a parameter (and all-reduces of a tensor
    made from it) leave its hooks as untraced: none the script can see (torch's own warning
    hook is C++). Was: one Python hook per op on the user's tensor, 3,000 on each. Backward
    still warns."""
    said = {}
    for traced in ("0", "1"):
        done = subprocess.run([sys.executable, "-c", OPS_ON_TENSORS_THAT_REQUIRE_GRAD], capture_output=True,
                              text=True, timeout=120, cwd=REPO, env={**os.environ, "LAB_TRACE": traced})
        assert done.returncode == 0, done.stderr[-2000:]
        said[traced] = [x for x in done.stdout.splitlines() if x.startswith("hooks")][-1]
    assert said["1"] == said["0"] == "hooks 0 0 [2.0, 2.0, 2.0] True", said


def test_the_recorder_has_no_thread_at_finalization_and_later_records_still_reach_the_stream(tmp_path):
    """A daemon thread that wakes during finalization is ended by pthread_exit where it
    stands; compose ranks aborted at exit with "terminate called without an active
    exception" about once in eight runs (seen in CI) when the stream sink had a flusher
    thread. It has none now (each line is written when it is made); the records reach
    stdout, also one made by an exit handler that runs after the tracer's."""
    done = subprocess.run([sys.executable, "-c", FLUSHER_AT_EXIT], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert '@@labctl-trace {"k":"M","rank":0}' in done.stdout, done.stdout
    assert "flusher alive at finalization: []" in done.stdout, done.stdout
    assert done.stdout.endswith('@@labctl-trace {"k":"M","rank":1}\n'), done.stdout



def _fake_run(tmp_path: Path, logs: dict[int, str], world: int) -> Path:
    run = tmp_path / "run"
    (run / "ranks").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"run_id": "x", "world_size": world}))
    (run / "plan.json").write_text(json.dumps({"nodes": [{"index": 0, "hostname": "lab-0"}]}))
    for rank, text in logs.items():
        (run / "ranks" / f"rank-{rank}.log").write_text(text)
    return run


def _lines(*records: dict) -> str:
    return "".join(trace.MARKER + json.dumps(r) + "\n" for r in records)




def test_ops_never_waited_on_are_let_go_oldest_first_so_the_merge_holds_a_bounded_number(tmp_path):
    """isends never waited on begin and never end: the merge holds a bounded number of
    them (MAX_PENDING_OPS shared by the ranks; 1M such ops on one rank cost 695 MiB
    before); the oldest are given up on at once, shown unfinished, and an end that
    comes for one later is no 'never began' problem."""
    begins = [{"k": "B", "i": i, "op": "isend", "pg": "default_pg", "p2p": i, "peer": 1, "shape": [1],
               "dtype": "float32", "bytes": 4, "caller": "a.py:1", "t": i * 1000} for i in range(1, 21)]
    ends = [{"k": "E", "i": i, "t": 10**9 + i} for i in (3, 18, 19, 20)]
    run = _fake_run(tmp_path, {0: _lines(*begins, *ends)}, world=1)
    summary = trace.Summary(path=run / "trace.json")
    ops = list(trace.builder.RankReader(run / "ranks" / "rank-0.log", 0, summary, max_pending=5))
    order = [(op.start // 1000, op.end is not None) for op in ops]
    assert order == [(i, False) for i in range(1, 16)] + [(18, True), (19, True), (20, True),
                                                           (16, False), (17, False)]
    assert [p.text for p in summary.problems] == [
        "more than 5 ops of rank 0 begun and not ended (async ops never waited on?): "
        "the oldest are shown unfinished"]
    assert [line.split(" (")[0] for line in summary.stuck_p2p] == [
        "rank 0's isend to rank 1 was never waited on, or its wait never returned"] * 2




PEAK_RSS_OF_CHILD = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
print(done.returncode)
print(done.stdout + done.stderr)
"""


def test_a_line_of_hundreds_of_megabytes_costs_the_merge_no_memory(tmp_path):
    """A rank that printed 200 MB without a newline (and a record buried in another long
    line): the merge reads past them in 1 MiB pieces, names the record it skipped, and keeps
    the good ones. Before, the reader held each whole line: 606 MiB of RSS for a 300 MB one."""
    good = _lines({"k": "M", "rank": 0, "node": 0, "host": "h"}, {"k": "G", "pg": "default_pg", "ranks": [0]},
                  {"k": "B", "i": 1, "op": "barrier", "pg": "default_pg", "seq": 1, "shape": [],
                   "dtype": "float32", "bytes": 0, "caller": "a.py:1", "t": 1_000_000},
                  {"k": "E", "i": 1, "t": 2_000_000})
    run = _fake_run(tmp_path, {0: ""}, world=1)
    with open(run / "ranks" / "rank-0.log", "w") as f:
        f.write("x" * 200_000_000 + "\n" + trace.MARKER + "y" * 3_000_000 + "\n" + good)
    measured = subprocess.run([sys.executable, "-c", PEAK_RSS_OF_CHILD, sys.executable, "-m", "labctl.cli",
                               "trace", str(run)], capture_output=True, text=True, timeout=300,
                              cwd=Path(__file__).resolve().parents[1])
    peak, code, shown = measured.stdout.split("\n", 2)
    assert int(peak) < 150, f"{peak} MiB: the merge read a long line whole"
    assert code == "0" and "Traceback" not in shown, shown
    assert f"warning: {run / 'ranks' / 'rank-0.log'}:2: a line of more than 1 MiB holds a trace record" in shown
    assert [e["name"] for e in json.loads((run / "trace.json").read_text())["traceEvents"]
            if e["ph"] == "X"] == ["barrier"]
    shutil.rmtree(run)




def test_the_timeline_picture_has_a_row_per_rank_or_says_why_not(tmp_path):
    """trace-timeline.png from trace.json (streamed, torch-free); without matplotlib one line."""
    events = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}}]
    events += [{"ph": "X", "name": op, "cat": "default_pg", "pid": 0, "tid": rank, "ts": ts, "dur": 500.0,
                "args": {"rank": rank}} for rank in (0, 1, 2) for op, ts in (("broadcast", 0.0), ("all_reduce", 900.0))]
    (tmp_path / "trace.json").write_text('{"traceEvents":[\n' + ",\n".join(json.dumps(e) for e in events)
                                         + '\n],\n"metadata":{}}\n')
    picture = trace.write_timeline(tmp_path)
    assert picture == tmp_path / "trace-timeline.png" and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert trace.views._slices(tmp_path / "trace.json", 4) == ([(0, "broadcast", 0.0, 500.0), (0, "all_reduce", 900.0, 500.0),
                                                        (1, "broadcast", 0.0, 500.0), (1, "all_reduce", 900.0, 500.0)], 6)
    picture.unlink()
    hidden = ("import sys; sys.modules['matplotlib'] = None\n"
              "from labctl import trace, errors\n"
              "try:\n    trace.write_timeline(sys.argv[1])\n"
              "except errors.LabError as exc:\n    print(exc)\n")
    from conftest import REPO
    done = subprocess.run([sys.executable, "-c", hidden, str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.stdout.strip() == trace.NO_TIMELINE and "torch" not in done.stderr
    assert not picture.exists()
    assert trace.write_timeline(tmp_path / "elsewhere") is None          # no trace.json: nothing


GIVES_UP = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(100)
dist.all_reduce(t)
if dist.get_rank() == 2:
    raise ValueError("rank 2 gives up")
dist.all_reduce(t)
"""


def test_tracing_off_a_failure_names_the_collective_the_others_were_left_in(tmp_path):
    """--no-trace, no --debug, no deadline: rank 2 raises after collective #1. It dumps its
    Flight Recorder ring on its way out; the others, left in #2, dump theirs as they end
    (their own error, or torchrun's SIGTERM). The report says who never came."""
    script = tmp_path / "gives_up.py"
    script.write_text(GIVES_UP)
    out = tmp_path / "run"
    done = labctl("up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "3", "--no-trace",
                  "--timeout", "300", "--out", str(out), timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    status = json.loads((out / "status.json").read_text())
    first = status["first_failure"]
    assert first["rank"] == 2 and first["error"]["exception"] == "ValueError: rank 2 gives up", first
    assert first["collective"]["source"] == "flight recorder"
    said = "ranks 0, 1 wait in all_reduce (collective #2 of default_pg) which rank 2 never entered"
    assert said in first["collective"]["text"]
    assert said in (out / "report.md").read_text()
    assert "trace" not in status and not (out / "trace.json").exists()     # nothing recorded
    assert not any(trace.MARKER.encode() in p.read_bytes() for p in (out / "ranks").glob("rank-*.log"))
    assert_nothing_left(status["run_id"])


def test_bad_records_are_named_and_the_merge_goes_on(tmp_path):
    good = _lines({"k": "M", "rank": 0, "node": 0, "host": "h"}, {"k": "G", "pg": "default_pg", "ranks": [0, 1, 2]},
                  {"k": "B", "i": 1, "op": "all_reduce", "pg": "default_pg", "seq": 1, "shape": [4],
                   "dtype": "float32", "bytes": 16, "caller": "a.py:1", "t": 1_000_000},
                  {"k": "E", "i": 1, "t": 2_000_000})
    truncated = good.replace('"k": "M", "rank": 0', '"k": "M", "rank": 1') + good.splitlines()[2][:40] + "\n"
    run = _fake_run(tmp_path, {0: "some output\n" + good, 1: truncated, 2: "no records here\n"}, world=3)
    shown = labctl("trace", str(run), timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr + shown.stdout
    assert f"warning: {run / 'ranks' / 'rank-1.log'}:5: garbled or truncated trace record" in shown.stdout
    assert "warning: no trace records from rank 2" in shown.stdout
    data = json.loads((run / "trace.json").read_text())
    assert [e["tid"] for e in data["traceEvents"] if e["ph"] == "X"] == [0, 1]
    assert data["metadata"]["missing_ranks"] == [2]
    assert chrome_trace.check(run / "trace.json") == []


def _v2(*lines: str | dict) -> str:
    """A rank log of the recorder's lines: dicts as JSON, strings as they are."""
    return "".join(trace.MARKER + (json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines)


SITE = {"k": "S", "s": 1, "op": "all_reduce", "pg": "default_pg", "kind": "c", "bytes": 16, "dtype": "float32",
        "shape": [4], "caller": "a.py:3"}


@pytest.mark.parametrize("bad, named", [
    ({**SITE, "bytes": 1e309}, "trace record with an unusable bytes: inf"),
    ({**SITE, "bytes": -1}, "trace record with an unusable bytes: -1"),
    ({**SITE, "shape": [4, "x"]}, "trace record with an unusable shape: x"),
    ({**SITE, "pg": 7}, "trace record with an unusable pg: 7"),
    ({"k": "H", "v": 2, "t0": True}, "trace record with an unusable t0: True"),
    ("X 1 1 1 5", "garbled or truncated trace record: X 1 1 1 5"),
    ("B 1 x 1 5", "garbled or truncated trace record: B 1 x 1 5"),
    ("B 2 9 1 5", "op of call site 9, which no S line described"),
    ({"k": "Q"}, "trace record of an unknown kind: Q"),
])
def test_a_bad_record_of_any_kind_is_named_never_a_traceback(tmp_path, bad, named):
    """A rank's record the merge cannot use (a broken value: JSON's 1e309 reads as inf, a
    negative size, a shape of strings, a cut line, an op of an unknown call site): named
    with its file and line, skipped; the merge writes trace.json from the rest."""
    run = _fake_run(tmp_path, {0: _v2({"k": "H", "v": 2, "t0": 10**18}, {"k": "M", "rank": 0, "node": 0, "host": "h"},
                                      {"k": "G", "pg": "default_pg", "ranks": [0]}, SITE, "X 1 1 1 1000 2000",
                                      bad, "X 3 1 2 3000 4000")}, world=1)
    shown = labctl("trace", str(run), timeout=120)
    assert shown.returncode == 0 and "Traceback" not in shown.stdout + shown.stderr, shown.stdout + shown.stderr
    assert f"warning: {run / 'ranks' / 'rank-0.log'}:6: {named}" in shown.stdout, shown.stdout
    events, meta = _events(run)
    assert [e["args"]["seq"] for e in events if e["ph"] == "X"] == [1, 2]
    assert chrome_trace.check(run / "trace.json") == []


def test_overlapping_ops_get_threads_of_their_own_and_unfinished_ops_reach_the_end(tmp_path):
    """trace.json as viewers need it: an op that overlaps a rank's other ops (an isend
    posted before a collective, DDP buckets) goes to another thread of that rank, so no
    thread has partly overlapping slices; past MAX_LANES overlapping ops, async events.
    Times are µs since the first op (they were absolute, near 1.8e15: a double lost the
    sub-µs digits and a flow landed past its slice). An op never ended is drawn to the
    last moment any rank was known alive (a T line), marked unfinished, with its caller."""
    t0 = 1_795_000_000_000_000_000
    many = trace.MAX_LANES + 2
    rank0 = [{"k": "H", "v": 2, "t0": t0}, {"k": "M", "rank": 0, "node": 0, "host": "h"},
             {"k": "G", "pg": "default_pg", "ranks": [0, 1]},
             {"k": "S", "s": 1, "op": "isend", "pg": "default_pg", "kind": "p", "bytes": 4, "dtype": "float32",
              "shape": [1], "peer": 1, "caller": "a.py:5"},
             {**SITE, "s": 2}, {**SITE, "s": 3, "op": "barrier", "caller": "a.py:9"},
             {"k": "S", "s": 4, "op": "isend", "pg": "default_pg", "kind": "p", "bytes": 4, "caller": "a.py:7"},
             "B 1 1 1 1000", "X 2 2 1 2000 5000", "E 1 7001"]
    rank0 += [f"B {i} 4 {i} {9000 + i}" for i in range(10, 10 + many)]           # all overlapping
    rank0 += [f"E {i} {60000 + i}" for i in range(10, 10 + many)] + ["B 3 3 2 70000"]
    rank1 = [{"k": "H", "v": 2, "t0": t0 + 500}, {"k": "M", "rank": 1, "node": 1, "host": "g"},
             {"k": "C", "offset_ns": -500, "rtt_ns": 1000}, {"k": "G", "pg": "default_pg", "ranks": [0, 1]},
             {"k": "S", "s": 1, "op": "irecv", "pg": "default_pg", "kind": "p", "bytes": 4, "dtype": "float32",
              "shape": [1], "peer": 0, "caller": "b.py:5"},
             {**SITE, "s": 2, "caller": "b.py:6"}, "X 1 1 1 1500 7500", "X 2 2 1 3000 5000", {"k": "T", "t": 100000}]
    run = _fake_run(tmp_path, {0: _v2(*rank0), 1: _v2(*rank1)}, world=2)
    summary = trace.merge(run, world=2)
    assert chrome_trace.check(run / "trace.json") == []
    events, meta = _events(run)
    assert meta["t0_unix_ns"] == t0 + 1000 and meta["end_us"] == pytest.approx(99.0)
    xs = [e for e in events if e["ph"] == "X"]
    first = next(e for e in xs if e["args"].get("p2p_seq") == 1 and e["args"]["rank"] == 0)
    collective = next(e for e in xs if e["name"] == "all_reduce" and e["args"]["rank"] == 0)
    assert (collective["ts"], collective["dur"], collective["tid"]) == (1.0, 3.0, 0)
    assert (first["ts"], first["dur"], first["tid"]) == (0.0, 6.001, trace.LANE_TID)     # it overlaps: lane 1
    barrier = next(e for e in xs if e["name"] == "barrier")
    assert barrier["args"]["unfinished"] is True and barrier["args"]["caller"] == "a.py:9"
    assert barrier["ts"] + barrier["dur"] == pytest.approx(meta["end_us"]) and barrier["tid"] == 0
    assert [e["ph"] for e in events].count("b") == many - trace.MAX_LANES          # lanes full: async pairs
    flows = [e for e in events if e["ph"] in "sf"]
    assert sorted((e["ph"], e["tid"]) for e in flows) == [("f", 1), ("s", trace.LANE_TID)]
    assert summary.unfinished == 1 and summary.lanes[0] == trace.MAX_LANES


def test_many_ops_issued_from_cpp_are_said_to_cost_more(tmp_path):
    """The one case the cost bars cannot hold for (a program of thousands of functional
    collectives, each traced through torch's C++ path): `labctl trace` and the run's notes
    say so with the measured cost; fewer such ops, nothing is said."""
    site = {**SITE, "via": "c++"}
    ops = [f"X {i} 1 {i} {i * 1000} {i * 1000 + 500}" for i in range(1, trace.CPP_OPS_NOTE + 1)]
    run = _fake_run(tmp_path, {0: _v2({"k": "H", "v": 2, "t0": 10**18}, {"k": "M", "rank": 0, "node": 0},
                                      {"k": "G", "pg": "default_pg", "ranks": [0]}, site, *ops)}, world=1)
    summary = trace.merge(run, world=1)
    assert summary.cpp_ops == trace.CPP_OPS_NOTE and "--no-trace turns tracing off" in summary.cost_note
    shown = labctl("trace", str(run), timeout=120)
    assert f"note: {trace.CPP_OPS_NOTE} ops were issued by torch's C++" in shown.stdout
    fewer = _fake_run(tmp_path / "fewer", {0: _v2({"k": "H", "v": 2, "t0": 10**18}, site, *ops[:10])}, world=1)
    assert trace.merge(fewer, world=1).cost_note is None


def test_the_checker_catches_what_viewers_draw_wrong(tmp_path):
    """tests/chrome_trace.py names partial overlap on a thread, a flow outside its slice,
    a negative time and a non-finite number (the first recorder's trace.json had each)."""
    def check(*events: dict) -> list[str]:
        path = tmp_path / "t.json"
        path.write_text(json.dumps({"traceEvents": list(events)}))
        return chrome_trace.check(path)

    x = {"ph": "X", "name": "a", "pid": 0, "tid": 0}
    assert check({**x, "ts": 0, "dur": 10}, {**x, "ts": 2, "dur": 3}) == []          # nested: fine
    assert "partly overlaps" in check({**x, "ts": 0, "dur": 10}, {**x, "ts": 5, "dur": 10})[0]
    assert "inside no slice" in check({**x, "ts": 1.8e15, "dur": 1.0},
                                      {"ph": "f", "bp": "e", "id": 1, "pid": 0, "tid": 0, "ts": 1.8e15 + 1.5},
                                      {"ph": "s", "id": 1, "pid": 0, "tid": 0, "ts": 1.8e15})[0]
    assert "ts -1" in check({**x, "ts": -1, "dur": 1})[0]
    path = tmp_path / "inf.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": 0, "dur": Infinity, "pid": 0, "tid": 0}]}')
    assert "non-finite" in chrome_trace.check(path)[0]


def test_an_empty_trace_says_so_in_one_line(tmp_path):
    run = _fake_run(tmp_path, {0: "hello\n", 1: ""}, world=2)
    shown = labctl("trace", str(run), timeout=120)
    assert shown.returncode == 1
    assert "no trace records in any rank log (was the lab run with `trace: false` / --no-trace?)" in shown.stdout
    assert "Traceback" not in shown.stderr
    assert json.loads((run / "trace.json").read_text())["traceEvents"] == []
    missing = labctl("trace", str(tmp_path / "nope"), timeout=120)
    assert missing.returncode != 0 and "not a run folder" in missing.stderr
    shutil.rmtree(run)


MIX2 = f"""
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
t = torch.ones(1000)
dist.broadcast(t, src=0)
if r == 1:
    time.sleep({STRAGGLER_S})                        # the straggler
dist.all_reduce(t)
if r == 0:
    dist.send(t, dst=1)
else:
    dist.recv(t, src=0)
dist.all_gather([torch.zeros(1000) for _ in range(2)], t)
dist.destroy_process_group()
"""


@pytest.mark.docker
def test_compose_2x1_gives_the_same_timeline(tmp_path):
    """The records travel in `docker compose logs` like results: same slices, flow,
    straggler; a process per container named by its hostname; clocks of containers on
    one host under 1 ms apart."""
    from docker_support import require_compose, require_image

    require_compose()
    require_image()
    script = tmp_path / "mix2.py"
    script.write_text(MIX2)
    out = tmp_path / "run"
    done = labctl("up", "--backend", "compose", "--script", str(script), "--nodes", "2",
                  "--nproc-per-node", "1", "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    _well_formed(out)
    events, meta = _events(out)
    slices = [e for e in events if e["ph"] == "X"]
    for r, p2p in ((0, "send"), (1, "recv")):
        names = [e["name"] for e in _of_rank(events, r) if e["name"] != "destroy_process_group"]
        assert names == ["broadcast", "all_reduce", p2p, "all_gather"], (r, names)
        assert {e["pid"] for e in slices if e["args"]["rank"] == r} == {r}
    hosts = {n["index"]: n["hostname"] for n in json.loads((out / "plan.json").read_text())["nodes"]}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {i: f"node {i} ({hosts[i]})" for i in (0, 1)}
    assert sorted((e["ph"], e["tid"] % trace.LANE_TID) for e in events if e["ph"] in "sf") == [("f", 1), ("s", 0)]
    second = {e["args"]["rank"]: e for e in slices if e["args"]["seq"] == 2}
    assert (second[1]["ts"] - second[0]["ts"]) / 1e6 >= STRAGGLER_S * 0.9
    assert second[0]["dur"] / 1e6 >= STRAGGLER_S * 0.9
    node1 = meta["clock_offsets_by_node"]["1"]          # one host: off by at most half a round trip
    assert abs(node1["clock_offset_ms"]) <= max(1.0, node1["rtt_ms"] / 2 + 0.05), node1
    shown = labctl("trace", str(out), timeout=120)
    assert "| default_pg | #2 | all_reduce | rank 1 |" in shown.stdout


def test_flight_recorder_dumps_name_only_ranks_that_dumped(tmp_path):
    """A rank without a dump (gone, or its main thread held the GIL) is said to have no
    dump, not to have never entered the collective; a dump cut short counts not."""
    def dump(rank: int, seqs: int, done: bool = True) -> str:
        lines = [trace.FR_MARKER + json.dumps({"rank": rank, "pg": "default_pg", "seq": s, "op": "all_reduce",
                                               "shape": [8], "dtype": "Float", "t": s}) for s in range(1, seqs + 1)]
        return "\n".join(lines + ([trace.FR_MARKER + json.dumps({"rank": rank, "done": seqs})] if done else [])) + "\n"

    run = _fake_run(tmp_path, {0: dump(0, 6), 1: dump(1, 6), 2: dump(2, 5), 3: dump(3, 4, done=False)}, world=4)
    found = trace.flight_recorder(run, world=4).to_dict()
    assert found["stuck"][0]["missing"] == [2] and found["stuck"][0]["waiting"] == [0, 1]
    assert found["no_dump"] == [3]
    assert found["text"] == ("ranks 0, 1 wait in all_reduce (collective #6 of default_pg) which rank 2 never "
                             "entered (last entered: rank 2: #5 all_reduce [8]) (no Flight Recorder dump "
                             "from rank 3)")
    assert trace.flight_recorder(_fake_run(tmp_path / "none", {0: "x\n"}, world=1), world=1) is None


def test_a_rank_s_ops_are_read_back_on_its_own_clock_in_the_order_it_began_them(tmp_path):
    """rank_ops (labctl/exercise_grade.py sets them against windows the rank wrote itself): times
    as recorded, whatever the clock offset; an end pairs by id; a recv from any source
    gets its peer from the end; bad lines are skipped."""
    records = _lines({"k": "M", "rank": 1, "node": 0, "host": "h"}, {"k": "C", "offset_ns": 5_000_000, "rtt_ns": 1},
                     {"k": "B", "i": 2, "op": "isend", "pg": "default_pg", "p2p": 1, "peer": 0, "bytes": 16,
                      "shape": [4], "dtype": "float32", "caller": "/x/mine.py:9", "t": 200},
                     {"k": "B", "i": 1, "op": "recv", "pg": "default_pg", "p2p": 2, "bytes": 8,
                      "caller": "/x/mine.py:10", "t": 100},
                     {"k": "E", "i": 1, "t": 300, "peer": 3},
                     {"k": "B", "i": 3, "op": "all_reduce", "pg": "default_pg", "seq": 1, "bytes": 4,
                      "caller": "/x/mine.py:12", "t": 400})
    run = _fake_run(tmp_path, {1: records + trace.MARKER + '{"k": "B", "i": 4, "op"\n'}, world=2)
    assert trace.rank_ops(run / "ranks" / "rank-1.log") == [
        trace.RankOp("recv", 3, 8, "/x/mine.py:10", 100, 300),
        trace.RankOp("isend", 0, 16, "/x/mine.py:9", 200, None),
        trace.RankOp("all_reduce", None, 4, "/x/mine.py:12", 400, None)]


def test_an_unfinished_recv_is_named_with_its_peer(tmp_path):
    records = _lines({"k": "M", "rank": 1, "node": 0, "host": "h"}, {"k": "G", "pg": "default_pg", "ranks": [0, 1]},
                     {"k": "B", "i": 1, "op": "recv", "pg": "default_pg", "p2p": 3, "shape": [4], "dtype": "float32",
                      "bytes": 16, "peer": 0, "caller": "job.py:7", "t": 5})
    run = _fake_run(tmp_path, {0: _lines({"k": "M", "rank": 0, "node": 0, "host": "h"}), 1: records}, world=2)
    summary = trace.merge(run, world=2)
    assert trace.diagnosis(summary).text == "rank 1 never finished recv from rank 0 (p2p #3 of default_pg, at job.py:7)"
    data = json.loads((run / "trace.json").read_text())
    assert [e["args"].get("unfinished") for e in data["traceEvents"] if e["ph"] == "X"] == [True]


@pytest.mark.docker
def test_pods_as_containers_bring_their_trace_through_collect(tmp_path):
    """The rendered k8s pods, played as containers and collected as `labctl collect` would
    (test_k8s_pods_as_containers): the records come through the pods' logs, the merge runs
    at collect, and every rank shows the same collectives in the same order."""
    from test_k8s_pods_as_containers import run_rendered_lab

    rundir = run_rendered_lab(tmp_path, "lab-k8s-pods-trace", nodes=2, nproc_per_node=1, trace=True,
                              workloads=["p2p", "collectives"])
    assert rundir.status["state"] == "passed", rundir.status.get("message")
    assert rundir.status["collected"]["by"] == "labctl collect"
    assert rundir.status["trace"]["missing_ranks"] == [] and rundir.status["trace"]["bad_records"] == 0
    _well_formed(rundir.path)
    events, meta = _events(rundir.path)
    per_rank = {r: [(e["args"]["seq"], e["name"], e["args"]["shape"]) for e in
                    sorted((e for e in _ops(events) if e["args"]["rank"] == r and e["cat"] == "default_pg"
                            and e["args"]["seq"] is not None), key=lambda e: e["args"]["seq"])] for r in (0, 1)}
    assert per_rank[0] and per_rank[0] == per_rank[1]
    assert [s for s, _, _ in per_rank[0]] == list(range(1, len(per_rank[0]) + 1))
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {i: f"node {i} ({rundir.hostnames[i]})" for i in (0, 1)}
    starts = {e["id"] for e in events if e["ph"] == "s"}
    assert starts and starts == {e["id"] for e in events if e["ph"] == "f"}
    node1 = meta["clock_offsets_by_node"]["1"]          # one host: off by at most half a round trip
    assert abs(node1["clock_offset_ms"]) <= max(1.0, node1["rtt_ms"] / 2 + 0.05), node1


def test_the_trace_field_reaches_every_node_as_LAB_TRACE():
    from labctl import plan as planmod
    from labctl.backends.containers import container_placement
    from labctl import spec as specmod

    def env(**fields):
        s = specmod.from_dict(fields)
        return [p.env for n in planmod.plan(s, container_placement(s, "compose"), "r").nodes
                for p in n.processes]

    assert all(e.get("LAB_TRACE") == "1" for e in env(trace=True)) and all(e.get("LAB_TRACE") == "1" for e in env())
    assert all("LAB_TRACE" not in e for e in env(trace=False))
    with pytest.raises(specmod.SpecError, match="trace: expected true or false"):
        specmod.from_dict({"trace": "yes"})


STUCK = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    print("sleeping", flush=True)
    time.sleep(600)
dist.all_reduce(torch.ones(7))
"""


def test_the_op_a_rank_hangs_in_reaches_its_log_while_it_hangs(tmp_path):
    """Trace lines wait in memory (no flush per op); the flusher thread still writes the B
    line of the op a rank is blocked in, since gloo's wait releases the GIL. A SIGTERM (what
    torchrun sends the others when a rank fails) makes a rank dump its Flight Recorder ring,
    then die of SIGTERM as before: blocked in the collective (a thread woken by the signal's
    wakeup fd) or in Python (the handler, which first writes where its threads were)."""
    import signal
    import time

    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    port = free_port()
    logs, procs = {r: tmp_path / f"rank-{r}.log" for r in (0, 1)}, []
    try:
        for rank, log in logs.items():
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "LAB_TRACE": "1", "PYTHONPATH": str(REPO)}
            with open(log, "w") as out:
                procs.append(subprocess.Popen([sys.executable, "-m", "workloads._script", str(script)],
                                              stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if f"{trace.MARKER}B " in logs[0].read_text() and "sleeping" in logs[1].read_text():
                break
            time.sleep(0.2)
        records = [x.split(trace.MARKER, 1)[1] for x in logs[0].read_text().splitlines() if trace.MARKER in x]
        sites = {s["s"]: s for s in (json.loads(x) for x in records if x.startswith('{"k":"S"'))}
        begun = [sites[int(x.split()[2])] for x in records if x.startswith("B ")]
        assert [(b["op"], b["shape"]) for b in begun] == [("all_reduce", [7])], logs[0].read_text()[-2000:]
        assert procs[0].poll() is None, "rank 0 must still be blocked in the all_reduce"
        for rank, p in enumerate(procs):
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=120) == -signal.SIGTERM, logs[rank].read_text()[-2000:]
        dumps = {r: [json.loads(x.split(trace.FR_MARKER, 1)[1]) for x in logs[r].read_text().splitlines()
                     if trace.FR_MARKER in x] for r in (0, 1)}
        assert [(d["op"], d["seq"], d["shape"]) for d in dumps[0] if "op" in d] == [("all_reduce", 1, [7])]
        assert dumps[0][-1] == {"rank": 0, "done": 1} and dumps[1] == [{"rank": 1, "done": 0}], dumps
        # and, first, where a rank in Python was (rank 1, asleep): the lab places a rank stopped
        # outside any op at its line; rank 0, blocked in the op, is placed by its record
        from labctl import stackdumps
        assert "(most recent call first)" not in logs[0].read_text()
        for rank, line in ((1, 6),):
            tracker = stackdumps.StackTracker()
            for text in logs[rank].read_text().splitlines():
                tracker.feed(text)
            tracker.close()
            assert tracker.at_sigterm and tracker.best == tracker.at_sigterm, logs[rank].read_text()[-2000:]
            where = stackdumps.where_stuck(tracker.best)
            assert (where["file"], where["line"]) == (str(script), line), (where, tracker.best)
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=60)




FORKS = """
import os, time, torch.distributed as dist
dist.init_process_group("gloo")
pid = os.fork()
if pid == 0:
    time.sleep(120)
    os._exit(0)
print(f"child {pid}", flush=True)
_, status = os.waitpid(pid, 0)
print(f"child ended {os.waitstatus_to_exitcode(status)}", flush=True)
"""


def _catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        caught = next(int(x.split()[1], 16) for x in status if x.startswith("SigCgt:"))
    return bool(caught >> (15 - 1) & 1)


def test_a_forked_child_dies_of_sigterm_as_untraced(tmp_path):
    """A rank catches SIGTERM (to dump where it was); a child it forks (a Pool or
    DataLoader worker) must not: wedged in C, no Python handler of its would ever run, and
    a Pool's terminate() would join it for ever (the zoo's tokenize_pool_worker_segfault
    hung so on rank 2, whose pool was fine)."""
    import signal
    import time

    script = tmp_path / "forks.py"
    script.write_text(FORKS)
    log = tmp_path / "rank-0.log"
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "LAB_TRACE": "1", "PYTHONPATH": str(REPO)}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "workloads._script", str(script)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while "child " not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        child = int(log.read_text().split("child ", 1)[1].split()[0])
        assert _catches_sigterm(proc.pid), "the rank itself catches SIGTERM (its dump)"
        assert not _catches_sigterm(child), "its forked child must die of SIGTERM as untraced"
        os.kill(child, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
        assert f"child ended {-signal.SIGTERM}" in log.read_text()
    finally:
        proc.kill()
        proc.wait(timeout=60)


# ---------------------------------------------------------------- the diagnosis, told right (issue 37)

def _calls(rank: int, ops: list[dict], groups: dict[str, list[int]]) -> str:
    """A rank's log of the recorder's lines for `ops` (op, pg, seq or p2p, shape, dtype,
    root, peer, api, caller, t = start in ms, end in ms or None: never ended)."""
    lines: list[str | dict] = [{"k": "H", "v": 2, "t0": 10**18}, {"k": "M", "rank": rank, "node": 0, "host": "h"}]
    lines += [{"k": "G", "pg": pg, "ranks": members} for pg, members in groups.items()]
    for i, o in enumerate(ops, 1):
        p2p = "p2p" in o
        site = {"k": "S", "s": i, "op": o["op"], "pg": o.get("pg", "default_pg"), "kind": "p" if p2p else "c",
                "bytes": o.get("bytes", 4), "dtype": o.get("dtype", "float32"), "shape": o.get("shape", [4]),
                "caller": o.get("caller", f"job.py:{10 + i}")}
        site.update({k: o[k] for k in ("root", "peer", "api", "reduce") if k in o})
        lines += [site, f"B {i} {i} {o['p2p'] if p2p else o['seq']} {int(o['t'] * 1e6)}"]
        if o.get("end") is not None:
            lines.append(f"E {i} {int(o['end'] * 1e6)}")
    return _v2(*lines)


def _diagnosed(tmp_path: Path, per_rank: dict[int, list[dict]], groups: dict[str, list[int]] | None = None):
    world = len(per_rank)
    groups = groups or {"default_pg": list(range(world))}
    run = _fake_run(tmp_path, {r: _calls(r, ops, groups) for r, ops in per_rank.items()}, world=world)
    return trace.merge(run, world=world)


def test_groups_that_share_a_name_are_matched_by_their_members(tmp_path):
    """A 2x2 DeviceMesh names both tp groups `mesh_tp` ([0, 1] and [2, 3]). Ranks 0 and 1
    complete their tp all_reduce; rank 2 waits in its own, which rank 3 never entered (it
    reduced over dp instead). The two groups' #1 are two collectives, not one of three
    ranks: the stuck one is said with its members, and rank 3 is the one missing."""
    def groups(rank):
        return {"default_pg": [0, 1, 2, 3], "mesh_tp": [0, 1] if rank < 2 else [2, 3],
                "mesh_dp": [0, 2] if rank % 2 == 0 else [1, 3]}

    def op(pg, end):
        return {"op": "all_reduce", "pg": pg, "seq": 1, "t": 1, "caller": "job.py:18", **({"end": 2} if end else {})}

    per_rank = {0: [op("mesh_tp", True)], 1: [op("mesh_tp", True)], 2: [op("mesh_tp", False)], 3: [op("mesh_dp", False)]}
    run = _fake_run(tmp_path, {r: _calls(r, ops, groups(r)) for r, ops in per_rank.items()}, world=4)
    s = trace.merge(run, world=4)
    tp = next(st for st in s.stuck if st.pg.startswith("mesh_tp"))
    assert (tp.pg, tp.waiting, tp.missing) == ("mesh_tp[2, 3]", [2], [3]), tp
    assert s.mismatch_found == [] and all(late.collectives <= 2 for late in s.lateness.values())


def test_the_merge_counts_each_rank_s_collectives_per_line_and_the_diagnosis_names_the_skipper(tmp_path):
    """The expert-parallel norm (the zoo's expert_clip_norm_skips_ep_reduce), as records:
    every rank reduces its dense grads (job.py:48) and its expert group's norm (job.py:16)
    twice, but rank 3 skips the second norm and waits in the barrier (job.py:54) with ranks
    0 and 1, while rank 2 waits in the norm for rank 3. The merge counts the collectives per
    rank and line; the diagnosis names rank 3, the call it skipped and its line."""
    def groups(rank):
        return {"default_pg": [0, 1, 2, 3], "ep": [0, 1] if rank < 2 else [2, 3]}

    def step(k, skip=False, stuck=False):
        ops = [{"op": "all_reduce", "seq": k + 1, "t": 10 * k + 1, "end": 10 * k + 2, "caller": "job.py:48"}]
        if not skip:
            ops.append({"op": "all_reduce", "pg": "ep", "seq": k + 1, "t": 10 * k + 3, "caller": "job.py:16",
                        **({} if stuck else {"end": 10 * k + 4})})
        return ops

    barrier = {"op": "barrier", "seq": 3, "t": 30, "caller": "job.py:54"}
    per_rank = {0: step(0) + step(1) + [barrier], 1: step(0) + step(1) + [barrier],
                2: step(0) + step(1, stuck=True), 3: step(0) + step(1, skip=True) + [barrier]}
    run = _fake_run(tmp_path, {r: _calls(r, ops, groups(r)) for r, ops in per_rank.items()}, world=4)
    s = trace.merge(run, world=4)
    assert {r: s.collective_sites.get((r, "job.py:16")) for r in range(4)} == {0: 2, 1: 2, 2: 2, 3: 1}
    d = trace.diagnosis(s)
    assert (d.rank, d.op, d.caller) == (3, "all_reduce", "job.py:16"), d.text


def test_a_mismatch_says_what_differs_and_who_the_odd_one_is(tmp_path):
    """The root is part of what must agree (a broadcast from another root hangs); the text
    says what differs; the odd rank is blamed, with its call and line."""
    def bcast(rank, root):
        return [{"op": "broadcast", "seq": 1, "root": root, "t": 1, "caller": f"job.py:{7 if rank != 2 else 8}"}]

    s = _diagnosed(tmp_path, {0: bcast(0, 0), 1: bcast(1, 0), 2: bcast(2, 1)})
    d = trace.diagnosis(s).to_dict()
    assert d["text"] == ("rank 2 called broadcast [4] from root 1 where rank 0 called broadcast [4] from root 0, "
                         "collective #1 of default_pg (the root differs)"), d
    assert (d["rank"], d["ranks"], d["op"], d["caller"]) == (2, [2], "broadcast", "job.py:8")
    assert d["stuck"][0]["calls"]["2"]["root"] == 1
    s = _diagnosed(tmp_path / "dtype", {r: [{"op": "all_reduce", "seq": 1, "t": 1, "dtype": "float64" if r == 2
                                              else "float32"}] for r in range(3)})
    assert trace.diagnosis(s).text.endswith("collective #1 of default_pg (the dtype differs)")
    assert "rank 2 called all_reduce [4] float64 where rank 0 called all_reduce [4] float32" in trace.diagnosis(s).text
    # the reduce op: gloo never checks it, every rank completes with other values; SUM is
    # the default and an op torch's C++ issued carries none (both SUM)
    s = _diagnosed(tmp_path / "reduce", {r: [{"op": "all_reduce", "seq": 1, "t": 1, "end": 2,
                                              **({"reduce": "MAX"} if r == 1 else {"reduce": "SUM"} if r == 0 else {})}]
                                         for r in range(3)})
    d = trace.diagnosis(s).to_dict()
    assert d["text"] == ("rank 1 called all_reduce [4] with MAX where rank 0 called all_reduce [4] with SUM, "
                         "collective #1 of default_pg (the reduce op differs)"), d
    assert (d["rank"], d["op"]) == (1, "all_reduce")


def test_an_odd_call_before_the_collective_the_others_wait_in_is_the_cause(tmp_path):
    """broadcast_object_list with a list of another length: rank 2's size broadcast
    differs but completes, rank 2 then dies unpickling what it got (a container's memory
    limit: SIGKILL, no line), and ranks 0, 1 wait for it in the next all_reduce. The odd
    call is named, with its line, not the all_reduce it never entered."""
    def ops(rank):
        mine = [{"op": "broadcast", "api": "broadcast_object_list", "seq": 1, "root": 0, "t": 1, "end": 2,
                 "shape": [2] if rank == 2 else [1], "caller": "job.py:11"}]
        if rank != 2:
            mine.append({"op": "all_reduce", "seq": 2, "t": 3, "caller": "job.py:12"})
        return mine

    d = trace.diagnosis(_diagnosed(tmp_path, {r: ops(r) for r in range(3)})).to_dict()
    assert (d["rank"], d["op"], d["caller"]) == (2, "broadcast_object_list", "job.py:11"), d
    assert d["text"].startswith("rank 2 called broadcast_object_list (its broadcast [2]) where rank 0 called "
                                "broadcast_object_list (its broadcast [1])"), d["text"]
    assert "(the size differs); ranks 0, 1 wait in all_reduce (collective #2 of default_pg) which rank 2 never entered" \
        in d["text"], d["text"]


def test_with_two_ranks_that_disagree_neither_is_the_odd_one(tmp_path):
    """Two ranks, two calls: no majority, so no culprit; the text says what each called and where."""
    s = _diagnosed(tmp_path, {0: [{"op": "all_reduce", "seq": 1, "shape": [1000], "t": 1, "caller": "job.py:7"}],
                              1: [{"op": "all_reduce", "seq": 1, "shape": [12], "t": 1, "caller": "job.py:7"}]})
    d = trace.diagnosis(s).to_dict()
    assert d["text"] == ("rank 0 called all_reduce [1000] at job.py:7; rank 1 called all_reduce [12] at job.py:7, "
                         "collective #1 of default_pg (the size differs; no rank is the odd one out)")
    assert (d["rank"], d["ranks"], d["op"]) == (None, [0, 1], "all_reduce")


def test_the_script_s_call_is_named_not_the_op_it_issued(tmp_path):
    """all_gather_object's all_gather is said as the call the script made."""
    gather = {"op": "all_gather", "api": "all_gather_object", "seq": 1, "shape": [1], "t": 1, "caller": "job.py:9"}
    s = _diagnosed(tmp_path, {0: [gather], 1: [gather], 2: [{"op": "barrier", "seq": 1, "t": 1, "shape": [],
                                                              "caller": "job.py:10"}]})
    d = trace.diagnosis(s).to_dict()
    assert d["text"].startswith("rank 2 called barrier [] where rank 0 called all_gather_object (its all_gather [1])")
    assert (d["rank"], d["op"]) == (2, "barrier")
    s = _diagnosed(tmp_path / "missing", {0: [gather], 1: [gather], 2: []})
    d = trace.diagnosis(s).to_dict()
    assert d["text"].startswith("ranks 0, 1 wait in all_gather_object (its all_gather) (collective #1 of default_pg)"
                                " which rank 2 never entered"), d["text"]
    assert (d["rank"], d["op"], d["stuck"][0]["call"]) == (2, "all_gather_object", "all_gather_object")


def test_across_groups_the_rank_the_most_ranks_wait_for_is_the_culprit(tmp_path):
    """Rank 2 uses two groups in the other order: it waits in pg1 for ranks 0 and 1, which
    wait for it in pg2. pg1 comes first by name, and said rank 0 (it never entered pg1's
    collective); the rank two others wait for is rank 2."""
    groups = {"default_pg": [0, 1, 2], "pg1": [0, 1, 2], "pg2": [0, 1, 2]}
    first, second = ({"op": "all_reduce", "pg": pg, "seq": 1, "t": 1} for pg in ("pg1", "pg2"))
    s = _diagnosed(tmp_path, {0: [second], 1: [second], 2: [{**first, "caller": "job.py:30"}]}, groups)
    d = trace.diagnosis(s).to_dict()
    assert (d["rank"], d["ranks"], d["op"]) == (2, [2], "all_reduce"), d
    assert [st["ranks"] for st in d["stuck"]] == [[0, 1], [2]]


def test_a_recv_from_a_rank_that_sent_to_another_blames_the_sender(tmp_path):
    """Rank 1 waits for rank 0's message; rank 0 sent it to rank 2, which never received it."""
    s = _diagnosed(tmp_path, {0: [{"op": "send", "p2p": 1, "peer": 2, "t": 1, "end": 2, "caller": "job.py:9"}],
                              1: [{"op": "recv", "p2p": 1, "peer": 0, "t": 1, "caller": "job.py:11"}],
                              2: []})
    d = trace.diagnosis(s).to_dict()
    assert (d["rank"], d["op"], d["caller"]) == (0, "send", "job.py:9")
    assert d["text"].startswith("rank 0 sent to rank 2 at job.py:9, and rank 2 never received it, while rank 1 "
                                "waits to receive from rank 0 at job.py:11")
    # rank 2 had received from rank 0 before and took fewer than were sent: it skipped a
    # receive (a pipeline stage running fewer microbatches), not rank 0 a wrong peer
    s = _diagnosed(tmp_path / "dropped", {
        0: [{"op": "send", "p2p": 1, "peer": 2, "t": 1, "end": 2, "caller": "job.py:9"},
            {"op": "send", "p2p": 2, "peer": 2, "t": 3, "end": 4, "caller": "job.py:9"}],
        1: [{"op": "recv", "p2p": 1, "peer": 0, "t": 1, "caller": "job.py:11"}],
        2: [{"op": "recv", "p2p": 1, "peer": 0, "t": 1, "end": 2, "caller": "job.py:13"}]})
    d = trace.diagnosis(s).to_dict()
    assert (d["rank"], d["op"], d["caller"]) == (2, "recv", "job.py:13"), d
    assert d["text"].startswith("rank 2 received 1 of the 2 messages rank 0 sent it"), d["text"]
    # the op named is the call the script made (batch_isend_irecv), not the send it issued
    s = _diagnosed(tmp_path / "batch", {
        0: [{"op": "send", "api": "batch_isend_irecv", "p2p": 1, "peer": 2, "t": 1, "end": 2, "caller": "job.py:9"}],
        1: [{"op": "recv", "p2p": 1, "peer": 0, "t": 1, "caller": "job.py:11"}], 2: []})
    assert trace.diagnosis(s).to_dict()["op"] == "batch_isend_irecv"


def test_a_recv_from_a_rank_that_sent_it_nothing_blames_the_receiver(tmp_path):
    """Rank 0 sent to rank 1; rank 1 waits to receive from rank 2, which sent it nothing:
    rank 1 named the wrong source (issue 50: it was the ranks missing from the barrier)."""
    s = _diagnosed(tmp_path, {0: [{"op": "send", "p2p": 1, "peer": 1, "t": 1, "caller": "job.py:9"}],
                              1: [{"op": "recv", "p2p": 1, "peer": 2, "t": 1, "caller": "job.py:12"}],
                              2: [{"op": "barrier", "seq": 1, "t": 2, "caller": "job.py:13"}]})
    d = trace.diagnosis(s).to_dict()
    assert (d["rank"], d["ranks"], d["op"], d["caller"]) == (1, [1], "recv", "job.py:12"), d
    assert d["text"].startswith("rank 1 waits to receive from rank 2 at job.py:12, which sent it nothing, while "
                                "rank 0's send to rank 1 at job.py:9 was never received (the wrong source?)")


def test_a_recv_from_a_peer_that_skipped_it_in_an_all_to_all_exchange_blames_the_peer(tmp_path):
    """An MoE dispatch: every rank isends a count to every peer from line 25, then receives
    from each in rank order. Rank 2 routed nothing to rank 0 and sent it no count: rank 0
    waits to receive from rank 2 while rank 3's count to it waits unreceived. Every other
    rank sent to every peer from line 25; rank 2 skipped rank 0: the cause is its send."""
    def sends(r, skip=()):
        return [{"op": "send", "api": "isend", "p2p": i + 1, "peer": p, "t": 1 + i, "end": 2 + i,
                 "caller": "job.py:25"} for i, p in enumerate(p for p in range(4) if p != r and p not in skip)]

    def recvs(r, peers):
        return [{"op": "recv", "p2p": 1, "peer": p, "t": 9 + i, "end": 10 + i, "caller": "job.py:32"}
                for i, p in enumerate(peers)]

    ranks = {0: sends(0) + recvs(0, [1]) + [{"op": "recv", "p2p": 1, "peer": 2, "t": 11, "caller": "job.py:32"}],
             1: sends(1) + recvs(1, [0, 2, 3]), 2: sends(2, skip=(0,)) + recvs(2, [0, 1, 3]),
             3: sends(3) + recvs(3, [0, 1, 2])}
    d = trace.diagnosis(_diagnosed(tmp_path, ranks)).to_dict()
    assert (d["rank"], d["op"], d["caller"]) == (2, "isend", "job.py:25"), d
    assert d["text"].startswith("rank 2 sent to rank(s) 1, 3 at job.py:25 but not as often to rank 0"), d["text"]
    # a ring (each rank sends to one neighbour from that line): no exchange to skip in, the
    # receiver that waits on a rank that sent it nothing named the wrong source
    ring = {r: [{"op": "send", "api": "isend", "p2p": 1, "peer": (r + 1) % 4, "t": 1, "end": 2, "caller": "job.py:25"}]
            for r in range(4)}
    for r in (1, 2, 3):
        ring[r] = ring[r] + [{"op": "recv", "p2p": 1, "peer": r - 1, "t": 3, "end": 4, "caller": "job.py:32"}]
    ring[0] = ring[0] + [{"op": "recv", "p2p": 1, "peer": 1, "t": 3, "caller": "job.py:32"}]
    d = trace.diagnosis(_diagnosed(tmp_path / "ring", ring)).to_dict()
    assert (d["rank"], d["op"]) == (0, "recv"), d


def test_a_send_and_the_recv_that_took_it_with_other_sizes_is_a_mismatch(tmp_path):
    """Rank 0 sent 12 bytes where rank 1's recv took 20: gloo completes it; the pair's
    sizes differ, said as the completed mismatch of a run that passed."""
    s = _diagnosed(tmp_path, {0: [{"op": "send", "p2p": 1, "peer": 1, "t": 1, "end": 2, "bytes": 12, "shape": [3],
                                   "caller": "job.py:12"}],
                              1: [{"op": "recv", "p2p": 1, "peer": 0, "t": 1, "end": 2, "bytes": 20, "shape": [5],
                                   "caller": "job.py:15"}]})
    m = s.mismatch_found[0]
    assert (m.ranks, m.rank, m.op, m.caller, m.differs) == ([0, 1], None, "send", "job.py:12", ["size"])
    assert m.text == ("rank 0's send to rank 1 at job.py:12 sent 12 bytes ([3] float32) where rank 1's recv from "
                      "rank 0 at job.py:15 takes 20 ([5] float32): p2p #1 of default_pg (the size differs)")
    same = _diagnosed(tmp_path / "same", {0: [{"op": "send", "p2p": 1, "peer": 1, "t": 1, "end": 2}],
                                          1: [{"op": "recv", "p2p": 1, "peer": 0, "t": 1, "end": 2}]})
    assert same.mismatch_found == []


def test_a_p2p_deadlock_names_every_rank_in_it(tmp_path):
    s = _diagnosed(tmp_path, {r: [{"op": "recv", "p2p": 1, "peer": 1 - r, "t": 1}] for r in (0, 1)})
    d = trace.diagnosis(s).to_dict()
    assert (d["rank"], d["ranks"], d["op"], d["caller"]) == (None, [0, 1], "recv", "job.py:11")
    # ... unless the script singles one out: `if stage == 0:` around stage 0's sends
    job = tmp_path / "pp.py"
    job.write_text("stage = dist.get_rank()\nif stage == 0:\n    dist.send(a, 1)\nelse:\n    dist.send(g, 0)\n")
    s = _diagnosed(tmp_path / "pp", {r: [{"op": "send", "p2p": 1, "peer": 1 - r, "t": 1,
                                          "caller": f"{job}:{3 if r == 0 else 5}"}] for r in (0, 1)})
    d = trace.diagnosis(s).to_dict()
    assert (d["rank"], d["op"], d["caller"]) == (0, "send", f"{job}:3"), d


def test_a_straggler_is_summed_up_per_rank(tmp_path):
    """Rank 2 enters each of 16 all_reduces 300 ms after the others: the per-rank sum says
    so in one sentence (status.json's trace.straggler, `labctl trace`); a run whose ranks
    arrive in turn, a few ms apart, has no straggler."""
    def loop(rank, late):
        return [{"op": "all_reduce", "seq": i, "t": i * 1000 + late(rank, i), "end": i * 1000 + 400,
                 "caller": "job.py:12"} for i in range(1, 17)]

    s = _diagnosed(tmp_path, {r: loop(r, lambda r, i: 300 if r == 2 else 0) for r in range(3)})
    found = trace.straggler(s)
    assert found["text"] == ("rank 2 arrived last at 16 of 16 collectives, by 300 ms on average "
                             "(most often in all_reduce at job.py:12)")
    assert (found["rank"], found["op"], found["caller"], found["last"], found["of"]) == (2, "all_reduce", "job.py:12",
                                                                                        16, 16)
    assert found["text"] in trace.text(s)
    s = _diagnosed(tmp_path / "even", {r: loop(r, lambda r, i: 3 * ((r + i) % 3)) for r in range(3)})
    assert trace.straggler(s) is None and "arrived last at" not in trace.text(s)


def test_a_rank_whose_few_late_arrivals_make_most_of_the_waiting_is_the_straggler(tmp_path):
    """Rank 1 does extra work every step (an SVD for its logs) before the first of six
    all_reduces: last at only 12 of 72 collectives by the share rule, yet 400 ms each time,
    where the others' turns at last are 1 ms: it made nearly all the waiting."""
    def steps(rank):
        ops, seq = [], 0
        for step in range(12):
            for i in range(6):
                seq += 1
                t = seq * 1000                       # ms
                late = 400 if (rank == 1 and i == 0) else (rank + seq) % 3
                ops.append({"op": "all_reduce", "seq": seq, "t": t + late, "end": t + 500,
                            "caller": "job.py:34"})
        return ops

    found = trace.straggler(_diagnosed(tmp_path, {r: steps(r) for r in range(3)}))
    assert (found["rank"], found["op"], found["caller"]) == (1, "all_reduce", "job.py:34"), found
    assert found["text"].startswith("rank 1 kept the others waiting"), found["text"]


def test_a_mismatch_that_completed_is_kept_for_a_run_that_passed(tmp_path):
    """[2, 3] and [3, 2]: the same bytes, gloo completes, the values are wrong."""
    s = _diagnosed(tmp_path, {r: [{"op": "all_reduce", "seq": 1, "shape": [3, 2] if r == 1 else [2, 3], "t": 1,
                                   "end": 2, "caller": f"job.py:{8 if r == 1 else 9}"}] for r in range(3)})
    found = s.mismatch_found[0].to_dict()
    assert (found["rank"], found["op"], found["caller"], found["differs"]) == (1, "all_reduce", "job.py:8", ["shape"])
    assert trace.diagnosis(s).rank == 1


def test_a_mismatch_a_rank_never_left_comes_before_what_the_others_wait_in_next(tmp_path):
    """Rank 1's all_to_all_single sends rank 0 more than it expects: gloo aborts rank 0
    inside it, ranks 1 and 2 finish it and wait in the next all_reduce. The op records say
    rank 0 never entered that all_reduce; the cause is rank 1's call, which rank 0 never left."""
    def ranks_ops(r):
        a2a = {"op": "all_to_all_single", "seq": 1, "shape": [4] if r == 1 else [3], "t": 1,
               "end": None if r == 0 else 2, "caller": "job.py:12"}
        return [a2a] + ([] if r == 0 else [{"op": "all_reduce", "seq": 2, "t": 3, "caller": "job.py:13"}])

    d = trace.diagnosis(_diagnosed(tmp_path, {r: ranks_ops(r) for r in range(3)})).to_dict()
    assert (d["rank"], d["op"], d["caller"]) == (1, "all_to_all_single", "job.py:12"), d
    assert d["text"].startswith("rank 1 called all_to_all_single [4] where rank 0 called all_to_all_single [3], "
                                "collective #1 of default_pg (the size differs); rank 0 never left it; ranks 1, 2 "
                                "wait in all_reduce (collective #2 of default_pg) which rank 0 never entered")
    assert d["mismatch"]["calls"]["0"]["shape"] == [3]


def test_all_to_all_single_splits_that_disagree_are_a_mismatch():
    """What rank i sends rank j (its input split j) must be what rank j expects from rank i
    (its output split i): gloo completes either way (issue 50: a stale count in an MoE
    dispatch). With three ranks the one in every disagreement is the odd one."""
    from labctl.trace.matcher import splits_mismatch
    from labctl.trace.model import Op

    def a2a(rank, ins, outs):
        return Op(rank=rank, op="all_to_all_single", pg="default_pg", seq=4, p2p=None, peer=None, root=None,
                  shape=[sum(ins)], dtype="float32", nbytes=4 * sum(ins), caller=f"moe.py:{20 + rank}", start=0,
                  end=1, splits=[ins, outs])

    agree = {0: a2a(0, [1, 2, 3], [1, 1, 1]), 1: a2a(1, [1, 1, 1], [2, 1, 1]), 2: a2a(2, [1, 1, 1], [3, 1, 1])}
    assert splits_mismatch("default_pg", 4, agree) is None
    # buffers as long as each rank's own splits: no size mismatch either (an MoE's dispatch)
    assert len({o.signature for o in agree.values()}) == 1 and agree[0].shape != agree[1].shape
    odd = dict(agree)
    odd[2] = a2a(2, [1, 1, 1], [2, 2, 1])      # rank 2 expects 2 from rank 0 (sends 3) and 2 from rank 1 (sends 1)
    m = splits_mismatch("default_pg", 4, odd)
    assert (m.rank, m.ranks, m.op, m.caller, m.differs) == (2, [2], "all_to_all_single", "moe.py:22", ["splits"])
    assert m.text.startswith("rank 0 sends rank 2 3 where rank 2 expects 2 from it; rank 1 sends rank 2 1 where "
                             "rank 2 expects 2 from it, all_to_all_single #4 of default_pg")
    # one pair disagrees (rank 1 sends rank 0 two rows where it expects one): rank 1's input
    # splits are unlike the two others', so rank 1 is the odd one
    one_pair = {0: a2a(0, [1, 1, 1], [1, 1, 1]), 1: a2a(1, [2, 1, 1], [1, 1, 1]), 2: a2a(2, [1, 1, 1], [1, 1, 1])}
    assert splits_mismatch("default_pg", 2, one_pair).rank == 1
    two = {0: a2a(0, [3, 3], [3, 2]), 1: a2a(1, [2, 4], [4, 4])}
    assert (splits_mismatch("default_pg", 1, two).rank, splits_mismatch("default_pg", 1, two).ranks) == (None, [0, 1])
    even = {0: a2a(0, [3, 3], [3, 3]), 1: a2a(1, [3, 3], [3, 3])}
    even[0].splits = None
    assert splits_mismatch("default_pg", 1, even) is None                   # a rank without splits: nothing to compare


def test_labctl_trace_says_an_op_that_never_finished_instead_of_0_ms(tmp_path):
    """Rank 1 waits in a barrier rank 0 never entered: `labctl trace`'s totals say the
    barrier never finished, not that it took 0.000 ms (issue 53 item 9)."""
    s = _diagnosed(tmp_path, {0: [{"op": "all_reduce", "seq": 1, "t": 1, "end": 2}],
                              1: [{"op": "all_reduce", "seq": 1, "t": 1, "end": 2},
                                  {"op": "barrier", "seq": 2, "t": 3}]})
    said = trace.views.text(s)
    row = next(line for line in said.splitlines() if line.startswith("| default_pg | barrier |"))
    assert row == "| default_pg | barrier | 1 (1 never finished) | 4 B | never finished | - |  |", row
    assert "| default_pg | all_reduce | 2 | 8 B |" in said
