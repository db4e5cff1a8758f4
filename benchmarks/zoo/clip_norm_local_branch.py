# zoo: culprit=1 op=all_reduce line=15|28|27 kind=abort nproc=3 timeout=30
# zoo: about=ZeRO-style clipping: each rank keeps a shard of the gradient, and the helper that all_reduces the global norm is called only when the rank's own shard is over the limit; at step 2 only rank 1's is
# zoo: source=https://github.com/dylanyunlon/Neuron_SP/issues/197
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

MAX_NORM = 1.0


def clip_shard_(shard):
    sq = shard.pow(2).sum().reshape(1)
    dist.all_reduce(sq)                       # the global norm: every rank must call it
    coef = min(1.0, MAX_NORM / (sq.sqrt().item() + 1e-6))
    shard.mul_(coef)


params = torch.zeros(4)
for step in range(5):
    grad = torch.full((4 * world,), 0.05)
    if step == 2:
        grad[4:8] = 3.0                       # a spike in the rows rank 1 owns
    shard = torch.empty(4)
    dist.reduce_scatter_tensor(shard, grad)
    if shard.norm() > MAX_NORM:               # the bug: a local test guards a collective
        clip_shard_(shard)
    params -= 0.1 * shard
dist.barrier()
dist.destroy_process_group()
