"""labctl/verdict.py: how a run ends is decided in one function, and only there.

The rules one by one on hand-made evidence; the driver's side of them (what it saw)
is tests/test_driver.py, the logs' side tests/test_blame.py and test_rundir.py, and
real labs end through the same function everywhere else.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from labctl import verdict
from labctl.blame import Findings
from labctl.outcome import NodeOutcome, NodeState, RunState
from labctl.runrecord import FailedCheck, FiredFault, RunRecord
from labctl.trace.model import Diagnosis
from labctl.verdict import Collection, Cut, Ending, Evidence, Seen

LABCTL = Path(__file__).resolve().parents[1] / "labctl"


def _record() -> RunRecord:
    return RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 2, 1, 2)


def _ok(i: int) -> NodeOutcome:
    return NodeOutcome(i, f"lab-{i}", 0, NodeState.SUCCEEDED, 5.0)


def _found(**kw) -> Findings:
    found = Findings(world=2, ranks={0, 1}, finished={0, 1}, total=4, **kw)
    return found


def _decide(seen: Seen, found: Findings | None = None, workloads: bool = True, fewest: int = 2,
            **more) -> RunRecord:
    return verdict.decide(_record(), Evidence(seen, 2, fewest, workloads, found=found, **more), "runs/x")


def test_every_node_succeeded_and_every_rank_finished_passes():
    rec = _decide(Seen(Ending.ALL_ENDED, [_ok(0), _ok(1)]), _found())
    assert (rec.state, rec.message, rec.first_failure) == (RunState.PASSED, "", None)
    assert rec.ok and rec.checks.total == 4 and rec.ranks_without_output == []


@pytest.mark.parametrize("ending, state", [
    (Ending.SIGNAL, RunState.INTERRUPTED), (Ending.DEADLINE, RunState.TIMEOUT),
    (Ending.BACKEND_FAILURE, RunState.FAILED), (Ending.ERROR, RunState.ERROR)])
def test_how_the_lifecycle_ended_decides_first(ending, state):
    rec = _decide(Seen(ending, [_ok(0), _ok(1)], "the driver's words", signal="SIGINT"), _found())
    assert (rec.state, rec.message) == (state, "the driver's words")


def test_a_node_that_did_not_succeed_fails_the_run_unless_an_elastic_lab_spares_it():
    lost = NodeOutcome(1, "lab-1", -9, NodeState.KILLED, 3.0, "SIGKILL")
    rec = _decide(Seen(Ending.NODE_FAILED, [_ok(0), lost]), _found())
    assert rec.state is RunState.FAILED and rec.first_failure is not None
    spared = _decide(Seen(Ending.ALL_ENDED, [_ok(0), lost]), _found(), fewest=1)
    assert spared.state is RunState.PASSED
    assert spared.node_outcomes[1].reason == "the lab went on without it, min_nodes 1 of 2"


def test_the_logs_fail_a_run_the_nodes_passed():
    both = [_ok(0), _ok(1)]
    failed_check = _found(failed=[{"workload": "p2p", "name": "x", "rank": 1}], failed_count=1)
    rec = _decide(Seen(Ending.ALL_ENDED, both), failed_check)
    assert rec.state is RunState.FAILED and rec.first_failure.check == "p2p/x"
    unfinished = _found()
    unfinished.finished = {0}
    rec = _decide(Seen(Ending.ALL_ENDED, both), unfinished)
    assert (rec.state, rec.message) == (RunState.FAILED, "some ranks never finished their workloads")
    assert _decide(Seen(Ending.ALL_ENDED, both), unfinished, workloads=False).state is RunState.PASSED


def test_the_collection_cut_short_or_failed_is_never_a_pass():
    both = [_ok(0), _ok(1)]
    cut = _decide(Seen(Ending.ALL_ENDED, both, collection=Collection.CUT, cut_by="SIGINT"))
    assert cut.state is RunState.INTERRUPTED and cut.signal == "SIGINT"
    assert cut.message.startswith("interrupted (SIGINT) while collecting the logs") and "labctl down runs/x" in cut.message
    broke = _decide(Seen(Ending.ALL_ENDED, both, collection=Collection.FAILED, collection_failure="boom"))
    assert broke.state is RunState.ERROR and broke.message.startswith("collecting the logs failed: boom")


def test_a_watched_run_still_running_or_removed_or_abandoned():
    going = [_ok(0), NodeOutcome(1, "lab-1")]
    seen = Seen(Ending.WATCHED, going, still_running=[1], why_still_running="--no-wait")
    rec = _decide(seen)
    assert rec.state is RunState.RUNNING and rec.message.startswith("node(s) 1 still running (--no-wait)")
    seen.removed_before_end = True
    assert _decide(seen).state is RunState.FAILED
    gone = _decide(Seen(Ending.WATCHED, going, "its labctl is gone", abandoned=True))
    assert (gone.state, gone.message) == (RunState.ABANDONED, "its labctl is gone")
    kept = _decide(Seen(Ending.WATCHED, going, "was interrupted"), previous=RunState.INTERRUPTED)
    assert kept.state is RunState.INTERRUPTED, "a state labctl decided before stands"


def test_the_finish_failing_or_cut_short():
    both = [_ok(0), _ok(1)]
    damaged = _decide(Seen(Ending.ALL_ENDED, both), storage_failure="run folder 'x': no space")
    assert (damaged.state, damaged.message) == (RunState.ERROR, "run folder 'x': no space")
    cut = _decide(Seen(Ending.ALL_ENDED, both), _found(),
                  cut=Cut("SIGTERM", "merging the trace", ("no trace.json",)))
    assert cut.state is RunState.INTERRUPTED and cut.signal == "SIGTERM"
    assert cut.message == ("SIGTERM cut the run folder's finish short while merging the trace: "
                           "no trace.json; the lab itself had passed")
    assert cut.unfinished == ["no trace.json"]


def test_a_kill_fault_is_named_as_the_cause():
    killed = NodeOutcome(1, "lab-1", -9, NodeState.KILLED, 3.0, "SIGKILL")
    fired = [FiredFault("kill-node:1@2", "kill-node", 1, "begin", "docker kill", 2.5)]
    rec = verdict.decide(_record(), Evidence(Seen(Ending.NODE_FAILED, [_ok(0), killed]), 2, 2, True,
                                             fired, _found()))
    assert rec.first_failure.fault == "kill-node:1@2"
    assert rec.node_outcomes[1].reason == "killed by fault kill-node:1@2"


def test_a_grade_made_after_the_finish_fails_only_a_passed_run():
    """Rule 5 (`labctl exercise check`): the lab's end decides first; a grade never turns
    a deadline, a signal or a failed rank into a pass, and fails a run that passed."""
    both = [_ok(0), _ok(1)]
    passed = _decide(Seen(Ending.ALL_ENDED, both), _found())
    bad = verdict.Grade((FailedCheck("exercise", "only p2p", None, "values arrived ..."),), "x.py: values arrived")
    rec = verdict.judge(passed, bad)
    assert (rec.state, rec.message) == (RunState.FAILED, "x.py: values arrived")
    assert rec.checks.failed == 1 and rec.checks.total == 5 and rec.failed_checks[-1].name == "only p2p"
    assert passed.state is RunState.PASSED, "judge makes a new record"
    assert verdict.judge(passed, verdict.Grade()).state is RunState.PASSED
    for ending, state in ((Ending.DEADLINE, RunState.TIMEOUT), (Ending.SIGNAL, RunState.INTERRUPTED),
                          (Ending.BACKEND_FAILURE, RunState.FAILED)):
        ended = _decide(Seen(ending, both, "the driver's words"), _found())
        for grade in (bad, verdict.Grade()):
            assert verdict.judge(ended, grade).state is state
            assert verdict.judge(ended, grade).message == "the driver's words"
    cut = verdict.judge(passed, verdict.Grade(cut_by="SIGINT"))
    assert (cut.state, cut.signal) == (RunState.INTERRUPTED, "SIGINT")
    assert cut.message == "SIGINT cut the exercise's grade short; the lab itself had passed"


def test_as_seen_now_reads_a_dead_controllers_run_as_abandoned():
    rec = _record()
    assert verdict.as_seen_now(rec, controller_gone=True) is RunState.ABANDONED
    assert verdict.as_seen_now(rec, controller_gone=False) is RunState.RUNNING


# ---- one place decides -----------------------------------------------------------------
def run_state_assignments(source: str, filename: str = "<src>") -> list[str]:
    """Where `source` gives a run a state: RunState members or RunState(...) used other
    than in a comparison, or a `state` attribute set to something that is not a NodeState
    member (a node's state is the backends' and the driver's to say)."""
    tree = ast.parse(source, filename)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []

    def in_compare(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.Compare):
                return True
            if isinstance(node, (ast.stmt, ast.Lambda)):
                return False
        return False

    for node in ast.walk(tree):
        run_state = (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                     and node.value.id == "RunState")
        made = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "RunState")
        if (run_state or made) and not in_compare(node):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(t, ast.Attribute) and t.attr == "state":
                        value = ast.unparse(node.value)
                        if "NodeState." not in value:
                            found.append(f"{filename}:{node.lineno}: {ast.unparse(t)} = {value}")
    return found


def test_no_module_but_verdict_decides_a_runs_state():
    # the checker itself finds what it must
    assert run_state_assignments("rec.state = RunState.PASSED\nx = dataclasses.replace(r, state=RunState('failed'))\n") \
        == ["<src>:1: rec.state = RunState.PASSED", "<src>:1: RunState.PASSED", "<src>:2: RunState('failed')"]
    assert run_state_assignments("o.state, o.reason = NodeState.STOPPED, 'x'\nif r.state is RunState.PASSED: pass\n") == []
    allowed = {"verdict.py", "outcome.py"}         # the one place, and the enum's definition
    found = []
    for path in sorted(LABCTL.rglob("*.py")):
        if path.name in allowed:
            continue
        hits = run_state_assignments(path.read_text(), str(path.relative_to(LABCTL.parent)))
        if path.name == "runrecord.py":                # the field's default, and reading status.json
            hits = [h for h in hits if h.split(": ", 1)[1] not in (
                "RunState.RUNNING", "RunState(d.get('state', 'running'))")]
        found += hits
    assert found == [], "only labctl/verdict.py decides how a run ends:\n" + "\n".join(found)


# ---------------------------------------------------------------- the call and line it names (issue 37)

def _stack(*frames: tuple[str, int, str]) -> list[str]:
    """A faulthandler dump, innermost frame first."""
    return ["Current thread 0x00007f (most recent call first):"] + [
        f'  File "{f}", line {n} in {fn}' for f, n, fn in frames]


TORCH = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def test_first_failure_names_the_call_and_its_line():
    """A hang: the diagnosis' culprit, call and line. A rank that died without a line of its
    own (SIGKILL): where its records end. A rank whose error was raised on the line of the op
    its records end in: that op (all_gather_object raised its IndexError after the gather)."""
    hang = {"rank": 1, "ranks": [1], "op": "broadcast", "caller": "/x/job.py:8", "text": "rank 1 called ..."}
    rec = _decide(Seen(Ending.DEADLINE, [_ok(0), _ok(1)]), _found(), diagnosis=Diagnosis.from_dict(hang))
    first = rec.first_failure
    assert (first.rank, first.hang, first.op, first.caller) == (1, True, "broadcast", "/x/job.py:8")
    assert first.to_dict()["op"] == "broadcast" and first.to_dict()["caller"] == "/x/job.py:8"
    assert first.describe() == "hang in a collective: rank 1 called ... (rank 1 at /x/job.py:8)"
    killed = NodeOutcome(0, "lab-0", -9, NodeState.KILLED, 3.0, "SIGKILL")
    found = _found(exit_codes={1: -9}, root_causes={0: 1})
    rec = _decide(Seen(Ending.NODE_FAILED, [killed, _ok(1)]), found,
                  ended_in={1: "in barrier [] (collective #2 of default_pg) at /x/job.py:14"},
                  ended_at={1: {"op": "barrier", "caller": "/x/job.py:14", "inside": True}})
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (1, "barrier", "/x/job.py:14"), first
    raised = _found(exit_codes={1: 1}, errors={1: {"exception": "IndexError: x", "file": "/x/job.py", "line": 10}})
    others = {"rank": 1, "ranks": [1], "op": "all_reduce", "caller": None, "text": "..."}
    rec = _decide(Seen(Ending.NODE_FAILED, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0), _ok(1)]), raised,
                  diagnosis=Diagnosis.from_dict(others), ended_at={1: {"op": "all_gather_object", "caller": "/x/job.py:10",
                                                   "inside": False}})
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (1, "all_gather_object", "/x/job.py:10"), first
    rec = _decide(Seen(Ending.NODE_FAILED, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0), _ok(1)]), raised,
                  diagnosis=Diagnosis.from_dict(others), ended_at={1: {"op": "all_reduce", "caller": "/x/job.py:12", "inside": False}})
    assert (rec.first_failure.op, rec.first_failure.caller) == ("all_reduce", "/x/job.py:10")


def test_ranks_held_in_new_group_wait_for_the_ranks_elsewhere():
    """Ranks 0 and 1 call new_group, which every rank must call; ranks 2 and 3 skipped it
    and wait in the next all_reduce for ranks 0 and 1, which the op records alone would
    blame. The stacks at the deadline say who holds whom."""
    held = _stack((TORCH, 5000, "new_group"), ("/x/job.py", 12, "<module>"))
    waits = _stack((TORCH, 3245, "all_reduce"), ("/x/job.py", 15, "<module>"))
    found = _found(stacks={0: held, 1: held, 2: waits, 3: waits})
    records = {"rank": 0, "ranks": [0, 1], "op": "all_reduce", "text": "ranks 2, 3 wait in all_reduce ..."}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 4, 4),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found, diagnosis=Diagnosis.from_dict(records)),
                         "runs/x")
    first = rec.first_failure
    assert (first.rank, first.hang, first.collective.ranks, first.collective.op) == (None, True, [2, 3],
                                                                                        "new_group")
    assert first.collective.text == ("ranks 0, 1 wait in new_group (at /x/job.py:12), which every rank must call; "
                                        "rank 2, 3 never called it (rank 2 at /x/job.py:15 in all_reduce; rank 3 at "
                                        "/x/job.py:15 in all_reduce)")
    # one rank alone in new_group (a group made only in rank 0's logger), the other two gone
    # on together to one all_reduce: the lone call is the odd one, not the two that skipped it
    found = _found(stacks={0: _stack((TORCH, 5000, "new_group"), ("/x/job.py", 17, "log")), 1: waits, 2: waits})
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found,
                                  diagnosis=Diagnosis.from_dict({**records, "ranks": [1, 2], "rank": None})), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (0, "new_group", "/x/job.py:17"), first
    assert first.collective.text.startswith("rank 0 alone calls new_group (at /x/job.py:17)"), first.collective.text
    sleeper = _stack(("/usr/lib/python3.11/time.py", 1, "sleep"), ("/x/job.py", 10, "<module>"))
    joins = _stack((TORCH, 1700, "init_process_group"), ("/x/job.py", 11, "<module>"))
    found = _found(stacks={0: joins, 1: sleeper})
    rec = _decide(Seen(Ending.DEADLINE, [_ok(0), _ok(1)]), found)
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (1, "init_process_group", "/x/job.py:10"), first


def test_a_rank_aborted_by_gloo_s_size_check_is_the_symptom_of_the_odd_call():
    """Rank 2 all_reduced float64 where ranks 0 and 1 had float32: rank 1 received more than
    it expected and gloo aborted it (SIGABRT, no line of its own). The cause is rank 2's
    call; rank 1's death is said as what it led to. Where the aborted rank is the odd one
    itself, it stays the first failure."""
    abort = "gloo::EnforceNotMet: [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 88 vs 44."
    calls = {str(r): {"op": "all_reduce", "call": "all_reduce", "caller": f"/x/job.py:{11 if r == 2 else 12}"}
             for r in range(3)}
    mismatch = {"rank": 2, "ranks": [2], "op": "all_reduce", "caller": "/x/job.py:11",
                "text": "rank 2 called all_reduce [64] float64 where rank 0 called all_reduce [64] float32, "
                        "collective #2 of default_pg (the dtype differs)",
                "stuck": [{"mismatch": "...", "ranks": [2], "calls": calls}]}
    found = Findings(world=3, ranks={0, 1, 2}, exit_codes={1: -6, 2: -15}, errors={1: {"exception": abort}},
                     root_causes={0: 1}, node_ranks={0: [0, 1, 2]})
    aborted = NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [aborted]), 1, 1, False, found=found,
                                  diagnosis=Diagnosis.from_dict(mismatch)), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.peer_rank, first.op, first.caller) == (2, 1, "all_reduce", "/x/job.py:11"), first
    # the odd rank then waited in the next collective when the launcher stopped it: its odd
    # call is still the op to name, not the one it was stopped in
    rec2 = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                          Evidence(Seen(Ending.BACKEND_FAILURE, [aborted]), 1, 1, False, found=found,
                                   diagnosis=Diagnosis.from_dict(mismatch),
                                   ended_at={2: {"op": "barrier", "caller": "/x/job.py:14", "inside": True}}),
                          "runs/x")
    assert (rec2.first_failure.op, rec2.first_failure.caller) == ("all_reduce", "/x/job.py:11"), rec2.first_failure
    assert first.describe() == ("rank 2 on node 0 made the odd call of a mismatched collective: " + mismatch["text"]
                                + "; rank 1 was killed by SIGABRT")
    assert first.blamed_for == "odd call"
    assert first.to_dict()["peer_error"] == {"exception": f"was killed by SIGABRT: {abort}"}
    itself = {**mismatch, "rank": 1, "ranks": [1]}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [aborted]), 1, 1, False, found=found,
                                  diagnosis=Diagnosis.from_dict(itself)), "runs/x")
    assert (rec.first_failure.rank, rec.first_failure.signal, rec.first_failure.peer_rank) == (1, "SIGABRT", None)


def test_of_the_ranks_that_left_early_the_one_the_stuck_collective_waits_for_is_named():
    """Ranks 0, 1 and 3 exited 0; rank 2 waits in its subgroup's all_reduce for rank 3: the
    others left after a collective they had all finished, and are not to blame."""
    closed = {"exception": "RuntimeError: [pair.cc:553] Connection closed by peer", "file": "/x/job.py", "line": 13}
    found = Findings(world=4, ranks={0, 1, 2, 3}, exit_codes={2: 1}, errors={2: closed}, root_causes={0: 2},
                     node_ranks={0: [0, 1, 2, 3]}, exits={0: [(0, 0), (1, 0), (3, 0), (2, 1)]},
                     exit_times={0: (1.0, 0), 1: (1.0, 0), 3: (1.1, 0), 2: (2.0, 0)})
    stuck = {"rank": 3, "ranks": [3], "op": "all_reduce", "caller": None,
             "text": "rank 2 waits in all_reduce (collective #1 of pg1) which rank 3 never entered"}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "direct", "gloo", 1, 4, 4),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)]),
                                  1, 1, False, found=found, diagnosis=Diagnosis.from_dict(stuck)), "runs/x")
    first = rec.first_failure
    assert (first.left_early, first.rank, first.ranks, first.op) == (True, 3, None, "all_reduce"), first
    assert first.describe().startswith("rank 3 on node 0 exited 0 while the others were still in a collective")


def test_where_the_ranks_that_left_early_finished_and_the_diagnosis_names_another_that_one_is_first():
    """Ranks 0 and 1 ran their scripts to the end (exit 0); ranks 2 and 3 then lost them:
    rank 3 reduced over mesh_dp with rank 1, which never did, so rank 2 waits for it in
    mesh_tp. The diagnosis names rank 3 and neither leaver: rank 3 is the first failure,
    with its call and line, rank 0 (the first leaver) its peer."""
    closed = {"exception": "RuntimeError: [pair.cc:553] Connection closed by peer", "file": "/x/job.py", "line": 19}
    found = Findings(world=4, ranks={0, 1, 2, 3}, exit_codes={2: 1, 3: 1}, errors={2: closed, 3: closed},
                     root_causes={0: 3}, node_ranks={0: [0, 1, 2, 3]},
                     exits={0: [(0, 0), (1, 0), (3, 1), (2, 1)]},
                     exit_times={0: (1.0, 0), 1: (1.0, 0), 3: (2.0, 1), 2: (2.1, 1)})
    stuck = {"rank": 3, "ranks": [3], "op": "all_reduce", "caller": "/x/job.py:18",
             "text": "rank 1 never entered collective #1 of mesh_dp; rank 3 never entered collective #1 of mesh_tp",
             "stuck": [{"pg": "mesh_dp", "waiting": [], "missing": [1], "ranks": [1], "mismatch": None,
                        "calls": {"3": {"call": "all_reduce", "caller": "/x/job.py:18"}}},
                       {"pg": "mesh_tp[2, 3]", "waiting": [], "missing": [3], "ranks": [3], "mismatch": None,
                        "calls": {"2": {"call": "all_reduce", "caller": "/x/job.py:18"}}}]}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "direct", "gloo", 1, 4, 4),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)]),
                                  1, 1, False, found=found, diagnosis=Diagnosis.from_dict(stuck)), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.left_early, first.peer_rank, first.op, first.caller) == \
        (3, False, 0, "all_reduce", "/x/job.py:18"), first
    assert first.describe().startswith("rank 3 on node 0 is the rank the others waited for: rank 1 never entered")
    named = {**stuck, "rank": 1, "ranks": [1]}          # the diagnosis names a leaver: it stays the first failure
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "direct", "gloo", 1, 4, 4),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)]),
                                  1, 1, False, found=found, diagnosis=Diagnosis.from_dict(named)), "runs/x")
    assert (rec.first_failure.left_early, rec.first_failure.rank) == (True, 1), rec.first_failure


def test_a_rank_whose_peer_went_away_while_it_waited_for_another_is_that_one_s_symptom():
    """torchrun stopped ranks 0, 1 and 3 (SIGTERM) after rank 2 raised 'Connection closed':
    rank 2 waited in its subgroup's all_reduce for rank 3, which never entered it. Rank 3
    is the cause; rank 2's error is what it led to (the zoo's subgroup_missing, when the
    others had not exited before the agent stopped them)."""
    closed = {"exception": "RuntimeError: [pair.cc:553] Connection closed by peer", "file": "/x/job.py", "line": 13,
              "call": "all_reduce"}
    found = Findings(world=4, ranks={0, 1, 2, 3}, exit_codes={0: -15, 1: -15, 2: 1, 3: -15}, errors={2: closed},
                     root_causes={0: 2}, node_ranks={0: [0, 1, 2, 3]})
    stuck = {"rank": 3, "ranks": [3], "op": "all_reduce", "caller": None,
             "text": "rank 2 waits in all_reduce (collective #1 of pg1) which rank 3 never entered",
             "stuck": [{"pg": "pg1", "waiting": [2], "missing": [3], "ranks": [3], "mismatch": None,
                        "calls": {"2": {"call": "all_reduce", "caller": "/x/job.py:13"}}}]}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 4, 4),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)]),
                                  1, 1, False, found=found, diagnosis=Diagnosis.from_dict(stuck)), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.blamed_for, first.peer_rank, first.op, first.caller) == (
        3, "absence", 2, "all_reduce", "/x/job.py:13"), first
    assert first.describe() == ("rank 3 on node 0 is the rank the others waited for: " + stuck["text"]
                                + "; rank 2 raised RuntimeError")



def test_ranks_that_timed_out_waiting_for_a_rank_still_busy_elsewhere_blame_it_at_its_line():
    """Rank 0 prepares data past the group's 10 s timeout while ranks 1 and 2 wait at a
    barrier: gloo's transport times them out ("Timed out waiting 10000ms for send
    operation"), torchrun stops rank 0 (SIGTERM: its stack, written then, has it in its
    loop). The timeouts are the symptom; rank 0 is the cause, at the line it was at, not
    the barrier line the others waited at (the zoo's rank0_prep_past_pg_timeout)."""
    timed_out = {"exception": "RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting "
                              "10000ms for send operation to complete", "file": "/x/job.py", "line": 13,
                 "call": "barrier"}
    stack = ["Current thread 0x00007f194d24ab80 (most recent call first):",
             '  File "/x/workloads/_trace/fr.py", line 123 in _stacks_to_stderr',
             '  File "/x/job.py", line 17 in <listcomp>',
             '  File "/x/job.py", line 17 in <module>']
    found = Findings(world=3, ranks={0, 1, 2}, exit_codes={0: -15, 1: 1, 2: 1},
                     errors={1: timed_out, 2: dict(timed_out)}, root_causes={0: 2},
                     node_ranks={0: [0, 1, 2]}, stacks={0: stack})
    stuck = {"rank": 0, "ranks": [0], "op": "barrier", "caller": None,
             "text": "ranks 1, 2 wait in barrier (collective #1 of default_pg) which rank 0 never entered",
             "stuck": [{"pg": "default_pg", "waiting": [1, 2], "missing": [0], "ranks": [0], "mismatch": None,
                        "calls": {"1": {"call": "barrier", "caller": "/x/job.py:13"},
                                  "2": {"call": "barrier", "caller": "/x/job.py:13"}}}]}

    def decide(found):
        return verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                              Evidence(Seen(Ending.BACKEND_FAILURE, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)]),
                                       1, 1, False, found=found, diagnosis=Diagnosis.from_dict(stuck)),
                              "runs/x").first_failure

    first = decide(found)
    assert (first.rank, first.blamed_for, first.peer_rank, first.op, first.caller) == (
        0, "absence", 2, "barrier", "/x/job.py:17"), first
    # no stack of its own: where the others called the collective it never entered
    first = decide(Findings(**{**found.__dict__, "stacks": {}}))
    assert (first.rank, first.caller) == (0, "/x/job.py:13"), first
    # its own error, not a timeout: it stays the first failure
    own = {**timed_out, "exception": "ValueError: bad batch"}
    first = decide(Findings(**{**found.__dict__, "errors": {1: own, 2: own}}))
    assert (first.rank, first.ranks, first.blamed_for) == (None, [1, 2], None), first

    # a timeout the rank made shorter than the others' (its node read minutes as seconds):
    # its own timeout is the cause, not rank 0's time; rank 1 alone timed out, and stays
    def decide_with(found, timeouts):
        return verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                              Evidence(Seen(Ending.BACKEND_FAILURE, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)]),
                                       1, 1, False, found=found, diagnosis=Diagnosis.from_dict(stuck),
                                       timeouts=timeouts), "runs/x").first_failure
    alone = Findings(**{**found.__dict__, "exit_codes": {0: -15, 1: 1, 2: -15}, "errors": {1: timed_out},
                        "root_causes": {0: 1}})
    first = decide_with(alone, {(1, "default_pg"): 3000, (2, "default_pg"): 1_800_000})
    assert (first.rank, first.blamed_for) == (1, None), first
    first = decide_with(alone, {(1, "default_pg"): 1_800_000, (2, "default_pg"): 1_800_000})
    assert (first.rank, first.blamed_for) == (0, "absence"), first


def test_an_error_raised_inside_torch_after_another_rank_s_odd_call_is_its_symptom():
    """DDP's join: rank 2, out of batches, shadows DDP's collectives while ranks 0 and 1
    all_reduce a logging scalar (collective #29: rank 2 the odd call). Rank 0 then raises a
    TypeError inside torch (the join's __exit__, _broadcast_coalesced fed what it received):
    a symptom of rank 2's odd call, which is the first failure. An error raised in the
    script's own code stays its rank's."""
    calls = {str(r): {"op": "all_reduce", "call": "all_reduce", "caller": f"/x/job.py:{24 if r == 2 else 31}"}
             for r in range(3)}
    mismatch = {"rank": 2, "ranks": [2], "op": "all_reduce", "caller": "/x/job.py:24",
                "text": "rank 2 called all_reduce [1] where rank 0 called all_reduce [], collective #29 of "
                        "default_pg (the shape differs)",
                "stuck": [{"mismatch": "...", "ranks": [2], "calls": calls}]}
    inside = {"exception": "TypeError: _broadcast_coalesced(): incompatible function arguments.",
              "file": "/x/job.py", "line": 24, "function": "main", "call": "__exit__"}

    def decide(error):
        found = Findings(world=3, ranks={0, 1, 2}, exit_codes={0: 1, 1: -15, 2: -6}, errors={0: error},
                         root_causes={0: 0}, node_ranks={0: [0, 1, 2]})
        return verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                              Evidence(Seen(Ending.BACKEND_FAILURE, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)]),
                                       1, 1, False, found=found, diagnosis=Diagnosis.from_dict(mismatch)),
                              "runs/x").first_failure

    first = decide(inside)
    assert (first.rank, first.blamed_for, first.peer_rank, first.op, first.caller) == (
        2, "odd call", 0, "all_reduce", "/x/job.py:24"), first
    own = {k: v for k, v in inside.items() if k != "call"} | {"exception": "ValueError: bad batch"}
    assert decide(own).rank == 0

# ---------------------------------------------------------------- the cause before the first victim (issue 50)

def test_a_rank_torch_s_monitored_barrier_names_is_the_cause_not_the_rank_that_raised():
    """Rank 0 raised first ("Rank 2 failed to pass monitoredBarrier"): rank 2, which never
    arrived, is the first failure, with the barrier it never reached and the line the
    others waited at; rank 0's error is what it caused."""
    said = {"exception": "RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 5000 ms",
            "file": "/x/job.py", "line": 13, "function": "<module>", "called": "monitored_barrier"}
    found = Findings(world=3, ranks={0, 1, 2}, exit_codes={0: 1, 1: 1, 2: -15}, errors={0: said},
                     root_causes={0: 0}, node_ranks={0: [0, 1, 2]})
    failed = NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.op, first.caller, first.peer_rank) == (2, "monitored_barrier", "/x/job.py:13", 0)
    assert first.blamed_for == "named by torch" and first.to_dict()["peer_error"]["exception"] == said["exception"]
    assert first.describe().startswith("rank 2 on node 0 is the rank torch's own check named in monitored_barrier")


def test_a_monitored_barrier_that_names_ranks_waiting_in_a_plain_barrier_blames_its_caller():
    """Only rank 0 called monitored_barrier; ranks 1 and 2 sat in a plain barrier of the
    default group, which rank 0 never entered: torch names 1 and 2, yet they waited for
    rank 0, whose monitored_barrier was the odd call. A named rank that ended outside any
    collective (held in its own code) stays the one torch named."""
    said = {"exception": "RuntimeError: [Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 10000 ms",
            "file": "/x/job.py", "line": 20, "function": "sync", "called": "monitored_barrier"}
    found = Findings(world=3, ranks={0, 1, 2}, exit_codes={0: 1, 1: 1, 2: 1}, errors={0: said},
                     root_causes={0: 0}, node_ranks={0: [0, 1, 2]})
    failed = NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)
    waiting = {r: {"op": "barrier", "caller": "/x/job.py:22", "inside": True, "pg": "default_pg"} for r in (1, 2)}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found,
                                  ended_at=waiting), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.op, first.caller, first.blamed_for) == (0, "monitored_barrier", "/x/job.py:20",
                                                                       "odd call"), first
    held = {**waiting, 2: {"op": "all_reduce", "caller": "/x/job.py:9", "inside": False, "pg": "default_pg"}}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found,
                                  ended_at=held), "runs/x")
    assert rec.first_failure.ranks == [1, 2] and rec.first_failure.blamed_for == "named by torch"


def test_a_rank_that_destroyed_its_group_is_named_with_the_destroy():
    """Rank 1 raised "not initialized" at its all_reduce on line 15: its own
    destroy_process_group on line 14 is the call to name."""
    error = {"exception": "ValueError: Default process group has not been initialized, please make sure to "
                          "call init_process_group.", "file": "/x/job.py", "line": 15, "function": "<module>",
             "called": "all_reduce"}
    found = _found(exit_codes={1: 1}, errors={1: error}, root_causes={0: 1})
    failed = NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)
    rec = _decide(Seen(Ending.NODE_FAILED, [failed, _ok(1)]), found, destroyed={1: "/x/job.py:14"})
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (1, "destroy_process_group", "/x/job.py:14"), first
    assert "its own destroy_process_group at /x/job.py:14 had torn the group down" in first.describe()
    rec = _decide(Seen(Ending.NODE_FAILED, [failed, _ok(1)]), found)          # no destroy recorded: its own line
    assert (rec.first_failure.op, rec.first_failure.caller) == ("all_reduce", "/x/job.py:15")


def test_a_rank_the_others_wait_for_whose_records_end_with_its_destroy_is_named_with_it():
    """An in-process restart on one rank: rank 1 destroyed the group (line 33) and re-made
    it alone, while ranks 0 and 2 wait in an all_reduce it never entered. The destroy is the
    call to name, not the all_reduce it missed; a rank whose records end elsewhere after a
    destroy long before keeps the collective."""
    hang = {"rank": 1, "ranks": [1], "op": "all_reduce", "caller": "/x/job.py:21",
            "text": "ranks 0, 2 wait in all_reduce (collective #3 of default_pg) which rank 1 never entered"}
    ended = {1: {"op": "destroy_process_group", "caller": "/x/job.py:33", "inside": False}}
    rec = _decide(Seen(Ending.DEADLINE, [_ok(0), _ok(1)]), _found(), diagnosis=Diagnosis.from_dict(hang),
                  ended_at=ended, destroyed={1: "/x/job.py:33"})
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (1, "destroy_process_group", "/x/job.py:33"), first
    later = {1: {"op": "all_reduce", "caller": "/x/job.py:40", "inside": False}}
    rec = _decide(Seen(Ending.DEADLINE, [_ok(0), _ok(1)]), _found(), diagnosis=Diagnosis.from_dict(hang),
                  ended_at=later, destroyed={1: "/x/job.py:33"})
    assert rec.first_failure.op == "all_reduce", rec.first_failure


def test_a_rank_held_in_a_store_read_is_named_with_it():
    """Rank 0 never entered the barrier the others wait in: its records end inside a store
    get the script made, which is the call to name, at its line."""
    hang = {"rank": 0, "ranks": [0], "op": "barrier", "caller": None, "text": "rank 1 waits in barrier ..."}
    rec = _decide(Seen(Ending.DEADLINE, [_ok(0), _ok(1)]), _found(), diagnosis=Diagnosis.from_dict(hang),
                  ended_at={0: {"op": "store.get", "caller": "/x/job.py:13", "inside": True}})
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (0, "store.get", "/x/job.py:13"), first
    # a monitored_barrier the others' plain barrier never answers: the same (no error yet:
    # the lab was stopped before its timeout)
    rec = _decide(Seen(Ending.DEADLINE, [_ok(0), _ok(1)]), _found(), diagnosis=Diagnosis.from_dict(hang),
                  ended_at={0: {"op": "monitored_barrier", "caller": "/x/job.py:20", "inside": True}})
    assert (rec.first_failure.op, rec.first_failure.caller) == ("monitored_barrier", "/x/job.py:20")


def test_the_call_the_script_s_line_made_is_the_op_not_the_collective_inside_it():
    """DDP's constructor raised inside a broadcast it issued: the op is the call on the
    script's line (DistributedDataParallel), not the broadcast its records end in."""
    error = {"exception": "RuntimeError: [1]: params[0] in this process with sizes [64, 8] appears not to "
                          "match sizes of the same param in process 0.", "file": "/x/job.py", "line": 13,
             "function": "<module>", "call": "_verify_param_shape_across_processes",
             "called": "DistributedDataParallel"}
    found = _found(exit_codes={1: 1}, errors={1: error}, root_causes={0: 1})
    rec = _decide(Seen(Ending.NODE_FAILED, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0), _ok(1)]), found,
                  ended_at={1: {"op": "broadcast", "caller": "/x/job.py:13", "inside": False}})
    assert (rec.first_failure.rank, rec.first_failure.op) == (1, "DistributedDataParallel")


def test_a_rank_that_died_inside_an_op_is_named_with_that_op():
    """Rank 1 was aborted by gloo inside its recv (SIGABRT, no line of its own); the others
    then waited for it in a barrier it never reached: the op is the recv it died in, at its
    line, not the barrier."""
    killed = NodeOutcome(0, "lab-0", -6, NodeState.FAILED, 3.0, "SIGABRT")
    found = _found(exit_codes={1: -6}, root_causes={0: 1},
                   errors={1: {"exception": "gloo::EnforceNotMet: [enforce fail at pair.cc:456] 20 vs 12"}})
    hang = {"rank": 1, "ranks": [1], "op": "barrier", "caller": None, "text": "rank 0 waits in barrier ..."}
    rec = _decide(Seen(Ending.NODE_FAILED, [killed, _ok(1)]), found, diagnosis=Diagnosis.from_dict(hang),
                  ended_at={1: {"op": "recv", "caller": "/x/job.py:15", "inside": True}})
    first = rec.first_failure
    assert (first.rank, first.op, first.caller) == (1, "recv", "/x/job.py:15"), first


def test_ranks_that_each_raised_the_same_error_at_the_same_line_are_all_named():
    """Ranks 0 and 1 each broadcast on a group they are not in and raise the same error at
    the same line; ranks 2 and 3 then lose them. Both are the first failure, not only the
    one that exited first; a peer's lost connection is never such an error."""
    error = {"exception": "ValueError: Invalid process group specified", "file": "/x/job.py", "line": 14,
             "function": "<module>", "called": "broadcast"}
    gone = {"exception": "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1", "file": "/x/job.py",
            "line": 17, "function": "<module>"}
    found = Findings(world=4, ranks={0, 1, 2, 3}, exit_codes={0: 1, 1: 1, 2: 1, 3: 1},
                     errors={0: error, 1: dict(error), 2: gone, 3: dict(gone)}, root_causes={0: 1},
                     node_ranks={0: [0, 1, 2, 3]})
    failed = NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 4, 4),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.ranks, first.op, first.caller) == (None, [0, 1], "broadcast", "/x/job.py:14"), first
    assert first.describe().startswith("rank 0, 1 on node 0 each exited with code 1: ValueError: Invalid process group")
    assert first.answer()[:2] == (None, [0, 1])
    # each rank's error names its own group object: still one error
    own = [{**error, "exception": f"ValueError: Global rank 0 is not part of group <ProcessGroup object at 0x7f{r}a0>"}
           for r in range(2)]
    found = Findings(world=4, ranks={0, 1, 2, 3}, exit_codes={0: 1, 1: 1, 2: 1, 3: 1},
                     errors={0: own[0], 1: own[1], 2: gone, 3: dict(gone)}, root_causes={0: 1},
                     node_ranks={0: [0, 1, 2, 3]})
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 4, 4),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found), "runs/x")
    assert rec.first_failure.ranks == [0, 1], rec.first_failure


def test_the_rank_whose_pickled_object_named_the_class_nobody_could_load_is_the_first_failure():
    """Every rank raises inside all_gather_object while unpickling rank 3's record: it holds
    a ShardFormatError whose __init__ takes two arguments. Only rank 3's pickle named that
    class (the recorder's `pickled` calls): it is the first failure, "sent it", with the
    call and the line. Two ranks that sent it, or none: the raisers stay."""
    error = {"exception": "TypeError: ShardFormatError.__init__() missing 1 required positional argument: 'line_no'",
             "file": "/x/job.py", "line": 38, "function": "<module>", "call": "all_gather_object",
             "called": "all_gather_object"}
    found = Findings(world=4, ranks={0, 1, 2, 3}, exit_codes={r: 1 for r in range(4)},
                     errors={r: dict(error) for r in range(4)}, root_causes={0: 0}, node_ranks={0: [0, 1, 2, 3]})
    failed = NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)
    sent = {r: {"builtins.dict"} for r in range(3)} | {3: {"job.ShardFormatError"}}

    def decide(pickled):
        return verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 4, 4),
                              Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found,
                                       pickled=pickled), "runs/x").first_failure

    first = decide(sent)
    assert (first.rank, first.blamed_for, first.op, first.caller) == (3, "sent it", "all_gather_object",
                                                                       "/x/job.py:38"), first
    for other in ({**sent, 1: {"job.ShardFormatError"}}, {}):
        assert decide(other).blamed_for is None


def test_the_root_whose_object_the_others_could_not_unpickle_is_the_first_failure():
    """Ranks 1 and 2 raised the same AttributeError inside broadcast_object_list: rank 0, its
    root, had sent an instance of a class only it defined. Rank 0 is the first failure,
    with the call and the line; the ranks that raised are its victims."""
    error = {"exception": "AttributeError: Can't get attribute 'RunConfig' on <module '__main__'>",
             "file": "/x/job.py", "line": 19, "function": "<module>", "call": "broadcast_object_list",
             "called": "broadcast_object_list"}
    found = Findings(world=3, ranks={0, 1, 2}, exit_codes={1: 1, 2: 1, 0: -15}, errors={1: error, 2: dict(error)},
                     root_causes={0: 1}, node_ranks={0: [0, 1, 2]})
    failed = NodeOutcome(0, "lab-0", 1, NodeState.FAILED, 3.0)
    ended = {r: {"op": "broadcast_object_list", "caller": "/x/job.py:19", "inside": False, "root": 0} for r in (1, 2)}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found, ended_at=ended),
                         "runs/x")
    first = rec.first_failure
    assert (first.rank, first.op, first.caller, first.blamed_for) == (0, "broadcast_object_list", "/x/job.py:19",
                                                                       "sent it"), first
    assert first.describe().startswith("rank 0 on node 0 sent an object the other ranks could not load")
    # an error that is no unpickling failure keeps the ranks that raised it
    other = {**error, "exception": "RuntimeError: something else"}
    found = Findings(world=3, ranks={0, 1, 2}, exit_codes={1: 1, 2: 1, 0: -15}, errors={1: other, 2: dict(other)},
                     root_causes={0: 1}, node_ranks={0: [0, 1, 2]})
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found, ended_at=ended),
                         "runs/x")
    assert rec.first_failure.rank != 0 and rec.first_failure.blamed_for is None
    # the rank that raised made the odd call (a longer object list: its own sizes were off):
    # what it could not unpickle came of its call, not of what the root sent
    from labctl.runrecord import TraceSummary
    from labctl.trace.model import Mismatch
    found = Findings(world=3, ranks={0, 1, 2}, exit_codes={2: 1, 0: -15, 1: -15},
                     errors={2: {**error, "exception": "_pickle.UnpicklingError: invalid load key, '\\x00'."}},
                     root_causes={0: 2}, node_ranks={0: [0, 1, 2]})
    record = RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3)
    record.trace = TraceSummary("trace.json", 9, mismatch=Mismatch("default_pg", 2, [2], 2, "broadcast_object_list",
                                                                 "/x/job.py:19", ["size"], {}, [], "rank 2 called ..."))
    rec = verdict.decide(record, Evidence(Seen(Ending.BACKEND_FAILURE, [failed]), 1, 1, False, found=found,
                                          ended_at=ended), "runs/x")
    assert (rec.first_failure.rank, rec.first_failure.blamed_for) == (2, None), rec.first_failure


def test_a_rank_held_in_a_store_read_of_a_key_another_rank_deleted_blames_the_delete():
    """Rank 2 waits in store.get("run_id") (the lab's deadline came); rank 0 had deleted
    that key: rank 0's delete is the first failure, rank 2 its victim."""
    hang = {"rank": 2, "ranks": [2], "op": "barrier", "caller": None, "text": "ranks 0, 1 wait in barrier ..."}
    found = Findings(world=3, ranks={0, 1, 2}, finished=set(), total=0, node_ranks={0: [0, 1, 2]})
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found,
                                  diagnosis=Diagnosis.from_dict(hang),
                                  ended_at={2: {"op": "store.get", "caller": "/x/job.py:23", "inside": True,
                                                "key": "run_id"}},
                                  deleted={"run_id": (0, "/x/job.py:17")}), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.op, first.caller, first.peer_rank) == (0, "store.delete_key", "/x/job.py:17", 2), first
    assert first.describe().startswith("rank 0 on node 0 deleted a store key another rank still had to read")
    # a key nobody deleted: the reader stays the first failure, with its read
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found,
                                  diagnosis=Diagnosis.from_dict(hang),
                                  ended_at={2: {"op": "store.get", "caller": "/x/job.py:23", "inside": True,
                                                "key": "run_id"}},
                                  deleted={"other": (0, "/x/job.py:17")}), "runs/x")
    assert (rec.first_failure.rank, rec.first_failure.op) == (2, "store.get")


def test_ranks_polling_a_store_counter_others_never_added_to_blame_those_others():
    """A home-made barrier: ranks 1 and 2 added to "bar/0" and poll it; rank 0 returned
    before adding and waits in the next all_reduce, which the diagnosis says ranks 1 and 2
    never entered. Rank 0, which never added, is the cause: store.add at the line the
    others added at."""
    hang = {"rank": None, "ranks": [1, 2], "op": "all_reduce", "caller": None,
            "text": "rank 0 waits in all_reduce (collective #1 of default_pg) which ranks 1, 2 never entered"}
    found = Findings(world=3, ranks={0, 1, 2}, finished=set(), total=0, node_ranks={0: [0, 1, 2]})
    polling = {r: {"op": "store.get", "caller": "/x/job.py:17", "inside": False, "key": "bar/0"} for r in (1, 2)}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found,
                                  diagnosis=Diagnosis.from_dict(hang), ended_at=polling,
                                  added={"bar/0": ([1, 2], "/x/job.py:16")}), "runs/x")
    first = rec.first_failure
    assert (first.rank, first.op, first.caller, first.hang) == (0, "store.add", "/x/job.py:16", True), first
    # every rank added: a slow counter, not a skipped add
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found,
                                  diagnosis=Diagnosis.from_dict(hang), ended_at=polling,
                                  added={"bar/0": ([0, 1, 2], "/x/job.py:16")}), "runs/x")
    assert rec.first_failure.op != "store.add" and rec.first_failure.rank is None


def test_ranks_polling_store_counters_on_different_keys_blame_the_fewest():
    """Every rank ends polling a store counter, but rank 1 on another key (its epoch one
    ahead): the deadline came with no collective waited in. Rank 1, alone on its key, is the
    cause, with its store call; a tie between two keys names nobody."""
    found = Findings(world=3, ranks={0, 1, 2}, finished=set(), total=0, node_ranks={0: [0, 1, 2]})
    polling = {r: {"op": "store.add", "caller": "/x/job.py:22", "inside": False,
                   "key": "epoch-2-done" if r == 1 else "epoch-1-done"} for r in (0, 1, 2)}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found, ended_at=polling),
                         "runs/x")
    first = rec.first_failure
    assert (first.rank, first.op, first.caller, first.hang) == (1, "store.add", "/x/job.py:22", True), first
    # one key for all: no party is odd
    same = {r: {**e, "key": "epoch-1-done"} for r, e in polling.items()}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found, ended_at=same), "runs/x")
    assert rec.first_failure is None or rec.first_failure.rank is None
    # a rank that ended elsewhere (a collective): not a store-only hang
    other = {**polling, 0: {"op": "all_reduce", "caller": "/x/job.py:9", "inside": True, "key": None}}
    rec = verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                         Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found, ended_at=other), "runs/x")
    assert rec.first_failure is None or rec.first_failure.op != "store.add"


def test_every_rank_waiting_for_a_key_nobody_set_blames_the_winner_of_the_election():
    """The first rank to finish indexing elects itself with store.compare_set and should
    then set the cache's path; it compares the result (bytes) with a str, never sees itself
    elected, and every rank waits in store.wait for the path. The election's winner (the
    first compare_set: calls.elections) is the cause, with its compare_set. A key someone
    set, or no election, names nobody so."""
    found = Findings(world=3, ranks={0, 1, 2}, finished=set(), total=0, node_ranks={0: [0, 1, 2]})
    waiting = {r: {"op": "store.wait", "caller": "/x/job.py:35", "inside": True, "key": "vocab/path"}
               for r in (0, 1, 2)}
    elected = {"vocab/builder": (0, "/x/job.py:30")}

    def decide(**kw):
        ev = Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found, ended_at=waiting, **kw)
        return verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3), ev, "runs/x").first_failure

    first = decide(elected=elected)
    assert (first.rank, first.op, first.caller, first.hang) == (0, "store.compare_set", "/x/job.py:30", True), first
    for kw in ({}, {"elected": elected, "set_keys": {"vocab/path": (1, "/x/job.py:34")}}):
        first = decide(**kw)
        assert first is None or first.op != "store.compare_set", first


def test_every_rank_waiting_in_the_store_for_a_key_only_one_of_them_will_set_blames_it():
    """Each rank publishes `token_count/<rank>` and waits for all counts; the vocabulary
    owner (rank 2) waits before it publishes. Ranks 0 and 1 set theirs: by that pattern the
    key nobody set is rank 2's, and rank 2 waits itself: it is the cause, at its read. Keys
    that do not name their setter, or a missing key of no one rank's, name nobody so."""
    found = Findings(world=3, ranks={0, 1, 2}, finished=set(), total=0, node_ranks={0: [0, 1, 2]})
    keys = "token_count/0, token_count/1, token_count/2"
    waiting = {r: {"op": "store.wait", "caller": "/x/job.py:20", "inside": True, "key": keys} for r in (0, 1, 2)}
    ranked = {f"token_count/{r}": (r, "/x/job.py:15") for r in (0, 1)}

    def decide(set_keys, ended=waiting):
        ev = Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found, ended_at=ended, set_keys=set_keys)
        return verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3), ev, "runs/x").first_failure

    first = decide(ranked)
    assert (first.rank, first.op, first.caller, first.hang) == (2, "store.wait", "/x/job.py:20", True), first
    for other in ({"token_count/0": (1, "/x/job.py:15")}, {}):
        first = decide(other)
        assert first is None or first.rank != 2, first
    odd = {r: {**w, "key": "token_count/0, token_count/1, ready"} for r, w in waiting.items()}
    first = decide(ranked, odd)
    assert first is None or first.rank != 2, first


def test_an_election_is_the_first_compare_set_of_a_key_two_ranks_made():
    from labctl.trace.calls import elections
    from labctl.trace.model import Op

    def cas(rank, start, key="lock"):
        return Op(rank=rank, op="store.compare_set", pg="store", seq=None, p2p=None, peer=None, root=None,
                  shape=None, dtype=None, nbytes=0, caller=f"/x/job.py:{30 + rank}", start=start, end=start + 1,
                  key=key)
    assert elections({0: [cas(0, 50)], 1: [cas(1, 20)], 2: [cas(2, 90)]}) == {"lock": (1, "/x/job.py:31")}
    assert elections({0: [cas(0, 50, "mine")]}) == {}                     # one rank's own key: no election

def test_ranks_held_by_a_store_key_blame_its_writer(tmp_path):
    """Ranks 1 and 2 read a store key while rank 0 waits for them in an all_reduce. Rank 0
    set the key and they poll on (the value is not the step they wait for): rank 0's set is
    the cause. Nobody set it, and the script's one set of that key is on a line rank 0 has
    gone past (a branch that skipped it): rank 0, at that line. Where rank 0 has not reached
    the set yet (it waits in a barrier before it), the readers stay blamed."""
    script = tmp_path / "job.py"
    script.write_text("\n" * 20 + "store.set('run_config', text)\n")      # line 21
    hang = {"rank": None, "ranks": [1, 2], "op": "all_reduce", "caller": None,
            "text": "rank 0 waits in all_reduce (collective #1 of default_pg) which rank 1, rank 2 never entered"}
    found = Findings(world=3, ranks={0, 1, 2}, finished=set(), total=0, node_ranks={0: [0, 1, 2]})

    def decide(ended, set_keys=None):
        return verdict.decide(RunRecord("lab-1", "lab", "local", "torchrun", "gloo", 1, 3, 3),
                              Evidence(Seen(Ending.DEADLINE, [_ok(0)]), 1, 1, False, found=found,
                                       diagnosis=Diagnosis.from_dict(hang), ended_at=ended,
                                       set_keys=set_keys or {}), "runs/x").first_failure

    polling = {r: {"op": "store.get", "caller": f"{script}:17", "inside": False, "key": "ckpt_step"} for r in (1, 2)}
    first = decide({**polling, 0: {"op": "all_reduce", "caller": f"{script}:30", "inside": True}},
                   {"ckpt_step": (0, f"{script}:34")})
    assert (first.rank, first.op, first.caller) == (0, "store.set", f"{script}:34"), first
    held = {r: {"op": "store.get", "caller": f"{script}:24", "inside": True, "key": "run_config"} for r in (1, 2)}
    first = decide({**held, 0: {"op": "all_reduce", "caller": f"{script}:30", "inside": True}})
    assert (first.rank, first.op, first.caller) == (0, "store.set", f"{script}:21"), first
    first = decide({**held, 0: {"op": "barrier", "caller": f"{script}:15", "inside": True}})
    assert first.op != "store.set", first
    # blocked on a key that was set (another store: a PrefixStore's): the reader's own fault
    first = decide({**held, 0: {"op": "all_reduce", "caller": f"{script}:30", "inside": True}},
                   {"run_config": (0, f"{script}:21")})
    assert first.op != "store.set", first
