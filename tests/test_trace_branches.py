"""The rank the script's own branches single out, the tie-breaker of a two-rank mismatch
(labctl/trace/branches.py), and the matcher that uses it."""
from __future__ import annotations

from labctl.trace.branches import left_loop_early, singled_out
from labctl.trace.matcher import blame, mismatch_of
from labctl.trace.model import Op, Stuck, Summary

EXTRA = """\
import torch.distributed as dist
rank = dist.get_rank()
if rank == 0:
    print("validating")
dist.all_reduce(x)
if rank == 0:
    with torch.no_grad():
        val = model(x)
dist.barrier()
"""
SKIPS = """\
import torch.distributed as dist
if dist.get_rank() != 1:
    dist.all_reduce(x)
dist.barrier()
"""
DATA = """\
import torch.distributed as dist
rank = dist.get_rank()
splits = [3, 3]
if args.rank in (1,):
    splits = [4, 4]
dist.all_to_all_single(out, x, splits, splits)
"""


def test_the_branch_around_a_rank_s_call_names_it_and_a_print_branch_names_nobody(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(EXTRA)
    assert singled_out({0: f"{job}:8", 1: f"{job}:9"}) == 0          # rank 0's forward under `if rank == 0`
    job.write_text(SKIPS)
    assert singled_out({0: f"{job}:3", 1: f"{job}:4"}) == 1          # `!= 1`: the one left out
    job.write_text(DATA)
    assert singled_out({0: f"{job}:6", 1: f"{job}:6"}) == 1          # no branch around: the file's one
    job.write_text("import torch.distributed as dist\nif rank == 0:\n    print('hi')\ndist.barrier()\n")
    assert singled_out({0: f"{job}:4", 1: f"{job}:4"}) is None       # a branch that only prints
    job.write_text("import torch.distributed as dist\nif rank == 0 and epoch == 1:\n    print('acc', evaluate())\n"
                   "dist.barrier()\n")
    assert singled_out({0: f"{job}:4", 1: f"{job}:4"}) == 0          # its print calls what does the work
    job.write_text("if rank == 0:\n    print(f'loss {loss.item():.3f}', len(x), str(dist.get_rank()))\ndist.barrier()\n")
    assert singled_out({0: f"{job}:3", 1: f"{job}:3"}) is None       # formatting inside a print is still a print
    assert singled_out({0: f"{tmp_path}/gone.py:3", 1: "?"}) is None  # nothing to read
    # a rank test outside an `if`: an assignment, a conditional expression
    job.write_text("padded = rank == 1\nrows = 64 if padded else 50\nw = load(rows)\nshard(w)\n")
    assert singled_out({0: f"{job}:4", 1: f"{job}:4"}) == 1
    job.write_text("dest = [1, 3] if rank == 2 else list(range(4))\nsend(dest)\n")
    assert singled_out({2: f"{job}:2", 3: f"{job}:2"}) == 2
    # an `if` that does something comes before tests that only give each rank its data
    job.write_text("splits = [3, 3] if rank == 0 else [2, 4]\nif rank == 1:\n    splits = [4, 4]\na2a(splits)\n")
    assert singled_out({0: f"{job}:4", 1: f"{job}:4"}) == 1
    # the rank by another name: what the file assigns from get_rank()
    job.write_text("stage, n = dist.get_rank(), dist.get_world_size()\nif stage == 0:\n    dist.send(a, 1)\n"
                   "else:\n    dist.send(g, 0)\n")
    assert singled_out({0: f"{job}:3", 1: f"{job}:5"}) == 0
    (tmp_path / "bad.py").write_text("if rank == 0:\n  x = (\n")
    assert singled_out({0: f"{tmp_path}/bad.py:1", 1: f"{tmp_path}/bad.py:1"}) is None


def _op(rank: int, op: str, caller: str, end: int | None = 2) -> Op:
    return Op(rank=rank, op=op, pg="default_pg", seq=16, p2p=None, peer=None, root=0 if op == "broadcast" else None,
              shape=[8] if op == "broadcast" else [], dtype="float32", nbytes=32, caller=caller, start=1, end=end)


def test_a_two_rank_mismatch_is_given_to_the_rank_the_script_singles_out(tmp_path):
    """Rank 0 broadcast where rank 1 called barrier: no majority; rank 0's call sits under
    `if rank == 0:`, so rank 0 is the odd one, with its call and line."""
    job = tmp_path / "job.py"
    job.write_text(EXTRA)
    m = mismatch_of("default_pg", 16, {0: _op(0, "broadcast", f"{job}:8"), 1: _op(1, "barrier", f"{job}:9")})
    assert (m.rank, m.ranks, m.op, m.caller) == (0, [0], "broadcast", f"{job}:8"), m
    assert m.text.endswith("the script's branches single out rank 0")
    job.write_text("import torch.distributed as dist\ndist.broadcast(x, 0)\ndist.barrier()\n")
    m = mismatch_of("default_pg", 16, {0: _op(0, "broadcast", f"{job}:2"), 1: _op(1, "barrier", f"{job}:3")})
    assert (m.rank, m.ranks) == (None, [0, 1])                        # nothing singles anyone out: a tie


FEWER = """\
import torch.distributed as dist
for epoch in range(3):
    for step, (x, y) in enumerate(batches):
        if x.shape[0] == 0:
            continue
        loss = model(x).sum()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        if rank == 0:
            dist.all_reduce(extra)
        if (step + 1) % eval_every == 0:
            dist.all_reduce(metrics)
    dist.barrier()
dist.destroy_process_group()
"""


def test_a_call_past_the_end_of_the_loop_the_others_are_in_left_that_loop_early(tmp_path):
    """The rank at the epoch's barrier (line 13) while the others are in the batch loop's
    all_reduce (line 8) left the batch loop, at line 3, early (still in the epoch loop); so
    did one past both loops (line 14). A call under an `if` of its own after the inner
    loop (a rank test, line 10; an eval step, line 12) is an extra one, no loop left; nor
    is a call in another file, or in a file that cannot be read."""
    job = tmp_path / "job.py"
    job.write_text(FEWER)
    assert left_loop_early(f"{job}:13", f"{job}:8") == 3
    assert left_loop_early(f"{job}:14", f"{job}:8") == 2
    assert left_loop_early(f"{job}:10", f"{job}:8") is None             # `if rank == 0:` an extra call
    assert left_loop_early(f"{job}:12", f"{job}:8") is None             # on an eval step: an extra call
    assert left_loop_early(f"{job}:8", f"{job}:13") is None             # the others are past it
    other = tmp_path / "other.py"
    other.write_text(FEWER)
    assert left_loop_early(f"{other}:11", f"{job}:8") is None
    assert left_loop_early(f"{tmp_path}/gone.py:11", f"{tmp_path}/gone.py:8") is None


def test_a_rank_that_ran_fewer_iterations_is_named_with_the_call_it_skipped(tmp_path):
    """Rank 1 waits in the barrier after the batch loop while ranks 0 and 2 wait in its
    all_reduce: rank 1 is the culprit and what it skipped (the all_reduce, its line) is the
    op, with a sentence that says so; its call under a rank test in the loop: its own."""
    job = tmp_path / "job.py"
    job.write_text(FEWER)
    calls = {0: {"call": "all_reduce", "caller": f"{job}:8"}, 1: {"call": "barrier", "caller": f"{job}:13"},
             2: {"call": "all_reduce", "caller": f"{job}:8"}}
    stuck = Stuck(pg="default_pg", seq=17, op="all_reduce", waiting=[0, 1, 2], missing=[], last={},
                  mismatch="rank 1 called barrier [] where rank 0 called all_reduce [4]", calls=calls, odd=[1])
    culprit, ranks, op, caller, lead = blame(Summary(stuck=[stuck]))
    assert (culprit, ranks, op, caller) == (1, [1], "all_reduce", f"{job}:8")
    assert lead == [f"rank 1 left the loop at line 3 before the others: it called barrier at {job}:13 while they "
                    f"wait in all_reduce at {job}:8 (it ran fewer iterations: it skipped that call)"]
    calls[1] = {"call": "all_reduce", "caller": f"{job}:10"}             # an extra call: its own is the op
    assert blame(Summary(stuck=[stuck]))[:4] == (1, [1], "all_reduce", f"{job}:10")
    calls[1] = {"call": "broadcast", "caller": f"{job}:10"}
    assert blame(Summary(stuck=[stuck]))[:4] == (1, [1], "broadcast", f"{job}:10")

