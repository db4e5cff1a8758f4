"""The live watcher (labctl/live/, issue 49): its rules as pure functions, the record
follower on files written in pieces, the view's bounds, and real labs: a hang named while
the lab still runs (and `labctl watch` beside it), `--on-hang stop` ending a 600 s lab
within the window, a lab without a trace (the watcher says so and stays quiet), bad input."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import LABCTL, REPO
from labctl.links import Link, Links
from labctl.live import stall
from labctl.live.ranks import RankRecords, RecordFollower
from labctl.live.stall import NS, InFlight, Kind, RankNow
from labctl.live.view import View
from labctl.live.window import MULTIPLE, Window
from workloads._protocol import TRACE_MARKER

ZOO = REPO / "benchmarks" / "zoo"


# ---- the window -----------------------------------------------------------------------
def test_a_small_op_gets_the_floor_and_a_large_one_over_a_slow_link_a_multiple_of_its_time():
    plain = Window.of(10.0, None, "gloo")
    assert plain.for_op("all_reduce", 4096, 4) == 10.0
    slow = Window.of(10.0, Links(nodes={1: Link(rate_bps=10_000_000)}), "gloo")
    expected = slow.expected_s("all_reduce", 32 << 20, 3)      # 2(n-1)/n * 32 MiB at 1.25 MB/s
    assert 30 < expected < 40
    assert slow.for_op("all_reduce", 32 << 20, 3) == pytest.approx(MULTIPLE * expected)
    assert slow.for_op("barrier", 0, 3) == 10.0
    assert slow.for_op("send", 32 << 20, 2) > 4 * 26          # one message: S / B


# ---- the rules --------------------------------------------------------------------------
def _op(rank: int, start_s: float, op: str = "all_reduce", seq: int | None = 5, members: int = 3) -> InFlight:
    return InFlight(rank, op, op, "default_pg", seq, None, 64, "job.py:9", int(start_s * NS), members)


def _ranks(*states: RankNow) -> dict[int, RankNow]:
    return {s.rank: s for s in states}


def test_an_op_past_its_window_on_a_quiet_rank_is_a_stall_and_within_it_is_not():
    inside = [RankNow(r, ops=5, inside=[_op(r, 100.0)], seen_ns=100 * NS) for r in (0, 1)]
    ranks = _ranks(*inside, RankNow(2, ops=4, seen_ns=99 * NS))
    assert stall.find(ranks, int(109 * NS), 10.0, lambda op: 10.0, 0) is None
    found = stall.find(ranks, int(111 * NS), 10.0, lambda op: 10.0, 0)
    assert found is not None and found.kind is Kind.OP and found.since_ns == 100 * NS
    # a large op's own window: not yet
    assert stall.find(ranks, int(111 * NS), 10.0, lambda op: 60.0, 0) is None


def test_a_rank_that_keeps_recording_while_holding_an_open_op_is_not_stuck():
    busy = RankNow(0, ops=900, inside=[_op(0, 100.0, "isend", None)], seen_ns=int(130 * NS))
    assert stall.find(_ranks(busy), int(131 * NS), 10.0, lambda op: 10.0, 0) is None


def test_nothing_in_flight_and_nothing_recorded_for_the_floor_asks_for_the_stacks():
    ranks = _ranks(RankNow(0, ops=3, seen_ns=100 * NS), RankNow(1, ops=3, seen_ns=101 * NS))
    assert stall.find(ranks, int(105 * NS), 10.0, lambda op: 10.0, 0) is None
    found = stall.find(ranks, int(112 * NS), 10.0, lambda op: 10.0, 0)
    assert found is not None and found.kind is Kind.STILL
    # no record at all yet: measured from the lab's start
    assert stall.find({}, int(109 * NS), 10.0, lambda op: 10.0, 100 * NS) is None
    assert stall.find({}, int(111 * NS), 10.0, lambda op: 10.0, 100 * NS).kind is Kind.STILL


def test_the_stacks_say_a_setup_hang_and_nothing_while_importing_or_computing():
    setup = frozenset({"init_process_group"})
    here = {"file": "job.py", "line": 9, "function": "<module>", "call": None}
    held = {"file": "job.py", "line": 4, "function": "<module>", "call": "init_process_group"}
    assert "wait in init_process_group for rank(s) 2" in stall.judge_stacks({0: held, 1: held, 2: here}, 3, setup)
    assert stall.judge_stacks({0: here, 1: here}, 2, setup) is None       # a slow warm-up on every rank
    importing = {"file": "<frozen importlib._bootstrap>", "line": 1, "function": "_load", "call": None}
    assert stall.judge_stacks({0: held, 1: importing}, 2, setup) is None
    assert stall.judge_stacks({0: held, 1: dict(here, importing=True)}, 2, setup) is None   # at `import torch`
    assert stall.judge_stacks({0: held}, 2, setup) is None                # a rank without a stack


def test_every_rank_repeating_one_store_call_for_the_floor_is_a_stall():
    """A home-made barrier (store.add(key, 0) in a loop) on every rank writes records all
    the time: nothing is "still", no op is open, yet nobody left can complete the count."""
    ranks = _ranks(RankNow(0, ops=90, seen_ns=130 * NS, polling_ns=100 * NS),
                   RankNow(1, ops=80, seen_ns=130 * NS, polling_ns=101 * NS))
    assert stall.find(ranks, int(110 * NS), 10.0, lambda op: 10.0, 0, world=2) is None
    found = stall.find(ranks, int(131 * NS), 10.0, lambda op: 10.0, 0, world=2)
    assert found is not None and found.kind is Kind.POLL and found.since_ns == 101 * NS
    # one rank of three not polling (it computes, or has not written yet): the count can still come
    assert stall.find(ranks, int(131 * NS), 10.0, lambda op: 10.0, 0, world=3) is None
    busy = _ranks(RankNow(0, ops=90, seen_ns=130 * NS, polling_ns=100 * NS), RankNow(1, ops=80, seen_ns=130 * NS))
    assert stall.find(busy, int(131 * NS), 10.0, lambda op: 10.0, 0, world=2) is None


# ---- following the records ----------------------------------------------------------------
def _line(payload: str) -> bytes:
    return (TRACE_MARKER + payload + "\n").encode()


def test_the_follower_reads_complete_lines_only_past_a_nul_tail_and_across_segments(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    seg1 = records / "rank-1.0000000000000000100.42.0000.rec"
    header = _line('{"k":"H","v":2,"t0":1000000000,"pid":42}')
    site = _line('{"k":"S","s":1,"op":"all_reduce","pg":"default_pg","kind":"c","bytes":64,'
                 '"dtype":"float32","shape":[16],"caller":"job.py:9"}')
    begin = _line("B 1 1 0 500")
    seg1.write_bytes(header + site + begin[:7] + b"\0" * 64)       # the B line half written
    ranks = RankRecords(tmp_path, 2)
    now = ranks.poll()[1]
    assert now.ops == 0 and now.inside == []
    seg1.write_bytes(header + site + begin + b"\0" * 64)
    now = ranks.poll()[1]
    assert now.ops == 1 and [o.op for o in now.inside] == ["all_reduce"]
    assert now.inside[0].start_ns == 1_000_000_000 + 500 and now.inside[0].caller == "job.py:9"
    # the second segment of the same process refers to the first one's site
    seg2 = records / "rank-1.0000000000000000100.42.0001.rec"
    seg2.write_bytes(_line("E 1 900") + _line("B 2 1 1 1000") + b"\0" * 16)
    now = ranks.poll()[1]
    assert now.ops == 2 and [o.seq for o in now.inside] == [1] and now.seen_ns == 1_000_000_000 + 1000
    assert RecordFollower(tmp_path).problems == []
    # torchrun restarts the rank: a new process; what the old one was inside is over
    (records / "rank-1.0000000000000000200.43.0000.rec").write_bytes(
        _line('{"k":"H","v":2,"t0":2000000000,"pid":43}') + b"\0" * 8)
    assert ranks.poll()[1].inside == []


def test_a_rank_repeating_one_store_call_is_polling_since_its_first_and_another_call_ends_it(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    header = _line('{"k":"H","v":2,"t0":1000000000,"pid":42}')
    poll = _line('{"k":"S","s":1,"op":"store.add","pg":"store","kind":"l","bytes":0,"caller":"job.py:22",'
                 '"key":"epoch-1-done"}')
    other = _line('{"k":"S","s":2,"op":"all_reduce","pg":"default_pg","kind":"c","bytes":64,'
                  '"dtype":"float32","shape":[16],"caller":"job.py:9"}')
    seg = records / "rank-0.0000000000000000100.42.0000.rec"
    body = header + poll + other + _line("B 1 2 1 100") + _line("E 1 150")
    calls = b"".join(_line(f"B {i} 1 0 {i * 1000}") + _line(f"E {i} {i * 1000 + 10}") for i in range(2, 5))
    seg.write_bytes(body + calls + b"\0" * 8)
    ranks = RankRecords(tmp_path, 1)
    assert ranks.poll()[0].polling_ns == 1_000_000_000 + 2000
    seg.write_bytes(body + calls + _line("B 9 2 2 9000") + _line("E 9 9100") + b"\0" * 8)
    assert ranks.poll()[0].polling_ns is None


def test_without_record_files_the_records_come_from_the_node_logs_split_by_rank(tmp_path):
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    log = nodes / "node-0.log"
    header = '{"k":"H","v":2,"t0":1000000000,"pid":42}'
    site = ('{"k":"S","s":1,"op":"recv","pg":"default_pg","kind":"p","bytes":4,"dtype":"float32",'
            '"shape":[1],"peer":1,"caller":"job.py:7"}')
    lines = [f"[rank0]:{TRACE_MARKER}{header}", f"[rank0]:{TRACE_MARKER}{site}", "[rank0]:hello",
             f"[rank1]:{TRACE_MARKER}{header}", f"[rank0]:{TRACE_MARKER}B 1 1 0 70"]
    log.write_text("\n".join(lines) + "\n" + f"[rank1]:{TRACE_MARKER}" + '{"k":"S"')   # rank 1's S half written
    ranks = RankRecords(tmp_path, 2)
    now = ranks.poll()
    assert now[0].ops == 1 and now[0].inside[0].op == "recv" and now[0].inside[0].peer == 1
    assert now[1].ops == 0 and now[1].seen_ns is None


# ---- the view ----------------------------------------------------------------------------
def test_the_view_in_a_log_writes_a_bounded_number_of_lines_and_on_a_tty_redraws_in_place():
    out = io.StringIO()
    view = View(out, tty=False, every_s=10.0)
    for i in range(600):                         # 60 s of polls, ten a second, every one a change
        t = 100.0 + i / 10
        ranks = _ranks(RankNow(0, ops=i + 1, inside=[_op(0, t - 0.05)], seen_ns=int(t * NS)))
        view.show(ranks, int(t * NS), t, t - 100)
    assert 5 <= view.lines_written <= 7 and out.getvalue().count("\n") == view.lines_written
    tty = io.StringIO()
    view = View(tty, tty=True)
    ranks = _ranks(RankNow(0, ops=3, inside=[_op(0, 100.0)], seen_ns=100 * NS), RankNow(1, ops=2))
    view.show(ranks, int(103 * NS), 103.0, 3.0)
    view.show(ranks, int(104 * NS), 104.0, 4.0)
    text = tty.getvalue()
    assert "\x1b[3F\x1b[J" in text and "in all_reduce #5 for 4.0 s at job.py:9" in text


# ---- real labs -----------------------------------------------------------------------------
def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(LABCTL + args, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=REPO,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait_for(what, deadline_s: float, proc: subprocess.Popen | None = None):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            return what()
        time.sleep(0.2)
    return None


def _live(run: Path) -> dict | None:
    try:
        return json.loads((run / "status.json").read_text()).get("live")
    except (OSError, ValueError):
        return None


def test_a_mismatch_hang_is_named_live_while_the_lab_runs_and_labctl_watch_shows_it(tmp_path):
    run = tmp_path / "run"
    # the deadline is what ends this lab (and the watch): 50 s leaves room past the naming
    # (~22 s in here) on a loaded machine; 40 s failed once at load 14 (no verdict yet)
    lab = _start(["up", "--script", str(ZOO / "missing_collective.py"), "--nodes", "1", "--nproc-per-node", "4",
                  "--timeout", "50", "--stall-window", "10", "--out", str(run)], tmp_path / "up.log")
    try:
        assert _wait_for(lambda: (run / "status.json").is_file(), 60, lab)
        watch = subprocess.run(LABCTL + ["watch", str(run)], capture_output=True, text=True, cwd=REPO,
                               timeout=180)
        live = _live(run)
        assert live is not None, (tmp_path / "up.log").read_text()[-3000:]
        # rank 3 waits in the barrier past the loop the others are still in: it ran one
        # iteration fewer, and the call it skipped (the loop's all_reduce) is the op
        assert live["rank"] == 3 and live["op"] == "all_reduce" and live["caller"].endswith("missing_collective.py:13")
        assert live["made_at"] - live["since"] < 20
        up_said = (tmp_path / "up.log").read_text()
        assert "HANG (live," in up_said and "kept as they are" in up_said
        # named while the lab still ran: its deadline came later
        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "timeout" and status["seconds"] > live["made_at"] - live["since"] + 10
        assert status["live"]["verdict"] == "confirmed"
        # the watch saw the same answer (borrowed, no second stack take) and exited 1: a hang named
        assert watch.returncode == 1, watch.stderr[-2000:]
        assert "HANG (live," in watch.stderr and "rank 3" in watch.stderr
        assert "ended" in watch.stderr
        lines = [x for x in up_said.splitlines() if "] live:" in x]
        assert 1 <= len(lines) <= status["seconds"] / 10 + 2       # a log line every 10 s at most
    finally:
        lab.kill()
        lab.wait()


def test_on_hang_stop_ends_a_600_s_lab_within_the_window_and_the_report_says_it(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(LABCTL + ["up", "--script", str(ZOO / "recv_recv_deadlock.py"), "--nodes", "1",
                                    "--nproc-per-node", "2", "--on-hang", "stop", "--out", str(run)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "timeout" and status["message"].startswith("hang named live")
    live = status["live"]
    assert sorted(live["ranks"]) == [0, 1] and live["op"] == "recv"
    assert live["made_at"] - live["since"] < 20
    assert status["seconds"] < 60                    # the deadline was 600 s
    report = (run / "report.md").read_text()
    assert "Live diagnosis" in report


def test_without_a_trace_the_watcher_says_it_cannot_watch_and_stays_quiet(tmp_path):
    done = subprocess.run(LABCTL + ["up", "--no-trace", "--workload", "env", "--nodes", "1", "--nproc-per-node", "2",
                                    "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "live: tracing is off" in done.stderr and "HANG" not in done.stderr


@pytest.mark.parametrize("args,said", [
    (["up", "--on-hang", "maybe"], "--on-hang: expected one of report, stop, given 'maybe'"),
    (["up", "--stall-window", "-1"], "--stall-window: expected a number of seconds from 1 to 86400"),
    (["up", "--stall-window", "1e9"], "--stall-window: expected a number of seconds from 1 to 86400"),
    (["watch", "/nonexistent-run"], "not a run folder"),
])
def test_bad_live_input_is_one_line_and_exit_2(args, said):
    done = subprocess.run(LABCTL + args, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_watch_refuses_an_ended_run_and_one_whose_labctl_is_gone(tmp_path):
    for state, controller, said in (("passed", None, "has ended (passed)"),
                                    ("running", {"pid": 2 ** 22 + 7, "host": os.uname().nodename,
                                                 "start_ticks": 1}, "labctl is gone")):
        folder = tmp_path / state
        folder.mkdir()
        status = {"run_id": "r", "lab": "l", "backend": "local", "launcher": "torchrun", "dist_backend": "gloo",
                  "nodes": 1, "nproc_per_node": 1, "world_size": 1, "state": state, "started": ""}
        if controller:
            status["controller"] = controller
        (folder / "status.json").write_text(json.dumps(status))
        done = subprocess.run(LABCTL + ["watch", str(folder)], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert done.returncode == 2 and said in done.stderr, done.stderr


SLEEPS = """\
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
if dist.get_rank() == 1:
    print("rank 1 sleeps", flush=True); time.sleep(3600)
dist.all_reduce(t)
"""


def test_ctrl_c_on_a_hang_takes_every_rank_s_stack_before_the_stop(tmp_path):
    """Ctrl-C on a hang (issue 53 item 5): every rank's stack is taken first, as at the
    deadline, so the report names the line rank 1 was held at (its sleep), not only the
    collective the others wait in."""
    import signal

    script = tmp_path / "job.py"
    script.write_text(SLEEPS)
    run = tmp_path / "run"
    lab = subprocess.Popen(LABCTL + ["up", "--script", str(script), "--nodes", "1", "--nproc-per-node", "2",
                                     "--timeout", "300", "--out", str(run)],
                           stdout=open(tmp_path / "up.log", "w"), stderr=subprocess.STDOUT, cwd=REPO,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    node_log = run / "nodes" / "node-0.log"         # written as the ranks print
    try:
        # the event: rank 1 said it sleeps (line 9), rank 0 is then in the all_reduce; Ctrl-C
        # takes the stacks whether or not the live watcher named the hang yet (was: waited
        # for the naming, the 10 s window more)
        assert _wait_for(lambda: node_log.is_file() and "rank 1 sleeps" in node_log.read_text(), 180, lab), \
            (tmp_path / "up.log").read_text()[-3000:]
        os.killpg(lab.pid, signal.SIGINT)
        assert lab.wait(timeout=180) == 130, (tmp_path / "up.log").read_text()[-3000:]
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
    said = (tmp_path / "up.log").read_text()
    assert "taking every rank's stack first" in said, said[-3000:]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted", status["message"]
    assert (run / "stacks" / "rank-1.txt").is_file()
    first = status["first_failure"]
    assert first["rank"] == 1 and first["caller"] == f"{script}:9", first


def test_every_rank_in_init_is_a_stall_when_some_say_they_cannot_reach_the_store():
    setup = frozenset({"init_process_group"})
    held = {"file": "job.py", "line": 4, "function": "<module>", "call": "init_process_group"}
    away = dict(held, store_unreached="127.0.0.1:29533")
    said = stall.judge_stacks({0: held, 1: away, 2: held}, 3, setup)
    assert said and "rank(s) 1 cannot reach the rendezvous store" in said
    assert stall.judge_stacks({0: held, 1: held}, 2, setup) is None            # all wait: not yet told apart
    assert stall.judge_stacks({0: away, 1: away}, 2, setup) is None            # nobody reached it
