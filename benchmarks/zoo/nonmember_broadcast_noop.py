# zoo: culprit=2 op=broadcast line=13|10 kind=silent nproc=4 timeout=30
# zoo: about=the trainers' group is built as [0, 1] though rank 2 trains too; rank 2's broadcast over it is a no-op (not a member), so it trains from its own weights
# zoo: source=https://github.com/pytorch/pytorch/issues/75755 https://github.com/pytorch/pytorch/issues/67338
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

trainers = dist.new_group([0, 1])
weights = torch.full((8,), float(rank))
if rank < 3:
    dist.broadcast(weights, src=0, group=trainers)
print(rank, "trains from", weights[0].item())
dist.barrier()
dist.destroy_process_group()
