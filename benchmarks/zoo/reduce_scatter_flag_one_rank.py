# zoo: culprit=1 op=reduce_scatter_tensor line=15 kind=silent nproc=3 timeout=30
# zoo: about=rank 1 reads a sharded-gradient flag from its own config and calls reduce_scatter_tensor where the others all_reduce the gradient; gloo completes both, the values are wrong
# zoo: source=https://github.com/pytorch/pytorch/issues/91535 https://github.com/deepspeedai/DeepSpeed/issues/5758
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

shard_grads = rank == 1
grad = torch.ones(world * 4)
dist.all_reduce(torch.ones(4))
if shard_grads:
    out = torch.empty(4)
    dist.reduce_scatter_tensor(out, grad)
else:
    dist.all_reduce(grad)
dist.barrier()
dist.destroy_process_group()
