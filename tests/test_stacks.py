"""Every rank's stack at a hang: at the deadline and on demand (`labctl stacks`),
for a user script that knows nothing of labctl. Real processes and containers."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import LABCTL, REPO, assert_nothing_left, labctl, labctl_in_background, processes_of_run
from docker_support import compose_lab_in_background, require_compose, require_image
from labctl import stackdumps
from workloads import _proc, _stacks

HANG = """
import time, torch.distributed as dist
dist.init_process_group("gloo")
def sleep_forever():
    print("sleeping", flush=True)
    time.sleep(600)
if dist.get_rank() == 1:
    sleep_forever()
print("at the barrier", flush=True)
dist.barrier()
"""
DUMP = """\
Thread 0x00007f1 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f2 (most recent call first):
  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier
  File "/v/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/tmp/job.py", line 5 in wait_all
  File "/tmp/job.py", line 9 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "/w/workloads/_script.py", line 23 in main
""".splitlines()


def test_a_dump_names_the_innermost_own_frame_and_the_collective():
    tracker = stackdumps.StackTracker()
    for line in ["before", *DUMP, "after"]:
        tracker.feed(line)
    assert tracker.last == DUMP
    assert stackdumps.where_stuck(tracker.last) == {"file": "/tmp/job.py", "line": 5,
                                               "function": "wait_all", "call": "barrier"}
    # a trace line the flusher thread wrote to stdout lands amid the dump (docker merges
    # stdout and stderr as they come): the dump stays whole
    mixed = DUMP[:4] + ['[rank0]:@@labctl-trace {"k":"E","i":3,"t":1}'] + DUMP[4:]
    tracker = stackdumps.StackTracker()
    for line in ["before", *mixed, "after"]:
        tracker.feed(line)
    assert tracker.last == DUMP


def _check_stacks(out, user_script):
    status = json.loads((out / "status.json").read_text())
    where = status["stacks"]
    assert where["1"]["function"] == "sleep_forever" and where["1"]["file"] == str(user_script)
    assert where["0"]["call"] == "barrier"
    assert "sleep_forever" in (out / "stacks" / "rank-1.txt").read_text()
    return status


def _wait_for_lines(out, lines: tuple[str, ...], seconds: float = 120) -> None:
    """Until the run's node logs hold each of `lines` (the ranks printed them), polled; a
    loaded machine imports torch slowly, so the deadline is generous."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = "".join(p.read_text(errors="replace") for p in (out / "nodes").glob("*.log")) \
            if (out / "nodes").is_dir() else ""
        if all(line in text for line in lines):
            return
        time.sleep(0.2)
    pytest.fail(f"the ranks never printed {lines} in {seconds:.0f} s")


@pytest.fixture(scope="module")
def deadline_run(tmp_path_factory):
    """The deadline lab (HANG, direct launcher, --timeout 25), started in the background:
    once its ranks are in the hang it only waits for its deadline, so the live lab of
    test_labctl_stacks_asks_a_live_lab_without_stopping_it (which asks for this fixture and
    comes first) and the signal test after it run in that wait instead of after it. Output
    goes to files, not pipes: nobody reads a pipe meanwhile, and a full one would stall the lab."""
    folder = tmp_path_factory.mktemp("deadline")
    script = folder / "script.py"
    script.write_text(HANG)
    out = folder / "run"
    with labctl_in_background(folder, "up", "--script", str(script), "--nodes", "2", "--nproc-per-node", "1",
                              "--launcher", "direct", "--timeout", "25", "--out", str(out)) as (proc, stdout, _):
        yield proc, script, out, stdout


@pytest.fixture(scope="module")
def compose_deadline_run(tmp_path_factory):
    """The same deadline lab on compose (--timeout 40), started in the background with the
    local one when an engine, Compose and the image are there (else None: its test skips,
    or fails under CI, with the reason); its wait overlaps the module's local labs."""
    with compose_lab_in_background(tmp_path_factory.mktemp("compose-deadline"), HANG, "--nodes", "2",
                                   "--nproc-per-node", "1", "--timeout", "40") as started:
        yield started


@pytest.mark.slow
@pytest.mark.usefixtures("compose_deadline_run", "deadline_run")   # both wait for their deadlines meanwhile
def test_labctl_stacks_asks_a_live_lab_without_stopping_it(tmp_path, write_script):
    script = write_script(HANG)
    out = tmp_path / "run"
    proc = subprocess.Popen([*LABCTL, "up", "--script", str(script), "--nodes", "2",
                             "--nproc-per-node", "1", "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_lines(out, ("sleeping", "at the barrier"))     # rank 1 sleeps, rank 0 is at its barrier
        run_id = json.loads((out / "status.json").read_text())["run_id"]
        before = sorted(processes_of_run(run_id))
        done = labctl("stacks", str(out), timeout=120)
        assert done.returncode == 0, done.stderr
        assert "sleep_forever" in done.stdout and "barrier" in done.stdout
        assert (out / "stacks" / "rank-0.txt").is_file()
        assert sorted(processes_of_run(run_id)) == before, "asking must not stop anything"
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert_nothing_left(run_id)


ASKED = """
import os, subprocess, sys, time, torch, torch.distributed as dist
status = "import sys; print([l for l in open('/proc/self/status') if l.startswith('SigBlk')][0].split()[1])"
child = subprocess.run([sys.executable, "-c", status], capture_output=True, text=True).stdout.strip()
print("child SigBlk", child, flush=True)
if os.environ["RANK"] == "1":
    dist.init_process_group("gloo", init_method="file://" + os.environ["STORE"], rank=0, world_size=1)
    dist.all_reduce(torch.ones(3))
def sleep_forever():
    print("ready", flush=True)
    time.sleep(600)
sleep_forever()
"""


def _wait_for(path, predicate, what, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if predicate(text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"{what} never showed in {path}:\n{text[-2000:]}")


def test_asking_for_stacks_kills_no_rank_and_leaves_no_blocked_signal_to_children(tmp_path, write_script):
    """signal_ranks on two real rank processes of a user script (torch imported, one joined
    a group): both print their stacks, the joined one its Flight Recorder entries, both live
    on, and a subprocess a rank started has no signal blocked. (The SIGUSR2/sigwait dump
    thread killed a rank: torch's import starts a thread that did not block SIGUSR2.)"""
    script = write_script(ASKED)
    run_id = f"asked-{os.getpid()}-{time.monotonic_ns()}"
    logs_ = {rank: tmp_path / f"rank-{rank}.log" for rank in (0, 1)}
    procs = {}
    try:
        for rank, log in logs_.items():
            env = {**os.environ, "RANK": str(rank), "LAB_RUN_ID": run_id, "STORE": str(tmp_path / "store"),
                   "PYTHONPATH": str(REPO)}
            with open(log, "w") as out:
                procs[rank] = subprocess.Popen([sys.executable, "-m", "workloads._script", str(script)],
                                               stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        for log in logs_.values():
            _wait_for(log, lambda t: "ready" in t, "ready")
        asked = _stacks.signal_ranks(run_id)
        assert sorted(rank for _, rank in asked) == [0, 1]
        for log in logs_.values():
            text = _wait_for(log, lambda t: "in sleep_forever" in t, "the stack")
            blocked = int(text.split("child SigBlk ")[1].split()[0], 16)
            assert blocked == 0, f"a rank's child inherits blocked signals {blocked:#x}"
        fr = _wait_for(logs_[1], lambda t: '"done":' in t, "the Flight Recorder dump")
        entries = [json.loads(line.split("@@labctl-fr ", 1)[1]) for line in fr.splitlines()
                   if "@@labctl-fr " in line]
        assert [e["op"] for e in entries if "op" in e] == ["all_reduce"] and entries[-1]["done"] == 1
        assert '"done":' not in logs_[0].read_text()          # no group: nothing to dump
        assert all(p.poll() is None for p in procs.values()), "asking must not end a rank"
    finally:
        for p in procs.values():
            p.kill()
            p.wait(timeout=60)


@pytest.mark.slow
def test_the_deadline_takes_every_ranks_stack_before_stopping(deadline_run):
    """The direct launcher (no torchrun agent between labctl and the ranks); the same
    under torchrun is checked by tests/test_trace.py's hang lab."""
    proc, script, out, stdout = deadline_run
    assert proc.wait(timeout=300) == 1
    status = _check_stacks(out, script)
    assert status["state"] == "timeout"
    shown = stdout.read_text()
    assert "Where each rank was" in shown and "sleep_forever" in shown
    assert_nothing_left(status["run_id"])


@pytest.mark.docker
def test_stacks_at_the_deadline_on_compose(compose_deadline_run):
    require_compose()
    require_image()
    proc, _, out, stdout, _ = compose_deadline_run
    assert proc.wait(timeout=300) == 1, stdout.read_text()[-3000:]
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "timeout"
    where = status["stacks"]
    assert where["1"]["function"] == "sleep_forever" and where["0"]["call"] == "barrier"


FORKS = """
import faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGRTMIN + 6, file=sys.stderr, all_threads=True, chain=False)
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
os.write(1, f"parent {child}\\n".encode())
time.sleep(120)
"""


def test_only_the_rank_s_own_process_is_asked_not_a_child_it_forked(tmp_path):
    """A forked DataLoader worker inherits RANK and the stack dump: asked too, it printed
    its stack into the rank's log, and the rank's own stack was read as the worker's line."""
    script = tmp_path / "forks.py"
    script.write_text(FORKS)
    env = {**os.environ, "RANK": "1", "LAB_RUN_ID": f"forks-{os.getpid()}"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline().split()[1])
        deadline = time.monotonic() + 60
        while not _stacks._catches(child, _stacks.SIGNAL) or not _stacks._catches(proc.pid, _stacks.SIGNAL):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _stacks._rank_processes(env["LAB_RUN_ID"]) == [(proc.pid, "1")]
    finally:
        proc.kill()
        proc.wait()
        try:
            os.kill(child, 9)
        except (OSError, NameError):
            pass


def test_the_stack_signal_leaves_sigusr1_to_the_script(tmp_path):
    """A rank with the stack dump installed catches the lab's real-time signal and not
    SIGUSR1: schedulers send SIGUSR1 as a preemption notice, and a rank without a handler of
    its own must die of it as it does under plain torchrun (the zoo's
    sigusr1_handler_rank0_only ran to the end under the lab: its handler caught it)."""
    script = tmp_path / "job.py"
    script.write_text("import os, signal, sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "workloads._script", str(script)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        for line in proc.stdout:            # the recorder's records come first
            if line.strip() == "ready":
                break
        masks = _proc.signals(proc.pid)
        assert masks.catches(_stacks.SIGNAL) and not masks.catches(signal.SIGUSR1), masks
        assert _stacks.SIGNAL != signal.SIGUSR1 and _stacks.SIGNAL_NAME == "SIGRTMIN+6"
        os.kill(proc.pid, signal.SIGUSR1)
        assert proc.wait(timeout=60) == -signal.SIGUSR1
    finally:
        proc.kill()
        proc.wait()
