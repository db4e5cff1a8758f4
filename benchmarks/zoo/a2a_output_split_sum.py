# zoo: culprit=1 op=all_to_all_single line=17 kind=exception nproc=3 timeout=30
# zoo: about=rank 1's output_split_sizes do not add up to its output's rows: torch raises on rank 1, the others wait in the exchange
# zoo: source=https://github.com/radixark/miles/issues/1002
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


inp = torch.full((world * 2, 4), float(rank))
in_splits = [2] * world
out_splits = [2] * world
if rank == 1:
    out_splits = [2, 2, 3]                # the bug: a stale count, 7 rows for an output of 6
out = torch.empty(world * 2, 4)
dist.all_to_all_single(out, inp, out_splits, in_splits)
print(rank, out[:, 0])
dist.destroy_process_group()
