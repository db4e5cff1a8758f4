"""The local backend against a hostile user: labctl killed at the worst moment,
ranks that detach, exit early, raise, or squat on ports. Real processes only."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LABCTL, REPO, assert_nothing_left, labctl, processes_of_run

pytestmark = pytest.mark.slow

HANG = """
import time, torch.distributed as dist
dist.init_process_group("gloo")
print("hanging", flush=True)
time.sleep(600)
"""


def start_hanging_lab(tmp_path: Path, write_script) -> tuple[subprocess.Popen, Path, str]:
    """`labctl up` of a lab that hangs, returned once every rank said so."""
    out = tmp_path / "run"
    proc = subprocess.Popen([*LABCTL, "up", "--script", str(write_script(HANG)), "--nodes", "2",
                             "--nproc-per-node", "1", "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        logs = list((out / "nodes").glob("*.log")) if out.exists() else []
        if sum("hanging" in p.read_text() for p in logs) == 2:
            break
        time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("the lab never started hanging")
    run_id = json.loads((out / "status.json").read_text())["run_id"]
    assert len(processes_of_run(run_id)) >= 4, "guards, agents and workers should be running"
    return proc, out, run_id


def gone_within(run_id: str, seconds: float) -> float:
    t0 = time.monotonic()
    while processes_of_run(run_id) and time.monotonic() - t0 < seconds:
        time.sleep(0.1)
    assert processes_of_run(run_id) == [], f"processes of {run_id} outlived labctl"
    return time.monotonic() - t0


def wait_for_rank_logs(proc: subprocess.Popen, out: Path, text: str, ranks: int) -> None:
    deadline = time.monotonic() + 60
    logs = [out / "ranks" / f"rank-{r}.log" for r in range(ranks)]
    while time.monotonic() < deadline:
        if all(p.is_file() and text in p.read_text() for p in logs):
            return
        time.sleep(0.1)
    proc.kill()                           # its lab follows (lifeline)
    pytest.fail(f"rank logs without {text!r} while the lab runs")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP])
def test_no_lab_outlives_a_killed_labctl(tmp_path, write_script, sig):
    """Also, while labctl (torchrun launcher) is alive: the rank logs exist and hold what
    the ranks printed (was: empty until `labctl down`), `labctl down` refuses, naming
    labctl's pid (was: stopped it without a word), and `up --out` onto the folder is a
    refusal (exit 2, was 1); after a SIGKILL, `report --format json` says abandoned."""
    proc, out, run_id = start_hanging_lab(tmp_path, write_script)
    if sig == signal.SIGKILL:
        wait_for_rank_logs(proc, out, "hanging", 2)
        refused = labctl("down", str(out))
        assert refused.returncode == 2 and f"labctl pid {proc.pid}" in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert processes_of_run(run_id), "a refused down must leave the lab running"
        again = labctl("up", "-q", "--out", str(out))
        assert again.returncode == 2 and "not empty" in again.stderr, again.stderr
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    took = gone_within(run_id, 10)
    status = json.loads((out / "status.json").read_text())
    if sig == signal.SIGHUP:              # labctl itself handles SIGHUP: a finished folder
        assert proc.returncode == 129
        assert status["state"] == "interrupted" and status["signal"] == "SIGHUP"
        return
    assert status["state"] == "running", "a SIGKILLed labctl cannot write anything"
    assert "hanging" in (out / "ranks" / "rank-1.log").read_text()     # before `down`
    report = labctl("report", str(out))
    assert report.returncode == 0 and "ABANDONED" in report.stdout
    assert "is gone: abandoned" in report.stderr
    as_json = labctl("report", "--format", "json", str(out))
    assert json.loads(as_json.stdout)["status"]["state"] == "abandoned", as_json.stdout[:500]
    down = labctl("down", str(out))
    assert down.returncode == 0, down.stderr
    assert f"nothing running of run {run_id}" in down.stdout
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "abandoned" and status["finished"]
    assert all(n["state"] == "stopped" and "labctl is gone" in n["reason"]
               for n in status["node_outcomes"]), status["node_outcomes"]
    assert "hanging" in (out / "ranks" / "rank-1.log").read_text()
    assert took < 10


def test_ctrl_c_exits_130_and_reports_the_nodes_as_stopped(tmp_path, write_script):
    proc, out, run_id = start_hanging_lab(tmp_path, write_script)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 130 and "Traceback" not in stderr
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "interrupted"
    assert [n["state"] for n in status["node_outcomes"]] == ["stopped", "stopped"]
    assert all(n["reason"] == "stopped by labctl on SIGINT" for n in status["node_outcomes"])
    assert_nothing_left(run_id)


DETACH = """
import os, subprocess, sys, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    subprocess.Popen(["sleep", "1000"], start_new_session=True)          # a new session
    if os.fork() == 0:                                                   # and a double fork
        if os.fork() == 0:
            os.setsid()
            os.execvp("sleep", ["sleep", "1001"])
        os._exit(0)
open("written-by-rank-%d.txt" % dist.get_rank(), "w").write("mine")
dist.barrier()
"""


def test_detached_descendants_are_killed_and_reported_and_files_stay_in_the_run(tmp_path, write_script):
    out = tmp_path / "run"
    done = labctl("up", "--script", str(write_script(DETACH)), "--nodes", "2",
                  "--nproc-per-node", "1", "--out", str(out), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    status = json.loads((out / "status.json").read_text())
    commands = sorted(x["command"] for x in status["leftovers"])
    assert commands == ["sleep 1000", "sleep 1001"]
    # both from the one node that holds rank 1 (torchrun's rendezvous need not put it on node 1)
    assert len({x["node"] for x in status["leftovers"]}) == 1
    assert "Processes killed after the ranks ended" in done.stdout and "sleep 1001" in done.stdout
    assert_nothing_left(status["run_id"])
    assert not subprocess.run(["pgrep", "-f", "sleep 100[01]"], capture_output=True).stdout
    # each node wrote in its own working directory inside the run folder, not in the caller's
    # (which node holds which rank is torchrun's choice: one file in each node's directory)
    written = sorted((p.parent.name, p.name) for p in (out / "work").glob("node-*/written-by-*"))
    assert [node for node, _ in written] == ["node-0", "node-1"], written
    assert sorted(name for _, name in written) == ["written-by-rank-0.txt", "written-by-rank-1.txt"]
    assert all(p.read_text() == "mine" for p in (out / "work").glob("node-*/written-by-*"))
    assert not list(tmp_path.glob("written-by-*"))
    down = labctl("down", str(out))
    assert f"nothing running of run {status['run_id']}" in down.stdout


def test_workdir_invoking_runs_nodes_where_labctl_was_started(tmp_path, write_script):
    out = tmp_path / "run"
    done = labctl("up", "--script", str(write_script(DETACH.replace("if dist.get_rank() == 1", "if False"))),
                  "--nodes", "2", "--nproc-per-node", "1", "--out", str(out), "--workdir", "invoking",
                  cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("written-by-*")) == [
        "written-by-rank-0.txt", "written-by-rank-1.txt"]


LEAVE_EARLY = """
import os, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    os._exit(0)
dist.barrier()
"""


@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_a_rank_that_exits_0_early_is_named_as_the_culprit(tmp_path, write_script, launcher):
    out = tmp_path / "run"
    done = labctl("up", "--script", str(write_script(LEAVE_EARLY)), "--nodes", "2",
                  "--nproc-per-node", "1", "--launcher", launcher, "--out", str(out),
                  "--timeout", "120", timeout=300)
    assert done.returncode == 1
    status = json.loads((out / "status.json").read_text())
    first = status["first_failure"]
    agent_tail = [line[:200] for line in (out / "nodes" / "node-1.log").read_text().splitlines()
                  if not line.startswith(("[rank", "frame"))][-12:]
    # rank 1 left; which node holds it is torchrun's choice (its c10d rendezvous need not
    # give node 1 rank 1), so the culprit is named by rank
    assert first.get("left_early") is True and first["rank"] == 1, (first, status["node_outcomes"], agent_tail)
    assert "left the group early" in done.stderr.splitlines()[-1]
    assert "left the group early" in (out / "report.md").read_text()


def test_the_early_leaver_is_named_when_labctl_stops_its_agent_at_the_exit_barrier(
        tmp_path, write_script, monkeypatch):
    """torchrun's agent waits at its exit barrier once its workers ended; under load the
    grace can end first and labctl stops it there (a CI flake): its guard says the agent
    had no workers left, and rank 1 is still the one that left early."""
    from labctl import driver, lab, spec

    monkeypatch.setattr(driver, "FAILURE_GRACE_S", 0.3)   # stop the others at once
    run = lab.up(spec.from_dict({"script": str(write_script(LEAVE_EARLY)), "nodes": 2,
                                 "nproc_per_node": 1, "timeout": 120}),
                 out=str(tmp_path / "run"), progress=lambda line: None)
    first = run.status["first_failure"]
    stopped = [n for n in run.status["node_outcomes"] if n["state"] == "stopped"]
    assert first.get("left_early") is True and first["rank"] == 1, (first, run.status["node_outcomes"])
    assert [n["index"] for n in stopped] == [first["node"]]
    assert "had no workers left" in run.node_log(first["node"]).read_text()


RAISE = """
import torch.distributed as dist
dist.init_process_group("gloo")
def check_learning_rate(lr):
    if dist.get_rank() == 1:
        raise ValueError(f"learning rate {lr} is negative")
check_learning_rate(-0.1)
dist.barrier()
"""


@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_the_exception_and_its_line_are_quoted_everywhere(tmp_path, write_script, launcher):
    script = write_script(RAISE, "train.py")
    out = tmp_path / "run"
    done = labctl("up", "--script", str(script), "--nodes", "2", "--nproc-per-node", "1",
                  "--launcher", launcher, "--out", str(out), timeout=300)
    assert done.returncode == 1
    quote = "ValueError: learning rate -0.1 is negative"
    where = f"{script}:6"
    status = json.loads((out / "status.json").read_text())
    error = status["first_failure"]["error"]
    assert status["first_failure"]["rank"] == 1
    assert error["exception"] == quote and f"{error['file']}:{error['line']}" == where
    assert error["function"] == "check_learning_rate"
    last = done.stderr.splitlines()[-1]
    assert quote in last and where in last
    assert quote in (out / "report.md").read_text()


def test_a_taken_rendezvous_port_is_refused_before_starting(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        done = labctl("up", "--rdzv-port", str(port), "--out", str(tmp_path / "run"), timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: rendezvous port {port} on 127.0.0.1 is already in use (EADDRINUSE); "
        "choose another --rdzv-port or leave it out for a free one"]
    assert not (tmp_path / "run").exists()


def test_nccl_without_a_gpu_is_refused_before_starting(tmp_path):
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU")
    done = labctl("up", "--dist-backend", "nccl", "--nodes", "1", "--nproc-per-node", "1",
                  "--out", str(tmp_path / "run"), timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "nccl needs a GPU per worker" in lines[0] and "has 0" in lines[0]
    assert not (tmp_path / "run").exists()


def test_a_damaged_results_file_is_a_warning_not_a_traceback(tmp_path):
    out = tmp_path / "run"
    done = labctl("up", "--workload", "barrier", "--nodes", "1", "--nproc-per-node", "2",
                  "--out", str(out), timeout=300)
    assert done.returncode == 0, done.stderr
    with open(out / "results.jsonl", "a") as f:
        f.write("{bad\n")
    lines = (out / "results.jsonl").read_text().count("\n")
    for command in (["report", str(out)], ["report", str(out), "--format", "json"],
                    ["compare", str(out), str(out)], ["logs", str(out)]):
        result = labctl(*command)
        assert "Traceback" not in result.stderr, command
    report = labctl("report", str(out))
    assert report.returncode == 0
    assert f"results.jsonl:{lines}: skipped a garbled result line" in report.stderr


BIG = """
import sys, torch.distributed as dist
dist.init_process_group("gloo")
line = "x" * 1023 + "\\n"
for _ in range({mib} * 1024):
    sys.stdout.write(line)
sys.stdout.flush()
dist.barrier()
"""


def peak_rss_mib(argv: list[str], cwd: Path) -> tuple[int, float]:
    """Run `argv`; its own peak RSS (VmHWM, sampled until it exits) in MiB, and its exit code."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    return proc.returncode, peak / 1024


def test_a_rank_printing_a_lot_does_not_grow_labctl(tmp_path, write_script):
    """200 MiB from one rank: labctl's peak RSS stays flat, and the log is whole."""
    out = tmp_path / "run"
    code, peak = peak_rss_mib([*LABCTL, "up", "-q", "--script", str(write_script(BIG.format(mib=200))),
                               "--nodes", "2", "--nproc-per-node", "1", "--launcher", "direct",
                               "--out", str(out)], REPO)
    assert code == 0
    assert (out / "ranks" / "rank-0.log").stat().st_size >= 200 * 1024 * 1024
    assert json.loads((out / "status.json").read_text())["state"] == "passed"
    assert peak < 100, f"labctl's peak RSS was {peak:.0f} MiB for 200 MiB of rank output"


WAIT = """
import os, time
print("ready", flush=True)
while not os.path.exists("never"):
    time.sleep(0.2)
"""


def test_down_force_stops_a_run_whose_labctl_is_alive_through_that_labctl(tmp_path, write_script):
    """`labctl down --force` of a live run: its labctl is asked to stop (SIGTERM) and
    writes the folder itself (interrupted), then nothing is left."""
    out = tmp_path / "run"
    proc = subprocess.Popen([*LABCTL, "up", "-q", "--script", str(write_script(WAIT)), "--launcher",
                             "direct", "--nodes", "1", "--nproc-per-node", "1", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_rank_logs(proc, out, "ready", 1)
    run_id = json.loads((out / "status.json").read_text())["run_id"]
    down = labctl("down", "--force", str(out))
    assert down.returncode == 0 and "Traceback" not in down.stderr, down.stderr
    assert f"pid {proc.pid}" in down.stderr
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "interrupted" and status["signal"] == "SIGTERM"
    assert_nothing_left(run_id)
