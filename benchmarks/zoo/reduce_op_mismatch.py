# zoo: culprit=1 op=all_reduce line=14 kind=silent nproc=3 timeout=30
# zoo: about=rank 1 all_reduces with MAX where the others SUM: gloo does not check the reduce op, every rank completes with other values
# zoo: source=https://github.com/mosaicml/llm-foundry/issues/578
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
grad = torch.full((1000,), float(rank + 1))
for step in range(3):
    dist.all_reduce(grad)
    grad /= dist.get_world_size()
op = dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM
dist.all_reduce(grad, op=op)
print(f"rank {rank}: {grad[0].item():.3f}")
dist.destroy_process_group()
