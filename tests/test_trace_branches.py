"""The rank the script's own branches single out, the tie-breaker of a two-rank mismatch
(labctl/trace/branches.py), and the matcher that uses it."""
from __future__ import annotations

from labctl.trace.branches import singled_out
from labctl.trace.matcher import mismatch_of
from labctl.trace.model import Op

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
