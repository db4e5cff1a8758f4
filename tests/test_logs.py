from labctl import logs


def test_split_by_rank_keeps_only_prefixed_lines_in_order():
    text = ("agent noise\n[rank0]:hello\n[rank1]:a\n[rank0]:[rank0]: Traceback\n"
            "W1121 torch warning\n[rank1]:b\n")
    assert logs.split_by_rank(text) == {0: ["hello", "[rank0]: Traceback"], 1: ["a", "b"]}


def test_glued_half_lines_from_torchrun_tee_are_put_back_together():
    text = ('[rank3]:@@labctl-result {"name": "a", "ok": tr[rank2]:@@labctl-result {"name": "b"}\n'
            '[rank3]:ue}\n[rank3]:[rank3]: Traceback\n')
    assert logs.split_by_rank(text) == {
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
