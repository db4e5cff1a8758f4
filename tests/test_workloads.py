"""The workloads, run for real: torchrun subprocesses on gloo over loopback.

Each lab is started from labctl's launch plan, as the local backend starts it
(c10d rendezvous, one torchrun agent per node, rank-prefixed tee'd output), and its result lines
are parsed and checked: exit status 0, every expected check on every rank, no
check with ok=false. One more lab is made to fail on purpose, and a few small
in-process tests show that a wrong value is recorded as a failure.
"""
from __future__ import annotations

import dataclasses

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from labctl import logs, plan
from labctl.backends.local.placement import local_placement
from plan_runner import split_by_rank
from labctl.backends.local.backend import free_port
from labctl.spec import from_dict
from workloads import _common, collectives

REPO = Path(__file__).resolve().parents[1]
ALL = ("env", "p2p", "collectives", "ddp")
TIMEOUT_S = 180


def parse_results(text: str) -> list[dict]:
    """Result records from rank-prefixed node output, with labctl's own log parser."""
    results = []
    for rank, lines in split_by_rank(text).items():
        results += logs.parse_results(lines, rank)
    return results


def run_lab(tmp_path: Path, nnodes: int, nproc: int, workloads=ALL, options: dict | None = None):
    """Start the launch plan's torchrun agents on this machine; return (exit codes, results, output).

    The argv and env come from labctl's plan (the same the local backend runs);
    only the process handling is this test's own, so a workload is tested
    without the backend in between.
    """
    entries = [{"name": w, "options": (options or {}).get(w, {})} for w in workloads]
    spec = from_dict({"nodes": nnodes, "nproc_per_node": nproc, "workloads": entries})
    the_plan = plan.plan(spec, local_placement(spec, free_port()), f"test-{tmp_path.name}")
    procs, node_logs = [], []
    for node in the_plan.nodes:
        (proc,) = node.processes
        log = open(tmp_path / f"node{node.index}.log", "wb")   # a file, not a pipe: no pipe can fill up
        node_logs.append(log)
        procs.append(subprocess.Popen(list(proc.argv), cwd=REPO, env={**os.environ, **proc.env},
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + TIMEOUT_S
    codes = []
    try:
        for p in procs:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        raise
    finally:
        for log in node_logs:
            log.close()
    output = "".join((tmp_path / f"node{node}.log").read_text(errors="replace") for node in range(nnodes))
    return codes, parse_results(output), output


def by_name(results: list[dict], workload: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in results:
        if r["workload"] == workload:
            out.setdefault(r["name"], []).append(r)
    return out


def ranks_of(records: list[dict]) -> list[int]:
    return sorted(r["rank"] for r in records)


def assert_lab_passed(codes, results, output, world_size: int) -> None:
    failed = [r for r in results if not r.get("ok")]
    assert not failed, f"failed checks: {failed}\n{output[-4000:]}"
    assert codes == [0] * len(codes), output[-4000:]
    everyone = list(range(world_size))
    for w in ALL:
        assert ranks_of(by_name(results, w).get("workload_done", [])) == everyone, (w, output[-4000:])


def assert_env(results, world_size: int, nodes: int, nproc: int) -> None:
    env = by_name(results, "env")
    rows = env["env"]
    assert ranks_of(rows) == list(range(world_size))               # every rank exactly once
    assert sorted(r["RANK"] for r in rows) == list(range(world_size))
    assert {r["WORLD_SIZE"] for r in rows} == {world_size}
    assert {r["LOCAL_WORLD_SIZE"] for r in rows} == {nproc}
    assert Counter(r["GROUP_RANK"] for r in rows) == {g: nproc for g in range(nodes)}
    assert all(r["launcher"] == "torchrun" and r["backend"] == "gloo" for r in rows)
    for name in ("rank-matches-env", "world-size-matches-env", "every-rank-once", "rank-formula",
                 "local-ranks-per-node", "local-rank-below-local-world-size"):
        assert ranks_of(env[name]) == list(range(world_size)), name
        assert not any(r.get("skipped") for r in env[name]), name


def assert_collectives(results, world_size: int) -> None:
    c = by_name(results, "collectives")
    everyone = list(range(world_size))
    for root in everyone:
        assert ranks_of(c[f"broadcast-root-{root}"]) == everyone
        assert ranks_of(c[f"scatter-root-{root}"]) == everyone
        assert ranks_of(c[f"gather-root-{root}"]) == [root]        # only the root receives
        for op in collectives.OPS:
            assert ranks_of(c[f"reduce-{op}-root-{root}"]) == [root], op
    for name in [f"all_reduce-{op}" for op in collectives.OPS] + [
            "all_gather", "all_gather-tensor", "all_to_all", "all_to_all_single", "reduce_scatter",
            "reduce_scatter-tensor", "barrier", "all_reduce-async", "broadcast-async",
            "subgroup-all_reduce"]:
        assert ranks_of(c[name]) == everyone, name
    # torch 2.13's gloo runs every collective and op used here: nothing may be skipped.
    assert not [r for r in results if r["workload"] == "collectives" and r.get("skipped")]
    groups = {r["rank"]: r["group"] for r in c["subgroup-all_reduce"]}
    assert all(groups[k] == list(range(k % 2, world_size, 2)) for k in everyone)


def assert_p2p(results, world_size: int) -> None:
    p = by_name(results, "p2p")
    assert ranks_of(p["ping-pong"]) == [0, 1]
    assert ranks_of(p["ring-shift"]) == list(range(world_size))
    pairs = p["pair-exchange"]
    assert ranks_of(pairs) == list(range(world_size))
    skipped = [r["rank"] for r in pairs if r.get("skipped")]
    assert skipped == ([world_size - 1] if world_size % 2 else [])   # odd size: last rank has no partner


def assert_ddp(results, world_size: int) -> None:
    d = by_name(results, "ddp")
    for kind in ("manual", "ddp"):
        for check in ("params-identical-on-all-ranks", "matches-single-process", "loss-decreases",
                      "loss-matches-single-process", "final-loss"):
            assert ranks_of(d[f"{kind}-{check}"]) == list(range(world_size)), (kind, check)
        assert all(r["last_loss"] < r["first_loss"] for r in d[f"{kind}-loss-decreases"])


@pytest.mark.slow
def test_one_process(tmp_path):
    codes, results, output = run_lab(tmp_path, nnodes=1, nproc=1)
    assert_lab_passed(codes, results, output, world_size=1)
    assert_env(results, world_size=1, nodes=1, nproc=1)
    assert_collectives(results, world_size=1)
    assert_ddp(results, world_size=1)
    p = by_name(results, "p2p")
    for name in ("ping-pong", "pair-exchange", "ring-shift"):
        (record,) = p[name]
        assert record["skipped"] and record["reason"], name


@pytest.mark.slow
@pytest.mark.parametrize("nnodes, nproc", [(1, 3), (2, 2)], ids=["odd-world-3", "2-nodes-x-2"])
def test_multi_rank_labs_pass(tmp_path, nnodes, nproc):
    """An odd world size on one node, and the default lab shape: 2 agents x 2 workers."""
    world = nnodes * nproc
    codes, results, output = run_lab(tmp_path, nnodes=nnodes, nproc=nproc)
    assert_lab_passed(codes, results, output, world_size=world)
    assert_env(results, world_size=world, nodes=nnodes, nproc=nproc)
    assert_p2p(results, world_size=world)
    assert_collectives(results, world_size=world)
    assert_ddp(results, world_size=world)



@pytest.mark.slow
def test_failing_check_makes_the_lab_fail(tmp_path):
    """Far too large a learning rate makes the loss blow up: the check fails, the exit status is not 0."""
    codes, results, output = run_lab(tmp_path, nnodes=1, nproc=2, workloads=("ddp",),
                                     options={"ddp": {"steps": 5, "lr": 2.0}})
    assert all(code != 0 for code in codes), output[-4000:]
    d = by_name(results, "ddp")
    for kind in ("manual", "ddp"):
        assert [r["ok"] for r in d[f"{kind}-loss-decreases"]] == [False, False]
        assert all(r["ok"] for r in d[f"{kind}-params-identical-on-all-ranks"])   # still in step
    assert [r["ok"] for r in d["workload_done"]] == [False, False]


def _context() -> _common.Context:
    import torch

    return _common.Context(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                           backend="gloo", device=torch.device("cpu"), workload="unit")


def test_a_wrong_value_is_a_recorded_failure_not_an_exception():
    ctx = _context()
    buf = io.StringIO()
    with redirect_stdout(buf):
        right = ctx.check("sum", [10.0, 10.0], [collectives.expected_reduction("SUM", 4)] * 2)
        wrong = ctx.check("product", [23.0], [collectives.expected_reduction("PRODUCT", 4)])
        close = ctx.check("almost", [1.0 + 1e-7], [1.0], rtol=1e-6)
    assert (right, wrong, close) == (True, False, True)
    assert (ctx.checks, ctx.failures) == (3, 1)
    records = logs.parse_results(buf.getvalue().splitlines())
    assert [r["ok"] for r in records] == [True, False, True]
    assert "got [23], expected [24]" in records[1]["detail"]


def test_expected_reductions_and_known_backend_gaps(monkeypatch):
    """The rule on both sides of each gap, whatever torch is installed: gloo has AVG and the
    list-form reduce_scatter from torch 2.8, NCCL has ncclAvg from 2.10. (It only asked the
    installed torch 2.13, where every answer is None: a function that always said None
    passed.)"""
    import torch

    assert [collectives.expected_reduction(op, 4) for op in ("SUM", "PRODUCT", "MIN", "MAX", "AVG")] \
        == [10, 24, 1, 4, 2.5]
    monkeypatch.setattr(torch, "__version__", "2.7.1")
    assert "Cannot use ReduceOp.AVG with Gloo" in collectives.unsupported("gloo", "AVG")
    assert "torch 2.7.1" in collectives.unsupported("gloo", "AVG")
    assert "does not support reduce_scatter" in collectives.unsupported("gloo", "reduce_scatter")
    assert collectives.unsupported("gloo", "SUM") is None
    assert collectives.unsupported("gloo", "all_to_all_single") is None
    for version in ("2.8.0", "2.13.0"):
        monkeypatch.setattr(torch, "__version__", version)
        for what in ("AVG", "reduce_scatter", "all_to_all_single"):
            assert collectives.unsupported("gloo", what) is None, (version, what)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 9, 9))
    assert "NCCL (2, 9, 9) has no ncclAvg" in collectives.unsupported("nccl", "AVG")
    assert collectives.unsupported("nccl", "SUM") is None
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    assert collectives.unsupported("nccl", "AVG") is None


def test_the_env_table_is_the_env_workloads_report_hook(tmp_path, monkeypatch):
    """report.py names no workload: the rank table is env's `head` and `rank_rows` hooks,
    placed before the checks per workload (issue 20 item 5)."""
    import json

    from labctl import plan as planmod, report, spec
    from labctl.rundir import RunDir
    from workloads._report import env as env_hook

    lab = spec.from_dict({"nodes": 1, "nproc_per_node": 2})
    run = RunDir.create(planmod.plan(lab, local_placement(lab, 29500), "envhook"),
                        out=tmp_path / "run")
    records = [{"workload": "env", "name": "env", "rank": r, "ok": True, "hostname": "h",
                "pid": 10 + r} for r in (1, 0)] + [{"workload": "p2p", "name": "ring", "rank": 0, "ok": True}]
    (run.path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = report.markdown(run)
    assert text.index("## Where every rank runs (workload env)") < text.index("## Checks per workload")
    assert "| 0 |  |  |  |  |  | h |  |  |  |  | 10 |" in text
    assert [r["rank"] for r in report.as_dict(run)["ranks"]] == [0, 1]
    from workloads._protocol.plugin import Heading

    monkeypatch.setattr(env_hook, "WORKLOAD", dataclasses.replace(
        env_hook.WORKLOAD, head=lambda results: [Heading("Ranks, as the hook says")],
        rank_rows=lambda results: [{"rank": "from the hook"}]))
    assert "## Ranks, as the hook says\n\n## Checks per workload" in report.markdown(run)
    assert report.as_dict(run)["ranks"] == [{"rank": "from the hook"}]
    (run.path / "results.jsonl").write_text(json.dumps(records[-1]) + "\n")
    assert report.as_dict(run)["ranks"] == [], "no env workload: an empty list, as before"


def test_the_runner_under_an_error_file_keeps_its_exit_code_and_last_line(tmp_path):
    """`python -m workloads` given torchrun's TORCHELASTIC_ERROR_FILE (workloads/_record.py):
    the same exit code and last stderr line as without, and the file holds the exception
    with labctl's rank (labctl/blame.py reads it)."""
    def run(**env):
        return subprocess.run([sys.executable, "-m", "workloads", "--workloads", "no_such_workload"],
                              cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
                              env={**os.environ, **env})

    error_file = tmp_path / "error.json"
    plain, recorded = run(), run(TORCHELASTIC_ERROR_FILE=str(error_file), RANK="5", LOCAL_RANK="1")
    assert plain.returncode == recorded.returncode == 1
    last = plain.stderr.strip().splitlines()[-1]
    assert "no_such_workload" in last and recorded.stderr.strip().splitlines()[-1] == last
    data = json.loads(error_file.read_text())
    assert data["labctl"]["rank"] == 5 and data["labctl"]["local_rank"] == 1
    assert data["message"]["message"].startswith("ModuleNotFoundError")
    # the traceback sits under labctl's key: torchrun's summary stays one line per worker
    assert "py_callstack" not in data["message"]["extraInfo"]
    assert data["labctl"]["py_callstack"].startswith("Traceback (most recent call last)")
    assert not error_file.with_name("error.json.tmp").exists()


KILLED_WHILE_RECORDING = """
import json, os, signal, sys
from workloads._record import recorded
dump = json.dump
def dump_then_die(*args, **kwargs):     # SIGKILL (or an error) while the error file is written
    if os.environ["DIE_AT_DUMP"] == str(dump_then_die.calls):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("FAIL_AT_DUMP") == str(dump_then_die.calls):
        raise OSError("no space left")
    dump_then_die.calls += 1
    return dump(*args, **kwargs)
dump_then_die.calls = 0
json.dump = dump_then_die
def worker():
    raise ValueError("boom")
recorded(worker)()
"""


@pytest.mark.parametrize("die_at_dump", [0, 1])
def test_a_worker_killed_while_recording_leaves_no_half_written_error_file(tmp_path, die_at_dump):
    """torchrun SIGTERMs a node's other workers as soon as one fails; one stopped while
    writing its error file must not leave it empty or cut (torchrun's agent crashed
    reading an empty one: CI). Killed in torch's write (0) or in labctl's (1): no file."""
    error_file = tmp_path / "error.json"
    done = subprocess.run([sys.executable, "-c", KILLED_WHILE_RECORDING], cwd=REPO, timeout=TIMEOUT_S,
                          env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file),
                               "DIE_AT_DUMP": str(die_at_dump)}, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert not error_file.exists(), error_file.read_text()


def test_when_labctls_part_of_the_error_file_fails_torchs_own_record_lands(tmp_path):
    error_file = tmp_path / "error.json"
    done = subprocess.run([sys.executable, "-c", KILLED_WHILE_RECORDING], cwd=REPO, timeout=TIMEOUT_S,
                          env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file),
                               "DIE_AT_DUMP": "-", "FAIL_AT_DUMP": "1"}, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.strip().endswith("ValueError: boom"), done.stderr
    data = json.loads(error_file.read_text())
    assert data["message"]["message"] == "ValueError: boom" and "labctl" not in data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.json"], "no temporary file left"


SAYS_JOINED = """
import os, sys, torch.distributed as dist
from workloads import _common
os.environ.update(RANK="0", WORLD_SIZE="1", LAB_INIT_METHOD="file://" + sys.argv[1] + "/a")
_common.join("gloo", None)                         # no LAB_FAULT_CLOCK: says nothing
dist.destroy_process_group()
print("between", flush=True)
os.environ.update(LAB_FAULT_CLOCK="join", LAB_INIT_METHOD="file://" + sys.argv[1] + "/b")
_common.join("gloo", None)
"""


def test_a_workload_rank_says_it_joined_only_on_the_join_fault_clock(tmp_path):
    """The workloads' init (`_common.join`) prints the join line after init_process_group
    returns, and only when the lab counts its faults from the join (LAB_FAULT_CLOCK)."""
    done = subprocess.run([sys.executable, "-c", SAYS_JOINED, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.split("between")
    assert "@@labctl-joined" not in before
    assert after.strip().startswith('@@labctl-joined {"rank": 0, "pid": ')


def test_debug_runs_ddp(tmp_path):
    """`labctl up --debug` (TORCH_DISTRIBUTED_DEBUG=DETAIL) with DDP: torch 2.13 dies of SIGSEGV
    in DDP's construction log under DETAIL (plain torchrun too); the ranks skip that one
    call, so the built-in ddp workload passes under --debug (issue 53 item 1)."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--debug", "--workload", "ddp", "--nodes", "1",
                           "--nproc-per-node", "2", "--no-trace", "--out", str(out), "-q"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    status = json.loads((out / "status.json").read_text())
    assert done.returncode == 0 and status["state"] == "passed", (status["message"], done.stderr[-2000:])
