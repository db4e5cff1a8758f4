"""`labctl collect --backend compose` of labs that `docker compose up -d` started, through
the CLI as a user runs it: the shipped compose/compose.yaml, and a rendered lab
whose rank 1 fails. Real containers, real logs; nothing of either run is left.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from docker_support import REPO, require_compose, require_image
from labctl.backends.compose.docker import compose_command
from labctl.rendered import RUN_LABEL

pytestmark = pytest.mark.docker
SHIPPED_RUN_ID = "lab-example"          # compose/compose.yaml's run id (its first line says so)


@pytest.fixture(scope="module", autouse=True)
def _docker_and_image():
    require_compose()
    require_image()


def labctl(*args: str, cwd: Path = REPO, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labctl.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def compose_up(compose_file: Path) -> None:
    done = subprocess.run([*compose_command(), "-f", str(compose_file), "up", "-d"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr


def left_of(run_id: str) -> tuple[str, str]:
    label = f"label={RUN_LABEL}={run_id}"
    ps = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True)
    nets = subprocess.run(["docker", "network", "ls", "-q", "--filter", label], capture_output=True, text=True)
    return ps.stdout.strip(), nets.stdout.strip()


def remove(run_id: str) -> None:
    containers, networks = left_of(run_id)
    if containers:
        subprocess.run(["docker", "rm", "-f", *containers.split()], capture_output=True)
    if networks:
        subprocess.run(["docker", "network", "rm", *networks.split()], capture_output=True)


def test_collect_of_the_shipped_compose_lab_then_delete(tmp_path):
    shipped = REPO / "compose" / "compose.yaml"
    assert f"run id {SHIPPED_RUN_ID}," in shipped.read_text().splitlines()[0]
    assert left_of(SHIPPED_RUN_ID) == ("", ""), "another lab-example is running here"
    compose_up(shipped)
    try:
        out = tmp_path / "run"
        done = labctl("collect", "--backend", "compose", "--run-id", SHIPPED_RUN_ID, "--out", str(out))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert done.stdout.startswith("# Lab lab: PASSED")           # the report, printed
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "passed" and status["world_size"] == 4
        assert [n["state"] for n in status["node_outcomes"]] == ["succeeded", "succeeded"]
        results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert all(r["ok"] for r in results)
        for workload in ("env", "p2p", "collectives", "ddp"):
            assert {r["rank"] for r in results if r["workload"] == workload} == {0, 1, 2, 3}, workload
        assert {r["rank"] for r in results if r.get("name") == "workload_done"} == {0, 1, 2, 3}
        for rank in range(4):
            assert (out / "ranks" / f"rank-{rank}.log").stat().st_size > 0
        # the report, as `labctl up` prints it: report.md without the sections of a row per call
        from labctl import report
        from labctl.rundir import RunDir
        assert report.markdown(RunDir.open(out), brief=True) == done.stdout.rstrip("\n") + "\n"
        assert "## P2p: every message, sent and received" in (out / "report.md").read_text()
        assert "backend: compose" in (out / "spec.yaml").read_text()
        assert len(json.loads((out / "plan.json").read_text())["nodes"]) == 2
        assert left_of(SHIPPED_RUN_ID) != ("", ""), "collect without --delete removes nothing"
        # --delete: the folder first, then the lab
        again = labctl("collect", "--backend", "compose", "--run-id", SHIPPED_RUN_ID,
                       "--out", str(tmp_path / "again"), "--delete")
        assert again.returncode == 0, again.stderr[-2000:]
        assert "removed 2 container(s) and 1 network(s) of run lab-example" in again.stderr
        assert json.loads((tmp_path / "again" / "status.json").read_text())["state"] == "passed"
        assert left_of(SHIPPED_RUN_ID) == ("", "")
        names = subprocess.run(["docker", "network", "ls", "--format", "{{.Name}}"],
                               capture_output=True, text=True, check=True).stdout
        assert SHIPPED_RUN_ID not in names
    finally:
        remove(SHIPPED_RUN_ID)


# the line the test appends to the (bind-mounted, same inode) script once collect has seen
# both nodes running; the script itself holds it only in two pieces
SEEN = "# collect saw both nodes running"
FAILING = """\
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} of {dist.get_world_size()} on {os.uname().nodename}", flush=True)
if rank == 1:                    # seen running by collect first: it saw who ended first
    while "#" " collect saw both nodes running" not in open(__file__).read():
        time.sleep(0.1)
    print("rank 1 gives up", flush=True)
    sys.exit(3)
dist.barrier()                   # rank 1 is gone: gloo says so, and rank 0 fails too
"""


def test_collect_of_a_compose_lab_with_a_failing_rank_names_it_and_keeps_its_log(tmp_path):
    run_id = f"cfail-{uuid.uuid4().hex[:8]}"
    (tmp_path / "fail.py").write_text(FAILING)
    rendered = labctl("render", "compose", "--script", "fail.py", "--name", "cfail", "--nodes", "2",
                      "--nproc-per-node", "1", "--run-id", run_id, "-o", "lab", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    (tmp_path / "lab" / "fail.py").write_text(FAILING)    # compose mounts it from the file's folder
    try:
        unknown = labctl("collect", "--backend", "compose", "--run-id", run_id, cwd=tmp_path)
        assert unknown.returncode == 2
        assert unknown.stderr.startswith(f"error: no run {run_id} on this Docker engine; runs there:")
        assert len(unknown.stderr.strip().splitlines()) == 1
        compose_up(tmp_path / "lab" / "compose.yaml")
        out = tmp_path / "run"
        done = _collect_telling_rank_1_once_both_run(tmp_path, run_id, out)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "failed"
        assert status["first_failure"]["rank"] == 1 and status["first_failure"]["exit_code"] == 3
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("error: lab failed: rank 1 on node 1 exited with code 3"), last
        assert "rank 1 gives up" in (out / "ranks" / "rank-1.log").read_text()
        assert "rank 0 of 2 on cfail-0" in (out / "ranks" / "rank-0.log").read_text()
        assert "First failure: rank 1" in (out / "report.md").read_text()
        assert left_of(run_id) == ("", "")
    finally:
        remove(run_id)


def _collect_telling_rank_1_once_both_run(tmp_path: Path, run_id: str, out: Path) -> subprocess.CompletedProcess:
    """`labctl collect --delete` of the failing lab; once its progress shows both nodes
    running (the event rank 1 waits for, was a 5 s sleep), SEEN is appended to the script."""
    said, err = tmp_path / "collect.out", tmp_path / "collect.err"
    argv = [sys.executable, "-m", "labctl.cli", "collect", "--backend", "compose", "--run-id", run_id,
            "--out", str(out), "--delete", "--timeout", "240"]
    with open(said, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=o, stderr=e, text=True)
    try:
        deadline = time.monotonic() + 240
        while not any(x.startswith("[") and x.count("running") == 2 for x in err.read_text().splitlines()):
            assert proc.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "collect never showed both nodes running: " + err.read_text()[-3000:]
            time.sleep(0.1)
        with open(tmp_path / "lab" / "fail.py", "a") as script:
            script.write(SEEN + "\n")
        proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, said.read_text(), err.read_text())


HANGING = """\
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(8)
for step in range(3):
    if dist.get_rank() == 1 and step == 1:
        continue                 # the bug: one all_reduce fewer on rank 1
    dist.all_reduce(t)
dist.barrier()
"""


def test_watch_of_a_compose_lab_docker_compose_started_names_its_hang_live(tmp_path):
    """`labctl watch --backend compose --run-id ID` on a rendered lab `docker compose up`
    started: its records come through the log stream, the hang is named while it hangs
    (status.json's live, before the lab's deadline), and the folder is collected after."""
    run_id = f"chang-{uuid.uuid4().hex[:8]}"
    # the deadline (70 s) is what ends the containers, and so the watch: the hang is named about
    # 20 s in here (containers up, torch imported, the 10 s window); containers start far slower
    # on a loaded machine (CI runs right after other work), so the room after it stays wide
    (tmp_path / "hang.py").write_text(HANGING)
    rendered = labctl("render", "compose", "--script", "hang.py", "--name", "chang", "--nodes", "2",
                      "--nproc-per-node", "1", "--run-id", run_id, "--timeout", "70", "-o", "lab", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    (tmp_path / "lab" / "hang.py").write_text(HANGING)
    try:
        compose_up(tmp_path / "lab" / "compose.yaml")
        done = labctl("watch", "--backend", "compose", "--run-id", run_id, cwd=tmp_path, timeout=400)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
        assert "HANG (live," in done.stderr
        status = json.loads((tmp_path / "runs" / run_id / "status.json").read_text())
        live = status["live"]
        # two ranks that called different collectives: either may be the odd one
        assert live["ranks"] in ([1], [0, 1]) and live["op"] in ("barrier", "all_reduce"), live
        assert "hang.py:8" in live["text"] and "hang.py:9" in live["text"], live
        assert live["verdict"] == "confirmed"       # the collect's finish said the same
        assert live["made_at"] - live["since"] < 30
        assert status["state"] == "running"          # the deadline came first: it was not stopped
    finally:
        remove(run_id)
