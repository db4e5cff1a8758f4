"""`labctl exercise` (labctl/exercise*.py, workloads/_exercise.py): real labs grade real files.

The reference solutions and the classic mistakes live in tests/exercises/ (never in the
package: `init` hands out no answer). One lab (2 x 2 local ranks, so world sizes 4, 3
and 2) runs every reference and the mistakes that do not end a lab; each mistake that
ends one (a deadlock, a raise, a call that never returns) gets its own, through the CLI
as a learner runs it. The pattern exercises (column-parallel, 1F1B, ring attention, MoE)
are tests/test_exercise_patterns.py's.
"""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from conftest import LABCTL, REPO, assert_nothing_left, labctl, labctl_in_background
from docker_support import require_compose, require_image
from labctl import exercise as ex
from labctl import exercise_checks as checks
from labctl.rendered import RUN_LABEL
from labctl.spec import SpecError
from workloads._protocol.exercises import EXERCISES, PATTERNS, Call, Config, traffic, worlds

HERE = Path(__file__).resolve().parent / "exercises"
REFERENCES = {"ring_allreduce": "ring_allreduce.py", "naive_allreduce": "naive_allreduce.py",
              "tree_broadcast": "tree_broadcast.py", "ring_allgather": "ring_allgather.py",
              "reduce_scatter": "reduce_scatter.py", "all_to_all": "all_to_all.py",
              "average_gradients": "average_gradients.py"}
MISTAKES = {"whole tensor": ("ring_allreduce", "ring_whole_tensor.py"),
            "wrong chunks": ("ring_allreduce", "ring_wrong_chunks.py"),
            "calls all_reduce": ("ring_allreduce", "ring_calls_all_reduce.py"),
            "linear broadcast": ("tree_broadcast", "tree_linear.py")}
ISSUE_52 = {"through the store": ("ring_allreduce", "ring_through_store.py"),     # item 7: must fail
            "padded ring": ("ring_allreduce", "ring_padded.py")}                 # item 8: must pass


# ---------------------------------------------------------------- one lab, many files

@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Every reference and every mistake that lets the lab go on, in one 2 x 2 lab."""
    out = tmp_path_factory.mktemp("exercise") / "run"
    named = [*((n, f) for n, f in REFERENCES.items()), *MISTAKES.values(), *ISSUE_52.values()]
    entries = [ex.entry(name, str(HERE / file)) for name, file in named]
    spec = ex.lab_spec(entries, None, {"out": str(out)}, ex.settings())
    run, grades = ex.check(spec, entries, progress=lambda line: None)
    by_file = {g.file.name: g for g in grades}
    yield run, by_file
    assert_nothing_left(run.status["run_id"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REFERENCES))
def test_each_reference_solution_passes_every_check_on_4_3_and_2_ranks(shared, name):
    run, grades = shared
    g = grades[REFERENCES[name]]
    assert g.worlds == [4, 3, 2]
    assert g.passed, ex.text([g], run)
    for world in (4, 3, 2):
        for check in (ex.Check.VALUES, ex.Check.TRAFFIC, ex.Check.WAITS, ex.Check.DEADLINE):
            assert g.cells[(check, world)].ok is True, (check, world, g.cells[(check, world)])
        only = g.cells[(ex.Check.ONLY_P2P, world)]
        assert only.ok is (True if EXERCISES[name].only_p2p else None)
    assert " ms (" in g.cells[(ex.Check.TIME, 4)].text        # timed against torch's, not graded
    assert g.cells[(ex.Check.TIME, 4)].ok is None


@pytest.mark.slow
def test_the_traffic_of_a_reference_is_read_from_the_trace(shared):
    """A correct ring sends exactly its optimum in all (1.00x), a tree too: the bytes are
    the trace's sends inside each call's window, not a formula applied to nothing."""
    _, grades = shared
    for file in ("ring_allreduce.py", "tree_broadcast.py", "ring_allgather.py", "all_to_all.py"):
        for world in (4, 3, 2):
            assert grades[file].cells[(ex.Check.TRAFFIC, world)].text == "1.00x", (file, world)
    assert grades["average_gradients.py"].cells[(ex.Check.TRAFFIC, 4)].text == "1.00x"


@pytest.mark.slow
def test_the_whole_tensor_around_the_ring_fails_on_traffic_at_3_and_4_ranks(shared):
    run, grades = shared
    g = grades["ring_whole_tensor.py"]
    assert not g.passed
    assert all(g.cells[(ex.Check.VALUES, w)].ok for w in (4, 3, 2))       # the values are right
    assert g.cells[(ex.Check.TRAFFIC, 4)].text == "FAIL 2.00x"            # n/2 times the optimum
    assert g.cells[(ex.Check.TRAFFIC, 3)].text == "FAIL 1.50x"
    assert g.cells[(ex.Check.TRAFFIC, 2)].ok is True                      # at n = 2 it is the optimum
    said = [f.text for f in g.findings]
    assert any("sent 2.0x the optimum" in t and "passing the whole tensor" in t for t in said), said
    assert [f.check for f in g.findings] == [ex.Check.TRAFFIC, ex.Check.TRAFFIC]
    # what was extra, beyond the padding a ring may need (world 4: chunks of ceil(S/4))
    (four,) = [t for t in said if "world size 4" in t]
    assert "adds at most 1.1 KiB): 118.4 KiB was extra beyond that padding: are you passing" in four, four


@pytest.mark.slow
def test_values_that_arrive_through_the_store_fail_beside_a_decoy_ring_of_the_optimal_bytes(shared):
    """Issue 52 item 7: each rank's `send` set into the lab's default store, a ring of zeros
    sending exactly the optimum beside it, and `recv` the sum of what the store hands back.
    Values, bytes, waits and deadline are all right; the store's methods, counted while
    each call ran, fail it."""
    run, grades = shared
    g = grades["ring_through_store.py"]
    assert not g.passed
    for world in (4, 3, 2):
        assert g.cells[(ex.Check.VALUES, world)].ok and g.cells[(ex.Check.WAITS, world)].ok
        assert g.cells[(ex.Check.TRAFFIC, world)].text == "1.00x"          # the decoy: exactly the optimum
        assert g.cells[(ex.Check.ONLY_P2P, world)].text == "FAIL"
    (said,) = g.findings
    assert said.check is ex.Check.ONLY_P2P
    assert said.text.startswith("values arrived through the store (world size 4: ranks 0, 1, 2, 3 called "
                                "store.get, store.set (the lab's key-value store) in 12 of 12 cases, the first "
                                "at ring_through_store.py:30 (store.set("), said.text
    assert "never the store's" in said.text
    assert g.headline().startswith("values arrived through the store (world size 4")


@pytest.mark.slow
def test_a_ring_whose_chunks_are_padded_to_equal_size_passes_traffic(shared):
    """Issue 52 item 8: a ring on chunks of ceil(S/n) elements (n not dividing S) sends
    n x 2(n-1) x ceil(S/n) in all, the padding its chunking needs: allowed, and said."""
    run, grades = shared
    g = grades["ring_padded.py"]
    assert g.passed, ex.text([g], run)
    assert g.cells[(ex.Check.TRAFFIC, 4)].text == "1.01x padded"
    assert all(g.cells[(ex.Check.TRAFFIC, w)].ok for w in (4, 3, 2))


@pytest.mark.slow
def test_chunks_that_miss_the_remainder_fail_on_values_at_3_ranks(shared):
    _, grades = shared
    g = grades["ring_wrong_chunks.py"]
    assert g.cells[(ex.Check.VALUES, 3)].text == "FAIL"
    (three,) = [f.text for f in g.findings if f.world == 3]
    assert "values wrong at world size 3" in three
    assert "a size that 3 does not divide (5, 1001)" in three and "torch.tensor_split" in three
    assert g.cells[(ex.Check.TRAFFIC, 3)].ok and g.cells[(ex.Check.DEADLINE, 3)].ok


@pytest.mark.slow
def test_a_collective_inside_the_function_is_named_with_its_line(shared):
    _, grades = shared
    g = grades["ring_calls_all_reduce.py"]
    assert all(g.cells[(ex.Check.VALUES, w)].ok for w in (4, 3, 2))
    assert all(g.cells[(ex.Check.ONLY_P2P, w)].text == "FAIL" for w in (4, 3, 2))
    (said,) = [f.text for f in g.findings]
    assert said.startswith("you called all_reduce at ring_calls_all_reduce.py:7: ")


@pytest.mark.slow
def test_src_sending_to_every_rank_is_not_a_tree(shared):
    _, grades = shared
    g = grades["tree_linear.py"]
    assert g.cells[(ex.Check.TRAFFIC, 4)].text == "FAIL 1.50x"
    assert g.cells[(ex.Check.TRAFFIC, 3)].ok         # at 3 ranks a tree's root sends twice too
    (said,) = [f.text for f in g.findings]
    assert "sent 1.5x the most one rank needs" in said and "is src sending to every rank" in said


@pytest.mark.slow
def test_a_shared_lab_keeps_to_one_run_and_leaves_nothing(shared):
    run, _ = shared
    assert run.status["world_size"] == 4
    assert run.spec.trace and run.spec.script.endswith("ring_allreduce.py")
    assert_nothing_left(run.status["run_id"])


# ---------------------------------------------------------------- labs that stop early, as a learner sees them

def _check_cli(tmp_path: Path, name: str, file: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = labctl("exercise", "check", name, str(HERE / file), "-q", "--no-time", "--out",
                  str(tmp_path / "run"), *args, timeout=400, cwd=tmp_path)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    return done, status


LEAKED_TIMEOUT_S = 45


@pytest.fixture(scope="module")
def leaked_thread_lab(tmp_path_factory):
    """The lab of a right all_to_all that leaves a thread running (leaks_a_thread.py),
    started in the background by the module's first lab of its own: after its calls it
    only waits for the lab's timeout, and the tests between run meanwhile."""
    folder = tmp_path_factory.mktemp("leaks")
    out = folder / "run"
    with labctl_in_background(folder, "exercise", "check", "all_to_all", str(HERE / "leaks_a_thread.py"), "-q",
                              "--no-time", "--out", str(out), "--timeout", str(LEAKED_TIMEOUT_S)) as (proc, stdout, stderr):
        yield proc, out, stdout, stderr


@pytest.mark.slow
def test_a_blocking_ring_deadlocks_and_each_rank_s_send_is_named_within_the_deadline(tmp_path, leaked_thread_lab):
    done, status = _check_cli(tmp_path, "ring_allreduce", "ring_blocking.py")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ring_allreduce (ring_blocking.py): deadline at world size 4")
    assert last.endswith("no rank's call returned within 5 s (a deadlock: every rank waits in a send); "
                         f"run folder {tmp_path / 'run'}")
    for rank in range(4):     # who waits in which send for whom, from the hang diagnosis
        assert (f"rank {rank} never finished send to rank {(rank + 1) % 4} (p2p #1 of default_pg, "
                f"at ring_blocking.py:14)") in done.stdout
    assert "dist.isend" in done.stdout                 # and what to do about it
    assert "world size 3, 2: not run (the lab stopped at world size 4)" in done.stdout
    # the deadline ended it (5 s), not the lab's own timeout (300 s)
    assert status["state"] == "failed" and status["seconds"] < 150
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_a_function_that_raises_on_one_rank_is_one_line(tmp_path):
    done, status = _check_cli(tmp_path, "ring_allreduce", "raises.py")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: ring_allreduce (raises.py): your function raised ValueError: rank 1 gives up at "
        "raises.py:7 (raise ValueError(\"rank 1 gives up\")) on rank 1 (world size 4, int64 arange, "
        f"1 element); run folder {tmp_path / 'run'}")
    assert "Traceback" not in done.stdout + done.stderr
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_a_function_that_never_returns_on_one_rank_is_one_line(tmp_path):
    done, status = _check_cli(tmp_path, "ring_allreduce", "never_returns.py", "--deadline", "3")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ring_allreduce (never_returns.py): deadline at world size 4, int64 arange, "
                           "1 element: rank 2's call did not return within 3 s at never_returns.py:10 "
                           "(time.sleep(3600)); ranks 0, 1, 3 had returned")
    assert status["seconds"] < 150
    assert_nothing_left(status["run_id"])


# ---------------------------------------------------------------- hostile files and the lab's end decide first

@pytest.mark.slow
def test_a_collective_below_torch_s_functions_fails_values_arrived_without_a_send(tmp_path):
    """gloo's own all-to-all on the process group's backend object: the trace sees no op,
    so the bytes sent are 0 while every value is right, which no send/recv schedule can do."""
    done, status = _check_cli(tmp_path, "all_to_all", "all_to_all_backend.py")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: all_to_all (all_to_all_backend.py): values arrived without any send you "
                           "issued: a collective did the work (world size 4: ranks 0, 1, 2, 3 got right "
                           "values with 0 bytes sent to them in 12 of 12 cases"), last
    assert "all_to_all_backend.py:8 calls _get_backend (a process group's backend" in last
    assert "| values | pass | pass | pass |" in done.stdout
    assert "| only p2p | FAIL | FAIL | FAIL |" in done.stdout
    assert "| traffic | FAIL 0.00x | FAIL 0.00x | FAIL 0.00x |" in done.stdout
    assert "passed" not in done.stdout
    assert status["state"] == "failed" and status["message"].startswith("all_to_all (all_to_all_backend.py): "
                                                                          "values arrived without any send")
    assert [c["name"] for c in status["failed_checks"]] == ["only p2p"]
    assert "# Lab lab: FAILED" in (tmp_path / "run" / "report.md").read_text()
    assert_nothing_left(status["run_id"])


def _wait_for_a_call(proc: subprocess.Popen, out: Path) -> None:
    """Until rank 0's log holds a call's record: the ranks run the learner's function."""
    log = out / "ranks" / "rank-0.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if log.is_file() and '"name": "call"' in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"labctl ended (exit {proc.returncode}) before any call"
        time.sleep(0.05)
    proc.kill()
    pytest.fail("no call recorded within 120 s")


@pytest.mark.slow
def test_ctrl_c_mid_run_exits_130_and_says_interrupted_not_a_failed_check(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([*LABCTL, "exercise", "check", "ring_allreduce", str(HERE / "never_returns.py"),
                             "-q", "--no-time", "--deadline", "120", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    _wait_for_a_call(proc, out)          # rank 2 sleeps in its first call, the others wait for it
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip().splitlines()[-1] == (f"error: ring_allreduce (never_returns.py): interrupted (SIGINT): "
                                               f"not graded; run folder {out}")
    assert "## ring_allreduce (never_returns.py): interrupted (SIGINT)" in stdout
    assert "FAILED" not in stdout + stderr and "Traceback" not in stderr
    status = json.loads((out / "status.json").read_text())
    assert (status["state"], status["signal"]) == ("interrupted", "SIGINT")
    assert_nothing_left(status["run_id"])


def _signal_at(lines: list[str], sig: int = signal.SIGINT) -> Callable[[str], None]:
    """A progress callback that sends this process `sig` once per progress line that
    starts with one of `lines` (in order): a signal at a known step, no timing."""
    left = list(lines)

    def progress(line: str) -> None:
        if left and line.startswith(left[0]):
            left.pop(0)
            os.kill(os.getpid(), sig)
    return progress


@pytest.mark.slow
@pytest.mark.parametrize("when, state, code", [
    ("one in the finish", "passed", 0),
    ("two in the finish", "interrupted", 130),
    ("one in the finish, one while grading", "interrupted", 130),
])
def test_ctrl_c_during_the_finish_gives_one_answer_on_the_terminal_the_exit_and_status_json(
        tmp_path, monkeypatch, when, state, code):
    """The finish notes a first signal and finishes; a second cuts the step under way short
    (the finish's, or the grade's): `answer` (the last line, the exit code) and
    status.json then say the same, whichever step it was."""
    entry = ex.entry("all_to_all", str(HERE / "all_to_all.py"))
    spec = ex.lab_spec([entry], None, {"out": str(tmp_path / "run")}, ex.settings(time=False))
    steps = {"one in the finish": ["finishing the run folder: splitting"],
             "two in the finish": ["finishing the run folder: splitting", "finishing the run folder: writing"],
             "one in the finish, one while grading": ["finishing the run folder: splitting", "grading"]}[when]
    progress = _signal_at(steps)
    real_grade = ex.grade

    def grade(run, entries):             # a progress line at the grade's start: its step
        progress("grading")
        return real_grade(run, entries)
    monkeypatch.setattr(ex, "grade", grade)
    with ex.held_signals() as signals:
        run, grades = ex.check(spec, [entry], progress=progress, signals=signals)
        said = ex.answer(run, grades)
    status = json.loads((run.path / "status.json").read_text())
    assert (status["state"], said.code, said.passed) == (state, code, code == 0), (status["message"], said)
    if code:
        assert said.line.startswith("all_to_all (all_to_all.py): interrupted (SIGINT)") and status["signal"] == "SIGINT"
    else:
        assert said.line == "passed: all_to_all (all_to_all.py) on world sizes 4, 3, 2"
        assert any("SIGINT arrived while the run folder was being finished" in n for n in status["notes"])
    assert_nothing_left(status["run_id"])


@pytest.mark.slow
def test_a_thread_left_running_fails_as_the_lab_s_timeout_and_is_named(leaked_thread_lab):
    """Every call right and in time, but a thread that is not a daemon keeps each rank
    alive: the lab's timeout ends it, and that decides before any check passes."""
    proc, out, stdout_file, stderr_file = leaked_thread_lab
    returncode = proc.wait(timeout=400)
    stdout, stderr = stdout_file.read_text(), stderr_file.read_text()
    status = json.loads((out / "status.json").read_text())
    assert returncode == 1, stdout + stderr
    assert stderr.strip().splitlines()[-1] == (
        f"error: all_to_all (leaks_a_thread.py): the lab's timeout ({LEAKED_TIMEOUT_S} s, --timeout) came after every "
        "call had returned: ranks 0, 1, 2, 3 did not end (108 threads your function started still ran); "
        f"run folder {out}")
    assert "## all_to_all (leaks_a_thread.py): FAILED: deadline" in stdout
    assert "target time.sleep; the first left by world size 4, int64 arange, 1 element" in stdout
    assert "daemon=True" in stdout and "passed" not in stdout
    assert status["state"] == "timeout" and [c["name"] for c in status["failed_checks"]] == ["deadline"]
    assert_nothing_left(status["run_id"])


def test_right_values_with_far_fewer_bytes_than_they_need_are_not_p2p():
    """The rule on hand-made calls: what each rank must receive (the others' data) against
    the sends to it that the trace saw; a rank without any trace record is unknown."""
    def op(kind, peer, nbytes):
        return SimpleNamespace(op=kind, peer=peer, nbytes=nbytes, caller="x.py:3", begin=0, end=1)

    def call(rank, ok=True):
        return Call(0, "all_to_all", 2, rank, 0, "int64 arange, 12 elements", ok, "", 0, 1, 12, 8)

    def grade(called, traced=frozenset({0, 1}), calls=None):
        g = ex.Grade(EXERCISES["all_to_all"], HERE / "all_to_all.py", [2])
        checks.arrived(g, 2, calls or [call(0), call(1)], called, set(traced))
        return g

    both = {(0, 0): [op("isend", 1, 96), op("irecv", 1, 96)], (0, 1): [op("isend", 0, 96), op("irecv", 0, 96)]}
    assert grade(both).findings == []                                   # the optimum: S each way
    quarter = {(0, 0): [op("isend", 1, 24)], (0, 1): [op("isend", 0, 96)]}
    (said,) = grade(quarter).findings
    assert said.text.startswith("values arrived with far fewer bytes than any send/recv schedule needs: a "
                                "collective did the work (world size 2: 1 right call, e.g. rank 1 "
                                "in int64 arange, 12 elements was sent 24 B where its values need at least 96 B")
    assert grade(quarter).cells[(ex.Check.ONLY_P2P, 2)].ok is False
    assert grade({}, traced={0}).findings == []                         # rank 1's trace is missing
    assert grade({}, calls=[call(0, ok=False), call(1, ok=False)]).findings == []   # wrong values: values' to say
    (nothing,) = grade({}).findings
    assert nothing.short.startswith("values arrived without any send you issued: a collective did the work "
                                    "(world size 2: ranks 0, 1 got right values with 0 bytes sent to them in 1 "
                                    "of 1 cases")



def test_the_traffic_allowance_is_the_padding_the_ring_s_chunks_need_and_no_more():
    """Issue 52 item 8, the rule on hand-made calls: a ring at n = 4 on 5 int64 elements
    (chunks of ceil(5/4) = 2) may send 2(n-1) x 2 elements a rank; one element more per
    message fails, and the line says how much was extra beyond that padding and asks
    about the chunks, not the whole tensor."""
    def ring_call(rank):
        return Call(0, "ring_allreduce", 4, rank, 0, "int64 arange, 5 elements", True, "", 0, 1, 5, 8)

    def grade(elements_per_message):
        sent = [SimpleNamespace(op="isend", peer=(r + 1) % 4, nbytes=elements_per_message * 8, caller="x.py:3",
                                begin=0, end=1) for r in range(4)]
        called = {(0, r): [sent[r]] * 6 for r in range(4)}          # 2(n-1) messages a rank
        g = ex.Grade(EXERCISES["ring_allreduce"], HERE / "ring_padded.py", [4])
        checks.traffic_check(g, 4, [ring_call(r) for r in range(4)], called)
        return g

    padded = grade(2)                                               # 4 x 6 x 2 x 8 = 384 B, optimum 240 B
    assert padded.cells[(ex.Check.TRAFFIC, 4)] == checks.Cell(True, "1.60x padded") and padded.findings == []
    over = grade(3)                                                 # 576 B: 192 B past the padding
    assert over.cells[(ex.Check.TRAFFIC, 4)].ok is False
    (said,) = over.findings
    assert "adds at most 144 B): 192 B was extra beyond that padding" in said.text, said.text
    assert "are the chunks larger than ceil(S/n) elements?" in said.text and "whole tensor" not in said.text


# ---------------------------------------------------------------- compose

@pytest.mark.slow
@pytest.mark.docker
def test_check_on_compose_passes_a_reference_solution(tmp_path):
    require_compose()
    require_image()
    done = labctl("exercise", "check", "ring_allreduce", str(HERE / "ring_allreduce.py"), "-q",
                  "--no-time", "--backend", "compose", "--out", str(tmp_path / "run"),
                  timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| traffic | 1.00x | 1.00x | 1.00x |" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "passed: ring_allreduce (ring_allreduce.py) on world sizes 4, 3, 2"
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["backend"] == "compose"
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={RUN_LABEL}={status['run_id']}"],
                          capture_output=True, text=True, check=True).stdout
    assert left.strip() == ""


# ---------------------------------------------------------------- bad input: one line, exit 2, no lab

@pytest.mark.parametrize("args, line", [
    (["ring_allreduce", "missing.py"],
     "error: missing.py: no such file (write a starter with: labctl exercise init ring_allreduce missing.py)"),
    (["ring_allreduce", "nofunction.py"],
     "error: nofunction.py: no function allreduce() at its top level; ring_allreduce needs "
     "allreduce(send, recv) (a starter: labctl exercise init ring_allreduce NEW_FILE.py)"),
    (["ring_allreduce", "broken.py"], "error: broken.py:2: syntax error: '(' was never closed"),
    (["ring_allreduce", "notes.txt"], "error: notes.txt: expected a .py file (your allreduce(send, recv))"),
    (["ring_allreduce", "."], "error: .: not a file (expected the Python file with your allreduce)"),
    (["ring", "nofunction.py"],
     "error: exercise: expected one of ring_allreduce, naive_allreduce, tree_broadcast, ring_allgather, "
     "reduce_scatter, all_to_all, average_gradients, column_parallel, pipeline_1f1b, ring_attention, "
     "moe_dispatch, given 'ring' (labctl exercise list)"),
    (["ring_allreduce", "good.py", "--nodes", "1", "--nproc-per-node", "1"],
     "error: exercise check: needs at least 2 ranks, the lab has 1 (--nodes x --nproc-per-node; default 2 x 2)"),
    (["ring_allreduce", "good.py", "--replicas", "2"],
     "error: exercise check: --replicas must be 1 (each replica would be graded apart)"),
    (["ring_allreduce", "good.py", "--max-restarts", "1"],
     "error: exercise check: not on an elastic lab (--max-restarts, --min-nodes): a restart or a "
     "smaller world would hide a deadlock"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_lab(tmp_path, args, line):
    (tmp_path / "nofunction.py").write_text("import torch\n\ndef all_reduce(send, recv):\n    pass\n")
    (tmp_path / "broken.py").write_text("def allreduce(send, recv):\n    return (\n")
    (tmp_path / "notes.txt").write_text("def allreduce(send, recv): pass\n")
    (tmp_path / "good.py").write_text("def allreduce(send, recv):\n    recv.copy_(send)\n")
    done = labctl("exercise", "check", *args, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "runs").exists()            # no lab was started


def test_flags_that_would_replace_the_file_or_the_trace_are_not_check_s():
    done = labctl("exercise", "check", "ring_allreduce", "x.py", "--script", "y.py", timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == "error: No such option '--script'."
    for flag in ("--workload", "--no-trace"):
        assert flag not in labctl("exercise", "check", "--help").stdout


# ---------------------------------------------------------------- list and init: no answer handed out

def test_list_names_every_exercise_and_its_function():
    done = labctl("exercise", "list")
    assert done.returncode == 0
    for e in EXERCISES.values():
        assert f"| {e.name} | {e.signature} | {e.reference} |" in done.stdout


def test_init_writes_a_starter_and_never_overwrites(tmp_path):
    done = labctl("exercise", "init", "ring_allreduce", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip() == ("wrote ring_allreduce.py; fill in allreduce(send, recv), then: "
                                   "labctl exercise check ring_allreduce ring_allreduce.py")
    assert (tmp_path / "ring_allreduce.py").read_text() == EXERCISES["ring_allreduce"].starter.read_text()
    again = labctl("exercise", "init", "ring_allreduce", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip() == "error: ring_allreduce.py: exists; use --force to overwrite it"
    assert labctl("exercise", "init", "ring_allreduce", "--force", cwd=tmp_path).returncode == 0
    mine = labctl("exercise", "init", "tree_broadcast", "mine.py", cwd=tmp_path)
    assert mine.returncode == 0 and (tmp_path / "mine.py").is_file()


@pytest.mark.parametrize("name", list(EXERCISES))
def test_a_starter_states_the_contract_and_hands_out_no_answer(name):
    exercise = EXERCISES[name]
    text = exercise.starter.read_text()
    tree = ast.parse(text)
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert fn.name == exercise.function
    assert f"labctl exercise check {name}" in text and "The contract" in text and "Hints" in text
    assert isinstance(fn.body[-1], ast.Raise) and "NotImplementedError" in ast.unparse(fn.body[-1])
    called = {ast.unparse(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    assert not called & {"dist.send", "dist.recv", "dist.isend", "dist.irecv", "dist.all_reduce"}, called
    assert ex.entry(name, str(exercise.starter)).exercise is exercise        # check accepts it


def test_the_references_stay_out_of_the_package():
    shipped = {p.name for p in (REPO / "workloads" / "_exercises").rglob("*.py")}
    for name in [*REFERENCES, *PATTERNS]:
        assert (HERE / f"{name}.py").is_file()
    assert shipped == {f"{n}.py" for n in EXERCISES}
    for name in EXERCISES:
        assert "NotImplementedError" in EXERCISES[name].starter.read_text()


# ---------------------------------------------------------------- the pieces

def test_worlds_cover_2_3_4_and_the_lab_s_own_largest_first():
    assert worlds(4) == [4, 3, 2]
    assert worlds(3) == [3, 2]
    assert worlds(2) == [2]
    assert worlds(6) == [6, 4, 3, 2]


def test_the_traffic_model_is_each_algorithm_s_optimum():
    ring = traffic("ring_allreduce", 4, 0, 1001, 8)
    assert ring.total == 2 * 3 * 1001 * 8                          # 2(n-1)/n x S per rank, n ranks
    assert ring.rank_most == 2 * 3 * 251 * 8                       # chunks of ceil(1001/4)
    assert ring.allowed_total == 4 * 2 * 3 * 251 * 8               # every rank's chunks padded to 251
    assert traffic("ring_allreduce", 4, 0, 12, 8).allowed_total == 2 * 3 * 12 * 8   # 4 divides 12: no padding
    assert traffic("all_to_all", 4, 0, 5, 8).allowed_total == traffic("all_to_all", 4, 0, 5, 8).total
    assert traffic("naive_allreduce", 4, 0, 10, 4).rank_most == 3 * 40
    assert traffic("naive_allreduce", 4, 2, 10, 4).rank_most == 40
    assert traffic("tree_broadcast", 4, 1, 10, 4).rank_most == 2 * 40
    assert traffic("tree_broadcast", 3, 1, 10, 4).rank_most == 2 * 40
    assert traffic("tree_broadcast", 4, 1, 10, 4).total == 3 * 40
    assert traffic("all_to_all", 3, 0, 10, 4) == traffic("ring_allgather", 3, 0, 10, 4)
    assert traffic("average_gradients", 4, 0, 10, 4) is None


def test_the_runner_s_config_travels_as_one_json_variable():
    config = Config(exercises=(("ring_allreduce", None), ("tree_broadcast", "/x/b.py")),
                    deadline=2.5, seed=7, time=False)
    assert Config.from_json(config.to_json()) == config


def test_the_lab_an_exercise_runs_on_is_the_user_s_with_the_file_as_script_and_tracing_on(tmp_path):
    file = tmp_path / "mine.py"
    file.write_text("def allreduce(send, recv):\n    pass\n")
    entry = ex.entry("ring_allreduce", str(file))
    spec = ex.lab_spec([entry], None, {"nodes": 3, "nproc_per_node": 1, "env": {"A": "1"}}, ex.settings(deadline=2))
    assert spec.script == str(file.resolve()) and spec.trace and spec.world_size == 3
    assert spec.timeout == ex.DEFAULT_TIMEOUT_S and spec.env["A"] == "1"
    config = Config.from_json(spec.env["LAB_EXERCISE"])
    assert config.exercises == (("ring_allreduce", None),) and config.deadline == 2
    with pytest.raises(SpecError, match="several files need the local backend"):
        other = tmp_path / "other.py"
        other.write_text("def broadcast(tensor, src):\n    pass\n")
        ex.lab_spec([entry, ex.entry("tree_broadcast", str(other))], None, {"backend": "compose"}, ex.settings())
    with pytest.raises(SpecError, match="--no-trace"):
        ex.lab_spec([entry], None, {"trace": False}, ex.settings())
    with pytest.raises(SpecError, match="--script"):
        ex.lab_spec([entry], None, {"script": "x.py"}, ex.settings())


def test_a_file_may_define_its_function_by_assignment_or_import(tmp_path):
    for body in ("from helpers import allreduce\n", "allreduce = lambda send, recv: None\n",
                 "import helpers as allreduce\n"):
        (tmp_path / "m.py").write_text(body)
        assert ex.entry("ring_allreduce", str(tmp_path / "m.py")).file == (tmp_path / "m.py").resolve()
    (tmp_path / "m.py").write_text("if True:\n    def allreduce(send, recv):\n        pass\n")
    with pytest.raises(SpecError, match="no function allreduce"):
        ex.entry("ring_allreduce", str(tmp_path / "m.py"))
