"""The calls that are no op of a group, read for the diagnosis (labctl/trace/calls.py), and
recorded by a real rank (workloads/_trace/calls.py) all the way to the first failure."""
from __future__ import annotations

from dataclasses import replace

import json
import re
import subprocess
import sys
from pathlib import Path

from labctl.trace.calls import (deleted_keys, destroyed_before, local_group_out_of_step, odd_new_group,
                               says_uninitialized, set_keys)
from labctl.trace.model import Op
from workloads._protocol.ops import LOCAL_SYNC

from conftest import REPO


def _call(rank: int, name: str, members: list[int] | None = None, line: int = 9, start: int = 0,
          end: int | None = 1) -> Op:
    return Op(rank=rank, op=name, pg="default_pg", seq=None, p2p=None, peer=None, root=None, shape=None,
              dtype=None, nbytes=0, caller=f"/x/job.py:{line}", start=start, end=end, members=members)


def test_the_ranks_whose_new_group_names_other_members_are_the_odd_ones():
    calls = {r: [_call(r, "new_group", [0, 1, 2], 11)] for r in range(3)}
    calls[3] = [_call(3, "new_group", [0, 1, 2, 3], 13, end=None)]
    odd = odd_new_group(calls)
    assert (odd.rank, odd.ranks, odd.op, odd.caller, odd.differs, odd.unfinished) == (
        3, [3], "new_group", "/x/job.py:13", ["members"], [3])
    assert "rank 3 with [0, 1, 2, 3] (at /x/job.py:13)" in odd.text
    assert odd_new_group({r: [_call(r, "new_group", [1, 0])] for r in range(2)}) is None   # the same ranks
    assert odd_new_group({0: [_call(0, "new_group", [0, 1])], 1: [_call(1, "new_group", [0, 2])]}).ranks == [0, 1]


def test_groups_made_by_new_subgroups_are_named_with_the_call_the_script_made():
    """new_subgroups makes its groups with new_group: the odd rank's call is new_subgroups."""
    calls = {r: [replace(_call(r, "new_group", [0, 1] if r != 1 else [0, 1, 2, 3], 12), api="new_subgroups")]
             for r in range(4)}
    odd = odd_new_group(calls)
    assert (odd.rank, odd.op, odd.calls[1]["call"]) == (1, "new_subgroups", "new_subgroups"), odd
    assert odd.text.startswith("new_group #1 (made by new_subgroups) was called with other members"), odd.text


def test_the_second_new_group_is_compared_with_the_second():
    calls = {r: [_call(r, "new_group", [0, 1]), _call(r, "new_group", [2, 3] if r != 2 else [1, 2])]
             for r in range(4)}
    odd = odd_new_group(calls)
    assert (odd.seq, odd.rank) == (2, 2)


def test_groups_made_by_their_members_alone_are_compared_by_the_groups_made_before():
    """use_local_synchronization=True: each rank makes only its own tp and dp groups (no
    k-th call to compare across ranks: a control, nothing said). Where rank 3 first makes
    a group of its own ([3], for logging), torch names its [2, 3] after one group where rank
    2 names it after none: they never meet, and rank 3, the one with a group before it
    that rank 2 did not make, is the odd one, at its [2, 3] call."""
    def local(rank: int, members: list[int], line: int, start: int, end: int | None = 1) -> Op:
        return replace(_call(rank, "new_group", members, line, start, end), key=LOCAL_SYNC)
    tp, dp = {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}, {0: [0, 2], 1: [1, 3], 2: [0, 2], 3: [1, 3]}
    fine = {r: [local(r, tp[r], 22, 1), local(r, dp[r], 22, 2)] for r in range(4)}
    assert odd_new_group(fine) is None and local_group_out_of_step(fine) is None
    late = {r: [local(r, tp[r], 22, 1, None if r in (2, 3) else 1)] + ([local(r, dp[r], 22, 2, None)] if r < 2 else [])
            for r in range(4)}
    late[3].insert(0, local(3, [3], 18, 0))
    odd = local_group_out_of_step(late)
    assert (odd.rank, odd.ranks, odd.op, odd.caller, odd.differs) == (3, [3], "new_group", "/x/job.py:22", ["order"])
    assert "rank 2 after 0 groups; rank 3 after 1 group" in odd.text, odd.text


def test_a_destroy_and_the_error_it_leads_to():
    calls = [_call(1, "destroy_process_group", line=14, start=5), _call(1, "store.get", start=6)]
    assert destroyed_before(calls).caller == "/x/job.py:14" and destroyed_before(calls, 4) is None
    assert says_uninitialized("ValueError: Default process group has not been initialized, please make sure")
    assert not says_uninitialized("RuntimeError: Connection closed by peer")


def test_the_first_delete_of_each_store_key_and_who_made_it():
    def delete(rank, key, start, line):
        return Op(rank=rank, op="store.delete_key", pg="store", seq=None, p2p=None, peer=None, root=None,
                  shape=None, dtype=None, nbytes=0, caller=f"/x/job.py:{line}", start=start, end=start + 1, key=key)
    calls = {0: [delete(0, "run_id", 9, 17)], 2: [delete(2, "run_id", 5, 30), delete(2, "other", 7, 31)],
             1: [_call(1, "store.get", start=3)]}
    assert deleted_keys(calls) == {"run_id": (2, "/x/job.py:30"), "other": (2, "/x/job.py:31")}


def test_the_last_set_of_each_store_key_and_who_made_it():
    def put(rank, key, start, line, end=True):
        return Op(rank=rank, op="store.set", pg="store", seq=None, p2p=None, peer=None, root=None, shape=None,
                  dtype=None, nbytes=0, caller=f"/x/job.py:{line}", start=start, end=start + 1 if end else None,
                  key=key)
    calls = {0: [put(0, "step", 5, 34), put(0, "step", 9, 34)], 1: [put(1, "step", 7, 40), put(1, "cfg", 8, 22, False)]}
    assert set_keys(calls) == {"step": (0, "/x/job.py:34")}      # the last set; one never finished is no set


SCRIPT = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if rank != 2:
    group = dist.new_group([0, 1])
else:
    group = dist.new_group([0, 1, 2])
if rank in (0, 1):
    dist.all_reduce(t, group=group)
store = dist.distributed_c10d._get_default_store()
store.set("k", "v")
assert store.get("k") == b"v"
store.add("n", 1)
if rank == 0:
    store.delete_key("n")
store.compare_set("lead", "", str(rank))
dist.all_reduce(t)
dist.destroy_process_group()
"""


def test_a_rank_records_its_calls_and_the_odd_new_group_is_the_first_failure(tmp_path):
    """One real lab: rank 2 creates a group of three where ranks 0 and 1 create a group of
    two; it is mostly held in the group's setup while the others wait for it in the next
    world all_reduce (gloo now and then lets the groups form: the run passes). The records
    carry every new_group with its members, the store read the script made (and none of
    torch's own), and the first failure (or, in a run that passed, the trace's mismatch
    and a note) names rank 2's new_group at line 11."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--script", str(script), "--nodes", "1",
                           "--nproc-per-node", "3", "--timeout", "240", "--on-hang", "stop", "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=400, cwd=REPO)
    status = json.loads((out / "status.json").read_text())
    if done.returncode != 0:            # rank 2 held in the group's setup: the hang, named
        first = status["first_failure"]
        assert (first["rank"], first["op"], first["caller"]) == (2, "new_group", f"{script}:11"), first
    else:                               # gloo let the groups form anyway (it does, now and then): said still
        said = status["trace"]["mismatch"]
        assert (said["rank"], said["op"], said["caller"]) == (2, "new_group", f"{script}:11"), said
        assert any("created a group with other members" in n for n in status["notes"]), status["notes"]
    sites = [json.loads(line.split(" ", 1)[1]) for path in sorted((out / "records").glob("rank-*.rec"))
             for line in path.read_bytes().rstrip(b"\0").decode().splitlines()
             if line.startswith("@@labctl-trace {") and '"kind":"l"' in line]
    calls = {(s["op"], s["caller"].rsplit(":", 1)[1], tuple(s.get("members") or ()), s.get("key")) for s in sites}
    assert ("new_group", "9", (0, 1), None) in calls and ("new_group", "11", (0, 1, 2), None) in calls, calls
    assert ("store.get", "16", (), "k") in calls and ("store.add", "17", (), "n") in calls, calls
    assert ("store.delete_key", "19", (), "n") in calls and ("store.set", "15", (), "k") in calls, calls
    assert ("store.compare_set", "20", (), "lead") in calls, calls
    assert all(s["caller"].startswith(str(script)) for s in sites), sites     # torch's own store reads are not the script's


HAZARDS = """\
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
store = dist.distributed_c10d._get_default_store()
pair = dist.new_group([0, 1])
if rank == 1:
    dist.send(torch.full((4,), 11.0), dst=2)
elif rank == 0:
    store.wait(["first"])
    dist.send(torch.full((4,), 10.0), dst=2)
else:
    from_0, from_1 = torch.zeros(4), torch.zeros(4)
    dist.recv(from_0)
    store.set("first", "1")
    dist.recv(from_1)
    dist.broadcast(from_1, src=0, group=pair)
if rank == 1:
    buf = torch.zeros(4)
    work = dist.irecv(buf, src=0)
    total = buf.sum().item()
    store.set("read", "1")
    work.wait()
elif rank == 0:
    store.wait(["read"])
    dist.send(torch.ones(4), dst=1)
dist.barrier()
from torch.distributed.tensor import DTensor, Shard, init_device_mesh
mesh = init_device_mesh("cpu", (3,))
whole = DTensor.from_local(torch.ones(2, 2), mesh, [Shard(0)]).full_tensor()
ep_group, _ = dist.new_subgroups(group_size=3)
slots = [torch.zeros(2)] * 3
dist.all_gather(slots, torch.full((2,), float(rank)))
counts = torch.ones(2, dtype=torch.int64)
dist.all_reduce(counts.float())
table = torch.ones(3, 2)
dist.broadcast(table[:, 0] if rank == 0 else torch.empty(3), src=0)
dist.destroy_process_group()
"""


def test_calls_torch_lets_pass_are_said_though_the_run_passed(tmp_path):
    """One real lab that passes, with three calls torch lets pass: rank 2 broadcasts over a
    group of ranks 0 and 1 (torch returns at once: line 17); rank 1 reads its irecv's buffer
    before waiting (line 21); rank 2 receives from any source at two lines that drop the
    sender, and rank 1's message comes first (rank 0 sends once rank 2 has one: lines 14,
    16); every rank all_gathers into a list that holds one tensor three times (line 33), and
    all_reduces into the copy `.float()` made of its int64 counts (line 35); rank 0 broadcasts
    a column of a table, not contiguous (line 37).
    status.json's trace.hazard is the first; a note says each."""
    script = tmp_path / "job.py"
    script.write_text(HAZARDS)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--script", str(script), "--nodes", "1",
                           "--nproc-per-node", "3", "--timeout", "240", "-q", "--out", str(out)],
                          capture_output=True, text=True, timeout=400, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    status = json.loads((out / "status.json").read_text())
    said = status["trace"]["hazard"]
    assert (said["rank"], said["op"], said["caller"]) == (2, "broadcast", f"{script}:17"), said
    notes = "\n".join(status["notes"])
    assert "not a member of" in notes, notes
    assert f"rank 1 read the buffer of its irecv at {script}:21 before waiting" in notes, notes
    assert f"rank 2 received from any source at lines 14, 16 of {script}" in notes, notes
    assert "came from ranks 1, 0 in that order" in notes, notes
    assert re.search(rf"rank \d's all_gather at {re.escape(str(script))}:33 wrote into an output list that holds one "
                     r"tensor in several slots", notes), notes
    assert re.search(rf"rank \d's all_reduce at {re.escape(str(script))}:35 wrote its result into a copy", notes), notes
    assert f"rank 0's broadcast at {script}:37 was given a tensor that is not contiguous" in notes, notes
    # the call DTensor's gather came from is the method the script's line called
    # (full_tensor), not the private machinery under it (redistribute_local_tensor)
    sites = [json.loads(line.split(" ", 1)[1]) for path in sorted((out / "records").glob("rank-*.rec"))
             for line in path.read_bytes().rstrip(b"\0").decode().splitlines() if line.startswith("@@labctl-trace {")]
    at_30 = {s.get("api") or s["op"] for s in sites if s.get("caller") == f"{script}:30"}
    assert at_30 == {"full_tensor"}, at_30
    # the groups new_subgroups makes with new_group: the call the script's line made
    at_31 = {(s["op"], s.get("api")) for s in sites if s.get("caller") == f"{script}:31"}
    assert at_31 == {("new_group", "new_subgroups")}, at_31

def test_a_line_that_keeps_what_recv_returns_does_not_drop_the_sender():
    from workloads._trace.calls import drops_result

    def where(source: str) -> tuple:
        import sys as _sys
        seen = []

        def recv(*_):
            frame = _sys._getframe(1)
            seen.append((frame.f_code, frame.f_lasti))
            return 1
        exec(compile(source, "job.py", "exec"), {"recv": recv})
        return seen[0]
    assert drops_result(*where("recv(1)\n"))
    assert not drops_result(*where("src = recv(1)\n"))
    assert not drops_result(*where("print(recv(1))\n"))


REINIT = """\
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
pair = dist.new_group([0, 1])
if rank in (0, 1):
    dist.all_reduce(torch.ones(4), group=pair)
dist.barrier()
dist.destroy_process_group()
dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=rank, world_size=world)
pair = dist.new_group([1, 2])
if rank == 2:
    dist.all_reduce(torch.ones(4), group=pair)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_group_made_after_a_destroy_and_a_re_init_is_numbered_anew(tmp_path):
    """Issue 52 item 4: after destroy_process_group() and a second init, torch names the new
    groups as the old ones (pg1 again), and their count continued the old group's, so the
    hang was blamed on rank 0, which is not in the new pair. The new generation's groups
    are default_pg@2 and pg1@2, numbered from 1: rank 2, alone in the new pair's
    all_reduce, is the rank the others wait for."""
    script = tmp_path / "job.py"
    script.write_text(REINIT)
    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "labctl.cli", "up", "--script", str(script), "--nodes", "1",
                    "--nproc-per-node", "3", "--timeout", "240", "--on-hang", "stop", "-q", "--out", str(out),
                    "--", str(tmp_path / "store")], capture_output=True, text=True, timeout=400, cwd=REPO)
    first = json.loads((out / "status.json").read_text())["first_failure"]
    assert first["rank"] == 2, first
    text = first["collective"]["text"]
    assert "collective #1 of pg1@2" in text and "collective #1 of default_pg@2" in text, text
