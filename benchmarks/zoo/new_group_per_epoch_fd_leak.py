# zoo: culprit=2 op=new_group line=18 kind=exception nproc=3 timeout=40
# zoo: about=every epoch builds a fresh gloo group to agree on the shuffle seed and drops it without destroying it, so each rank leaks the group's sockets; rank 2's node has a low open-file limit (ulimit -n 128) and its new_group fails with "Too many open files" around epoch 19 while the others wait in that new_group
# zoo: source=https://github.com/pytorch/pytorch/issues/129868
import resource

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
NODE_ULIMIT_N = [4096, 4096, 128][rank]            # `ulimit -n` on each rank's node
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(NODE_ULIMIT_N, hard), hard))


def epoch_seed(epoch):
    # the sampler agrees on this epoch's shuffle seed over a group of its own
    seed_group = dist.new_group(list(range(world)))
    seed = torch.tensor([1000 + epoch], dtype=torch.int64)
    dist.broadcast(seed, src=0, group=seed_group)
    return int(seed)


torch.manual_seed(0)
w = torch.zeros(16)
for epoch in range(60):
    gen = torch.Generator().manual_seed(epoch_seed(epoch))
    order = torch.randperm(64, generator=gen)
    grad = torch.randn(16, generator=gen) * (order[0] + rank)
    dist.all_reduce(grad)
    w -= 0.01 * grad / world
dist.barrier()
dist.destroy_process_group()
