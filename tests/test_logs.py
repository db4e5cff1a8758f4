import json
import re

from labctl import logs, stackdumps
from plan_runner import split_by_rank
from test_tracebacks import ABORT, GLOO_MISMATCH
import pytest


def test_split_by_rank_keeps_only_prefixed_lines_in_order():
    text = ("agent noise\n[rank0]:hello\n[rank1]:a\n[rank0]:[rank0]: Traceback\n"
            "W1121 torch warning\n[rank1]:b\n")
    assert split_by_rank(text) == {0: ["hello", "[rank0]: Traceback"], 1: ["a", "b"]}


def test_glued_half_lines_from_torchrun_tee_are_put_back_together():
    text = ('[rank3]:@@labctl-result {"name": "a", "ok": tr[rank2]:@@labctl-result {"name": "b"}\n'
            '[rank3]:ue}\n[rank3]:[rank3]: Traceback\n')
    assert split_by_rank(text) == {
        3: ['@@labctl-result {"name": "a", "ok": true}', "[rank3]: Traceback"],
        2: ['@@labctl-result {"name": "b"}'],
    }


def test_parse_results_reads_marked_json_and_flags_garbage():
    lines = ['x', logs.RESULT_MARKER + '{"workload": "p2p", "name": "ping", "ok": true}',
             "prefix " + logs.RESULT_MARKER + '{"broken": ', logs.RESULT_MARKER + "[1]"]
    out = logs.parse_results(lines, rank=2)
    assert out[0] == {"workload": "p2p", "name": "ping", "ok": True, "rank": 2}
    assert [r["ok"] for r in out[1:]] == [False, False]
    assert out[1]["name"] == "unparsable_result_line"


def test_result_marker_matches_the_workloads_contract():
    from workloads import _common
    assert _common.RESULT_MARKER == logs.RESULT_MARKER


TORCHRUN_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/tmp/s.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-21_12:06:07
  host      : box
  rank      : 3 (local_rank: 1)
  exitcode  : -15 (pid: 3839)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 3839
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_12:06:07
  host      : box
  rank      : 2 (local_rank: 0)
  exitcode  : 3 (pid: 3837)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_torchrun_failure_summary():
    assert logs.torchrun_failures(TORCHRUN_SUMMARY) == {3: -15, 2: 3}
    assert logs.torchrun_failed_workers(TORCHRUN_SUMMARY) == [(3, 1, -15), (2, 0, 3)]
    assert logs.torchrun_root_cause(TORCHRUN_SUMMARY) == 2
    assert logs.torchrun_root_cause("all good\n") is None


@pytest.mark.parametrize("how", ["per line", "bytes", "stream"])
def test_a_native_abort_in_a_run_of_plain_lines_is_found(how, tmp_path, monkeypatch):
    """The fast skip must not skip it: a chunk of rank 1's plain lines holding the abort."""
    plain = b"".join(b"[rank1]:step %d\n" % i for i in range(2000))
    abort = b"".join(b"[rank1]:" + line.encode() + b"\n" for line in ABORT.splitlines())
    (ranks, _), found, _ = _split(tmp_path, plain + abort + plain, how, monkeypatch)
    assert found.errors == {1: {"exception": GLOO_MISMATCH}}
    assert ranks["rank-1.log"] == (plain + abort + plain).replace(b"[rank1]:", b"")


def _mixed_log(seed: int) -> bytes:
    """A node log with everything a reader must notice, in random order and runs,
    bytes that are not UTF-8 among them (in plain runs and next to results)."""
    import random

    rnd = random.Random(seed)
    pieces: list[str | bytes] = []
    for _ in range(400):
        rank = rnd.randrange(3)
        kind = rnd.random()
        if kind < 0.40:                              # a run of plain lines of one rank
            pieces += [f"[rank{rank}]:step {i} loss {rnd.random():.4f}\n" for i in range(rnd.randrange(1, 30))]
        elif kind < 0.50:                            # a long one, with look-alikes of what matters
            pieces += [f"[rank{rank}]:" + rnd.choice(["step {} @ lr (0.1)", "eta 3s\r{}%|###", "", "x" * 90,
                                                       "mail me @ (most recent {})", "[{}, 2]"]).format(i) + "\n"
                       for i in range(rnd.randrange(50, 400))]
        elif kind < 0.58:
            pieces.append(f"I1123 12:00:00.000 1 torch/distributed/run.py:1] agent line {rnd.random()}\n")
        elif kind < 0.64:
            pieces.append(f'[rank{rank}]:{logs.RESULT_MARKER}{{"workload": "w", "name": "c", "ok": true}}\n')
        elif kind < 0.70:
            pieces += [f"[rank{rank}]:[rank{rank}]: Traceback (most recent call last):\n",
                       f'[rank{rank}]:[rank{rank}]:   File "/tmp/train.py", line {rnd.randrange(1, 99)}, in <module>\n',
                       f"[rank{rank}]:[rank{rank}]: ValueError: bad {rnd.random()}\n"]
        elif kind < 0.75:                            # torchrun's tee glued two ranks' half lines
            pieces.append(f"[rank{rank}]:half of a line[rank{(rank + 1) % 3}]:another\n")
        elif kind < 0.78:                            # ... and cut a character in two
            pieces += [f"[rank{rank}]:half caf".encode() + b"\xc3" + f"[rank{(rank + 1) % 3}]:other\n".encode(),
                       f"[rank{rank}]:".encode() + b"\xa9 rest\n"]
        elif kind < 0.84:
            pieces += [f"[rank{rank}]:Current thread 0x00007f (most recent call first):\n",
                       f'[rank{rank}]:  File "/tmp/train.py", line 7 in <module>\n', f"[rank{rank}]:\n"]
        elif kind < 0.90:                            # not UTF-8, in a plain run
            pieces += [f"[rank{rank}]:".encode() + rnd.choice([b"caf\xe9", b"\xff\xfe", b"cut \xe2\x82", b"\x80"])
                       + f" {i}\n".encode() for i in range(rnd.randrange(1, 20))]
        elif kind < 0.95:                            # not UTF-8, in a run that holds a result line
            bad = [f"[rank{rank}]:caf".encode() + b"\xe9" + f" {i}\n".encode() for i in range(rnd.randrange(1, 10))]
            pieces += [*bad, f'[rank{rank}]:{logs.RESULT_MARKER}{{"workload": "w", "name": "caf'.encode()
                       + b"\xe9" + b'", "ok": false}\n', *bad]
        elif kind < 0.97:                            # a C++ abort: no traceback, its own lines
            pieces += [f"[rank{rank}]:terminate called after throwing an instance of 'gloo::EnforceNotMet'\n",
                       f"[rank{rank}]:  what():  [enforce fail at pair.cc:456] {rnd.random()} vs 12.\n"]
        else:
            pieces.append(f"[rank{rank}]:" + "é" * rnd.randrange(1, 50) + "\n")
    return b"".join(piece if isinstance(piece, bytes) else piece.encode() for piece in pieces)


def _run_folder(tmp_path, name: str, data: bytes):
    """A run folder of one node with three ranks, its node log holding `data`."""
    from labctl.backends.local.placement import local_placement
    from labctl.plan import plan
    from labctl.rundir import RunDir
    from labctl.spec import from_dict

    spec = from_dict({"nodes": 1, "nproc_per_node": 3})
    run = RunDir.create(plan(spec, local_placement(spec, 29500), "lab-test"), out=tmp_path / name)
    run.node_log(0).parent.mkdir(parents=True, exist_ok=True)
    run.node_log(0).write_bytes(data)
    return run


def _split(tmp_path, data: bytes, how: str, monkeypatch) -> tuple:
    """The run folder's split of one node log (blame.LogReading over logs.LogSplit, rank
    logs on disk): the
    rank logs' BYTES, results.jsonl and what the pass found. `how`: "per line" (the fast
    skip off: every line goes the line-by-line way), "bytes" (as a run ends: whole
    chunks), "stream" (chunks cut anywhere)."""
    from labctl.blame import LogReading

    run = _run_folder(tmp_path, how, data)
    with monkeypatch.context() as patch:
        if how == "stream":
            patch.setattr(logs, "READ_CHUNK", 777)
        reading = LogReading.of(run, [0])
        if how == "per line":
            reading.split.readers[0]._one_rank_chunk = lambda chunk: False
            reading.split.readers[0]._plain_run = lambda rank, run: False
        found = reading.finish()
    return _written(run), found, reading.split.readers[0].agent_tail


def _written(run) -> tuple:
    ranks = {p.name: p.read_bytes() for p in sorted((run.path / "ranks").glob("rank-*.log"))}
    return ranks, (run.path / "results.jsonl").read_bytes()


@pytest.mark.parametrize("seed", range(5))
def test_the_fast_skip_writes_the_bytes_the_line_by_line_split_writes(seed, tmp_path, monkeypatch):
    """One writer: whether a run of plain lines is skipped over whole or every line goes
    the line-by-line way, each rank log gets the same BYTES, those its `[rank<N>]:`
    segments held (was: the line path re-encoded what it decoded, so `caf\\xe9` stayed
    in a plain run and became U+FFFD next to a result line)."""
    data = _mixed_log(seed)
    slow = _split(tmp_path, data, "per line", monkeypatch)
    (ranks, results), found, _ = slow
    assert found.errors and found.stacks          # the log has tracebacks and stack dumps
    assert any(b"caf\xe9 " in log for log in ranks.values())
    assert b"\xff\xfe" in b"".join(ranks.values()) and b"half caf\xc3\xa9 rest\n" in b"".join(ranks.values())
    for name, log in ranks.items():               # no other rank's segment in a rank log
        assert set(re.findall(rb"\[rank(\d+)\]:", log)) <= {name[len("rank-"):-len(".log")].encode()}
    # undecodable bytes reach results only as U+FFFD
    assert "caf\ufffd" in {json.loads(line)["name"] for line in results.decode("ascii").splitlines()}
    assert _split(tmp_path, data, "bytes", monkeypatch) == slow
    assert _split(tmp_path, data, "stream", monkeypatch) == slow


def test_each_segment_s_bytes_go_to_its_rank_log_unchanged(tmp_path, monkeypatch):
    """The bytes a rank printed, whichever way its lines went."""
    rank0 = [b"caf\xe9\n", b"\xff plain\n", b"@@labctl-result {\"name\": \"caf\xe9\", \"ok\": true}\n",
             b"caf\xe9 after\n", b"\xe2\x82 cut\n"]
    data = b"".join(b"[rank0]:" + line for line in rank0) + b"[rank1]:caf\xe9\n[rank1]:\xff\n"
    for how in ("per line", "bytes"):
        ranks, _ = _split(tmp_path, data, how, monkeypatch)[0]
        assert ranks == {"rank-0.log": b"".join(rank0), "rank-1.log": b"caf\xe9\n\xff\n"}


@pytest.mark.parametrize("seed", range(3))
def test_following_a_log_as_it_grows_equals_one_pass(seed, tmp_path, monkeypatch):
    """The live follower: the log grows in pieces cut anywhere (half lines included)
    and is fed a budget at a time; what comes out is what one pass at the end gives."""
    import random

    from labctl.blame import LogReading

    rnd = random.Random(seed)
    data = _mixed_log(seed)
    one_pass = _split(tmp_path, data, "per line", monkeypatch)
    monkeypatch.setattr(logs, "READ_CHUNK", 500)
    run = _run_folder(tmp_path, "follow", b"")
    reading = LogReading.of(run, [0])
    split = reading.split
    written = 0
    while written < len(data):
        step = rnd.randrange(1, 3000)
        with open(run.node_log(0), "ab") as f:
            f.write(data[written:written + step])
        written += step
        split.advance(rnd.randrange(1, 5000))
    found = reading.finish()
    assert split.offsets[run.node_log(0)] == len(data)
    assert (_written(run), found, split.readers[0].agent_tail) == one_pass


def test_an_over_long_line_is_read_in_pieces(monkeypatch):
    import io

    monkeypatch.setattr(logs, "MAX_LINE", 64)
    monkeypatch.setattr(logs, "READ_CHUNK", 50)
    long = b"y" * 300
    writes: list[tuple[int, bytes]] = []
    reader = logs.NodeLogReader(lambda rank, data: writes.append((rank, data)))
    reader.feed_stream(io.BytesIO(b"[rank0]:before\n[rank0]:" + long + b"\n[rank1]:after\n[rank0]:end"))
    reader.close()
    assert [data for rank, data in writes if rank == 1] == [b"after\n"]
    rank0 = [data for rank, data in writes if rank == 0]
    assert b"".join(rank0) == b"before\n" + long + b"\nend"
    assert max(len(piece) for piece in rank0) <= 2 * 64      # memory stays bounded


def test_the_joins_are_read_as_the_logs_grow_each_process_once(tmp_path):
    """The join fault clock's reader: only what is new is read; a marker line cut by the
    end of what was written so far counts once it is whole; the same process's line seen
    twice (torchrun replays a failed worker's output) is one join; garbage is no join."""
    node0, node1 = tmp_path / "node-0.log", tmp_path / "node-1.log"
    node0.write_bytes(b'hello\n[rank0]:@@labctl-joined {"rank": 0, "pid": 10}\n[rank1]:@@labctl-joi')
    reader = logs.JoinReader()
    assert reader.read([node0, node1]) == 1                  # node-1.log is not there yet
    with open(node0, "ab") as f:
        f.write(b'ned {"rank": 1, "pid": 11}\n[rank0]:@@labctl-joined {"rank": 0, "pid": 10}\n')
    node1.write_bytes(b'@@labctl-joined {not json}\n' + b"x" * 10_000 + b'\n@@labctl-joined {"rank": 2, "pid": 12}\n')
    assert reader.read([node0, node1]) == 3
    assert reader.joins == {(0, 10), (1, 11), (2, 12)}
    assert reader.offsets[str(node0)] == node0.stat().st_size


def test_a_dump_s_threads_and_the_ranks_in_a_node_log_are_read_once():
    dump = ["before", "Thread 0x1 (most recent call first):", '  File "x", line 1 in w', "",
            "Current thread 0x2 (most recent call first):", '  File "/t/a.py", line 3 in f']
    assert stackdumps.dump_threads(dump) == [("Thread 0x1 (most recent call first):", ['  File "x", line 1 in w', ""]),
                                       ("Current thread 0x2 (most recent call first):", ['  File "/t/a.py", line 3 in f'])]
    assert logs.ranks_in(b"[rank3]: a\n[rank1]: b\nnot [rank7]: c\n[rank3]: d\n[rank10]:") == [3, 1, 10]


def test_text_a_rank_prints_after_its_prefix_is_its_own_whatever_prefix_it_begins_with():
    """Issue 52 item 5: torchrun's tee writes a prefix and then what it read of a line, never
    nothing, so another rank's prefix right after a prefix is the rank's own text: rank 0's
    forged traceback stays in rank 0's log and is not read as an error (torch prefixes a
    worker's traceback with its own rank), and its result line is rank 0's whatever its
    "rank" says. A half line glued to another rank's write is still split."""
    written: dict[int, bytes] = {}
    results: list[dict] = []
    reader = logs.NodeLogReader(lambda rank, data: written.__setitem__(rank, written.get(rank, b"") + data),
                                lambda rank, text: results.extend(logs.parse_results([text], rank)))
    reader.feed_bytes(b"[rank0]:[rank1]:Traceback (most recent call last):\n"
                      b'[rank0]:[rank1]:  File "/x.py", line 3, in <module>\n'
                      b"[rank0]:[rank1]:RuntimeError: forged\n"
                      + f'[rank0]:{logs.RESULT_MARKER}{{"workload": "s", "name": "c", "rank": 1, "ok": false}}\n'.encode()
                      + b"[rank1]:fine\n[rank0]:half[rank1]:glued\n[rank0]: rest\n")
    assert written[1] == b"fine\nglued\n", written
    assert written[0].startswith(b"[rank1]:Traceback") and written[0].endswith(b"half rest\n"), written
    assert [(r["name"], r["rank"]) for r in results] == [("c", 0)]
    assert all(t.error is None for t in reader.error_trackers.values()), reader.error_trackers


@pytest.mark.parametrize("path", ["bytes", "lines"])
def test_a_rank_s_store_retry_warning_is_read_on_both_paths(path):
    """The fast skip of plain runs must not skip torch's warning that a rank cannot reach
    the rendezvous store (blame.setup_hang reads it)."""
    plain = "".join(f"[rank0]:step {i}\n" for i in range(50))
    warning = ("[rank1]:[W1129 21:12:15.893 TCPStore.cpp:340] [c10d] TCP client failed to connect/validate "
               "to host 127.0.0.1:29533 - retrying (try=0, timeout=300000ms, delay=7954ms)\n")
    reader = logs.NodeLogReader()
    data = (plain + warning + "[rank1]:more\n").encode()
    if path == "bytes":
        reader.feed_bytes(data)
    else:
        for line in data.split(b"\n")[:-1]:
            reader.feed_line(line)
    reader.close()
    assert reader.store_unreached == {1: "127.0.0.1:29533"}
