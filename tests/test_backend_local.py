"""The local backend with real torchrun agents and workers on this machine.

The lifecycle (deadline, Ctrl-C, ...) is tests/test_lifecycle_contract.py;
killed controllers and hostile ranks are tests/test_local_hostile.py."""
import json
import re

import pytest

from labctl import lab, spec, tracebacks
from labctl.errors import LabError

from conftest import assert_nothing_left, finalize

pytestmark = pytest.mark.slow
QUIET = lambda line: None  # noqa: E731


def run_lab(tmp_path, **fields):
    return lab.up(spec.from_dict(fields), out=str(tmp_path / "run"), progress=QUIET)


def ranks_in(run, workload):
    return sorted({r["rank"] for r in run.results() if r["workload"] == workload})


@pytest.mark.parametrize("nodes, nproc", [(1, 4), (4, 1), (3, 1)])
def test_topologies_pass(tmp_path, nodes, nproc):
    run = run_lab(tmp_path, nodes=nodes, nproc_per_node=nproc, workloads=["env", "p2p", "collectives"])
    assert run.status["state"] == "passed", run.status
    world = nodes * nproc
    for workload in ("env", "p2p", "collectives"):
        assert ranks_in(run, workload) == list(range(world))
    envs = {r["rank"]: r for r in run.results() if r["name"] == "env"}
    assert {int(e["WORLD_SIZE"]) for e in envs.values()} == {world}
    assert sorted({e["GROUP_RANK"] for e in envs.values()}) == list(range(nodes))
    assert all((run.path / "ranks" / f"rank-{r}.log").stat().st_size > 0 for r in range(world))
    assert_nothing_left(run.status["run_id"])


def test_direct_launcher_sets_rank_per_worker(tmp_path):
    """Also: file:// init and LAB_SHARED_DIR (the elastic checkpoint) are one directory,
    the run folder's shared/, and plan.json names it."""
    run = run_lab(tmp_path, launcher="direct", init_method="file", workloads=[
        "env", "p2p", "collectives", "ddp", {"name": "elastic", "options": {"steps": 4, "checkpoint_every": 2}}])
    assert run.status["state"] == "passed", run.status
    envs = {r["rank"]: r for r in run.results() if r["name"] == "env"}
    assert sorted(envs) == [0, 1, 2, 3]
    assert [envs[r]["LOCAL_RANK"] for r in range(4)] == [0, 1, 0, 1]
    plan = json.loads((run.path / "plan.json").read_text())
    assert [p["env"]["RANK"] for n in plan["nodes"] for p in n["processes"]] == ["0", "1", "2", "3"]
    shared, run_id = (tmp_path / "run" / "shared").resolve(), run.status["run_id"]
    assert {n["env"]["LAB_SHARED_DIR"] for n in plan["nodes"]} == {str(shared)}
    assert {n["env"]["LAB_INIT_METHOD"] for n in plan["nodes"]} == {f"file://{shared}/{run_id}.init"}
    assert (shared / run_id / "elastic" / "checkpoint.pt").is_file(), "the workload wrote there too"
    assert_nothing_left(run.status["run_id"])


FAIL_ON_RANK = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print("args", sys.argv[1:], flush=True)
t = torch.ones(1)
dist.all_reduce(t)
if rank == int(os.environ["FAIL_RANK"]):
    print("rank", rank, "giving up", flush=True)
    os._exit(3)
dist.barrier()
"""


@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_a_failing_rank_fails_the_lab_names_it_and_leaves_nothing(tmp_path, write_script, launcher):
    script = write_script(FAIL_ON_RANK)
    run = run_lab(tmp_path, script=str(script), script_args=["--lr", "0.1"], launcher=launcher,
                  env={"FAIL_RANK": "2"})
    assert run.status["state"] == "failed"
    assert run.status["first_failure"]["rank"] == 2
    assert 2 in run.status["failed_ranks"]
    assert "giving up" in (run.path / "ranks" / "rank-2.log").read_text()
    assert "args ['--lr', '0.1']" in (run.path / "ranks" / "rank-0.log").read_text()
    assert (run.path / "nodes" / "node-1.log").stat().st_size > 0
    assert_nothing_left(run.status["run_id"])


LEAVE_BESIDE_A_FAILING_RANK = """
import os, time, torch, torch.distributed as dist
from pathlib import Path
dist.init_process_group("gloo")
rank, shared = dist.get_rank(), Path(os.environ["LAB_SHARED_DIR"])
print("joined", flush=True)            # every rank's node log names it
dist.all_reduce(torch.ones(4))
if rank in (1, 3):                     # skip the next collective, exit 0
    (shared / f"left-{rank}.tmp").write_text(str(os.getpid()))
    os.replace(shared / f"left-{rank}.tmp", shared / f"left-{rank}")
    os._exit(0)

def gone(pid):                         # exited (a zombie until its parent reaps it) or reaped
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True

for r in (1, 3):                       # the others enter it only once both have left
    while not (shared / f"left-{r}").exists() or not gone(int((shared / f"left-{r}").read_text())):
        time.sleep(0.05)
dist.all_reduce(torch.ones(4))
"""


@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_ranks_that_left_early_are_named_on_every_node_beside_failing_ranks(tmp_path, write_script, launcher):
    """Ranks 1 and 3 skip a collective and exit 0; ranks 0 and 2, on the same nodes as
    they (a node holds consecutive ranks), then fail with 'Connection closed by peer'.
    Both leavers are named, each with its node (was, under torchrun: rank 0's symptom,
    since no node had all its ranks exit 0)."""
    run = run_lab(tmp_path, script=str(write_script(LEAVE_BESIDE_A_FAILING_RANK)), launcher=launcher,
                  nodes=2, nproc_per_node=2, timeout=120)
    first = run.status["first_failure"]
    assert run.status["state"] == "failed" and first.get("left_early") is True, first
    assert sorted(first["ranks"]) == [1, 3] and first["exit_code"] == 0, first
    node = {r: next(i for i in (0, 1) if r in _ranks_of_node(run, i)) for r in (0, 1, 2, 3)}
    assert node[0] == node[1] and node[2] == node[3] != node[1], "each leaver beside a failing rank"
    assert dict(zip(first["ranks"], first["nodes"])) == {1: node[1], 3: node[3]}
    assert first["symptom_rank"] in (0, 2) and tracebacks.peer_gone(first["error"]["exception"]), first
    # in the order they left where that is known (direct mode), else by rank
    said = " and ".join(f"rank {r} on node {node[r]}" for r in first["ranks"]) + \
        " exited 0 while the others were still in a collective (left the group early)"
    assert launcher == "direct" or first["ranks"] == [1, 3]
    assert run.status["message"] == said
    assert said in (run.path / "report.md").read_text()
    assert {0, 2} <= set(run.status["failed_ranks"]) and not {1, 3} & set(run.status["failed_ranks"])
    assert_nothing_left(run.status["run_id"])


def _ranks_of_node(run, index: int) -> set[int]:
    """The ranks a node ran (every rank of the script prints a line)."""
    return {int(r) for r in re.findall(r"^\[rank(\d+)\]:", run.node_log(index).read_text(), flags=re.M)}


PG_TIMEOUT_SEEN = """
import datetime, os, torch, torch.distributed as dist
if os.environ["RANK"] == "0":        # its own timeout: kept, and labctl says so once
    dist.init_process_group("gloo", None, datetime.timedelta(seconds=7))
else:                                 # none: the lab's pg_timeout
    dist.init_process_group(backend="gloo")
print("pg timeout", dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout, flush=True)
"""


def test_pg_timeout_acts_on_a_script_that_does_not_read_it(tmp_path, write_script):
    """`--pg-timeout` did nothing for a script that does not read LAB_PG_TIMEOUT: the
    script wrapper gives init_process_group the lab's timeout when the script gives none."""
    run = run_lab(tmp_path, script=str(write_script(PG_TIMEOUT_SEEN)), nodes=1, nproc_per_node=2,
                  pg_timeout=4.5, timeout=120)
    assert run.status["state"] == "passed", run.status
    assert "pg timeout 0:00:04.500000" in run.rank_log(1).read_text()
    rank0 = run.rank_log(0).read_text()
    assert "pg timeout 0:00:07" in rank0
    said = "labctl: pg_timeout 4.5 s is not applied: the script passes its own timeout (0:00:07) to init_process_group"
    assert rank0.count(said) == 1 and said not in run.rank_log(1).read_text()
    assert_nothing_left(run.status["run_id"])


MIXED_OUTPUT = """
import json, os, sys, time, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for i in range(3000):
    print(f"step {i} " + "x" * (i % 200), end="\\r" if i % 7 == 0 else "\\n")
sys.stdout.flush()
sys.stdout.buffer.write(b"caf\\xe9 is not UTF-8\\n")    # in the same run as the result lines
sys.stdout.buffer.flush()
print("@@labctl-result " + json.dumps({"workload": "mixed", "name": "ok", "ok": True}))
print("@@labctl-result {garbled")
sys.stdout.flush()
if rank == 2:
    raise ValueError("rank 2 gives up")
if rank == 3:
    sys.stdout.write("a last line with no end")
    sys.stdout.flush()
    time.sleep(1)
    os._exit(5)
dist.barrier()
"""


def test_direct_mode_rank_logs_from_the_guards_equal_the_node_log_split(tmp_path, write_script):
    """Local direct-mode guards write each rank's log as the output comes; the run
    folder must hold what splitting the node logs would have given, byte for byte."""
    import shutil

    from labctl.outcome import NodeOutcome
    from labctl.rundir import RunDir

    run = run_lab(tmp_path, script=str(write_script(MIXED_OUTPUT)), launcher="direct",
                  nodes=2, nproc_per_node=2)
    assert run.record.rank_logs_by_guards is True
    assert json.loads((run.path / "status.json").read_text())["rank_logs_by_guards"] is True
    assert RunDir.open(run.path).record.rank_logs_by_guards is True, "kept for a folder opened again"
    assert run.status["state"] == "failed" and run.status["first_failure"]["rank"] in (2, 3)
    assert "rank 2 gives up" in run.status["rank_errors"]["2"]["exception"]
    assert run.status["rank_exit_codes"]["3"] == 5
    assert run.rank_log(3).read_bytes().endswith(b"a last line with no end")   # as printed
    split = RunDir.open(shutil.copytree(run.path, tmp_path / "split"))
    split.record.rank_logs_by_guards = False              # the node-log split of other backends
    finalize(split, [NodeOutcome(**n) for n in run.status["node_outcomes"]], "failed")
    for rank in range(4):
        guard_written = run.rank_log(rank).read_bytes()
        assert guard_written.count(b"\n") > 2500 and b"\r" in guard_written
        assert b"\ncaf\xe9 is not UTF-8\n@@labctl-result " in guard_written
        # the node log is a line view: it cannot say that rank 3's last line had no end
        unended = b"\n" if rank == 3 else b""
        assert guard_written + unended == split.rank_log(rank).read_bytes(), f"rank {rank}"
    assert sorted(run.results(), key=json.dumps) == sorted(split.results(), key=json.dumps)
    assert len(run.results()) == 8                  # 4 ranks x (one result + one unparsable)
    for key in ("state", "first_failure", "checks", "rank_exit_codes", "rank_errors", "failed_ranks"):
        assert run.status[key] == split.status[key], key
    assert "rank 3 exited with code 5" in (run.path / "nodes" / "node-1.guard.txt").read_text()
    assert_nothing_left(run.status["run_id"])


def test_ranks_repeated_by_replicas_are_split_from_the_node_logs_once(tmp_path):
    run = run_lab(tmp_path, launcher="direct", replicas=2, nodes=1, nproc_per_node=2, workloads=["env"])
    assert run.status["state"] == "passed", run.status
    assert not run.record.rank_logs_by_guards               # rank 0 of each replica: one rank log
    assert "rank_logs_by_guards" not in json.loads((run.path / "status.json").read_text())
    envs = [r for r in run.results() if r["name"] == "env"]
    assert sorted((e["replica"], e["rank"]) for e in envs) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert_nothing_left(run.status["run_id"])


def test_missing_script_is_a_clear_error(tmp_path):
    with pytest.raises(LabError, match="no such file"):
        run_lab(tmp_path, script=str(tmp_path / "absent.py"))


@pytest.mark.parametrize("nodes, nproc, gpus, refused", [
    (1, 2, 0, "needs a GPU per worker (2 per node), and this machine has 0"),
    (1, 2, 1, "needs a GPU per worker (2 per node), and this machine has 1"),
    (2, 1, 4, "runs one node only: the 2 nodes share this machine's 4 GPU(s)"),
    (1, 4, 4, None),
])
def test_nccl_is_refused_where_local_ranks_cannot_each_have_a_gpu(nodes, nproc, gpus, refused):
    from labctl.backends.local.backend import nccl_refusal

    found = nccl_refusal(spec.from_dict({"dist_backend": "nccl", "nodes": nodes,
                                         "nproc_per_node": nproc}), gpus)
    assert (found is None) if refused is None else (refused in found)


MANY_OPS = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(20000):
    dist.all_reduce(t)
dist.destroy_process_group()
"""


def test_signals_while_labctl_finishes_the_run_folder(tmp_path, write_script):
    """Issue 28: both ranks succeeded and labctl merges a 40,000-op trace. A first SIGINT
    (to labctl's whole process group, as a terminal sends it) is noted and the finish goes
    on; a second one cuts the merge short: exit 130, status.json interrupted and truthful
    (the lab itself had passed; no trace.json; how to get it), no temporary file, nothing
    left running. (One signal at each step: tests/test_lab.py.)"""
    import os
    import signal
    import subprocess
    import sys

    from conftest import REPO

    script = write_script(MANY_OPS)
    out = tmp_path / "run"
    up = subprocess.Popen([sys.executable, "-m", "labctl.cli", "up", "--script", str(script),
                           "--nodes", "1", "--nproc-per-node", "2", "--trace", "--out", str(out)],
                          cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    said = []
    try:
        for line in up.stderr:
            said.append(line)
            if line.startswith("finishing the run folder: merging the trace"):
                os.killpg(up.pid, signal.SIGINT)
            elif line.startswith("SIGINT: finishing the run folder first"):
                os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=120)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
    text = "".join(said)
    assert up.returncode == 130, text[-3000:]
    assert "SIGINT: merging the trace cut short" in text, text[-3000:]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "interrupted" and status["signal"] == "SIGINT", status
    assert status["message"].startswith("SIGINT cut the run folder's finish short while merging "
                                        "the trace: no trace.json"), status["message"]
    assert status["message"].endswith("the lab itself had passed"), status["message"]
    assert status["checks"] == {"total": 0, "failed": 0, "skipped": 0}, "decided before the merge"
    assert [n["state"] for n in status["node_outcomes"]] == ["succeeded"]
    assert sorted(p.name for p in out.rglob("*.tmp")) == [] and not (out / "trace.json").exists()
    assert not (out / ".labctl-reserve").exists()
    from labctl import trace
    records = trace.record_files(out).get(1, [])
    assert records and all(p.stat().st_size > 0 for p in records), "the ranks' record files are whole"
    assert_nothing_left(status["run_id"])
    # the folder reads back: `labctl trace` writes what the cut merge did not
    from conftest import labctl
    again = labctl("trace", str(out))
    assert again.returncode == 0 and (out / "trace.json").is_file(), again.stderr
