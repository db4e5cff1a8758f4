"""`labctl preflight` and the preflight workload on real local processes.

A 2x2 lab passes every check through the CLI; node 0's rendezvous port taken
by a listener that never answers, and a port nobody listens on, each fail the
named `port` check within the connect timeout (the pre-init checks speak
before init_process_group could); `up --preflight` stops with the table and
exit 2 without starting the lab. The table itself is checked on records.
"""
from __future__ import annotations

import dataclasses
import json
import socket
import time

import pytest

import plan_runner
from conftest import assert_nothing_left, labctl
from labctl import lab
from labctl import draw
from labctl import plan as planmod
from labctl.backends.local.placement import local_placement
from labctl.spec import from_dict
from workloads._protocol.ports import free_port
from workloads._report import preflight as hook

FAST = {"connect_timeout": 3, "join_timeout": 10}


def results_of(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_preflight_passes_on_local_2x2_with_every_check_in_one_table(tmp_path):
    """A tcp:// init lab: its init port (MASTER_PORT + 1) is checked too."""
    out = tmp_path / "pf"
    done = labctl("preflight", "--nodes", "2", "--nproc-per-node", "2", "--init-method", "tcp",
                  "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "passed" and status["launcher"] == "direct"
    for row in ("| node 1 -> node 0 | dns | pass |", "| node 1 -> node 0 | port | pass |",
                "| node 1 -> node 0 | clock | pass |", "| node 0 <-> node 1 | all_reduce | pass |",
                "| node 0 <-> node 1 | p2p | pass |", "| all nodes | all_reduce | pass |",
                "| node 1 | shm | pass |", "| node 0 | join | pass | 4 rank(s) |",
                "| node 1 -> node 0 | init_port | pass |", "| node 0 | init_port | pass |"):
        assert row in done.stdout, done.stdout
    assert "preflight passed in" in done.stdout
    checks = {(r["name"], r.get("node"), r.get("peer")) for r in results_of(out)}
    assert ("clock", 1, 0) in checks and ("p2p", 0, 1) in checks
    assert_nothing_left(status["run_id"])


def preflight_plan(tmp_path, port: int, nodes: int = 2, **fields) -> planmod.LaunchPlan:
    spec = lab.preflight_spec(from_dict({
        "nodes": nodes, "nproc_per_node": 1, "workloads": [{"name": "preflight", "options": FAST}],
        **fields}))
    return planmod.plan(spec, local_placement(spec, port), f"pf-{tmp_path.name[-16:]}")


@pytest.mark.slow
def test_a_taken_rendezvous_port_fails_the_named_port_check_before_init(tmp_path):
    """A listener that never accepts holds node 0's port: node 0 cannot host the store,
    node 1 connects but gets no store answer. Both say so, and nobody waits for init."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    port = squatter.getsockname()[1]
    try:
        started = time.monotonic()
        run = plan_runner.run_plan(tmp_path, preflight_plan(tmp_path, port))
        took = time.monotonic() - started
    finally:
        squatter.close()
    assert run.codes == [1, 1], run.output[-3000:]
    ports = {r["node"]: r for r in run.named("preflight", "port")}
    assert not ports[0]["ok"] and "node 0 cannot listen on port" in ports[0]["detail"]
    assert "EADDRINUSE" in ports[0]["detail"]
    assert not ports[1]["ok"] and "does not answer as the lab's store" in ports[1]["detail"]
    assert not run.named("preflight", "all_reduce"), "no process group may have formed"
    rows = {(r["nodes"], r["check"]): r for r in hook.rows(run.results)}
    assert not rows[("node 1 -> node 0", "port")]["ok"]
    assert took < 90, f"took {took:.0f} s: the failure must come at the connect timeout, not a deadline"


@pytest.mark.slow
def test_a_port_nobody_listens_on_fails_the_port_check_with_connection_refused(tmp_path):
    """Node 0 never came up (or a firewall rejects): node 1 names the refusal and exits."""
    port = free_port()                               # a port that was free a moment ago
    full = preflight_plan(tmp_path, port)
    run = plan_runner.run_plan(tmp_path, dataclasses.replace(full, nodes=full.nodes[1:]))
    assert run.codes == [1], run.output[-3000:]
    (port_check,) = run.named("preflight", "port")
    assert not port_check["ok"] and "connection refused" in port_check["detail"]
    assert f"127.0.0.1:{port}" in port_check["detail"]
    assert [r["ok"] for r in run.named("preflight", "dns")] == [True]


@pytest.mark.slow
def test_a_taken_tcp_init_port_fails_the_named_init_port_check(tmp_path):
    """A tcp:// init lab needs MASTER_PORT + 1 on node 0 as well: taken, it is named."""
    port = free_port(2)                              # below the ephemeral range: no connect() holds port + 1
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", port + 1))
    squatter.listen(1)
    try:
        run = plan_runner.run_plan(tmp_path, preflight_plan(tmp_path, port, init_method="tcp"))
    finally:
        squatter.close()
    assert run.codes == [1, 1], run.output[-3000:]
    checks = {r["node"]: r for r in run.named("preflight", "init_port")}
    assert not checks[0]["ok"] and f"cannot listen on port {port + 1} for tcp:// init" in checks[0]["detail"]
    assert [r["ok"] for r in run.named("preflight", "port")] == [True, True]
    (join,) = run.named("preflight", "join")
    assert not join["ok"] and "rank 0 (node 0): init_port" in join["detail"]


@pytest.mark.slow
def test_up_with_preflight_stops_with_the_table_and_exit_2_when_a_check_fails(tmp_path):
    """/dev/shm below what the lab asks for: the preflight says so, the lab never starts."""
    spec = tmp_path / "lab.yaml"
    spec.write_text("nodes: 2\nnproc_per_node: 1\nworkloads:\n"
                    "  - {name: preflight, options: {min_shm_mib: 100000000}}\n")
    out = tmp_path / "lab"
    done = labctl("up", "--preflight", "-f", str(spec), "--out", str(out))
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| node 0 | shm | FAIL |" in done.stdout and "| node 1 | shm | FAIL |" in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: preflight failed: shm (node 0, node 1); logs in ")
    assert last.endswith("the lab was not started")
    assert not out.exists() and (tmp_path / "lab-preflight" / "report.md").is_file()


@pytest.mark.slow
def test_up_with_preflight_runs_the_lab_after_a_passing_preflight(tmp_path):
    out = tmp_path / "lab"
    done = labctl("up", "--preflight", "--workload", "barrier", "--nodes", "2",
                  "--nproc-per-node", "1", "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "preflight passed in" in done.stderr
    checked = json.loads((tmp_path / "lab-preflight" / "status.json").read_text())
    ran = json.loads((out / "status.json").read_text())
    assert checked["state"] == ran["state"] == "passed"
    assert checked["launcher"] == "direct" and ran["launcher"] == "torchrun"
    assert {r["workload"] for r in results_of(out)} == {"barrier"}


def test_the_table_has_one_row_per_node_pair_and_check_worst_record_first():
    records = [
        {"workload": "preflight", "name": "port", "rank": 2, "node": 1, "peer": 0, "ok": True,
         "seconds": 0.1, "value": "a:1 (100 ms)"},
        {"workload": "preflight", "name": "port", "rank": 3, "node": 1, "peer": 0, "ok": False,
         "value": "a:1 unreachable", "detail": "a:1 not reachable: connection refused"},
        {"workload": "preflight", "name": "dns", "rank": 2, "node": 1, "peer": 0, "ok": True, "value": "a -> 1.2.3.4"},
        {"workload": "preflight", "name": "p2p", "rank": 0, "node": 0, "peer": 1, "ok": True, "value": "1 ms round trip"},
        {"workload": "preflight", "name": "p2p", "rank": 2, "node": 0, "peer": 1, "ok": True},
        {"workload": "preflight", "name": "all_reduce", "rank": 0, "node": 0, "peer": "all", "ok": True, "value": "2 ms"},
        {"workload": "preflight", "name": "all_reduce", "rank": 2, "node": 1, "peer": "all", "ok": True, "value": "3 ms"},
        {"workload": "other", "name": "dns", "rank": 0, "ok": False},
    ]
    rows = hook.rows(records)
    assert [(r["nodes"], r["check"], r["ok"]) for r in rows] == [
        ("node 1 -> node 0", "dns", True), ("node 1 -> node 0", "port", False),
        ("node 0 <-> node 1", "p2p", True), ("all nodes", "all_reduce", True)]
    assert rows[1]["value"] == "a:1 not reachable: connection refused" and rows[1]["ranks"] == [2, 3]
    assert rows[2]["value"] == "1 ms round trip"
    assert "1 of 4 preflight check(s) failed: port" in draw.markdown(hook.views(records))
    assert hook.as_json(records)["ok"] is False


def test_a_node_that_reported_no_check_is_named_in_the_table_and_the_last_line(tmp_path):
    """A node that never started (or died before its first check) must not read as passing."""
    from labctl import commands
    from labctl.rundir import RunDir

    run = RunDir.create(preflight_plan(tmp_path, 29500), out=tmp_path / "pf")
    (run.path / "results.jsonl").write_text(json.dumps(
        {"workload": "preflight", "name": "join", "rank": 0, "node": 0, "peer": 0, "ok": False,
         "value": "1 rank(s) missing", "detail": "rank(s) 1 never reached node 0's store"}) + "\n")
    from labctl.outcome import RunState
    run.record.state = RunState.FAILED
    passed, section = commands.preflight_table(run)
    assert not passed and f"- node 1: no check reported (never started, or died first): {run.node_log(1)}" in section
    assert commands.preflight_failure(run).startswith("preflight failed: join (node 0); no check reported (node 1); ")
