import json
import re

from labctl import logs
from plan_runner import split_by_rank
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


ABORT = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
         "  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
         "op.preamble.length <= op.nbytes. 1000 vs 12. Received data size doesn't match expected size. "
         "Is there a distributed collective mismatch in your code?\n")
GLOO_MISMATCH = ("gloo::EnforceNotMet: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
                 "tcp/pair.cc:456] op.preamble.length <= op.nbytes. 1000 vs 12. Received data size doesn't "
                 "match expected size. Is there a distributed collective mismatch in your code?")


def _tracked(text: str) -> dict | None:
    tracker = logs.ErrorTracker()
    for line in text.splitlines():
        tracker.feed(line)
    return tracker.error


def test_a_native_abort_is_a_rank_s_error_in_its_own_words():
    """gloo throws from its own thread: no Python exception, only what libstdc++'s
    terminate handler prints; the type and the what() line make the error."""
    assert _tracked(ABORT) == {"exception": GLOO_MISMATCH}
    # faulthandler's word on the same abort (PYTHONFAULTHANDLER) says less: kept out
    assert _tracked(ABORT + "Fatal Python error: Aborted\n\nThread 0x7f (most recent call first):\n") \
        == {"exception": GLOO_MISMATCH}
    assert _tracked("Fatal Python error: Segmentation fault\n") == {"exception": "Fatal Python error: Segmentation fault"}
    assert _tracked("terminate called without an active exception\n") == {
        "exception": "terminate called without an active exception"}
    # the what() line cut off: the type at least
    assert _tracked(ABORT.splitlines()[0]) == {"exception": ABORT.splitlines()[0]}
    # whichever came last: a traceback after an abort line, an abort after a traceback
    traceback = 'Traceback (most recent call last):\n  File "/t.py", line 4, in <module>\nValueError: boom\n'
    assert _tracked(ABORT + traceback) == {"exception": "ValueError: boom", "file": "/t.py", "line": 4,
                                           "function": "<module>"}
    assert _tracked(traceback + ABORT) == {"exception": GLOO_MISMATCH}
    # a what() that follows no terminate line is nobody's error
    assert _tracked("  what():  nothing\n") is None


@pytest.mark.parametrize("how", ["per line", "bytes", "stream"])
def test_a_native_abort_in_a_run_of_plain_lines_is_found(how, tmp_path, monkeypatch):
    """The fast skip must not skip it: a chunk of rank 1's plain lines holding the abort."""
    plain = b"".join(b"[rank1]:step %d\n" % i for i in range(2000))
    abort = b"".join(b"[rank1]:" + line.encode() + b"\n" for line in ABORT.splitlines())
    (ranks, _), found, _ = _split(tmp_path, plain + abort + plain, how, monkeypatch)
    assert found.errors == {1: {"exception": GLOO_MISMATCH}}
    assert ranks["rank-1.log"] == (plain + abort + plain).replace(b"[rank1]:", b"")


def test_torchrun_s_wrapper_is_no_rank_s_error():
    assert logs.launcher_wrapper("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:")
    assert not logs.launcher_wrapper("RuntimeError: ChildFailedError in a message")


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


def test_where_a_rank_was_is_its_main_thread_when_no_thread_is_in_a_collective():
    """A rank whose main thread waits for a lock a thread of its own holds: the dump lists
    that thread first; where the rank was is the main thread's line (the zoo's lock_stuck
    case read the thread's line). A thread inside a collective still wins."""
    dump = ["Thread 0x00007f01 (most recent call first):",
            '  File "/x/job.py", line 14 in <lambda>',
            '  File "/usr/lib/python3.11/threading.py", line 982 in run',
            "Current thread 0x00007f02 (most recent call first):",
            '  File "/x/job.py", line 18 in <module>',
            '  File "<frozen runpy>", line 88 in _run_code']
    assert logs.where_stuck(dump) == {"file": "/x/job.py", "line": 18, "function": "<module>", "call": None}
    in_op = ["Thread 0x00007f03 (most recent call first):",
             '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 9 in all_reduce',
             '  File "/x/job.py", line 30 in worker']
    assert logs.where_stuck(in_op + dump)["line"] == 30


def test_an_error_raised_inside_a_torch_distributed_call_says_which():
    """broadcast(src=0, group=[2, 3]) raises in torch's own check, before any op is issued
    (the recorder sees none): the traceback says the call (first_failure.op); an error of
    the script's own says none."""
    tracker = logs.ErrorTracker()
    for line in ["Traceback (most recent call last):",
                 '  File "/x/job.py", line 12, in <module>',
                 "    dist.broadcast(t, src=0, group=sub)",
                 '  File "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
                 '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3130, in broadcast',
                 '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1090, in _canonicalize_group_rank',
                 "ValueError: Global rank 0 is not part of group"]:
        tracker.feed(line)
    assert tracker.error == {"exception": "ValueError: Global rank 0 is not part of group", "file": "/x/job.py",
                             "line": 12, "function": "<module>", "call": "broadcast", "called": "broadcast"}
    tracker = logs.ErrorTracker()
    for line in ["Traceback (most recent call last):", '  File "/x/job.py", line 3, in <module>', "ValueError: boom"]:
        tracker.feed(line)
    assert "call" not in tracker.error


def test_the_last_traceback_is_the_one_the_error_tracker_reads():
    """logs.last_traceback (the page's quote) ends where ErrorTracker finds the error: the
    exception line, its rank prefix gone; a marked line of the rank's stdout amid it is no
    part of it; None without a traceback."""
    lines = ["[rank1]: Traceback (most recent call last):", "[rank1]: old: 1",
             "[rank1]: Traceback (most recent call last):", '[rank1]:   File "/t/train.py", line 9, in <module>',
             "@@labctl-result {}", "[rank1]:     step()", "[rank1]:     ~~~~^^", "", "[rank1]: ValueError: lr -0.1",
             "[rank1]: after the exception"]
    quote = logs.last_traceback(lines)
    assert quote == ["Traceback (most recent call last):", '  File "/t/train.py", line 9, in <module>',
                     "    step()", "    ~~~~^^", "", "ValueError: lr -0.1"]
    tracker = logs.ErrorTracker()
    for line in lines:
        tracker.feed(line)
    assert tracker.error["exception"] == quote[-1] and tracker.error["line"] == 9
    assert logs.last_traceback(["no traceback here"]) is None
    assert logs.without_rank_prefix("[rank12]: x") == "x" and logs.without_rank_prefix("x [rank1]: y") == "x [rank1]: y"


def test_a_dump_s_threads_and_the_ranks_in_a_node_log_are_read_once():
    dump = ["before", "Thread 0x1 (most recent call first):", '  File "x", line 1 in w', "",
            "Current thread 0x2 (most recent call first):", '  File "/t/a.py", line 3 in f']
    assert logs.dump_threads(dump) == [("Thread 0x1 (most recent call first):", ['  File "x", line 1 in w', ""]),
                                       ("Current thread 0x2 (most recent call first):", ['  File "/t/a.py", line 3 in f'])]
    assert logs.ranks_in(b"[rank3]: a\n[rank1]: b\nnot [rank7]: c\n[rank3]: d\n[rank10]:") == [3, 1, 10]


def test_two_stack_dumps_glued_together_are_two_and_the_last_one_is_where_the_rank_is():
    """A rank asked for its stacks twice (the live watcher, then the deadline) prints two
    faulthandler dumps with no line between them: the second one is where it is now."""
    first = ['Thread 0x00007f1 (most recent call first):', '  File "/x/t.py", line 3 in waiter', '',
             'Current thread 0x00007f2 (most recent call first):',
             '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1899 in init_process_group',
             '  File "/x/job.py", line 6 in <module>']
    second = [line.replace("line 1899 in init_process_group", "line 3252 in all_reduce")
              .replace("line 6 in", "line 20 in") for line in first]
    tracker = logs.StackTracker()
    for line in first + second:
        tracker.feed(f"[rank0]:{line}")
    tracker.close()
    assert logs.where_stuck(tracker.last) == {"file": "/x/job.py", "line": 20, "function": "<module>",
                                              "call": "all_reduce"}


def test_an_error_says_the_call_the_script_s_line_made():
    """The call the script's line made on the way to the error (issue 50): the function the
    next frame runs (all_gather_object, past torch's logging wrapper), or the class whose
    constructor it is (DistributedDataParallel); nothing where the line does not say."""
    tb = [
        "Traceback (most recent call last):",
        '  File "/x/job.py", line 13, in <module>',
        "    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, hidden)))",
        "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/v/site-packages/torch/nn/parallel/distributed.py", line 825, in __init__',
        "    _verify_param_shape_across_processes(self.process_group, parameters)",
        '  File "/v/site-packages/torch/distributed/utils.py", line 288, in _verify_param_shape_across_processes',
        "    return dist._verify_params_across_processes(process_group, tensors, logger)",
        "RuntimeError: [1]: params[0] in this process with sizes [64, 8] appears not to match",
    ]
    tracker = logs.ErrorTracker()
    for line in tb:
        tracker.feed(line)
    assert (tracker.error["line"], tracker.error["called"]) == (13, "DistributedDataParallel"), tracker.error
    assert logs.called_on_line("out = dist.all_gather_object(objs, x)", ["wrapper", "all_gather_object"]) \
        == "all_gather_object"
    assert logs.called_on_line("step(model)", ["_wrapped_call_impl"]) is None
    assert logs.called_on_line("dist.broadcast(x, src=1, group=g23)", ["wrapper", "_get_msg_dict"]) == "broadcast"
    assert logs.called_on_line("", ["all_reduce"]) is None
    # a call that never reached torch.distributed (load_state_dict raised on a renamed key)
    # is no op: the op to name is the collective the rank then never entered
    stale = [
        "Traceback (most recent call last):",
        '  File "/x/job.py", line 15, in <module>',
        "    model.load_state_dict(state)",
        '  File "/v/site-packages/torch/nn/modules/module.py", line 2581, in load_state_dict',
        "    raise RuntimeError(",
        "RuntimeError: Error(s) in loading state_dict for Sequential:",
    ]
    tracker = logs.ErrorTracker()
    for line in stale:
        tracker.feed(line)
    assert tracker.error["line"] == 15 and "called" not in tracker.error, tracker.error


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
