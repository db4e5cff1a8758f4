# zoo: culprit=1 op=all_to_all_single line=13|11 kind=abort nproc=3 timeout=30
# zoo: about=rank 1's input splits send rank 0 two rows where rank 0 expects one: gloo aborts the receiver
# zoo: source=https://github.com/pytorch/pytorch/issues/117486
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

dist.all_reduce(torch.ones(4))
splits = [2, 1, 1] if rank == 1 else [1, 1, 1]     # rank 1 sends rank 0 two rows
out = torch.zeros(3)
dist.all_to_all_single(out, torch.ones(sum(splits)), output_split_sizes=[1, 1, 1], input_split_sizes=splits)
dist.all_reduce(torch.ones(4))
dist.destroy_process_group()
