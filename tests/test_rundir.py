"""Finalizing a run folder from node logs alone: the first failure and its real culprit."""
from __future__ import annotations

import json

from labctl.outcome import NodeOutcome, NodeState, RunState
from labctl.backends.local.placement import local_placement
from labctl.plan import plan
from labctl.rundir import RunDir
from labctl.spec import from_dict
from conftest import finalize

PEER_RESET = ("[rank0]:[rank0]: Traceback (most recent call last):\n"
              '[rank0]:[rank0]:   File "/tmp/train.py", line 5, in <module>\n'
              "[rank0]:[rank0]:     dist.barrier()\n"
              "[rank0]:[rank0]: RuntimeError: [pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer.\n"
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
              "============================================================\n"
              "Root Cause (first observed failure):\n"
              "[0]:\n"
              "  time      : 2026-11-23_13:29:01\n"
              "  host      : localhost\n"
              "  rank      : 0 (local_rank: 0)\n"
              "  exitcode  : 1 (pid: 2766) \n"
              "============================================================\n")
AGENT_DONE = ("I1123 13:29:01.000000 7 torch/distributed/elastic/agent/server/api.py:933] "
              "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.\n")


def _rundir(tmp_path):
    spec = from_dict({"nodes": 2, "nproc_per_node": 1})
    p = plan(spec, local_placement(spec, 29500), "lab-test")
    return RunDir.create(p, out=tmp_path / "run")


def _finalize(tmp_path, node1: NodeOutcome, node1_log: str) -> dict:
    run = _rundir(tmp_path)
    run.write_node_log(0, PEER_RESET)
    run.write_node_log(1, node1_log)
    finalize(run, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=30.0), node1], RunState.FAILED)
    return json.loads((run.path / "status.json").read_text())["first_failure"]


def test_a_node_whose_workers_finished_is_the_culprit_even_when_stopped_at_the_exit_barrier(tmp_path):
    # under load torchrun's agent can still wait at its exit barrier when labctl's grace ends
    stopped = NodeOutcome(1, "lab-1", -15, NodeState.STOPPED)
    first = _finalize(tmp_path, stopped, AGENT_DONE)
    assert first["left_early"] is True and first["node"] == 1 and first["symptom_rank"] == 0


def test_a_stopped_node_that_never_finished_is_not_blamed(tmp_path):
    stopped = NodeOutcome(1, "lab-1", -15, NodeState.STOPPED)
    first = _finalize(tmp_path, stopped, "")
    assert "left_early" not in first and first["rank"] == 0


def _fault(kind, target, lab_s, text):
    from labctl.runrecord import FiredFault

    return FiredFault(text, kind, target, "begin", "SIGKILL", lab_s, ok=True, took_s=0.1)


def test_a_kill_fault_is_the_root_cause_only_when_it_came_before_the_failure():
    from labctl.blame import Findings, FirstFailure, fault_cause

    found = Findings(node_ranks={0: [0], 1: [1]})
    peer = {"rank": 0, "node": 0, "exit_code": 1, "error": {"exception": "RuntimeError: Connection reset by peer"}}
    killed = NodeOutcome(1, "lab-1", -9, "killed", exited_s=30.2, signal="SIGKILL")
    peer_node = NodeOutcome(0, "lab-0", 1, "failed", exited_s=30.9)
    cause = fault_cause(FirstFailure(**peer), [peer_node, killed], found,
                        [_fault("kill-node", 1, 30.1, "kill-node:1@30")]).to_dict()
    assert (cause["fault"], cause["node"], cause["rank"]) == ("kill-node:1@30", 1, None)
    assert cause["peer_error"] == peer["error"] and cause["peer_rank"] == 0
    # rank 0 crashed at 5 s by itself; the kill at 30 s came later: not its cause
    crashed = NodeOutcome(0, "lab-0", 1, "failed", exited_s=5.0)
    assert fault_cause(FirstFailure(**peer), [crashed, killed], found,
                       [_fault("kill-node", 1, 30.1, "kill-node:1@30")]).to_dict() == peer
    # a freeze kills nothing, but the peer's lost connection is its symptom: the frozen
    # node's rank is the one it waited for (tests/test_blame.py has the timeout's case)
    frozen = fault_cause(FirstFailure(**peer), [peer_node], found,
                         [_fault("stop-node", 1, 20.0, "stop-node:1@20+60")]).to_dict()
    assert (frozen["fault"], frozen["rank"], frozen["node"], frozen["peer_rank"], frozen["peer_error"]) == \
        ("stop-node:1@20+60", 1, 1, 0, peer["error"])
    # a rank's own error is not a freeze's symptom: it stays first, with the fault before it
    own = {**peer, "error": {"exception": "ValueError: bad batch", "file": "job.py", "line": 9}}
    after = fault_cause(FirstFailure(**own), [peer_node], found,
                        [_fault("stop-node", 1, 20.0, "stop-node:1@20+60")]).to_dict()
    assert after == {**own, "after_fault": "stop-node:1@20+60"}


def test_the_node_log_split_keeps_an_over_long_unended_line_as_printed(tmp_path):
    """torchrun's tee writes a rank's 3 MiB line once, prefixed, with no newline: the
    split rank log holds exactly those bytes (was: a newline every MiB and at the end);
    the reader cuts the line in pieces, the file keeps it."""
    run = _rundir(tmp_path)
    printed = b"0123456789abcdef" * (3 << 16) + b"@@labctl-result not json"
    with open(run.node_log(0), "wb") as f:
        f.write(b"[rank0]:" + printed)
    run.write_node_log(1, "[rank1]:a line\n[rank1]:no end")
    finalize(run, [NodeOutcome(0, "lab-0", 0, NodeState.SUCCEEDED),
                  NodeOutcome(1, "lab-1", 0, NodeState.SUCCEEDED)], RunState.PASSED)
    assert run.rank_log(0).read_bytes() == printed
    assert run.rank_log(1).read_bytes() == b"a line\nno end"


def test_the_first_failure_reads_back_from_status_json_with_the_same_keys_and_sentence():
    """status.json's first_failure is FirstFailure.to_dict: every shape it takes reads
    back (report, `labctl report` of an old folder) to the same keys, order and sentence."""
    from labctl.blame import FirstFailure

    error = {"exception": "ValueError: boom", "file": "/x.py", "line": 3, "function": "f"}
    shapes = [
        ({"rank": 0, "node": 0, "exit_code": 1, "error": error, "signal": "SIGSEGV"},
         "rank 0 on node 0 was killed by SIGSEGV: ValueError: boom at /x.py:3"),
        ({"rank": None, "node": 1, "exit_code": None, "lost": "pod deleted"}, "node 1 lost: pod deleted"),
        ({"rank": 2, "node": None, "exit_code": None, "check": "w/c", "after_fault": "stop-node:1@5+9"},
         "rank 2 failed check w/c (after fault stop-node:1@5+9)"),
        ({"rank": None, "ranks": [], "node": 1, "exit_code": 0, "left_early": True, "error": None,
          "symptom_rank": 0}, "its ranks on node 1 exited 0 while the others were still in a "
                              "collective (left the group early)"),
        ({"fault": "kill-rank:1@5", "fault_s": 6.0, "signal": "SIGKILL", "rank": 1, "node": None,
          "exit_code": None, "peer_error": error, "peer_rank": None},
         "rank 1 on node None was killed by fault kill-rank:1@5 (SIGKILL)"),
        ({"rank": 3, "node": None, "exit_code": None, "hang": True, "collective": {"text": "all_reduce"}},
         "hang in a collective: all_reduce"),
    ]
    for data, sentence in shapes:
        first = FirstFailure.from_dict(data)
        assert list(first.to_dict().items()) == list(data.items())
        assert first.describe() == sentence


def test_bytes_that_are_not_utf8_stay_in_the_rank_log_and_reach_the_report_as_replacement_characters(tmp_path):
    """The rank log keeps the bytes the rank printed (a result line in the same run no
    longer turns them into U+FFFD); what status.json, results.jsonl and report.md read
    from the lines (results, the exception) is text with U+FFFD where a byte was not UTF-8."""
    from labctl import report

    run = _rundir(tmp_path)
    printed = (b"caf\xe9 plain\n"
               b'@@labctl-result {"workload": "w", "name": "caf\xe9", "ok": false, "detail": "\xff"}\n'
               b"[rank0]: Traceback (most recent call last):\n"
               b'[rank0]:   File "/tmp/train.py", line 5, in <module>\n'
               b"[rank0]: ValueError: caf\xe9\n")
    with open(run.node_log(0), "wb") as f:
        f.write(b"".join(b"[rank0]:" + line + b"\n" for line in printed.split(b"\n")[:-1])
                + b"labctl: rank 0 exited with code 1 at 100.0\n")
    run.write_node_log(1, "[rank1]:fine\n")
    finalize(run, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=1.0),
                  NodeOutcome(1, "lab-1", 0, NodeState.SUCCEEDED)], RunState.FAILED)
    assert run.rank_log(0).read_bytes() == printed
    status = json.loads((run.path / "status.json").read_bytes().decode("utf-8"))
    assert status["rank_errors"]["0"]["exception"] == "ValueError: caf\ufffd"
    assert [(c["name"], c["detail"]) for c in status["failed_checks"]] == [("caf\ufffd", "\ufffd")]
    assert [r["name"] for r in run.results()] == ["caf\ufffd"]
    text = report.markdown(run)
    assert "ValueError: caf\ufffd" in text and "| w | caf\ufffd | 0 | \ufffd |" in text
    text.encode("utf-8")                          # strict: no byte smuggled in as a surrogate


# ---------------------------------------------------------------- the same --out at once

def test_two_runs_that_both_saw_the_folder_free_claim_it_once(tmp_path, monkeypatch):
    """Issue 38: two labs given the same --out at the same instant both started (1 in 13
    tries) and killed each other. Both looks (the folder free) are made before either
    writes; one claims the folder, the other is refused (exit 2) and leaves it as it was."""
    import threading

    from labctl import rundir
    from labctl.rundir import FolderRefused

    looked = threading.Barrier(2, timeout=30)
    real = rundir._existing

    def both_looked(path):                      # after the look, before the folder is made
        looked.wait()
        return real(path)

    monkeypatch.setattr(rundir, "_existing", both_looked)
    spec = from_dict({"nodes": 1, "nproc_per_node": 1})
    out = tmp_path / "same"
    made, refused = [], []

    def up(run_id):
        try:
            made.append(RunDir.create(plan(spec, local_placement(spec, 29500), run_id), out=out))
        except FolderRefused as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=up, args=(f"lab-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len(refused) == 1, (made, refused)
    assert refused[0].startswith(f"run folder '{out}' ") and refused[0].endswith("choose another --out")
    assert json.loads((out / "status.json").read_text())["run_id"] == made[0].record.run_id
    assert (out / rundir.RESERVE_NAME).stat().st_size == rundir.RESERVE_BYTES


def test_a_claim_on_a_folder_another_run_filled_since_the_look_deletes_nothing(tmp_path):
    from labctl import rundir
    from labctl.rundir import FolderRefused

    out = tmp_path / "run"
    out.mkdir()
    (out / "status.json").write_text("theirs")          # a whole run came and went (reserve released)
    try:
        RunDir._claim(out)
    except FolderRefused as exc:
        assert "exists and is not empty" in str(exc)
    else:
        raise AssertionError("claimed a folder that holds another run")
    assert sorted(p.name for p in out.iterdir()) == ["status.json"]
    assert (out / "status.json").read_text() == "theirs" and not (out / rundir.RESERVE_NAME).exists()


def test_two_real_labs_with_the_same_out_started_together_one_runs(tmp_path):
    """Two `labctl up --out SAME` started at once, a few times: one runs to its end, the
    other says one line and exits 2; the winner's folder is whole."""
    import subprocess

    from conftest import LABCTL, REPO

    lab = ["up", "--workload", "env", "--nodes", "1", "--nproc-per-node", "1", "--timeout", "60"]
    for attempt in range(4):
        out = tmp_path / f"same-{attempt}"
        procs = [subprocess.Popen([*LABCTL, *lab, "--out", str(out)], cwd=REPO, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        done = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        assert sorted(code for code, _, _ in done) == [0, 2], done
        (loser,) = [err for code, _, err in done if code == 2]
        assert loser.count("\n") == 1 and loser.startswith("error: ") and "choose another --out" in loser, loser
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "passed" and (out / "report.md").is_file() and (out / "ranks" / "rank-0.log").is_file()


def test_the_folder_s_node_logs_and_stack_dumps_are_found_by_the_names_it_writes(tmp_path):
    """node_logs and stack_files (the page's readers) find what node_log and write_stacks
    name, by number (node-10 after node-2)."""
    run = RunDir(tmp_path, None)        # names only: no record needed
    (tmp_path / "nodes").mkdir()
    for index in (10, 2):
        run.node_log(index).write_text("")
    run.guard_log(2).write_text("")
    (tmp_path / "nodes" / "node-x.log").write_text("")
    assert run.node_logs() == [(2, run.node_log(2)), (10, run.node_log(10))]     # by index, not by name
    assert run.stack_files() == []
    run.write_stacks({11: ["Current thread 0x1 (most recent call first):"], 3: ["Thread 0x2:"]})
    assert run.stack_files() == [(3, run.stack_file(3)), (11, run.stack_file(11))]
    assert run.stack_file(3).read_text() == "Thread 0x2:\n"
