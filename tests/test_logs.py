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
    assert logs.torchrun_root_cause(TORCHRUN_SUMMARY) == 2
    assert logs.torchrun_root_cause("all good\n") is None


def _mixed_log(seed: int) -> bytes:
    """A node log with everything a reader must notice, in random order and runs."""
    import random

    rnd = random.Random(seed)
    pieces = []
    for _ in range(400):
        rank = rnd.randrange(3)
        kind = rnd.random()
        if kind < 0.45:                              # a run of plain lines of one rank
            pieces += [f"[rank{rank}]:step {i} loss {rnd.random():.4f}\n" for i in range(rnd.randrange(1, 30))]
        elif kind < 0.55:                            # a long one, with look-alikes of what matters
            pieces += [f"[rank{rank}]:" + rnd.choice(["step {} @ lr (0.1)", "eta 3s\r{}%|###", "", "x" * 90,
                                                       "mail me @ (most recent {})", "[{}, 2]"]).format(i) + "\n"
                       for i in range(rnd.randrange(50, 400))]
        elif kind < 0.65:
            pieces.append(f"I1123 12:00:00.000 1 torch/distributed/run.py:1] agent line {rnd.random()}\n")
        elif kind < 0.72:
            pieces.append(f'[rank{rank}]:{logs.RESULT_MARKER}{{"workload": "w", "name": "c", "ok": true}}\n')
        elif kind < 0.80:
            pieces += [f"[rank{rank}]:[rank{rank}]: Traceback (most recent call last):\n",
                       f'[rank{rank}]:[rank{rank}]:   File "/tmp/train.py", line {rnd.randrange(1, 99)}, in <module>\n',
                       f"[rank{rank}]:[rank{rank}]: ValueError: bad {rnd.random()}\n"]
        elif kind < 0.86:                            # torchrun's tee glued two ranks' half lines
            pieces.append(f"[rank{rank}]:half of a line[rank{(rank + 1) % 3}]:another\n")
        elif kind < 0.92:
            pieces += [f"[rank{rank}]:Current thread 0x00007f (most recent call first):\n",
                       f'[rank{rank}]:  File "/tmp/train.py", line 7 in <module>\n', f"[rank{rank}]:\n"]
        else:
            pieces.append(f"[rank{rank}]:" + "é" * rnd.randrange(1, 50) + "\n")
    return "".join(pieces).encode()


def _read(data: bytes, how: str) -> tuple:
    import io

    lines: dict[int, list[str]] = {}

    def block(rank: int, data: bytes) -> None:       # as the run folder's split writes them
        lines.setdefault(rank, []).extend(data.decode().split("\n")[:-1])

    reader = logs.NodeLogReader(lambda rank, line: lines.setdefault(rank, []).append(line),
                                block if how == "blocks" else None)
    if how == "per line":
        reader._feed_lines(data)
    elif how in ("bytes", "blocks"):
        reader.feed_bytes(data)
    else:
        reader.feed_stream(io.BytesIO(data))
    reader.close()
    return lines, reader.errors(), reader.stack_dumps(), reader.ranks_seen, reader.agent_tail


@pytest.mark.parametrize("seed", range(5))
def test_the_fast_split_of_whole_runs_equals_the_line_by_line_one(seed, monkeypatch):
    data = _mixed_log(seed)
    slow = _read(data, "per line")
    assert slow[1] and slow[2]                       # the log has tracebacks and stack dumps
    assert _read(data, "bytes") == slow
    assert _read(data, "blocks") == slow
    monkeypatch.setattr(logs, "READ_CHUNK", 777)     # chunks cut anywhere
    assert _read(data, "stream") == slow


@pytest.mark.parametrize("seed", range(3))
def test_following_a_log_as_it_grows_equals_one_pass(seed, tmp_path, monkeypatch):
    """The live follower: the log grows in pieces cut anywhere (half lines included)
    and is fed a budget at a time; what comes out is what one pass at the end gives."""
    import random

    rnd = random.Random(seed)
    data = _mixed_log(seed)
    monkeypatch.setattr(logs, "READ_CHUNK", 500)
    lines: dict[int, list[str]] = {}
    reader = logs.NodeLogReader(lambda rank, line: lines.setdefault(rank, []).append(line),
                                lambda rank, block: lines.setdefault(rank, []).extend(block.decode().split("\n")[:-1]))
    log, offset, written = tmp_path / "node-0.log", 0, 0
    log.write_bytes(b"")
    while written < len(data):
        step = rnd.randrange(1, 3000)
        with open(log, "ab") as f:
            f.write(data[written:written + step])
        written += step
        with open(log, "rb") as f:
            f.seek(offset)
            offset += reader.feed_stream(f, rnd.randrange(1, 5000))
    with open(log, "rb") as f:
        f.seek(offset)
        offset += reader.feed_stream(f)
    reader.close()
    assert offset == len(data)
    got = (lines, reader.errors(), reader.stack_dumps(), reader.ranks_seen, reader.agent_tail)
    assert got == _read(data, "per line")


def test_an_over_long_line_is_read_in_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "MAX_LINE", 64)
    monkeypatch.setattr(logs, "READ_CHUNK", 50)
    long = "y" * 300
    lines = _read(f"[rank0]:before\n[rank0]:{long}\n[rank1]:after\n[rank0]:end".encode(), "stream")[0]
    assert lines[1] == ["after"]
    assert lines[0][0] == "before" and lines[0][-1] == "end"
    assert "".join(lines[0][1:-1]) == long and max(len(piece) for piece in lines[0]) <= 2 * 64   # memory stays bounded
