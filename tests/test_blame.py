"""Failure blame from torch elastic's error files (labctl/blame.py, workloads/_record.py).

Under torchrun each worker's escaping exception lands in its error file; the local
backend keeps torchrun's --log-dir in the run folder (`torchrun/node-<i>/`), and the
first failure comes from those files, the printed failure summary only as a fallback.
"""
from __future__ import annotations

import dataclasses

import json
import shutil

import pytest

from labctl.blame import Findings, first_failure, read_error_files
from labctl.runrecord import FiredFault
from labctl.outcome import NodeOutcome, NodeState, RunState
from labctl.backends.local.placement import local_placement
from labctl.plan import plan
from labctl.rundir import RunDir
from labctl.spec import from_dict
from workloads._record import recorded

from conftest import assert_nothing_left, finalize

RUN_ID = "lab-test"
CLOSED = "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:4242"
# node 0's agent, alone, blames its own rank 0 (a peer's symptom); node 0 ended first
NODE0_SUMMARY = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                 "============================================================\n"
                 "Root Cause (first observed failure):\n"
                 "[0]:\n"
                 "  time      : 2026-11-24_10:00:01\n"
                 "  rank      : 0 (local_rank: 0)\n"
                 "  exitcode  : 1 (pid: 100) \n"
                 "============================================================\n")
# node 1's log was cut before its summary and before rank 3's traceback
NODE1_CUT = "[rank2]:step 1\n[rank3]:step 1\n[rank3]:Traceback (most rec"


def _run(tmp_path, nodes: int = 2, nproc: int = 2) -> RunDir:
    spec = from_dict({"nodes": nodes, "nproc_per_node": nproc})
    return RunDir.create(plan(spec, local_placement(spec, 29500), RUN_ID), out=tmp_path / "run")


def _error_file(run: RunDir, node: int, local_rank: int):
    folder = run.path / "torchrun" / f"node-{node}" / f"{RUN_ID}_x1y2" / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "error.json"


def _raise(monkeypatch, path, rank: int, local_rank: int, exc: Exception) -> int:
    """A worker of torchrun raising `exc` through workloads/_record.py (the real writer);
    returns the line it was raised on."""
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))

    def worker():
        raise exc

    with pytest.raises(type(exc)):
        recorded(worker)()
    return worker.__code__.co_firstlineno + 1


def test_the_error_files_name_the_first_failure_when_the_summary_is_cut_or_misleading(tmp_path, monkeypatch):
    """Rank 3 raised first (its error file is the earliest), then the peers saw the
    connection close. Node 1's log was cut before its traceback and summary; node 0's
    summary, from the node that ended first, names its own rank 0: the summary alone
    blames rank 0 with a peer's symptom."""
    run = _run(tmp_path)
    line = _raise(monkeypatch, _error_file(run, 1, 1), 3, 1, ValueError("rank 3 cannot go on"))
    _raise(monkeypatch, _error_file(run, 0, 0), 0, 0, RuntimeError(CLOSED.split(": ", 1)[1]))
    run.write_node_log(0, "[rank0]:step 1\n[rank1]:step 1\n" + NODE0_SUMMARY)
    run.write_node_log(1, NODE1_CUT)
    finalize(run, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=30.0),
                  NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=31.0)], RunState.FAILED)
    status = json.loads((run.path / "status.json").read_text())
    first = status["first_failure"]
    assert (first["rank"], first["node"]) == (3, 1)
    assert first["error"] == {"exception": "ValueError: rank 3 cannot go on", "file": __file__,
                              "line": line, "function": "worker"}
    assert status["message"] == f"rank 3 on node 1: ValueError: rank 3 cannot go on at {__file__}:{line}"
    assert 3 in status["failed_ranks"] and status["rank_errors"]["3"] == first["error"]
    assert status["rank_exit_codes"] == {"0": 1}, "only what the summary printed"
    # the same folder without the error files: the printed summary decides, as before
    shutil.rmtree(run.path / "torchrun")
    finalize(run, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=30.0),
                  NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=31.0)], RunState.FAILED)
    assert json.loads((run.path / "status.json").read_text())["first_failure"]["rank"] == 0


def test_an_error_file_keeps_a_message_with_a_carriage_return_whole(tmp_path, monkeypatch):
    """A message with a "\r" in it (a progress bar's, a Windows path's) is one line, as in
    a log: the reader cut it at the "\r" (str.splitlines)."""
    files = tmp_path / "node-0" / f"{RUN_ID}_cr" / "attempt_0" / "0"
    files.mkdir(parents=True)
    line = _raise(monkeypatch, files / "error.json", 0, 0, ValueError("step 3/10\rstep 4/10 failed"))
    read, notes = read_error_files(tmp_path / "node-0", 0)
    assert not notes and read[0].message == "ValueError: step 3/10\rstep 4/10 failed", read
    assert (read[0].frame.file, read[0].frame.line) == (__file__, line)


def test_a_peer_hanging_up_first_points_at_the_rank_that_died_without_raising(tmp_path, monkeypatch):
    """Rank 2 left with os._exit(3) (no exception, no error file); rank 3 raised only
    "connection closed". The rank that died without raising is the first failure."""
    files = tmp_path / "node-1" / f"{RUN_ID}_ab" / "attempt_0" / "1"
    files.mkdir(parents=True)
    _raise(monkeypatch, files / "error.json", 3, 1, RuntimeError(CLOSED.split(": ", 1)[1]))
    found = Findings(node_ranks={0: [0, 1], 1: [2, 3]}, exit_codes={2: 3, 3: 1}, root_causes={1: 3})
    read, notes = read_error_files(tmp_path / "node-1", 1)
    assert notes == [] and [f.rank for f in read] == [3]
    found.add_error_files(read)
    first = first_failure([NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=1.0)], found)
    assert (first.rank, first.node, first.exit_code) == (2, 1, 3)


def test_garbled_or_truncated_error_files_are_left_out_with_a_note(tmp_path, monkeypatch):
    run = _run(tmp_path, nodes=1)
    good = _error_file(run, 0, 1)
    _raise(monkeypatch, good, 1, 1, ValueError("boom"))
    text = good.read_text()
    _error_file(run, 0, 0).write_text(text[: len(text) // 2])               # cut mid-way
    wrong = json.loads(text)
    wrong["message"]["extraInfo"]["timestamp"] = "yesterday"
    run.path.joinpath("torchrun", "node-0", f"{RUN_ID}_x1y2", "attempt_0", "2").mkdir()
    _error_file(run, 0, 2).write_text(json.dumps(wrong))
    _error_file(run, 0, 3).write_bytes(b"\xff\xfe{[")
    # torch's own layout (a worker under plain `record`): read, but it names no global rank
    plain = {"message": {"message": "KeyError: 'x'", "extraInfo": {
        "py_callstack": 'Traceback (most recent call last):\n  File "/s.py", line 2, in <module>\n'
                        "KeyError: 'x'\n", "timestamp": "1700000000"}}}
    _error_file(run, 0, 4).write_text(json.dumps(plain))
    files, notes = read_error_files(run.path / "torchrun" / "node-0", 0)
    assert [(f.rank, f.message) for f in files] == [(1, "ValueError: boom"), (None, "KeyError: 'x'")]
    assert (files[1].frame.file, files[1].frame.line, files[1].timestamp) == ("/s.py", 2, 1700000000.0)
    assert len(notes) == 3 and all("ignored torch elastic error file" in n for n in notes)
    assert "attempt_0/0/error.json" in notes[0] and "attempt_0/2/error.json" in notes[1]
    # the run folder's end: no traceback, the notes in status.json, rank 1 named
    run.write_node_log(0, "")
    finalize(run, [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=3.0)], RunState.FAILED)
    status = json.loads((run.path / "status.json").read_text())
    assert status["first_failure"]["rank"] == 1 and status["notes"] == notes


def test_only_the_newest_attempt_counts(tmp_path, monkeypatch):
    """An elastic agent restarted its workers: attempt_0's failure was recovered from."""
    base = tmp_path / "node-0" / f"{RUN_ID}_q"
    for attempt, exc in ((0, ValueError("old")), (1, ValueError("new"))):
        (base / f"attempt_{attempt}" / "0").mkdir(parents=True)
        _raise(monkeypatch, base / f"attempt_{attempt}" / "0" / "error.json", 0, 0, exc)
    files, _ = read_error_files(tmp_path / "node-0", 0)
    assert [f.message for f in files] == ["ValueError: new"]
    assert read_error_files(tmp_path / "nowhere", 0) == ([], [])


RAISE_ON_RANK_3 = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
if dist.get_rank() == 3:
    raise ValueError(f"rank {dist.get_rank()} cannot go on")
dist.barrier()
"""


@pytest.mark.slow
def test_a_raising_rank_is_named_from_its_error_file_in_a_real_torchrun_lab(tmp_path, write_script):
    """One local torchrun lab (2 nodes x 2): rank 3 raises. Its error file lands in the
    run folder, the agent read it too (its summary quotes the exception), and the first
    failure names rank 3, its node, exception and line, also once the node log is cut."""
    from labctl import lab, spec

    script = write_script(RAISE_ON_RANK_3)
    run = lab.up(spec.from_dict({"script": str(script), "nodes": 2, "nproc_per_node": 2}),
                 out=str(tmp_path / "run"), progress=lambda line: None)
    expected = {"exception": "ValueError: rank 3 cannot go on", "file": str(script), "line": 5,
                "function": "<module>"}
    meta = run.status
    assert meta["state"] == "failed"
    # c10d's rendezvous decides which node holds ranks 2 and 3
    node = next(i for i in (0, 1) if "[rank3]:" in run.node_log(i).read_text())
    first = meta["first_failure"]
    assert (first["rank"], first["node"], first["exit_code"], first["error"]) == (3, node, 1, expected)
    assert meta["rank_exit_codes"]["3"] == 1, "the exit code is the same as without the error file"
    assert "ValueError: rank 3 cannot go on" in run.rank_log(3).read_text(), "the rank printed it too"
    plan_json = json.loads((run.path / "plan.json").read_text())
    log_dirs = [a for n in plan_json["nodes"] for a in n["argv"] if a.startswith("--log-dir=")]
    assert log_dirs == [f"--log-dir={(run.path / 'torchrun' / f'node-{i}').resolve()}" for i in (0, 1)]
    [error_file] = (run.path / "torchrun" / f"node-{node}").glob(f"{meta['run_id']}_*/attempt_0/1/error.json")
    assert json.loads(error_file.read_text())["labctl"]["rank"] == 3
    # torchrun's agent read it: its summary names the exception, in one line
    assert "traceback : ValueError: rank 3 cannot go on\n" in run.node_log(node).read_text()
    # the same folder with that node's log cut before rank 3's traceback and the summary
    copy = RunDir.open(shutil.copytree(run.path, tmp_path / "cut"))
    text = copy.node_log(node).read_text()
    copy.write_node_log(node, text[:text.index("Traceback")])
    finalize(copy, [NodeOutcome(**n) for n in meta["node_outcomes"]], "failed")
    assert copy.status["first_failure"]["error"] == expected and copy.status["first_failure"]["rank"] == 3
    assert_nothing_left(meta["run_id"])



def _agent_failed(rank: int, code: int, signal: str = "") -> str:
    """What a torchrun agent prints when a worker of its node failed: its own traceback
    ending in ChildFailedError, then the failure summary."""
    return ("Traceback (most recent call last):\n"
            '  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent\n'
            "    raise ChildFailedError(\n"
            + NODE0_SUMMARY.replace("rank      : 0 (local_rank: 0)", f"rank      : {rank} (local_rank: 0)")
            .replace("exitcode  : 1 (pid: 100) ", f"exitcode  : {code} (pid: 100) {signal}"))


def test_a_rank_s_failure_is_told_in_its_own_words_or_none_never_its_launcher_s(tmp_path):
    """No error files (compose, Kubernetes): node 0's summary names its rank 0, whose
    error only says the peer reset the connection; rank 1 on node 1 aborted in C++. The
    first failure is rank 1 with gloo's line; once rank 1 printed nothing (an OOM kill),
    it is rank 1 killed by SIGKILL, with no words: never the agent's ChildFailedError."""
    from test_logs import ABORT, GLOO_MISMATCH

    reset = ("[rank0]:Traceback (most recent call last):\n"
             '[rank0]:  File "/tmp/s.py", line 4, in <module>\n'
             "[rank0]:RuntimeError: [pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer\n")
    run = _run(tmp_path, nproc=1)
    outcomes = [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=3.0),
                NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=3.4)]
    run.write_node_log(0, reset + _agent_failed(0, 1))
    aborted = "".join(f"[rank1]:{line}\n" for line in ABORT.splitlines())
    run.write_node_log(1, aborted + _agent_failed(1, -6, "(SIGABRT)"))
    finalize(run, outcomes, RunState.FAILED)
    first = run.status["first_failure"]
    assert first == {"rank": 1, "node": 1, "exit_code": -6, "error": {"exception": GLOO_MISMATCH},
                     "signal": "SIGABRT"}
    assert run.status["message"] == f"rank 1 on node 1 was killed by SIGABRT: {GLOO_MISMATCH}"
    run.write_node_log(1, _agent_failed(1, -9, "(SIGKILL)"))
    finalize(run, outcomes, RunState.FAILED)
    assert run.status["first_failure"] == {"rank": 1, "node": 1, "exit_code": -9, "signal": "SIGKILL"}
    assert run.status["message"] == "rank 1 on node 1 was killed by SIGKILL"
    # a node that failed with no rank to blame (its rendezvous): the agent's own error
    run.write_node_log(0, "Traceback (most recent call last):\n"
                          '  File "/venv/torch/distributed/elastic/rendezvous/api.py", line 9, in join\n'
                          "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: timed out\n")
    run.write_node_log(1, "")
    finalize(run, outcomes, RunState.FAILED)
    assert run.status["message"].startswith("the launcher on node 0 exited with code 1: "
                                          "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError")


def test_ranks_that_exited_0_are_read_from_what_torchrun_s_summaries_leave_out():
    """Under torchrun no line says a worker exited 0; each agent's summary lists every
    worker of its node that did not (the failed one, those it then stopped). With
    nproc_per_node known, the ones left out had exited 0: early leavers, on every node."""
    from labctl.logs import torchrun_failed_workers

    closed = {"exception": CLOSED}
    found = Findings(node_ranks={0: [0, 1], 1: [2, 3]}, exit_codes={0: 1, 2: 1}, errors={0: closed, 2: closed},
                     root_causes={0: 0, 1: 2}, nproc_per_node=2, world=4,
                     summaries={0: torchrun_failed_workers(_agent_failed(0, 1)),
                                1: torchrun_failed_workers(_agent_failed(2, 1))})
    outcomes = [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=2.0),
                NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=2.1)]
    first = first_failure(outcomes, found)
    assert (first.left_early, first.ranks, first.nodes, first.symptom_rank) == (True, [1, 3], [0, 1], 0)
    assert first.describe() == ("rank 1 on node 0 and rank 3 on node 1 exited 0 while the others were "
                                "still in a collective (left the group early)")
    # rank 3 stopped by its agent (-15) did not leave: only rank 1
    found.summaries[1] = torchrun_failed_workers(_agent_failed(2, 1) + _agent_failed(3, -15).replace(
        "(local_rank: 0)", "(local_rank: 1)"))
    first = first_failure(outcomes, found)
    assert (first.rank, first.node, first.ranks, first.nodes) == (1, 0, None, None)
    assert first.to_dict()["left_early"] is True
    # without nproc_per_node (a folder of an older labctl) nothing can be said
    found.nproc_per_node = None
    assert not first_failure(outcomes, found).left_early


SHAPE_MISMATCH = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
# rank 0 sends 1000 floats where rank 1 expects 10: gloo's own thread throws, the rank aborts
# (sizes by index, no rank test: a tie the script does not break, so the rank that aborted
# heads the report; `1000 if rank == 0 else 10` would single out rank 0 as the odd call)
dist.all_reduce(torch.ones([1000, 10][dist.get_rank()]))
dist.barrier()
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "direct"])
def test_a_rank_that_aborts_in_cpp_is_named_in_its_own_words(tmp_path, write_script, launcher):
    """A shape mismatch (no --debug): gloo tells rank 1 'Received data size doesn't match
    expected size' from a C++ thread and the rank dies by SIGABRT, with no Python
    exception and no error file; rank 0 only sees the connection reset. The headline
    (status.json, the last line, report.md) names rank 1, SIGABRT and gloo's own line,
    never torchrun's ChildFailedError or a launcher frame (was: 'killed by SIGABRT:
    ...ChildFailedError: at .../launcher/api.py:383')."""
    from conftest import labctl

    out = tmp_path / "run"
    done = labctl("up", "--script", str(write_script(SHAPE_MISMATCH)), "--nodes", "1",
                  "--nproc-per-node", "2", "--launcher", launcher, "--out", str(out),
                  "--timeout", "120", timeout=300)
    assert done.returncode == 1, done.stderr
    status = json.loads((out / "status.json").read_text())
    first = status["first_failure"]
    gloo_said = "Received data size doesn't match expected size"
    assert (first["rank"], first["node"], first["exit_code"], first["signal"]) == (1, 0, -6, "SIGABRT"), first
    assert first["error"]["exception"].startswith("gloo::EnforceNotMet: [enforce fail at ")
    assert gloo_said in first["error"]["exception"] and "file" not in first["error"]
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"error: lab failed: rank 1 on node 0 was killed by SIGABRT: gloo::EnforceNotMet:"), last
    headline = (out / "report.md").read_text().split("**First failure: ", 1)[1].split("**", 1)[0]
    assert gloo_said in headline and gloo_said in status["message"]
    for text in (last, headline, status["message"]):
        assert "ChildFailedError" not in text and "launcher" not in text and "torchrun" not in text
    assert status["rank_errors"]["1"] == first["error"], "the failed processes list says it too"
    assert gloo_said in (out / "ranks" / "rank-1.log").read_text()
    assert_nothing_left(status["run_id"])


def test_a_kill_fault_keeps_what_the_peers_saw_when_the_killed_rank_is_named_first():
    """The killed rank itself is the first failure (it died by a signal its launcher did
    not send, no error file): the fault is the cause and the peers' word comes from their
    own errors (was: no peer_error at all whenever error files named the killed rank)."""
    from labctl.blame import fault_cause

    reset = {"exception": "RuntimeError: Read error [127.0.0.1]:1: Connection reset by peer"}
    found = Findings(node_ranks={0: [0], 1: [1]}, exit_codes={0: 1, 1: -9}, errors={0: reset},
                     root_causes={0: 0, 1: 1})
    outcomes = [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=12.0),
                NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=11.5)]
    first = first_failure(outcomes, found)
    assert (first.rank, first.signal, first.error) == (1, "SIGKILL", None), "the culprit behind the reset"
    fired = [FiredFault("kill-rank:1@2", "kill-rank", 1, "begin", "SIGKILL", 11.1, ok=True, took_s=0.01)]
    cause = fault_cause(first, outcomes, found, fired).to_dict()
    assert (cause["fault"], cause["rank"], cause["peer_rank"], cause["peer_error"]) == ("kill-rank:1@2", 1, 0, reset)
    # a whole node killed: none of its ranks is a peer
    fired = [dataclasses.replace(fired[0], fault="kill-node:1@2", kind="kill-node")]
    found.errors[1] = {"exception": "RuntimeError: half a line before the kill"}
    cause = fault_cause(first, outcomes, found, fired).to_dict()
    assert (cause["node"], cause["peer_rank"], cause["peer_error"]) == (1, 0, reset)


def test_a_frozen_or_cut_off_node_is_the_cause_of_its_peers_timeout():
    """Node 1 frozen (stop-node) or cut off (partition): rank 0's collective timed out
    waiting for it. The rank the others waited for is node 1's (was: rank 0, "after
    fault"); the timeout is kept as its peers' symptom. A rank's own error is not a symptom
    of a fault: it stays the first failure, after the fault."""
    from labctl.blame import fault_cause

    timed_out = {"exception": "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms "
                              "for recv operation to complete", "file": "job.py", "line": 14}
    found = Findings(node_ranks={0: [0], 1: [1]}, exit_codes={0: 1}, errors={0: timed_out}, root_causes={0: 0})
    outcomes = [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=32.0),
                NodeOutcome(1, "lab-1", None, NodeState.STOPPED, exited_s=40.0)]
    first = first_failure(outcomes, found)
    assert (first.rank, first.node) == (0, 0)
    for kind, said in (("stop-node", "was frozen by"), ("partition", "was cut off the network by")):
        fired = [FiredFault(f"{kind}:1@20+60", kind, 1, "begin", "docker pause lab-1", 21.0, took_s=0.1)]
        cause = fault_cause(dataclasses.replace(first), outcomes, found, fired)
        assert (cause.fault, cause.rank, cause.node, cause.peer_rank, cause.peer_error) == \
            (f"{kind}:1@20+60", 1, 1, 0, timed_out)
        assert cause.describe().startswith(f"rank 1 on node 1 {said} fault {kind}:1@20+60; rank 0 waited for it "
                                           "in vain: RuntimeError: "), cause.describe()
    own = {"exception": "ValueError: bad batch", "file": "job.py", "line": 9}
    found.errors[0] = own
    first = first_failure(outcomes, found)
    fired = [FiredFault("stop-node:1@20+60", "stop-node", 1, "begin", "docker pause lab-1", 21.0, took_s=0.1)]
    cause = fault_cause(first, outcomes, found, fired)
    assert (cause.rank, cause.fault, cause.after_fault) == (0, None, "stop-node:1@20+60")


def test_a_rank_stopped_after_the_symptom_is_not_its_cause():
    """Direct mode times every exit: rank 2 saw its peer hang up and exited first; rank 0
    was killed later, when labctl stopped its node (SIGKILL after the grace). Rank 0 is
    no cause; a rank that aborted before the symptom is."""
    reset = {"exception": "RuntimeError: Connection reset by peer"}
    found = Findings(node_ranks={0: [0, 1], 1: [2, 3]}, exit_codes={2: 1, 0: -9},
                     errors={2: reset}, exit_times={2: (100.0, 1), 0: (105.0, 0), 1: (105.1, 0), 3: (99.0, 1)})
    outcomes = [NodeOutcome(0, "lab-0", 1, NodeState.STOPPED, exited_s=9.0),
                NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=4.0)]
    first = first_failure(outcomes, found)
    assert first.left_early and first.rank == 3, "rank 3 exited 0 before rank 2's error"
    found.exit_codes[3] = -6                 # rank 3 aborted (SIGABRT) before the symptom instead
    first = first_failure(outcomes, found)
    assert (first.rank, first.signal, first.left_early) == (3, "SIGABRT", False)


def test_a_rank_stopped_by_sigterm_is_not_the_one_that_hung_up():
    """torchrun, 2 x 2: rank 3 left the loop and exited 0; ranks 0 and 2 raised 'Connection
    closed' (error files); rank 1 was stopped by its agent (SIGTERM, no error file). The
    rank that hung up is rank 3, not rank 1 (the zoo's left_early case read 'rank 1 was
    killed by SIGTERM')."""
    from labctl.blame import ErrorFile
    from labctl.logs import torchrun_failed_workers

    closed = {"exception": CLOSED}
    files = {r: ErrorFile(r // 2, r % 2, r, None, CLOSED, None, 100.0 + r) for r in (0, 2)}
    found = Findings(node_ranks={0: [0, 1], 1: [2, 3]}, exit_codes={0: 1, 1: -15, 2: 1},
                     errors={0: closed, 2: closed}, error_files=files, root_causes={0: 0, 1: 2},
                     nproc_per_node=2, world=4,
                     summaries={0: torchrun_failed_workers(_agent_failed(0, 1) + _agent_failed(1, -15).replace(
                         "(local_rank: 0)", "(local_rank: 1)")), 1: torchrun_failed_workers(_agent_failed(2, 1))})
    outcomes = [NodeOutcome(0, "lab-0", 1, NodeState.FAILED, exited_s=2.0),
                NodeOutcome(1, "lab-1", 1, NodeState.FAILED, exited_s=2.1)]
    first = first_failure(outcomes, found)
    assert (first.left_early, first.rank, first.node) == (True, 3, 1), first


def test_an_error_file_says_the_call_the_script_s_line_made(tmp_path):
    """The error file's traceback is read as a log's: the call on the script's line
    (broadcast, around which torch's logging wrapper raised) reaches first_failure.error."""
    files = tmp_path / "node-0" / f"{RUN_ID}_called" / "attempt_0" / "0"
    files.mkdir(parents=True)
    stack = "\n".join([
        "Traceback (most recent call last):",
        '  File "/x/job.py", line 14, in <module>',
        "    dist.broadcast(x, src=1, group=g23)",
        '  File "/v/site-packages/torch/distributed/c10d_logger.py", line 85, in wrapper',
        "    msg_dict = _get_msg_dict(func.__name__, *args, **kwargs)",
        '  File "/v/site-packages/torch/distributed/c10d_logger.py", line 59, in _get_msg_dict',
        '    "backend": f"{dist.get_backend(group)}",',
        "ValueError: Invalid process group specified"])
    (files / "error.json").write_text(json.dumps({
        "message": {"message": "ValueError: Invalid process group specified",
                    "extraInfo": {"py_callstack": stack, "timestamp": "1"}},
        "labctl": {"rank": 0, "local_rank": 0, "time_ns": 1}}))
    read, notes = read_error_files(tmp_path / "node-0", 0)
    assert not notes and read[0].error()["called"] == "broadcast", read


def test_every_rank_held_in_init_blames_the_ranks_that_cannot_reach_the_store():
    from labctl.blame import setup_hang
    held = {"file": "job.py", "line": 17, "function": "<module>", "call": "init_process_group"}
    where = {0: held, 1: dict(held), 2: held}
    d = setup_hang(where, 3, {1: "127.0.0.1:29533"})
    assert (d.rank, d.ranks, d.op, d.caller) == (1, [1], "init_process_group", "job.py:17")
    assert "127.0.0.1:29533" in d.text and "rank 0, 2 reached the store" in d.text
    assert setup_hang(where, 3, {}) is None                                     # nothing tells them apart
    assert setup_hang(where, 3, {0: "h:1", 1: "h:1", 2: "h:1"}) is None         # the store itself is away
    assert setup_hang({0: held, 1: dict(held, call="new_group"), 2: held}, 3, {1: "h:1"}) is None
