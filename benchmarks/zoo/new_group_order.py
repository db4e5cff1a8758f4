# zoo: culprit=1 op=new_group|all_reduce line=12|13|18 kind=hang nproc=3 timeout=30
# zoo: about=rank 1 creates the data-parallel and the model-parallel group in the other order, so its groups do not meet the others'
# zoo: source=https://github.com/vllm-project/vllm/pull/41509 (new_group is a collective: every rank must create the same groups in the same order)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


if rank == 1:                             # the bug: another order on rank 1
    mp_group = dist.new_group([0, 1, 2])
    dp_group = dist.new_group([0, 1, 2])
else:
    dp_group = dist.new_group([0, 1, 2])
    mp_group = dist.new_group([0, 1, 2])
x = torch.ones(16)
dist.all_reduce(x, group=dp_group)
dist.all_reduce(x, group=mp_group)
dist.broadcast(x, src=0, group=dp_group)
print(rank, x[0].item())
dist.destroy_process_group()
