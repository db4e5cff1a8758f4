"""Replicas: R independent torchrun jobs that meet through one replica store.

The plan is checked as data (names, rendezvous, env, ports, the store
service), then run for real: the `replicas` workload on 2x1 and 1x2 with
R = 2, and a user script that reads only the REPLICA_* variables, run through
`labctl up` (the local backend starts the store first and stops it last).
"""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from conftest import assert_nothing_left, labctl
from labctl import logs, plan as planmod, spec
from labctl import draw
from labctl.backends.containers import DEFAULT_STORE_PORT, container_placement
from labctl.backends.local.placement import local_placement
from labctl.plan import node_command
from plan_runner import local_plan, run_plan
from workloads import _common, replicas
from workloads._report import replicas as replicas_report

REPLICA_VARS = ("REPLICA_ID", "REPLICA_NUM", "REPLICA_STORE_ADDR", "REPLICA_STORE_PORT")


def _plan(placement="compose", **fields):
    s = spec.from_dict(fields)
    pl = (local_placement(s, 40000, run_folder="/runs/run-1") if placement == "local"
          else container_placement(s, placement))
    return planmod.plan(s, pl, "run-1")


# ---- the plan -------------------------------------------------------------------
def test_one_replica_adds_nothing():
    p = _plan()
    assert p.services == () and [n.hostname for n in p.nodes] == ["lab-0", "lab-1"]
    assert {n.replica for n in p.nodes} == {0}
    for node in p.nodes:
        env = node.processes[0].env
        assert not any(v in env for v in REPLICA_VARS) and env["LAB_INIT_METHOD"] == "env://"
        assert "--rdzv-id=run-1" in node.processes[0].argv
    assert "replicas" not in p.to_dict() and "services" not in p.to_dict()


def test_replicas_are_rendezvous_of_their_own_around_one_store():
    p = _plan(nodes=2, nproc_per_node=2, replicas=3)
    assert [n.hostname for n in p.nodes] == [f"lab-r{k}-{i}" for k in range(3) for i in range(2)]
    assert [n.index for n in p.nodes] == list(range(6)) and [n.replica for n in p.nodes] == [0, 0, 1, 1, 2, 2]
    for node in p.nodes:
        (proc,) = node.processes
        k, i = node.replica, node.index % 2
        env = proc.env
        assert env["NODE_RANK"] == str(i) and env["MASTER_ADDR"] == f"lab-r{k}-0"
        assert [env[v] for v in REPLICA_VARS] == [str(k), "3", "lab-store", str(DEFAULT_STORE_PORT)]
        assert f"--rdzv-id=run-1-r{k}" in proc.argv
        assert f"--rdzv-endpoint=lab-r{k}-0:29500" in proc.argv
        assert f"--rdzv-conf=is_host={int(i == 0)},join_timeout=120" in proc.argv
        assert "--nnodes=2" in proc.argv, "each replica is a job of `nodes` nodes"
    (store,) = p.services
    assert store.hostname == "lab-store"
    (proc,) = store.processes
    assert proc.argv == ("python3", "-m", "workloads._replica_store", "--port", "29400", "--lifetime", "600")
    assert proc.env["LAB_RUN_ID"] == "run-1"
    data = p.to_dict()
    assert data["replicas"] == 3 and data["services"][0]["hostname"] == "lab-store"
    assert [n["replica"] for n in data["nodes"]] == [0, 0, 1, 1, 2, 2]


def test_local_replicas_get_their_own_ports():
    p = _plan("local", nodes=1, nproc_per_node=2, replicas=2, init_method="tcp")
    assert spec.ports_taken(p.spec) == 5
    argvs = [n.processes[0].argv for n in p.nodes]
    assert "--rdzv-endpoint=127.0.0.1:40000" in argvs[0] and "--rdzv-endpoint=127.0.0.1:40002" in argvs[1]
    assert [n.processes[0].env["LAB_INIT_METHOD"] for n in p.nodes] == \
        ["tcp://127.0.0.1:40001", "tcp://127.0.0.1:40003"]
    assert p.nodes[0].processes[0].env["REPLICA_STORE_PORT"] == "40004"
    assert "--port" in p.services[0].processes[0].argv and "40004" in p.services[0].processes[0].argv


def test_direct_mode_replicas_number_ranks_within_the_replica():
    p = _plan(nodes=2, nproc_per_node=2, replicas=2, launcher="direct")
    ranks = [(n.replica, pr.rank) for n in p.nodes for pr in n.processes]
    assert ranks == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    argv, env = node_command(p.nodes[3])       # replica 1, node 1
    assert env["NODE_RANK"] == "1" and env["REPLICA_ID"] == "1" and env["WORLD_SIZE"] == "4"


def test_init_urls():
    assert _plan(init_method="tcp").nodes[1].processes[0].env["LAB_INIT_METHOD"] == "tcp://lab-0:29501"
    assert _plan(init_method="file").nodes[0].processes[0].env["LAB_INIT_METHOD"] == \
        "file:///lab/shared/run-1.init"
    two = _plan(init_method="file", replicas=2)
    assert [n.processes[0].env["LAB_INIT_METHOD"] for n in two.nodes][::2] == \
        ["file:///lab/shared/run-1-r0.init", "file:///lab/shared/run-1-r1.init"]
    local = _plan("local", init_method="file").nodes[0]
    # the run folder's shared/, the very directory LAB_SHARED_DIR names
    assert local.processes[0].env["LAB_INIT_METHOD"] == "file:///runs/run-1/shared/run-1.init"
    assert local.env["LAB_SHARED_DIR"] == "/runs/run-1/shared"


def test_one_replica_skips_the_replicas_workload_with_the_reason():
    import torch

    ctx = _common.Context(rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                          backend="gloo", device=torch.device("cpu"), workload="replicas")
    buf = io.StringIO()
    with redirect_stdout(buf):
        replicas.run(ctx)
    (record,) = logs.parse_results(buf.getvalue().splitlines())
    assert record["skipped"] and "REPLICA_NUM is 1" in record["reason"] and "--replicas 2" in record["reason"]
    assert "skipped: REPLICA_NUM is 1" in draw.markdown(replicas_report.views([record])) + "\n"


# ---- real processes ---------------------------------------------------------------
REPLICA_CHECKS = ("cross-replica-join", "cross-replica-all_reduce", "within-replica-all_reduce",
                  "hsdp-params-identical-on-all-replicas-and-ranks", "hsdp-matches-single-process",
                  "hsdp-loss-decreases", "hsdp-loss-matches-single-process", "workload_done")


@pytest.mark.slow
@pytest.mark.parametrize("nodes, nproc, launcher", [(2, 1, "direct"), (1, 2, "torchrun")])
def test_replicas_workload_two_replicas(tmp_path, nodes, nproc, launcher):
    the_plan = local_plan(tmp_path, nodes=nodes, nproc_per_node=nproc, replicas=2, launcher=launcher,
                          workloads=["replicas"])
    run = run_plan(tmp_path, the_plan)
    assert not run.failed(), f"{run.failed()}\n{run.output[-4000:]}"
    assert run.codes == [0] * nodes * 2, run.output[-4000:]
    assert run.service_codes == [0], "the store ends cleanly on SIGTERM"
    assert "replica store: listening on port" in run.output
    everyone = [(k, r) for k in range(2) for r in range(2)]
    for name in REPLICA_CHECKS:
        got = sorted((x["replica"], x["rank"]) for x in run.named("replicas", name))
        assert got == everyone, name
    groups = {(x["replica"], x["rank"]): (x["group_rank"], x["group_size"])
              for x in run.named("replicas", "cross-replica-join")}
    assert groups == {(k, r): (k, 2) for k, r in everyone}
    table = draw.markdown(replicas_report.views(run.results)) + "\n"
    assert "| 0 | 2 |" in table and "| 1 | 2 |" in table and "| none |" in table


USER_SCRIPT = """
# Reads only REPLICA_ID, REPLICA_NUM, REPLICA_STORE_ADDR, REPLICA_STORE_PORT (and joins its
# own replica's default group from the launcher's env://), as in the replica-groups tutorial.
import datetime, os, sys
import torch, torch.distributed as dist

replica, replicas = int(os.environ["REPLICA_ID"]), int(os.environ["REPLICA_NUM"])
dist.init_process_group("gloo")
rank = dist.get_rank()
store = dist.TCPStore(os.environ["REPLICA_STORE_ADDR"], int(os.environ["REPLICA_STORE_PORT"]),
                      is_master=False, timeout=datetime.timedelta(seconds=60))
group = dist.ProcessGroupGloo(dist.PrefixStore(f"my-group-{rank}", store), replica, replicas,
                              datetime.timedelta(seconds=60))
t = torch.full((4,), float(replica + 1))
group.allreduce([t]).wait()
want = replicas * (replicas + 1) / 2
print(f"replica {replica} rank {rank}: cross-replica sum {t[0].item():g} (want {want:g})", flush=True)
group.barrier().wait()
dist.destroy_process_group()
sys.exit(0 if bool((t == want).all()) else 1)
"""


@pytest.mark.slow
def test_a_user_script_builds_its_own_cross_replica_group(tmp_path, write_script):
    script = write_script(USER_SCRIPT, "cross.py")
    out = tmp_path / "run"
    done = labctl("up", "--quiet", "--replicas", "2", "--nodes", "1", "--nproc-per-node", "2",
                  "--timeout", "240", "--script", str(script), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "passed" and len(status["node_outcomes"]) == 2
    text = "".join((out / "nodes" / f"node-{i}.log").read_text() for i in range(2))
    for k in range(2):
        for r in range(2):
            assert f"replica {k} rank {r}: cross-replica sum 3 (want 3)" in text, text[-3000:]
    store_log = (out / "services" / "lab-store.log").read_text()
    assert "listening on port" in store_log and "SIGTERM" in store_log, store_log
    assert_nothing_left(status["run_id"])
