"""Shared fixtures: run labs for real, and prove nothing of a run is left running."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LABCTL = [sys.executable, "-m", "labctl.cli"]


def processes_of_run(run_id: str) -> list[int]:
    """PIDs whose environment carries LAB_RUN_ID=<run_id> (agents and workers alike)."""
    needle = f"LAB_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_nothing_left(run_id: str) -> None:
    deadline = time.monotonic() + 5
    while processes_of_run(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_of_run(run_id) == [], f"processes of {run_id} still running"


def labctl(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (as a user would)."""
    return subprocess.run([*LABCTL, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=kw.pop("cwd", REPO), **kw)


@contextlib.contextmanager
def labctl_in_background(folder: Path, *args: str):
    """The real CLI started and left running (a lab that mostly waits for its deadline, so
    other tests run meanwhile); its stdout and stderr go to files in `folder`, not pipes:
    nobody reads a pipe meanwhile, and a full one would stall the lab. Yields (process,
    stdout file, stderr file). A lab still running at the end (its test was not selected,
    or failed before waiting) is stopped: SIGTERM, then SIGKILL if it does not end."""
    stdout, stderr = folder / "stdout.txt", folder / "stderr.txt"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        proc = subprocess.Popen([*LABCTL, *args], cwd=REPO, stdout=out, stderr=err, text=True)
    try:
        yield proc, stdout, stderr
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def default_lab_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`labctl up`, the default lab (2 nodes x 2 processes, every default workload), run once
    for the whole session: tests/test_cli.py checks its folder and the CLI around it,
    tests/test_html_report.py its page, tests/test_tour.py the README's `labctl up` line.
    Run from a folder of its own with `--out run` (its stdout names `run/...`); its users
    only read it (the page's test has `labctl report --format html` write the same page
    again). Returns (run folder, the finished `labctl up`)."""
    folder = tmp_path_factory.mktemp("default-lab")
    done = labctl("up", "--out", "run", cwd=folder)
    return folder / "run", done


@pytest.fixture
def write_script(tmp_path):
    def write(body: str, name: str = "script.py") -> Path:
        path = tmp_path / name
        path.write_text(body)
        return path
    return write


def decided(result, rundir):
    """What a driver's result comes to before any log is read: labctl/verdict.py decides
    the state from what the driver saw (`result.seen`), as the finish does. The driver
    tests assert the lifecycle's rules through it."""
    from types import SimpleNamespace

    from labctl import verdict

    spec = rundir.spec
    evidence = verdict.Evidence(result.seen, spec.nodes, spec.fewest_nodes, False)
    record = verdict.decide(rundir.record, evidence, str(rundir.path))
    return SimpleNamespace(state=record.state, message=record.message, signal=record.signal,
                           outcomes=record.node_outcomes, notes=result.notes, kept=result.kept,
                           error=result.error, seen=result.seen)


def finalize(run, outcomes, state, message: str = "") -> None:
    """Finish a run folder (labctl/finish.py) as if the driver had seen `outcomes` and
    ended the lifecycle in `state` (passed: every node ended; failed: the backend saw the
    lab fail; timeout, interrupted, error; running: watched, still running)."""
    from labctl import finish
    from labctl.outcome import RunState
    from labctl.verdict import Ending, Seen

    state = RunState(state)
    ending = {RunState.PASSED: Ending.ALL_ENDED, RunState.FAILED: Ending.BACKEND_FAILURE,
              RunState.TIMEOUT: Ending.DEADLINE, RunState.INTERRUPTED: Ending.SIGNAL,
              RunState.ERROR: Ending.ERROR, RunState.RUNNING: Ending.WATCHED}[state]
    outcomes = list(outcomes)
    going = [o.index for o in outcomes if not o.state.ended] if state is RunState.RUNNING else []
    finish.finish(run, Seen(ending, outcomes, message, still_running=going,
                            why_still_running="still running"), lambda line: None)
