"""labctl/trace/loader.py's follower and labctl/trace/builder.py's feed API (issue 48), and
a process's record segments read as one stream (issue 52)."""
from __future__ import annotations

import json
from pathlib import Path

from labctl import trace
from labctl.trace import RankBuilder, RankFollower, RecordFollower
from workloads._protocol import TRACE_MARKER, records

T0 = 1_700_000_000_000_000_000
SEGMENT = 4096                          # a mapped segment's size in these tests (NUL past what was written)


def line(payload: str | dict) -> bytes:
    return (TRACE_MARKER + (json.dumps(payload) if isinstance(payload, dict) else payload) + "\n").encode()


def site(ident: int, op: str = "all_reduce", **more) -> bytes:
    return line({"k": "S", "s": ident, "op": op, "pg": "default_pg", "kind": "c", "bytes": 4, "dtype": "float32",
                 "shape": [1], "caller": f"job.py:{ident}", **more})


HEADER = line({"k": "H", "v": 2, "t0": T0, "pid": 7})


def segment_name(rank: int, seg: int, pid: int = 7) -> str:
    return f"rank-{rank}.{T0:019d}.{pid}.{seg:04d}.rec"


class Segment:
    """A record file as the recorder writes it: mapped, NUL-padded past what was written."""

    def __init__(self, folder: Path, rank: int = 0, seg: int = 0, pid: int = 7):
        self.path = folder / segment_name(rank, seg, pid)
        self.path.write_bytes(b"\0" * SEGMENT)
        self.pos = 0

    def write(self, data: bytes) -> None:
        with open(self.path, "r+b") as f:
            f.seek(self.pos)
            f.write(data)
        self.pos += len(data)


def records_of(followed) -> list:
    return [f.record for f in followed]


# ---------------------------------------------------------------- the follower

def test_a_file_appended_in_three_steps_is_read_in_three_polls_each_only_its_new_lines(tmp_path):
    seg = Segment(tmp_path)
    follower = RankFollower(tmp_path, 0)
    assert follower.poll() == []                            # all NUL: nothing written yet
    seg.write(HEADER + site(1))
    first = follower.poll()
    assert [type(r) for r in records_of(first)] == [records.Header, records.Site]
    assert {f.process for f in first} == {f"{T0:019d}.7"}
    seg.write(line("B 1 1 1 100"))
    assert records_of(follower.poll()) == [records.Begin(1, 1, 1, 100)]
    seg.write(line("E 1 200") + line({"k": "T", "t": 300}))
    assert records_of(follower.poll()) == [records.End(1, 200), records.Alive(300)]
    assert follower.poll() == [] and follower.problems == []
    tail = follower.tails[seg.path]
    assert tail.offset == seg.pos, "it keeps a byte offset: the next poll reads from there"


def test_a_line_still_being_written_is_left_until_it_is_complete(tmp_path):
    seg = Segment(tmp_path)
    follower = RankFollower(tmp_path, 0)
    whole = line("B 1 1 1 100")
    seg.write(HEADER + site(1) + whole[:9])                 # torn for now: the rank is mid-write
    assert [type(r) for r in records_of(follower.poll())] == [records.Header, records.Site]
    assert follower.poll() == [] and follower.problems == []
    seg.write(whole[9:])
    assert records_of(follower.poll()) == [records.Begin(1, 1, 1, 100)]
    assert follower.problems == []


def test_a_new_segment_is_picked_up_and_the_old_one_let_go(tmp_path):
    first = Segment(tmp_path, seg=0)
    first.write(HEADER + site(1) + line("B 1 1 1 100"))
    follower = RecordFollower(tmp_path.parent / tmp_path.name / "..")    # not a run folder: nothing
    assert follower.poll() == []
    run = tmp_path / "run"
    (run / "records").mkdir(parents=True)
    first.path = first.path.rename(run / "records" / first.path.name)
    follower = RecordFollower(run)
    assert [(rank, type(rec)) for rank, _, rec in follower.poll()] == [
        (0, records.Header), (0, records.Site), (0, records.Begin)]
    second = Segment(run / "records", seg=1)
    second.write(line("E 1 200") + line("B 2 1 2 300"))
    got = follower.poll()
    assert [rec for _, _, rec in got] == [records.End(1, 200), records.Begin(2, 1, 2, 300)]
    assert len({process for _, process, _ in got}) == 1, "one process, however many segments"
    follower.poll()
    assert first.path in follower.ranks[0].done, "a segment its process went on from is read no more"
    other = Segment(run / "records", rank=1)
    other.write(HEADER)
    assert [(rank, type(rec)) for rank, _, rec in follower.poll()] == [(1, records.Header)]


def test_the_nul_tail_ends_what_is_read_and_a_bad_line_is_a_problem_not_an_exception(tmp_path):
    seg = Segment(tmp_path)
    seg.write(HEADER + line("B 1 x 1 5") + line({"k": "Q"}))
    follower = RankFollower(tmp_path, 0)
    assert [type(r) for r in records_of(follower.poll())] == [records.Header]
    assert [p.line for p in follower.problems] == [2, 3]
    assert "garbled" in follower.problems[0].text and "unknown kind" in follower.problems[1].text
    assert follower.tails[seg.path].offset == seg.pos < SEGMENT


# ---------------------------------------------------------------- the builder, fed one record at a time

def test_the_builder_fed_one_record_at_a_time_says_what_the_rank_is_doing():
    b = RankBuilder(3)
    for rec in (records.Header(T0, 7, 2), records.Clock(offset_ns=5), records.Group("default_pg", [0, 3]),
                records.Site(1, "all_reduce", "default_pg", False, 4, "float32", [1], None, None, "job.py:9",
                             None, None),
                records.Site(2, "send", "default_pg", True, 4, "float32", [1], 0, None, "job.py:12", None, None)):
        assert b.feed(rec, "p") is None
    assert b.feed(records.Begin(1, 1, 1, 100), "p") is None
    assert [(op.op, op.seq, op.start) for op in b.inside] == [("all_reduce", 1, T0 + 105)]
    done = b.feed(records.End(1, 150), "p")
    assert (done.op, done.start, done.end) == ("all_reduce", T0 + 105, T0 + 155)
    assert b.inside == [] and b.ops == 1 and b.alive == T0 + 155
    b.feed(records.Begin(2, 2, 1, 200), "p")
    b.feed(records.Alive(400), "p")
    assert [op.op for op in b.inside] == ["send"] and b.last_op.op == "send" and b.last_op.peer == 0
    assert b.last["default_pg"].op == "all_reduce" and b.ops == 2 and b.alive == T0 + 405
    assert b.groups == {"default_pg": [0, 3]}
    unfinished = b.finish()
    assert [op.op for op in unfinished] == ["send"] and unfinished[0].end is None
    assert b.info.ended_in == "in send [1] (p2p #1 of default_pg) at job.py:12"
    assert b.summary.stuck_p2p == ["rank 3 never finished send to rank 0 (p2p #1 of default_pg, at job.py:12)"]


def test_a_second_process_has_its_own_sites():
    b = RankBuilder(0)
    b.feed(records.Site(1, "all_reduce", "default_pg", False, 4, None, [1], None, None, "a.py:1", None, None), "p1")
    b.feed(records.Begin(1, 1, 1, 10), "p2")                # site 1 of another process: never described
    assert b.inside == [] and "no S line described" in b.summary.problems[0].text


def test_a_process_s_second_segment_refers_to_sites_of_its_first(tmp_path):
    """Issue 52, item 1: a process that writes more than a segment's worth of ops goes on
    in a second file (same t0 and pid, the next segment number) whose ops refer to call
    sites its first described: one stream, not two."""
    run = tmp_path / "run"
    (run / "records").mkdir(parents=True)
    (run / "ranks").mkdir()
    first = run / "records" / segment_name(0, 0)
    second = run / "records" / segment_name(0, 1)
    first.write_bytes(HEADER + line({"k": "M", "rank": 0, "node": 0, "host": "h"})
                      + line({"k": "G", "pg": "default_pg", "ranks": [0]}) + site(1, "broadcast", root=0)
                      + line("B 1 1 1 100") + line("E 1 200"))
    second.write_bytes(line("B 2 1 2 300") + line("E 2 450"))
    summary = trace.merge(run, world=1)
    assert [str(p) for p in summary.problems] == []
    ops = trace.rank_ops(trace.record_sources(run)[0])
    assert [(o.op, o.caller, o.end - o.begin) for o in ops] == [("broadcast", "job.py:1", 100),
                                                                 ("broadcast", "job.py:1", 150)]
    assert [(o.begin - ops[0].begin) for o in ops] == [0, 200], "the second segment's times: the first's t0"
    assert summary.ops == 2 and summary.totals[("default_pg", "broadcast")].count == 2


# ---------------------------------------------------------------- sources it will not read (issue 52 item 11)

def test_labctl_trace_names_each_record_source_it_will_not_read_and_reads_the_rest(tmp_path):
    """A record folder a hand or a script spoiled: a shape nested 100,000 deep (was a
    RecursionError traceback), a FIFO named *.rec (the trace hung on it), a directory
    named *.rec (the whole trace failed), a 20 GB sparse file (over 120 s reading its
    zeros). Each is one warning naming it; the good file's op is in trace.json; fast."""
    import os
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    folder = run / "records"
    folder.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"run_id": "x", "world_size": 2}))
    (run / "plan.json").write_text(json.dumps({"nodes": [{"index": 0, "hostname": "lab-0"}]}))
    good = Segment(folder, rank=0)
    good.write(HEADER + line({"k": "M", "rank": 0, "world": 2, "node": 0, "host": "h"})
               + line({"k": "G", "pg": "default_pg", "ranks": [0, 1]}) + site(1)
               + line(f"B 1 1 1 {1_000_000}") + line(f"E 1 {2_000_000}")
               + line('{"k":"S","s":9,"op":"x","pg":"p","bytes":1,"shape":' + "[" * 100_000 + "]" * 100_000 + "}"))
    os.mkfifo(folder / segment_name(0, 0, pid=8))
    (folder / segment_name(1, 0, pid=9)).mkdir()
    with open(folder / segment_name(1, 0, pid=10), "wb") as f:
        f.truncate(20 << 30)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "trace", str(run)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert time.monotonic() - started < 30
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    said = done.stdout + done.stderr
    assert f"{good.path}:7: garbled or truncated trace record" in said
    assert f"{folder / segment_name(0, 0, pid=8)}:1: a FIFO, not a record source: not read" in said
    assert f"{folder / segment_name(1, 0, pid=9)}:1: a directory, not a record source: not read" in said
    assert (f"{folder / segment_name(1, 0, pid=10)}:1: 21,474,836,480 bytes, larger than a record segment "
            "(8 MiB): not the recorder's, not read") in said
    events = json.loads((run / "trace.json").read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("ph") == "X"] == ["all_reduce"]
    # the finish's trim passes them by, whatever they are
    trace.trim_record_files(run)
    assert (folder / segment_name(1, 0, pid=10)).stat().st_size == 20 << 30
