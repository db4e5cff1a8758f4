"""Workloads `store` and `init_methods`, run for real on this machine (gloo, loopback).

Each lab is started from labctl's launch plan (tests/plan_runner.py). Every
check must be present on every rank and pass; the one thing skipped on CPU is
the NCCL twin of the store-built group.
"""
from __future__ import annotations

import pytest

from plan_runner import local_plan, run_plan
from labctl import draw
from workloads import init_methods, store
from workloads._report import init_methods as init_methods_report, store as store_report

STORE_CHECKS = ("set-get", "add-counter", "wait-for-late-key", "wait-missing-key-raises",
                "compare_set-one-winner", "compare_set-mismatch-keeps-value", "check-delete_key",
                "num_keys", "prefix-stores-apart", "store-group-all_reduce",
                "default-group-all_reduce-meanwhile", "store-group-broadcast", "agent-store")


def _ranks(records):
    return sorted(r["rank"] for r in records)


def _passed(run, world: int) -> None:
    assert not run.failed(), f"failed: {run.failed()}\n{run.output[-4000:]}"
    assert run.codes == [0] * len(run.codes), run.output[-4000:]
    for r in run.named("init_methods", "workload_done") + run.named("store", "workload_done"):
        assert r["ok"]


@pytest.mark.slow
@pytest.mark.parametrize("launcher, nodes, nproc", [("torchrun", 1, 2), ("direct", 2, 1)])
def test_store_workload_every_check_on_every_rank(tmp_path, launcher, nodes, nproc):
    run = run_plan(tmp_path, local_plan(tmp_path, nodes=nodes, nproc_per_node=nproc,
                                        launcher=launcher, workloads=["store"]))
    _passed(run, 2)
    for name in STORE_CHECKS:
        assert _ranks(run.named("store", name)) == [0, 1], name
        assert not any(r.get("skipped") for r in run.named("store", name)), name
    (nccl,) = {r["reason"] for r in run.named("store", "store-group-nccl-all_reduce")}
    assert "needs CUDA" in nccl
    for r in run.named("store", "wait-missing-key-raises"):
        assert r["raised"] == "DistStoreError" and 0.45 <= r["seconds"] <= 5.5
    assert {r["counter"] for r in run.named("store", "add-counter")} == {2}
    assert len({r["leader"] for r in run.named("store", "compare_set-one-winner")}) == 1
    for op in store.LATENCY_OPS:
        rows = run.named("store", f"latency-{op}")
        assert _ranks(rows) == [0, 1] and all(r["count"] == 300 for r in rows)
        assert all(0 < r["time_us_median"] <= r["time_us_p99"] for r in rows)
    facts = run.named("store", "agent-store")
    if launcher == "torchrun":
        assert {r["TORCHELASTIC_USE_AGENT_STORE"] for r in facts} == {"True"}
        assert {r["TORCHELASTIC_RESTART_COUNT"] for r in facts} == {"0"}
        assert _ranks(run.named("store", "agent-store-under-torchrun")) == [0, 1]
    else:
        assert {r["TORCHELASTIC_USE_AGENT_STORE"] for r in facts} == {None}
        assert _ranks(run.named("store", "no-agent-store-when-direct")) == [0, 1]
    # torch 2.13 gives each restart attempt a new TCPStore instead of a /worker/attempt_<n> prefix
    assert {r["key_layout"] for r in facts} == {"default_pg/0//<key>"}
    assert {r["attempt_prefix"] for r in facts} == {None}
    section = draw.markdown(store_report.views(run.results)) + "\n"
    assert "default_pg/0//<key>" in section and "| set | 2 | 300 |" in section


@pytest.mark.slow
@pytest.mark.parametrize("method", ["env", "tcp", "file"])
@pytest.mark.parametrize("launcher, nodes, nproc", [("torchrun", 1, 2), ("direct", 2, 1)])
def test_each_init_method_with_each_launcher(tmp_path, method, launcher, nodes, nproc):
    """The lab joins through its init_method; then every method is tried again."""
    the_plan = local_plan(tmp_path, nodes=nodes, nproc_per_node=nproc, launcher=launcher,
                          init_method=method, workloads=["init_methods", "barrier"])
    run = run_plan(tmp_path, the_plan)
    _passed(run, 2)
    joined = run.named("init_methods", "lab-joined-through")
    assert _ranks(joined) == [0, 1]
    want = {"env": "TCPStore on port", "tcp": "TCPStore on port", "file": "FileStore"}[method]
    assert all(r["store"].startswith(want) for r in joined)
    for m in init_methods.METHODS:
        rows = run.named("init_methods", f"join-{m}")
        assert _ranks(rows) == [0, 1] and not any(r.get("skipped") for r in rows), m
        assert all(r["seconds"] > 0 for r in rows)
    url = the_plan.nodes[0].processes[0].env.get("LAB_INIT_METHOD")
    again = {r["url"] for r in run.named("init_methods", f"join-{method}")}
    if method == "tcp":
        assert again == {url}, "the planned port on node 0, once more"
    shared = the_plan.placement.shared_dir
    assert {n.env["LAB_SHARED_DIR"] for n in the_plan.nodes} == {shared}
    (path,) = {r["url"] for r in run.named("init_methods", "join-file")}
    # one shared directory: the lab's file:// init, LAB_SHARED_DIR and the workload's own join
    assert path.startswith(f"file://{shared}/"), path
    if method == "file":          # the same shared directory, a fresh file
        assert url.startswith(f"file://{shared}/") and path != url
    stale = {r.get("stale_keys_removed") for r in run.named("init_methods", "join-env")}
    if launcher == "torchrun" and method == "env":
        (n,) = stale     # the first group's keys, still in the agent's store
        assert n >= 2, "every rank leaves its gloo address behind"
    elif launcher == "direct":
        assert stale == {None}, "no agent store, nothing left behind"
    order = [r["name"] for r in run.results if r.get("rank") == 0 and r["name"].startswith("join-")]
    assert order[-1] == f"join-{method}", "the lab's own method goes last"
    assert _ranks(run.named("barrier", "barrier")) == [0, 1], "the group still works afterwards"
    table = draw.markdown(init_methods_report.views(run.results)) + "\n"
    assert table.count("| yes |") == 3 and "(slowest of 2)" in table


def test_report_sections_are_pure_and_say_what_was_skipped():
    results = [
        {"workload": "init_methods", "name": "join-env", "rank": 0, "ok": True, "seconds": 0.01},
        {"workload": "init_methods", "name": "join-env", "rank": 1, "ok": True, "seconds": 0.03},
        {"workload": "init_methods", "name": "join-tcp", "rank": 0, "ok": False, "seconds": 0.02},
        {"workload": "init_methods", "name": "join-tcp", "rank": 1, "ok": True, "seconds": 0.02},
        {"workload": "init_methods", "name": "join-file", "rank": 0, "ok": True, "skipped": True,
         "reason": "/tmp is not one directory"},
    ]
    table = draw.markdown(init_methods_report.views(results)) + "\n"
    lines = table.splitlines()
    assert lines[0] == "### init methods"
    assert "| env:// |" in lines[4] and "| yes | 0.030 (slowest of 2) |" in lines[4]
    assert "| no (1 of 2 ranks failed) |" in lines[5]
    assert "skipped: /tmp is not one directory" in lines[6]
    assert init_methods_report.views([]) == [] and store_report.views([]) == []
    assert store.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert store.percentile(list(range(1, 201)), 99) == 198


def test_workload_modules_with_a_report_section_do_not_import_torch():
    import subprocess
    import sys
    code = ("import sys; import workloads.store, workloads.init_methods, workloads.replicas; "
            "import workloads._report.store, workloads._report.init_methods, workloads._report.replicas, "
            "workloads._report.env, workloads._report.preflight; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


USER_TCP_SCRIPT = """
import os, torch, torch.distributed as dist
from torch.distributed import init_process_group
init_process_group("gloo", init_method=os.environ["LAB_INIT_METHOD"],
                   rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
t = torch.ones(1)
dist.all_reduce(t)
print("joined", os.environ["LAB_INIT_METHOD"], "sum", int(t.item()), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_user_script_joins_through_tcp_under_torchrun(tmp_path):
    """A user script joining the lab's way through a tcp:// LAB_INIT_METHOD under
    torchrun (was: every rank a client of a store nobody hosts, a hang until the deadline)."""
    import json

    from conftest import labctl

    script = tmp_path / "train.py"
    script.write_text(USER_TCP_SCRIPT)
    out = tmp_path / "run"
    done = labctl("up", "-q", "--script", str(script), "--launcher", "torchrun", "--init-method", "tcp",
                  "--nodes", "2", "--nproc-per-node", "1", "--timeout", "120", "--pg-timeout", "60",
                  "--out", str(out), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "passed"
    for rank in (0, 1):
        log = (out / "ranks" / f"rank-{rank}.log").read_text()
        assert "joined tcp://" in log and "sum 2" in log, log
