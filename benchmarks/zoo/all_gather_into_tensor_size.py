# zoo: culprit=2 op=all_gather_into_tensor line=14 kind=exception nproc=3 timeout=30
# zoo: about=rank 2 sizes all_gather_into_tensor's output for one rank fewer than the group has: torch raises on rank 2
# zoo: source=https://github.com/hiyouga/LlamaFactory/issues/9194
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


shard = torch.ones(8)
peers = world - 1 if rank == 2 else world   # the bug: rank 2 leaves itself out
out = torch.empty(8 * peers)
dist.all_gather_into_tensor(out, shard)
print(rank, out.sum().item())
dist.destroy_process_group()
