"""The diagnosis zoo (benchmarks/zoo/, benchmarks/zoo.py): the headers, the scorer (a pure
function: a case's expected answer and a tool's answer -> verdicts), each tool's answer as
read from what it writes, the runner's bad input, and one real case through the lab."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import _zoo  # noqa: E402
from _zoo import Answer, BadCase, Verdict, parse_header, score  # noqa: E402

ZOO = REPO / "benchmarks" / "zoo"


def case(header: str, name: str = "c"):
    return parse_header(header + "\nimport torch\n", name)


# ---------------------------------------------------------------- headers

def test_every_zoo_case_has_a_header_whose_lines_are_code_of_its_script():
    cases = sorted(ZOO.glob("*.py")) + sorted((ZOO / "heldout").glob("*.py"))
    assert len([p for p in cases if "culprit=none" not in p.read_text()]) >= 30
    for path in cases:
        c = _zoo.load_case(path)
        text = path.read_text()
        ast.parse(text)
        lines = text.splitlines()
        for n in c.lines:
            code = lines[n - 1].strip()
            assert code and not code.startswith("#"), f"{path.name}: line {n} is not code: {code!r}"
        assert c.timeout <= 120 and c.culprits <= set(range(c.world)), path.name


def test_a_header_reads_all_of_and_a_source():
    c = case("# zoo: culprit=1+2 op=new_group line=7 kind=hang nproc=4\n"
             "# zoo: source=https://github.com/pytorch/pytorch/issues/1\n# zoo: source=(the forum thread too)")
    assert c.culprits == {1, 2} and c.together and c.split == "dev"
    assert c.source == "https://github.com/pytorch/pytorch/issues/1 (the forum thread too)"
    assert score(c, Answer((1, 2), "new_group", 7)).all
    assert not score(c, Answer((1,), "new_group", 7)).culprit          # all of them, not some
    with pytest.raises(BadCase, match="mixes"):
        case("# zoo: culprit=1+2|3 op=x line=1 kind=hang nproc=4")


def test_the_heldout_cases_are_their_own_split(tmp_path):
    (tmp_path / "heldout").mkdir()
    (tmp_path / "a.py").write_text("# zoo: culprit=none kind=pass\nimport torch\n")
    (tmp_path / "heldout" / "b.py").write_text("# zoo: culprit=1 op=send line=3 kind=hang\nimport torch\nx = 1\n")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import zoo as runner
    assert [c.name for c in runner.select(tmp_path, None)] == ["a"]
    held = runner.select(tmp_path, None, "heldout")
    assert [(c.name, c.split) for c in held] == [("b", "heldout")]
    assert [c.name for c in runner.select(tmp_path, None, "all")] == ["a", "b"]


def test_a_header_reads_alternatives_and_defaults():
    c = case("# zoo: culprit=0|1 op=send|recv line=7|9 kind=deadlock nproc=2 timeout=30\n# zoo: about=a b c")
    assert c.culprits == {0, 1} and c.ops == {"send", "recv"} and c.lines == {7, 9}
    assert (c.backend, c.nodes, c.nproc, c.timeout, c.about) == ("local", 1, 2, 30.0, "a b c")
    c = case("# zoo: culprit=1 op=all_reduce line=3 kind=timeout backend=compose nodes=2 nproc=1\n"
             "# zoo: faults=stop-node:1@20+60 pg_timeout=10")
    assert c.faults == ("stop-node:1@20+60",) and c.pg_timeout == 10 and c.world == 2


@pytest.mark.parametrize("text, says", [
    ("import torch\n", "no '# zoo:"),
    ("# zoo: culprit=1 op=x kind=hang\n", "needs op= and line="),
    ("# zoo: culprit=1 op=x line=a kind=hang\n", "is not a number"),
    ("# zoo: culprit=5 op=x line=1 kind=hang nproc=2\n", "not a rank"),
    ("# zoo: culprit=1 op=x line=1 kind=hang colour=red\n", "unknown or malformed"),
    ("# zoo: culprit=1 op=x line=1 kind=hang backend=k8s\n", "backend="),
])
def test_a_bad_header_is_one_line_naming_the_case(text, says):
    with pytest.raises(BadCase) as exc:
        parse_header(text, "bad")
    assert says in str(exc.value) and str(exc.value).startswith("bad: ") and "\n" not in str(exc.value)


def test_code_before_the_header_ends_it():
    with pytest.raises(BadCase, match="no '# zoo:"):
        parse_header("import torch\n# zoo: culprit=1 op=x line=1 kind=hang\n", "late")


# ---------------------------------------------------------------- the scorer

MISMATCH = "# zoo: culprit=2 op=broadcast line=13 kind=mismatch nproc=4"
EITHER = "# zoo: culprit=0|1 op=recv line=9 kind=deadlock nproc=2"
OBJECTS = "# zoo: culprit=1 op=all_gather_object line=8 kind=exception nproc=3"
CONTROL = "# zoo: culprit=none kind=pass nproc=2"


@pytest.mark.parametrize("header, answer, verdict", [
    (MISMATCH, Answer((2,), "broadcast", 13), Verdict(True, True, True)),
    (MISMATCH, Answer((1,), "all_reduce", 15), Verdict(False, False, False)),
    (MISMATCH, Answer((2,), "broadcast", None), Verdict(True, True, False)),
    (MISMATCH, Answer((0, 2), "broadcast", 13), Verdict(False, True, True)),      # one rank too many
    (MISMATCH, Answer(), Verdict(False, False, False)),
    (EITHER, Answer((0, 1), "recv", 9), Verdict(True, True, True)),               # both, where either may be
    (EITHER, Answer((1,), "recv", 9), Verdict(True, True, True)),
    (EITHER, Answer((0,), "send", 10), Verdict(True, False, False)),
    (OBJECTS, Answer((1,), "all_gather_object", 8), Verdict(True, True, True)),
    (OBJECTS, Answer((1,), "all_gather", 8), Verdict(True, False, True)),         # the inner op is not the call
    (CONTROL, Answer(), Verdict(True, True, True)),
    (CONTROL, Answer((0,), None, None), Verdict(False, False, False)),            # blames a passing run
    ("# zoo: culprit=0 op=all_gather_into_tensor line=3 kind=hang", Answer((0,), "all_gather_single", 3),
     Verdict(True, True, True)),                   # torch 2.13's new name of the same call
    ("# zoo: culprit=0 op=delete_key line=3 kind=hang", Answer((0,), "store.delete_key", 3),
     Verdict(True, True, True)),
])
def test_the_score_of_a_right_and_a_wrong_answer(header, answer, verdict):
    assert score(case(header), answer) == verdict


# ---------------------------------------------------------------- what each tool said

def test_the_lab_s_answer_is_first_failure_s_rank_op_and_line():
    script = "case.py"
    mismatch = {"first_failure": {"rank": 2, "hang": True, "collective": {"rank": 2, "stuck": [
        {"pg": "default_pg", "seq": 4, "op": "all_reduce", "rank": 2, "mismatch": "...",
         "last": {"0": "#4 all_reduce [100]", "2": "#4 broadcast [100]"},
         "calls": {"2": {"op": "broadcast", "caller": "/x/case.py:13"}}}]}}}
    assert _zoo.lab_answer(mismatch, script).said == ((2,), "broadcast", 13)
    died = {"first_failure": {"rank": 1, "signal": "SIGKILL",
                              "last_op": "in barrier [] (collective #2 of default_pg) at /x/case.py:14"}}
    assert _zoo.lab_answer(died, script).said == ((1,), "barrier", 14)
    raised = {"first_failure": {"rank": 1, "exit_code": 1, "op": "all_gather_object",
                                "error": {"exception": "IndexError: x", "file": "/x/case.py", "line": 8}}}
    assert _zoo.lab_answer(raised, script).said == ((1,), "all_gather_object", 8)
    passed = {"first_failure": None, "trace": {"straggler": {"ranks": [2], "op": "all_reduce",
                                                             "caller": "/x/case.py:12", "text": "..."}}}
    assert _zoo.lab_answer(passed, script).said == ((2,), "all_reduce", 12)
    assert _zoo.lab_answer({"first_failure": None}, script).silent


DETAIL_OUT = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/x/case.py", line 15, in <module>
[rank1]:     dist.all_reduce(t)
[rank1]:   File "/v/torch/distributed/distributed_c10d.py", line 3245, in all_reduce
[rank1]:     work = group.allreduce([tensor], opts)
[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: \
CollectiveFingerPrint(OpType=ALLREDUCE), but Rank 2 is running collective: CollectiveFingerPrint(OpType=BROADCAST).
[rank2]: Traceback (most recent call last):
[rank2]:   File "/x/case.py", line 13, in <module>
[rank2]:     dist.broadcast(t, src=0)
[rank2]: RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: \
CollectiveFingerPrint(OpType=BROADCAST), but Rank 0 is running collective: CollectiveFingerPrint(OpType=ALLREDUCE).
[rank0]: Traceback (most recent call last):
[rank0]:   File "/x/case.py", line 15, in <module>
[rank0]:     dist.all_reduce(t)
[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: \
CollectiveFingerPrint(OpType=ALLREDUCE), but Rank 2 is running collective: CollectiveFingerPrint(OpType=BROADCAST).
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
"""


def test_torchrun_s_answer_follows_detail_s_mismatch_else_its_root_cause():
    assert _zoo.torchrun_answer(DETAIL_OUT, "case.py").said == ((2,), "broadcast", 13)
    plain = DETAIL_OUT.replace("Detected mismatch", "Connection closed")
    assert _zoo.torchrun_answer(plain, "case.py").said == ((0,), "all_reduce", 15)
    assert _zoo.torchrun_answer("nothing\n", "case.py").silent
    barrier = plain.replace("Connection closed", "[Rank 0]: Ranks 3 failed to pass monitoredBarrier in 1800000 ms")
    assert _zoo.torchrun_answer(barrier, "case.py").culprits == (3,)


def test_frtrace_s_answer_is_its_first_problem():
    out = ("Collective sequence number: 4 has errors\ninternal record id: 3\ngroup info: 0:default_pg\n"
           "collective: gloo:all_reduce\nerror msg: Culprit rank 2; Error type: COLLECTIVE_TYPE_MISMATCH, "
           "Expected collective type: 'all_reduce' does not match found collective type: 'broadcast'\n"
           "collective stack trace: \n \nNot all ranks joining collective, sequence number: 9\n"
           "collective: gloo:barrier\nmissing ranks: {1}\n")
    assert _zoo.frtrace_answer(out, "case.py").said == ((2,), "broadcast", None)
    missing = out[out.index("Not all"):]
    assert _zoo.frtrace_answer(missing, "case.py").said == ((1,), "barrier", None)


# ---------------------------------------------------------------- the runner

def zoo(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "zoo.py"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def test_an_unknown_case_or_tool_is_one_line_and_exit_2():
    done = zoo("--cases", "no_such_case")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "unknown zoo case 'no_such_case'" in done.stderr
    done = zoo("--tools", "lab,gdb")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "unknown tool 'gdb'" in done.stderr


def test_a_case_without_its_header_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "plain.py").write_text("import torch\n")
    done = zoo("--zoo", str(tmp_path), "--cases", "plain")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "plain: no '# zoo:" in done.stderr


@pytest.mark.slow
def test_one_real_case_through_the_lab_is_scored_right(tmp_path):
    """rank 1 raises between two all_reduces: the lab names rank 1, the all_reduce it never
    reached and the line it raised at; the table says so."""
    for name in ("exception", "control_pass"):
        (tmp_path / "zoo").mkdir(exist_ok=True)
        (tmp_path / "zoo" / f"{name}.py").write_text((ZOO / f"{name}.py").read_text())
    done = zoo("--zoo", str(tmp_path / "zoo"), "--cases", "exception", "--tools", "lab",
               "--out", str(tmp_path / "runs"), timeout=400)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| exception |"))
    assert "✓✓✓" in row, done.stdout
    assert "| lab | dev | 1 | 1/1 (100 %) | 1/1 (100 %) | 1/1 (100 %) | 1/1 (100 %) |" in done.stdout


DUMP = """=== Rank 0: http://127.0.0.1:1/handler/dump_traceback? ===
Current thread 0x1 (most recent call first):
  <no Python frame>

Thread 0x2 (most recent call first):
  File "/work/workloads/_trace.py", line 1471 in waiter

Thread 0x3 (most recent call first):
  File "/tmp/case/missing_collective.py", line 13 in <module>
  File "/work/workloads/_script.py", line 146 in main

=== Rank 1: http://127.0.0.1:2/handler/dump_traceback? ===
Thread 0x3 (most recent call first):
  File "/tmp/case/missing_collective.py", line 13 in <module>

=== Rank 10: http://127.0.0.1:3/handler/dump_traceback? ===
Thread 0x3 (most recent call first):
  File "/tmp/case/missing_collective.py", line 14 in <module>
"""


def test_the_debug_server_s_stacks_are_read_as_a_user_reads_its_page():
    """Where each rank is in the script (its main thread: listed last), and the odd one
    out with the call on its line: right when one rank is elsewhere, no culprit when no
    line is most ranks' (the page shows where, not who)."""
    source = (ZOO / "missing_collective.py").read_text()
    lines = _zoo.stack_lines(DUMP, "missing_collective.py", 11)
    assert (lines[0], lines[1], lines[10], lines[2]) == (13, 13, 14, None)
    case = _zoo.load_case(ZOO / "missing_collective.py")
    right = _zoo.debug_server_answer({0: 13, 1: 13, 2: 13, 3: 14}, source)
    assert (right.culprits, right.op, right.line) == ((3,), "barrier", 14)
    assert _zoo.score(case, right).all
    split = _zoo.debug_server_answer({0: 13, 1: 13, 2: 14, 3: 14}, source)
    assert split.culprits == () and not _zoo.score(case, split).culprit
    gone = _zoo.debug_server_answer({0: 13, 1: 13, 2: 13, 3: None}, source)
    assert (gone.culprits, gone.line) == ((3,), None) and not _zoo.score(case, gone).all


def test_the_dumps_answer_reads_labctl_diagnose_json():
    said = ('{"rank": 3, "culprits": [3], "op": "barrier", "line": "/z/missing_collective.py:14", '
            '"text": "rank 3 called barrier [] where rank 0 called all_reduce [64]"}')
    a = _zoo.dumps_answer(said, "missing_collective.py", 4.0)
    assert (a.culprits, a.op, a.line, a.seconds) == ((3,), "barrier", 14, 4.0)
    a = _zoo.dumps_answer('note: x\n{"rank": null, "culprits": [0, 1], "op": "all_reduce", "line": null}', "c.py")
    assert (a.culprits, a.op, a.line) == ((0, 1), "all_reduce", None)
    a = _zoo.dumps_answer('{"rank": null, "culprits": [], "op": null, "line": "/z/other.py:3", "text": ""}', "c.py")
    assert a.silent and a.text == "nothing stuck"
    a = _zoo.dumps_answer("error: /x: no dump in it\n", "c.py")
    assert a.silent and a.text == "error: /x: no dump in it"


@pytest.mark.parametrize("header, collective", [
    ("culprit=1 op=all_reduce line=3 kind=mismatch", True),
    ("culprit=1 op=broadcast_object_list line=3 kind=hang", True),
    ("culprit=0 op=full_tensor|distribute_tensor line=3 kind=mismatch", True),
    ("culprit=0 op=add|all_reduce line=3 kind=hang", True),         # a collective among its ops
    ("culprit=0|1 op=send line=3 kind=deadlock", False),            # p2p
    ("culprit=1 op=get line=3 kind=hang", False),                   # a store call
    ("culprit=1 op=new_group line=3 kind=hang", False),             # the group's life cycle
    ("culprit=1 op=all_reduce line=3 kind=exception", False),       # a rank raised: not the dumps' kind
])
def test_a_collective_case_is_a_hang_or_mismatch_in_a_collective_call(header, collective):
    assert case(f"# zoo: {header}").collective is collective


def test_the_collective_summary_counts_culprit_and_op_on_collective_cases_only():
    import zoo
    right = Answer((1,), "all_reduce", 3, "")
    cases = [case("# zoo: culprit=1 op=all_reduce line=3 kind=mismatch", "a"),
             case("# zoo: culprit=1 op=broadcast line=3 kind=hang", "b"),
             case("# zoo: culprit=0|1 op=send line=3 kind=deadlock", "c")]
    results = {c.name: {"case": c, "found": {"dumps": {"answer": right}}} for c in cases}
    text = zoo.collective_summary(cases, results, ["dumps"])
    assert "| dumps | dev | 2 | 1/2 (50 %) |" in text
