"""`labctl diagnose` on torch's own Flight Recorder dumps (labctl/trace/frdump.py, frdiag.py):
real dumps written by a real 2-rank gloo job that hangs on a collective one rank never
calls, the same read as pickle (with and without stack traces) and JSON; torch's names
and frames mapped to the lab's; the lab's matcher on them; and bad input (not a dump, cut,
hostile, empty, missing, huge): one line, exit 2, nothing run."""
from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, labctl
from labctl.trace import frdiag, frdump

JOB = '''
import datetime, os, sys
import torch, torch.distributed as dist

out = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2))
rank = dist.get_rank()
t = torch.ones(8)
dist.all_reduce(t)
sub = dist.new_group([0, 1])
dist.broadcast(t, 0, group=sub)
if rank == 0:
    try:
        dist.all_reduce(t)                      # MISSING: rank 1 never calls it
    except RuntimeError:
        pass                                    # gloo's timeout (or rank 1 gone): dump, as NCCL's watchdog would
c10d = torch._C._distributed_c10d
prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
for folder, data in (("bare", c10d._dump_fr_trace(True, False)), ("json", c10d._dump_fr_trace_json(True, False)),
                     ("pickle", c10d._dump_fr_trace(True, True))):
    os.makedirs(os.path.join(out, folder), exist_ok=True)
    with open(os.path.join(out, folder, os.path.basename(prefix) + str(rank)), "wb") as f:
        f.write(data)
'''
MISSING_LINE = next(i for i, line in enumerate(JOB.splitlines(), 1) if "MISSING" in line)
FIRST_LINE = next(i for i, line in enumerate(JOB.splitlines(), 1) if line == "dist.all_reduce(t)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """Two gloo ranks, rank 1 missing an all_reduce: each dumps its Flight Recorder (the
    file names TORCH_FR_DUMP_TEMP_FILE=<prefix> gives, <prefix><rank>) three ways."""
    out = tmp_path_factory.mktemp("frdumps")
    job = out / "job.py"
    job.write_text(JOB)
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1",
               "TORCH_FR_DUMP_TEMP_FILE": str(out / "rank_")}
        env.pop("PYTHONPATH", None)
        procs.append(subprocess.Popen([sys.executable, str(job), str(out)], env=env, cwd=out,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    said = [p.communicate(timeout=60)[0].decode(errors="replace") for p in procs]
    for name in ("pickle", "json", "bare"):
        assert sorted(p.name for p in (out / name).iterdir()) == ["rank_0", "rank_1"], said
    return out


def test_a_real_gloo_dump_names_the_rank_that_never_came_its_call_and_line(dumps):
    read = frdump.load(dumps / "pickle")
    assert [d.rank for d in read] == [0, 1] and {d.kind for d in read} == {"pickle"}
    assert all(d.has_frames and d.backend == "gloo" for d in read)
    r = frdiag.read(read)
    d = r.diagnosis
    assert (d.rank, d.ranks, d.op) == (1, [1], "all_reduce")
    assert r.line == f"{dumps / 'job.py'}:{MISSING_LINE}"        # where rank 0 waits: the call rank 1 never made
    assert (r.stuck.pg, r.stuck.seq, r.stuck.waiting, r.stuck.missing) == ("default_pg", 2, [0], [1])
    ops = frdump.ops_of(read[0])
    assert [(o.op, o.pg, o.seq) for o in ops] == [("all_reduce", "default_pg", 1), ("broadcast", "pg1", 1),
                                                   ("all_reduce", "default_pg", 2)]
    assert ops[0].end is not None and ops[2].end is None        # gloo says no state: the newest never ended
    assert ops[0].caller.endswith(f"job.py:{FIRST_LINE}") and ops[0].dtype == "float32" and ops[0].shape == [8]


@pytest.mark.parametrize("kind", ["json", "bare"])
def test_the_json_dump_and_one_without_stacks_name_the_same_but_no_line(dumps, kind):
    r = frdiag.read(frdump.load(dumps / kind))
    assert (r.diagnosis.rank, r.diagnosis.op, r.line) == (1, "all_reduce", None)
    assert {d.kind for d in r.dumps} == {"json" if kind == "json" else "pickle"}


def test_the_command_prints_who_what_where_and_its_json(dumps):
    done = labctl("diagnose", str(dumps / "pickle"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "culprit: rank 1\nop: all_reduce\n" in done.stdout
    assert f"job.py:{MISSING_LINE}" in done.stdout and "group: default_pg, collective #2" in done.stdout
    done = labctl("diagnose", str(dumps / "json"), "--format", "json", timeout=60)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert (said["ranks"], said["culprits"], said["op"], said["kind"]) == ([0, 1], [1], "all_reduce", ["json"])
    done = labctl("diagnose", str(dumps / "json" / "rank_1"), timeout=60)   # one rank alone: no one to compare
    assert done.returncode == 0 and "nothing stuck" in done.stdout, done.stderr


# ---------------------------------------------------------------- torch's names and frames

def _entry(seq: int, name: str, sizes=((4,),), rid: int = 0, pg=("0", "default_pg"), frames=(), **more) -> dict:
    return {"record_id": rid, "pg_id": int(pg[0]), "process_group": pg, "collective_seq_id": seq, "p2p_seq_id": 0,
            "op_id": rid + 1, "profiling_name": name, "time_created_ns": 1000 + rid,
            "input_sizes": [list(s) for s in sizes], "input_dtypes": ["Float"] * len(sizes),
            "output_sizes": [list(s) for s in sizes], "state": "scheduled", "is_p2p": False,
            "frames": [{"name": n, "filename": f, "line": ln} for n, f, ln in frames], **more}


def _dump(entries: list[dict], ranks: str = "[0, 1, 2]") -> bytes:
    return pickle.dumps({"version": "2.10", "entries": entries, "pg_status": {},
                         "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}}})


def test_torchs_op_names_are_the_labs():
    assert frdump.op_name("gloo:all_reduce") == ("all_reduce", None)
    assert frdump.op_name("nccl:send 0->1") == ("send", 1)
    assert frdump.op_name("nccl:recv 1<-0") == ("recv", 0)
    assert frdump.op_name("nccl:_all_gather_base") == ("all_gather_into_tensor", None)
    assert frdump.op_name("nccl:_reduce_scatter_base") == ("reduce_scatter_tensor", None)
    assert frdump.op_name("nccl:all_reduce_barrier") == ("barrier", None)
    assert frdump.op_name("nccl:coalesced") == ("batch_p2p_ops", None)


def test_the_caller_is_the_first_frame_not_torchs_nor_pythons_and_the_api_the_outermost():
    c10d = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    frames = (frdump.Frame("all_gather", c10d, 1), frdump.Frame("all_gather_object", c10d, 2),
              frdump.Frame("wrapper", "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", 83),
              frdump.Frame("inner", "/usr/lib/python3.11/contextlib.py", 81),
              frdump.Frame("main", "/work/train.py", 12))
    assert frdump.where_called(frames) == ("/work/train.py:12", "all_gather_object")
    assert frdump.where_called(frames[:3]) == ("?", "all_gather_object")
    # the script's __getstate__ all_reduces while broadcast_object_list pickles: that call's
    nested = (frdump.Frame("all_reduce", c10d, 1), frdump.Frame("__getstate__", "/work/train.py", 21),
              frdump.Frame("dumps", "/usr/lib/python3.11/pickle.py", 9),
              frdump.Frame("_object_to_tensor", c10d, 3), frdump.Frame("broadcast_object_list", c10d, 4),
              frdump.Frame("<module>", "/work/train.py", 38))
    assert frdump.where_called(nested) == ("/work/train.py:21", "broadcast_object_list")


def test_an_odd_call_is_the_culprit_with_its_own_line():
    where = (("all_reduce", "/t/torch/distributed/distributed_c10d.py", 9), ("main", "/w/job.py", 7))
    odd = (("broadcast", "/t/torch/distributed/distributed_c10d.py", 9), ("main", "/w/job.py", 11))
    dumps = [frdump.decode(_dump([_entry(1, "gloo:all_reduce", frames=where, rid=0),
                                  _entry(2, "gloo:broadcast" if r == 1 else "gloo:all_reduce", rid=1,
                                         frames=odd if r == 1 else where)]), r) for r in range(3)]
    r = frdiag.read(dumps)
    assert (r.diagnosis.rank, r.diagnosis.op, r.line) == (1, "broadcast", "/w/job.py:11")
    assert "rank 1 called broadcast [4] where rank 0 called all_reduce [4]" in r.diagnosis.text


def test_a_rank_that_left_no_dump_is_absent_first_and_the_one_that_never_came_last():
    sub = {"name": "1", "desc": "undefined", "ranks": "[1, 2]"}
    def dump(entries):
        return pickle.dumps({"version": "2.10", "entries": entries, "pg_config": {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}, "1": sub}})
    # rank 2 skipped its subgroup's all_reduce and ended, as rank 0 did (no dumps); rank 1 waits in it
    where = (("main", "/w/job.py", 14),)
    dumps = [frdump.decode(dump([_entry(1, "gloo:all_reduce"), _entry(2, "gloo:all_reduce", rid=1),
                                 _entry(1, "gloo:all_reduce", rid=2, pg=("1", "undefined"), frames=where)]), 1)]
    r = frdiag.read(dumps)
    assert (r.diagnosis.rank, r.diagnosis.op, r.no_dump, r.stuck.pg) == (2, "all_reduce", [0, 2], "pg1")
    assert r.line == "/w/job.py:14"                         # where rank 1 waits for it
    assert "no dump from rank 0, 2" in r.diagnosis.text
    two = [frdump.decode(dump([_entry(1, "gloo:all_reduce"), _entry(2, "gloo:all_reduce", rid=1)]), 0), *dumps]
    assert (frdiag.read(two).diagnosis.rank, frdiag.read(two).no_dump) == (2, [2])


def test_nccl_states_say_what_completed():
    done = {"state": "completed", "time_discovered_completed_ns": 5}
    dumps = [frdump.decode(_dump([_entry(1, "nccl:all_reduce", **done), _entry(2, "nccl:all_reduce", rid=1, **done)],
                                 "[0, 1]"), 0),
             frdump.decode(_dump([_entry(1, "nccl:all_reduce", **done),
                                  _entry(2, "nccl:all_reduce", rid=1, state="started")], "[0, 1]"), 1)]
    assert frdiag.read(dumps).diagnosis is not None         # rank 1 never left #2: named
    dumps[1] = frdump.decode(_dump([_entry(1, "nccl:all_reduce", **done), _entry(2, "nccl:all_reduce", rid=1, **done)],
                                   "[0, 1]"), 1)
    assert frdiag.read(dumps).diagnosis is None             # every rank completed: nothing stuck


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing run

class _System:
    """A pickle that would run `touch MARKER` if it were loaded with pickle.load."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _refused(path: Path, says: str) -> None:
    done = labctl("diagnose", str(path), timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and says in done.stderr, done.stderr
    assert done.stdout == ""


def test_a_hostile_pickle_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "rank_0").write_bytes(pickle.dumps({"version": "2.10", "entries": [_System(marker)]}))
    _refused(tmp_path / "d", "names posix.system")
    assert not marker.exists()
    with pytest.raises(frdump.BadDump, match="names builtins.eval"):
        frdump.decode(b"\x80\x04cbuiltins\neval\n(S'1'\ntR.", 0)
    assert not marker.exists()


def test_bad_input_is_one_line_and_exit_2(tmp_path, dumps):
    (tmp_path / "text").write_text("hello\n")
    _refused(tmp_path / "text", "neither a pickle nor JSON")
    whole = (dumps / "pickle" / "rank_0").read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "rank_0").write_bytes(whole[: len(whole) // 2])
    _refused(tmp_path / "cut", "a broken or cut pickle")
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", "no dump in it")
    _refused(tmp_path / "nowhere", "no such file or folder")
    (tmp_path / "other.json").write_text('{"a": 1}')
    _refused(tmp_path / "other.json", "no `entries` list")
    (tmp_path / "list0").write_bytes(pickle.dumps([1, 2]))
    _refused(tmp_path / "list0", "no `entries` list")
    huge = tmp_path / "huge" / "rank_0"
    huge.parent.mkdir()
    with open(huge, "wb") as f:
        f.truncate(frdump.MAX_FILE_BYTES + 1)           # sparse: nothing is written
    _refused(huge.parent, "more than any dump this reads")


def test_deep_or_odd_values_are_bounded_not_crashes():
    with pytest.raises(frdump.BadDump):
        frdump.decode(b"{" + b'"a":[' * 100_000 + b"]" * 100_000 + b"}", 0)
    odd = {"version": 3, "entries": [{"profiling_name": "gloo:all_reduce", "input_sizes": "x", "frames": [1, {}],
                                      "process_group": None, "collective_seq_id": "7"}, "junk", None]}
    d = frdump.decode(pickle.dumps(odd), 0)
    assert [(e.seq, e.group, e.input_sizes, e.frames) for e in d.entries] == [(7, "pg", [], (frdump.Frame("", "", 0),))]


def test_a_run_folder_says_its_own_diagnosis_then_its_torch_dumps(tmp_path, dumps):
    run = tmp_path / "run"
    (run / "fr").mkdir(parents=True)
    (run / "status.json").write_text((REPO / "tests" / "golden" / "status" / "hang.json").read_text())
    for rank in (0, 1):
        (run / "fr" / f"rank_{rank}").write_bytes((dumps / "pickle" / f"rank_{rank}").read_bytes())
    done = labctl("diagnose", str(run), timeout=60)
    assert done.returncode == 0, done.stderr
    own, _, theirs = done.stdout.partition("\n\n")
    assert own.startswith("run lab-20261125-113609-d4ab: timeout: deadline of 25s passed\n")
    assert "first failure (status.json): rank 1" in own
    assert theirs.startswith(f"torch Flight Recorder dumps in {run / 'fr'}: rank 0, 1 (gloo")
    assert "culprit: rank 1\nop: all_reduce\n" in theirs
    (run / "status.json").write_text('{"state": ')
    _refused(run, "the run folder is damaged")


def test_a_scatter_s_ranks_agree_on_their_output_not_on_the_input_only_the_source_has():
    """torch records scatter's input on the source alone (an empty list elsewhere): the
    ranks' outputs are what must agree, so a scatter every rank called alike is no mismatch
    (it was read as 'the dtype differs'); one whose output differs on rank 2 is."""
    def scatter(rank: int, out=(4,), dtype="Float") -> dict:
        src = rank == 0
        return _entry(1, "gloo:scatter", sizes=((3, 4),) if src else (), output_sizes=[list(out)],
                      input_dtypes=["Float"] if src else [], output_dtypes=[dtype])
    alike = [frdump.decode(_dump([scatter(r)]), r) for r in range(3)]
    assert [(op.shape, op.dtype) for d in alike for op in frdump.ops_of(d)] == [([4], "float32")] * 3
    assert frdiag.read(alike).diagnosis is None or not frdiag.read(alike).diagnosis.mismatches
    odd = alike[:2] + [frdump.decode(_dump([scatter(2, dtype="Double")]), 2)]
    assert "dtype" in frdiag.read(odd).diagnosis.text


def test_dumps_with_stacks_name_the_rank_that_skipped_a_call_in_a_wait_cycle():
    """Expert-parallel clipping from the dumps alone: rank 3 skipped its expert group's
    second all_reduce (job.py:16) and waits in the barrier with ranks 0 and 1 for rank 2,
    which waits in that all_reduce for rank 3. With stacks, each rank's collectives per line
    say who skipped (matcher._skipped_a_call); a ring that wrapped (its first record_id not
    0) counts nothing, and the rank most waited for stays."""
    def at(line):
        return (("all_reduce", "/t/torch/distributed/distributed_c10d.py", 9), ("main", "/w/job.py", line))

    def entries(rank, skip=False, wrapped=0):
        ep = ("1", "ep01") if rank < 2 else ("2", "ep23")
        out = [_entry(1, "gloo:all_reduce", frames=at(48)), _entry(1, "gloo:all_reduce", pg=ep, frames=at(16)),
               _entry(2, "gloo:all_reduce", frames=at(48))]
        if not skip:
            out.append(_entry(2, "gloo:all_reduce", pg=ep, frames=at(16)))
        if rank != 2:
            out.append(_entry(3, "gloo:barrier", frames=at(54)))
        return [{**e, "record_id": i + wrapped, "op_id": i + 1, "time_created_ns": 1000 + i} for i, e in enumerate(out)]

    def dump(rank, wrapped=0):
        return pickle.dumps({"version": "2.10", "entries": entries(rank, skip=rank == 3, wrapped=wrapped),
                             "pg_status": {}, "pg_config": {
                                 "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                                 "1": {"name": "1", "desc": "ep01", "ranks": "[0, 1]"},
                                 "2": {"name": "2", "desc": "ep23", "ranks": "[2, 3]"}}})

    r = frdiag.read([frdump.decode(dump(rank), rank) for rank in range(4)])
    assert (r.diagnosis.rank, r.diagnosis.op, r.line) == (3, "all_reduce", "/w/job.py:16"), r.diagnosis.text
    wrapped = frdiag.read([frdump.decode(dump(rank, wrapped=5), rank) for rank in range(4)])
    assert wrapped.diagnosis.rank == 2, wrapped.diagnosis.text


def test_a_rank_that_went_on_alone_past_where_the_rest_are_held_is_the_odd_one():
    """A home-made store barrier rank 0 returned early from: it waits alone in the first
    all_reduce while ranks 1 and 2 entered no collective at all (held in the store). The
    few that went on are the odd ones (frdiag._went_ahead); where the rest made collectives,
    or do not outnumber them, the ranks never entered are named as before."""
    where = (("all_reduce", "/t/torch/distributed/distributed_c10d.py", 9), ("main", "/w/job.py", 27))
    alone = [frdump.decode(_dump([_entry(1, "gloo:all_reduce", frames=where)] if r == 0 else []), r) for r in range(3)]
    r = frdiag.read(alone)
    assert (r.diagnosis.rank, r.diagnosis.op, r.line) == (0, "all_reduce", "/w/job.py:27"), r.diagnosis.text
    assert "rank 0 went on alone to all_reduce" in r.diagnosis.text
    two = [frdump.decode(_dump([_entry(1, "gloo:all_reduce", frames=where)] if r == 0 else [], "[0, 1]"), r)
           for r in range(2)]
    assert frdiag.read(two).diagnosis.ranks == [1]         # one against one: the one never entered, as ever
    made = [frdump.decode(_dump([_entry(1, "gloo:all_reduce", frames=where)]
                                + ([_entry(2, "gloo:all_reduce", rid=1, frames=where)] if r == 0 else [])), r)
            for r in range(3)]
    assert frdiag.read(made).diagnosis.ranks == [1, 2]     # the rest made collectives: they are somewhere else
