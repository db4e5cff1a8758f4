# zoo: culprit=1 op=all_to_all_single line=18 kind=silent nproc=2 timeout=30
# zoo: about=a functional all_to_all_single (the MoE dispatch) where rank 1's output splits expect 4 rows from rank 0, which sends 3: it completes, one row is garbage
# zoo: source=https://github.com/pytorch/pytorch/issues/117486
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import torch.distributed._functional_collectives as funcol

tokens = torch.arange(6.0) + 10 * rank
in_splits = [3, 3] if rank == 0 else [2, 4]
out_splits = [3, 2] if rank == 0 else [3, 4]   # rank 0 sends rank 1 three rows
if rank == 1:
    out_splits = [4, 4]                   # the bug: a stale count from the last batch
out = funcol.all_to_all_single(tokens, out_splits, in_splits, dist.group.WORLD)
print(rank, out.tolist())
dist.destroy_process_group()
