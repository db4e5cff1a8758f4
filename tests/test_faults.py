"""The failure lab: injected faults, the process-group timeout and debug mode.

Parsing and validation are checked directly; every fault that fires is checked
on real processes (local) and real containers (compose): the lab ends the way
torch makes it end, faults.jsonl says when each fault fired, and the report
names the fault (or the collective's own timeout) rather than a crash or the deadline.
"""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import assert_nothing_left, labctl
from docker_support import compose_lab_in_background, require_compose, require_image
from labctl import backends, faults, spec as specmod
from labctl.backends.local.placement import local_placement
from labctl.plan import plan
from labctl.backends.compose import render as render_compose

# A training-like loop: all_reduce forever (until the lab's fault or deadline ends it).
LOOP = """
import os, time, torch, torch.distributed as dist
from datetime import timedelta
dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ["LAB_PG_TIMEOUT"])))
x = torch.ones(4)
step = 0
while True:
    dist.all_reduce(x)
    x.fill_(1)
    step += 1
    if step % 20 == 0:
        print("step", step, flush=True)
    time.sleep(0.05)
"""
LOOP_LINE = LOOP.splitlines().index("    dist.all_reduce(x)") + 1
MISMATCH = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(2 if dist.get_rank() == 0 else 3))
"""
TIMED_OUT = re.compile(r"timed? ?out|timeout", re.I)


# ---- syntax and validation ----------------------------------------------------------
@pytest.mark.parametrize("text", ["kill-rank:3@5", "kill-node:1@2.5", "stop-node:0@5+30",
                                  "partition:1@10+20", "delay:1=50"])
def test_a_fault_round_trips(text):
    assert faults.parse(text).text == text


@pytest.mark.parametrize("text, expected", [
    ("kill-rank:1", "kill-rank is written kill-rank:R@T"),
    ("stop-node:1@5", "stop-node is written stop-node:N@T+D"),
    ("explode:1@2", "unknown fault kind 'explode'"),
    ("delay:1=fast", "delay is written delay:N=MS"),
])
def test_a_malformed_fault_says_how_it_is_written(text, expected):
    with pytest.raises(faults.FaultSyntaxError, match=re.escape(expected)):
        faults.parse(text)


@pytest.mark.parametrize("data, expected", [
    ({"faults": ["kill-node:2@5"]}, "a node of this lab: 0 to 1"),
    ({"faults": ["kill-rank:4@5"]}, "a rank of this lab: 0 to 3 (world size 4)"),
    ({"faults": ["partition:1@5+5"]}, "the local backend cannot do partition (backends that can: compose)"),
    ({"faults": ["delay:1=50"]}, "the local backend cannot do delay (backends that can: compose)"),
    ({"faults": ["kill-rank:1@5"], "backend": "k8s"}, "the k8s backend cannot do kill-rank "
                                                      "(backends that can: local, compose)"),
    ({"faults": ["stop-node:1@5+5"], "backend": "k8s"}, "the k8s backend cannot do stop-node "
                                                        "(backends that can: local, compose)"),
    ({"faults": ["stop-node:1@5+700"]}, "a fault that ends before the lab's deadline"),
    ({"faults": "kill-node:x@5"}, "kill-node is written kill-node:N@T"),
    ({"pg_timeout": 0}, "pg_timeout: expected a number of seconds > 0"),
    ({"debug": "yes"}, "debug: expected true or false"),
    ({"fault_clock": "later"}, "fault_clock: expected one of start, join"),
    ({"faults": ["kill-node:1@5"], "fault_clock": "join", "backend": "k8s"},
     "fault_clock: the k8s backend cannot hear the ranks join (backends that can: local, compose)"),
])
def test_a_fault_outside_the_lab_or_the_backend_is_one_line(data, expected):
    with pytest.raises(specmod.SpecError, match=re.escape(expected)) as info:
        backends.from_dict(data)
    assert "\n" not in str(info.value)


def test_faults_pg_timeout_and_debug_round_trip_through_the_spec():
    spec = backends.from_dict({"faults": ["kill-rank:1@5", "stop-node:1@10+5"], "pg_timeout": 15,
                              "debug": True})
    assert spec.faults == (faults.Fault("kill-rank", 1, 5.0), faults.Fault("stop-node", 1, 10.0, 5.0))
    assert spec.to_dict()["faults"] == ["kill-rank:1@5", "stop-node:1@10+5"]
    assert backends.from_dict(spec.to_dict()) == spec


def test_only_a_lab_with_faults_on_the_join_clock_asks_its_ranks_to_say_they_joined():
    from labctl.plan import plan as make_plan

    def env(**fields):
        spec = backends.from_dict(fields)
        placement = backends.create(spec.backend).placement(spec)
        return make_plan(spec, placement, "run-1").nodes[1].processes[0].env

    assert env(faults=["kill-node:1@2"], fault_clock="join")["LAB_FAULT_CLOCK"] == "join"
    assert "LAB_FAULT_CLOCK" not in env(faults=["kill-node:1@2"])
    assert "LAB_FAULT_CLOCK" not in env(fault_clock="join"), "no fault: nothing to say"
    assert backends.from_dict({"fault_clock": "join", "backend": "k8s"}).fault_clock == "join"


def test_the_node_env_carries_pg_timeout_and_debug_and_the_users_env_wins():
    spec = backends.from_dict({"pg_timeout": 12.5, "debug": True, "env": {"TORCH_CPP_LOG_LEVEL": "WARNING"}})
    env = plan(spec, local_placement(spec, 29500), "r").nodes[0].processes[0].env
    assert env["LAB_PG_TIMEOUT"] == "12.5"
    assert env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL" and env["TORCH_CPP_LOG_LEVEL"] == "WARNING"
    assert "NCCL_DEBUG" not in env                        # gloo lab
    nccl = backends.from_dict({"debug": True, "dist_backend": "nccl"})
    assert plan(nccl, local_placement(nccl, 29500), "r").nodes[0].processes[0].env["NCCL_DEBUG"] == "INFO"
    plain = backends.from_dict({})
    assert not {"LAB_PG_TIMEOUT", "TORCH_DISTRIBUTED_DEBUG"} & set(
        plan(plain, local_placement(plain, 29500), "r").nodes[0].processes[0].env)


def test_only_a_delayed_node_gets_net_admin_in_compose():
    spec = backends.from_dict({"backend": "compose", "faults": ["delay:1=50", "kill-node:0@5"]})
    from labctl.backends.containers import container_placement

    services = render_compose.render(plan(spec, container_placement(spec, "compose"), "r"))["services"]
    assert services["lab-1"]["cap_add"] == ["NET_ADMIN"] and "cap_add" not in services["lab-0"]


def test_the_workloads_pass_lab_pg_timeout_to_init_process_group(monkeypatch):
    from workloads import _common

    monkeypatch.setenv("LAB_PG_TIMEOUT", "7")
    assert _common.pg_timeout().total_seconds() == 7
    monkeypatch.delenv("LAB_PG_TIMEOUT")
    assert _common.pg_timeout() is None


# ---- real processes --------------------------------------------------------------
def _run(tmp_path, script, *args, timeout=400):
    out = tmp_path / "run"
    # the faults' T counts from every rank's join (fault_clock: join): a loaded machine's
    # slow torch import cannot make a fault miss the loop it is meant for
    done = labctl("up", "--script", str(script), "--nodes", "2", "--nproc-per-node", "1",
                  "--fault-clock", "join", "--out", str(out), *args, timeout=timeout)
    status = json.loads((out / "status.json").read_text())
    fired = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()] \
        if (out / "faults.jsonl").exists() else []
    return done, status, fired


def test_a_join_clock_that_never_starts_says_which_faults_never_fired(tmp_path, write_script):
    """No rank ever joins a process group: the join clock never starts, nothing is fired,
    and the lab says so instead of passing in silence over the faults it was given."""
    done, status, fired = _run(tmp_path, write_script("print('no process group here')\n"),
                               "--fault", "kill-node:1@1", "--timeout", "120", timeout=200)
    assert done.returncode == 0 and status["state"] == "passed" and fired == []
    assert ("the fault clock never started (fault_clock: join): not every rank said it joined "
            "its process group; not fired: kill-node:1@1") in done.stderr
    note = ("fault kill-node:1@1 never fired: the fault clock never started (not every rank said it joined "
            "its process group; the lab ended at ")
    assert any(n.startswith(note) for n in status["notes"]), status["notes"]       # and it is written down
    assert f"- note: {note}" in done.stdout


def test_a_fault_scheduled_after_the_lab_ends_is_said_never_to_have_fired(tmp_path, write_script):
    """Issue 38: a fault due after the lab had ended never fired, and nothing said so: the
    run passed as if the lab had been through it."""
    out = tmp_path / "run"
    done = labctl("up", "--script", str(write_script("print('quick', flush=True)\n")), "--nodes", "1",
                  "--nproc-per-node", "2", "--fault", "kill-rank:1@50", "--fault", "stop-node:0@55+2",
                  "--timeout", "60", "--out", str(out), timeout=200)
    status = json.loads((out / "status.json").read_text())
    assert done.returncode == 0 and status["state"] == "passed" and not (out / "faults.jsonl").exists()
    said = [n for n in status["notes"] if "never fired" in n]
    assert len(said) == 2, status["notes"]
    for note, text, at in zip(said, ("kill-rank:1@50", "stop-node:0@55+2"), (50, 55)):
        found = re.fullmatch(rf"fault {re.escape(text)} never fired: it was scheduled at {at} s on the fault "
                             r"clock, and the lab ended at ([0-9.]+) s on it \(([0-9.]+) s after labctl started "
                             r"the lab\)", note)
        assert found and float(found.group(1)) < at and float(found.group(2)) < 60, note
        assert f"- note: {note}" in done.stdout and (out / "report.md").read_text().count(note) == 1


@pytest.mark.slow
@pytest.mark.usefixtures("compose_partition_run")      # the compose partition lab runs meanwhile
def test_kill_rank_fails_the_lab_naming_the_rank_and_the_fault(tmp_path, write_script):
    done, status, fired = _run(tmp_path, write_script(LOOP), "--fault", "kill-rank:1@2",
                               "--pg-timeout", "60", "--timeout", "200")
    assert done.returncode == 1, done.stderr
    assert status["state"] == "failed"
    first = status["first_failure"]
    assert (first["rank"], first["fault"], first["signal"]) == (1, "kill-rank:1@2", "SIGKILL")
    assert status["rank_exit_codes"]["1"] == -9
    node = status["node_outcomes"][first["node"]]
    assert node["state"] == "failed" and node["reason"] == "its rank 1 was killed by fault kill-rank:1@2"
    assert "rank 1 on node" in done.stderr and "was killed by fault kill-rank:1@2 (SIGKILL)" in done.stderr
    (record,) = fired
    assert record["phase"] == "begin" and record["ok"] and 2 <= record["fired_s"] < 60
    assert record["clock"] == "join"
    said = done.stderr
    assert 0 <= said.index("every rank joined (2 of 2): the fault clock starts") \
        < said.index("fault kill-rank:1@2 (begin)"), said
    assert "Faults and what the nodes did" in done.stdout and "kill-rank:1@2" in done.stdout
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_kill_node_is_the_root_cause_not_the_peers_closed_connection(tmp_path, write_script):
    done, status, fired = _run(tmp_path, write_script(LOOP), "--fault", "kill-node:1@2",
                               "--pg-timeout", "60", "--timeout", "200")
    assert done.returncode == 1, done.stderr
    node1 = status["node_outcomes"][1]
    assert (node1["state"], node1["signal"], node1["reason"]) == ("killed", "SIGKILL",
                                                                  "killed by fault kill-node:1@2")
    first = status["first_failure"]
    assert (first["node"], first["fault"]) == (1, "kill-node:1@2")
    assert "node 1 was killed by fault kill-node:1@2" in done.stderr
    assert fired[0]["kind"] == "kill-node" and fired[0]["fired_s"] >= 2
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_stop_node_ends_in_the_collectives_own_timeout_not_the_deadline(tmp_path, write_script):
    done, status, fired = _run(tmp_path, write_script(LOOP), "--fault", "stop-node:1@2+60",
                               "--pg-timeout", "10", "--timeout", "240")
    assert done.returncode == 1, done.stderr
    assert status["state"] == "failed"                   # not "timeout": the lab's deadline is far
    first = status["first_failure"]
    # the frozen node is what the others waited for; their timeout is its symptom (the
    # healthy node's rank: torchrun's c10d rendezvous need not give node 0 rank 0)
    assert (first["node"], first["fault"]) == (1, "stop-node:1@2+60"), first
    assert first["peer_rank"] != first["rank"] and TIMED_OUT.search(first["peer_error"]["exception"]), first
    assert first["op"] == "all_reduce" and first["caller"].endswith(":" + str(LOOP_LINE)), first
    assert "was frozen by fault stop-node:1@2+60" in status["message"], status["message"]
    begin, end = fired
    assert begin["phase"] == "begin" and end["phase"] == "end"
    # the peer gave up after pg_timeout, long before the freeze was over: ended early
    assert end["note"] == "ended early: the lab ended" and end["fired_s"] < 2 + 60
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_debug_mode_quotes_torchs_collective_mismatch(tmp_path, write_script):
    done, status, _ = _run(tmp_path, write_script(MISMATCH), "--debug", "--timeout", "200")
    assert done.returncode == 1
    error = status["first_failure"]["error"]["exception"]
    assert error.startswith("RuntimeError: Detected mismatch between collectives on ranks")
    assert "TensorShape=[2]" in error and "TensorShape=[3]" in error
    assert "Detected mismatch between collectives" in done.stdout


# ---- real containers ------------------------------------------------------------
@pytest.fixture(scope="module")
def compose_partition_run(tmp_path_factory):
    """The compose partition lab, started in the background by the module's first local
    fault lab when an engine, Compose and the image are there (else None: its test skips,
    or fails under CI, with the reason): it mostly waits for its pg_timeout, and the local
    fault labs run meanwhile. Its test comes after theirs."""
    with compose_lab_in_background(tmp_path_factory.mktemp("partition"), LOOP, "--nodes", "2",
                                   "--nproc-per-node", "1", "--fault-clock", "join",
                                   "--fault", "partition:1@2+90", "--pg-timeout", "10",
                                   "--timeout", "300") as started:
        yield started


@pytest.mark.docker
@pytest.mark.slow
def test_compose_partition_ends_in_the_collectives_timeout_not_the_deadline(compose_partition_run):
    require_compose()
    require_image()
    proc, _, out, stdout_file, stderr_file = compose_partition_run
    returncode = proc.wait(timeout=500)
    stdout, stderr = stdout_file.read_text(), stderr_file.read_text()
    status = json.loads((out / "status.json").read_text())
    fired = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    assert returncode == 1, stderr
    assert status["state"] == "failed"                   # not "timeout"
    begin, end = fired
    assert begin["ok"] and "network disconnect" in begin["did"] and begin["fired_s"] >= 2
    assert end["ok"] and "network connect" in end["did"]  # reconnected before the teardown
    first = status["first_failure"]
    assert (first["node"], first["fault"]) == (1, "partition:1@2+90"), first
    assert TIMED_OUT.search(first["peer_error"]["exception"]), first
    assert "was cut off the network by fault partition:1@2+90" in status["message"], status["message"]
    assert "Faults and what the nodes did" in stdout and "partition:1@2+90" in stdout


@pytest.mark.docker
def test_compose_refuses_a_delay_on_a_kernel_without_netem(tmp_path, write_script):
    from labctl.backends.compose.preflight import kernel_has_netem

    require_compose()
    require_image()
    if kernel_has_netem() is not False:
        pytest.skip("this kernel has netem (or it cannot be told): nothing to refuse")
    done = labctl("up", "--backend", "compose", "--script", str(write_script(LOOP)),
                  "--fault", "delay:1=50", "--out", str(tmp_path / "run"), timeout=120)
    assert done.returncode == 2
    assert "fault delay:1=50 needs tc netem" in done.stderr and "CONFIG_NET_SCH_NETEM" in done.stderr
    assert not (tmp_path / "run").exists()                # refused before anything started


@pytest.mark.docker
@pytest.mark.slow
def test_compose_kill_node_during_a_freeze_blames_the_kill_and_unpauses_before_teardown(
        tmp_path, write_script):
    require_compose()
    require_image()
    out = tmp_path / "run"
    done = labctl("up", "--backend", "compose", "--script", str(write_script(LOOP)), "--nodes", "3",
                  "--nproc-per-node", "1", "--fault-clock", "join",
                  "--fault", "stop-node:1@2+120", "--fault", "kill-node:2@4",
                  "--pg-timeout", "60", "--timeout", "300", "--out", str(out), timeout=500)
    assert done.returncode == 1, done.stderr
    status = json.loads((out / "status.json").read_text())
    fired = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    assert [(f["fault"], f["phase"], f["ok"]) for f in fired] == [
        ("stop-node:1@2+120", "begin", True), ("kill-node:2@4", "begin", True),
        ("stop-node:1@2+120", "end", True)]               # unpaused so that it could be stopped
    assert "docker pause" in fired[0]["did"] and "docker kill" in fired[1]["did"]
    assert fired[2]["note"] == "ended early: the lab ended"
    node2 = status["node_outcomes"][2]
    assert (node2["state"], node2["signal"], node2["reason"]) == ("killed", "SIGKILL",
                                                                  "killed by fault kill-node:2@4")
    assert status["first_failure"]["fault"] == "kill-node:2@4"
    assert "node 2 was killed by fault kill-node:2@4 (SIGKILL)" in done.stderr
    containers = subprocess.run(["docker", "ps", "-aq", "--filter",
                                 f"label=labctl.dev/run-id={status['run_id']}"],
                                capture_output=True, text=True).stdout.split()
    assert containers == []
