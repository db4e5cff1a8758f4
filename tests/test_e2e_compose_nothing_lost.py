"""Never lose a log, never report a pass not seen: the end of a compose run, for real.

- Ctrl-C at the terminal (SIGINT to labctl's whole process group) while labctl
  collects the logs of a lab whose rank 0 printed 40 MB and whose nodes all
  succeeded: the collection finishes (the `docker logs` child is not in that
  group), every byte is in the folder, the outcome is the lab's own, and the
  containers are removed only then. The script is named `d$USER.py`: compose
  must mount it where the plan runs it, whatever $USER is (issue 23, case 9).
- A collection that fails (`docker logs` broken at the edge, by a PATH shim)
  is an error and deletes nothing; the kept containers show the hardening
  (`docker inspect`); `labctl down` then saves every log and removes the lab.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docker_support import REPO, require_compose, require_image
from labctl.rendered import RUN_LABEL

pytestmark = pytest.mark.docker

LINES = 400_000          # rank 0 prints LINES x 100 bytes = 40 MB
CHATTY = f"""\
import sys
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    out = sys.stdout
    for i in range({LINES}):
        out.write(f"line {{i:08d}} " + "x" * 85 + "\\n")
    out.write("rank 0 done\\n")
    out.flush()
dist.barrier()
print(f"rank {{rank}} ok", flush=True)
dist.destroy_process_group()
"""

QUIET = """\
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ok", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module", autouse=True)
def _docker_and_image():
    require_compose()
    require_image()


def _containers(run_id: str) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}"],
                          capture_output=True, text=True, check=True).stdout.split()


def _nothing_left(run_id: str) -> bool:
    networks = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label={RUN_LABEL}={run_id}"],
                              capture_output=True, text=True, check=True).stdout.split()
    return not _containers(run_id) and not networks


def _children_reading_logs(pid: int) -> list[list[str]]:
    """argv of labctl's children that read container logs (`docker logs`, or the
    `docker compose logs` of older labctls), wherever their process group is."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"logs" in argv:
            found.append([a.decode() for a in argv if a])
    return found


def _wait_for(what: str, check, proc: subprocess.Popen, deadline_s: float = 300):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        assert proc.poll() is None, f"labctl ended (exit {proc.returncode}) before {what}"
        time.sleep(0.02)
    pytest.fail(f"no {what} within {deadline_s:g}s")


def test_ctrl_c_during_the_collection_loses_nothing_and_a_dollar_named_script_runs(tmp_path):
    script = tmp_path / "d$USER.py"
    script.write_text(CHATTY)
    out, progress = tmp_path / "run", tmp_path / "progress.txt"
    with open(progress, "w") as sink:
        up = subprocess.Popen([sys.executable, "-m", "labctl.cli", "up", "--backend", "compose",
                               "--script", script.name, "--name", "chatty", "--nodes", "2",
                               "--nproc-per-node", "1", "--out", str(out)], cwd=tmp_path,
                              stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                              env={**os.environ, "USER": "odd-user"})
    run_id = None
    try:
        # both nodes succeeded and labctl is reading a node's log: Ctrl-C, as a terminal sends it
        reader = _wait_for("`docker logs` child", lambda: _children_reading_logs(up.pid), up)
        run_id = json.loads((out / "status.json").read_text())["run_id"]
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=300)
        said = progress.read_text()
        assert up.returncode == 0, said[-3000:]
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "passed", said[-3000:]
        assert [n["state"] for n in status["node_outcomes"]] == ["succeeded", "succeeded"]
        assert "SIGINT: collecting the logs first" in said, said[-3000:]
        assert any("SIGINT arrived while the lab was being cleaned up; every log was collected"
                   in note for note in status["notes"])
        # every byte rank 0 printed, in its node log and its rank log, in order
        rank0 = (out / "ranks" / "rank-0.log").read_bytes()
        assert rank0.count(b"\n") >= LINES + 2 and rank0.count(b"x" * 85) == LINES
        assert f"line {LINES - 1:08d} ".encode() in rank0[-400:] or b"rank 0 done" in rank0[-400:]
        assert (out / "nodes" / "node-0.log").stat().st_size > LINES * 100
        assert b"rank 1 ok" in (out / "ranks" / "rank-1.log").read_bytes()
        assert any("logs" in a for a in reader[0]), reader
        assert _nothing_left(run_id), "the containers go only after their logs are saved"
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        if run_id is not None and not _nothing_left(run_id):
            subprocess.run([sys.executable, "-m", "labctl.cli", "down", "--discard-logs", str(out)],
                           cwd=tmp_path, capture_output=True, timeout=120)


BROKEN_LOGS = """\
#!/bin/sh
# `docker logs` fails as a broken engine would; every other docker call is the real one
if [ "$1" = "logs" ]; then echo "Error response from daemon: injected failure" >&2; exit 1; fi
exec {docker} "$@"
"""


def test_a_failed_collection_is_an_error_deletes_nothing_and_down_saves_the_logs(tmp_path):
    import shutil

    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "docker").write_text(BROKEN_LOGS.format(docker=shutil.which("docker")))
    (shim / "docker").chmod(0o755)
    (tmp_path / "quiet.py").write_text(QUIET)
    out = tmp_path / "run"
    run_id = None
    try:
        done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--backend", "compose",
                               "--script", "quiet.py", "--name", "kept", "--nodes", "2",
                               "--nproc-per-node", "1", "--out", str(out)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=400,
                              env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
        status = json.loads((out / "status.json").read_text())
        run_id = status["run_id"]
        said = done.stdout + done.stderr
        assert done.returncode == 1, said[-3000:]
        assert status["state"] == "error" and status["logs_uncollected"] is True
        assert status["message"].startswith("collecting the logs failed: docker logs kept-0 failed "
                                            "(exit 1): Error response from daemon: injected failure")
        assert f"`labctl down {out}` saves them" in status["message"]
        assert "nothing was deleted, so that no log is lost" in said
        # the containers are kept (their logs with them), and hardened as rendered
        ids = _containers(run_id)
        assert len(ids) == 2
        for info in json.loads(subprocess.run(["docker", "inspect", *ids], capture_output=True,
                                              text=True, check=True).stdout):
            host = info["HostConfig"]
            assert info["State"]["ExitCode"] == 0, "both nodes succeeded under the hardening"
            assert host["Memory"] == 2 << 30 and host["NanoCpus"] == 10**9
            assert host["PidsLimit"] == 4096
            assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
            assert host["ReadonlyRootfs"] is True
            assert "no-new-privileges:true" in host["SecurityOpt"]
            tmpfs = {m["Target"] for m in host["Mounts"] if m["Type"] == "tmpfs"}
            assert tmpfs == {"/tmp", "/work", "/home/lab"}
            assert host["ShmSize"] == 1 << 30
        # `labctl down` (real docker) saves every log first, keeps the state, then removes
        down = subprocess.run([sys.executable, "-m", "labctl.cli", "down", str(out)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=180)
        assert down.returncode == 0, down.stdout + down.stderr
        assert down.stdout.startswith(f"saved the logs into {out}")
        for rank in (0, 1):
            assert f"rank {rank} ok" in (out / "ranks" / f"rank-{rank}.log").read_text()
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "error" and "logs_uncollected" not in status
        assert status["message"].endswith("`labctl down` saved the logs afterwards")
        assert _nothing_left(run_id)
    finally:
        if run_id is not None and not _nothing_left(run_id):
            subprocess.run([sys.executable, "-m", "labctl.cli", "down", "--discard-logs", str(out)],
                           cwd=tmp_path, capture_output=True, timeout=120)


# 20,000 ops in all: their merge takes over a second here (the SIGINT, sent when it begins,
# lands within milliseconds); 40,000 took 14 s more of all_reduces between the containers
MANY_OPS = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for _ in range(10000):
    dist.all_reduce(t)
print(f"rank {dist.get_rank()} ok", flush=True)
dist.destroy_process_group()
"""


def test_ctrl_c_while_the_run_folder_is_finished_lets_it_finish(tmp_path):
    """Issue 28: both containers succeeded, their logs are collected, and labctl merges a
    20,000-op trace: Ctrl-C then is noted, the folder is finished (trace.json, report.md,
    the lab's own outcome: exit 0), and nothing is left."""
    script = tmp_path / "ops.py"
    script.write_text(MANY_OPS)
    out = tmp_path / "run"
    up = subprocess.Popen([sys.executable, "-m", "labctl.cli", "up", "--backend", "compose",
                           "--script", script.name, "--name", "finish", "--nodes", "2",
                           "--nproc-per-node", "1", "--trace", "--out", str(out)], cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    said, run_id = [], None
    try:
        for line in up.stderr:
            said.append(line)
            if line.startswith("finishing the run folder: merging the trace"):
                os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=300)
        text = "".join(said)
        run_id = json.loads((out / "status.json").read_text())["run_id"]
        assert up.returncode == 0, text[-3000:]
        assert "SIGINT: finishing the run folder first" in text, text[-3000:]
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "passed" and status["trace"]["ops"] == 20000, status
        assert any("SIGINT arrived while the run folder was being finished" in n
                   for n in status["notes"])
        assert (out / "report.md").is_file() and (out / "trace.json").is_file()
        assert sorted(p.name for p in out.rglob("*.tmp")) == []
        assert _nothing_left(run_id)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        if run_id is not None and not _nothing_left(run_id):
            subprocess.run([sys.executable, "-m", "labctl.cli", "down", "--discard-logs", str(out)],
                           cwd=tmp_path, capture_output=True, timeout=120)
