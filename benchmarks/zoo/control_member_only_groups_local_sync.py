# zoo: culprit=none kind=pass nproc=4 timeout=40
# zoo: about=a correct script that looks wrong: each rank creates only the tensor- and data-parallel groups it belongs to (new_group under 'if rank in ranks', so ranks skip the others' groups), which is allowed because every call passes use_local_synchronization=True and every rank walks the group list in the same order; the groups then reduce activations and gradients, and the world reduces the loss
# zoo: source=https://github.com/NVIDIA/Megatron-LM/pull/5079
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
TP = 2
tp_ranks = [list(range(i, i + TP)) for i in range(0, world, TP)]
dp_ranks = [list(range(i, world, TP)) for i in range(TP)]

groups = {}
order = tp_ranks + dp_ranks
for ranks in order:
    if rank in ranks:
        kind = "tp" if ranks in tp_ranks else "dp"
        groups[kind] = dist.new_group(ranks, use_local_synchronization=True)

torch.manual_seed(0)
w = torch.randn(16, 8)
shard = w.chunk(TP, dim=1)[rank % TP]
for step in range(4):
    x = torch.randn(4, 16) + step
    partial = x @ shard
    out = partial.sum().reshape(1)
    dist.all_reduce(out, group=groups["tp"])
    grad = torch.full((8,), out.item() / 100)
    dist.all_reduce(grad, group=groups["dp"])
    loss = out.clone()
    dist.all_reduce(loss)
    if rank == 0:
        print(f"step {step}: loss {loss.item() / world:.3f}", flush=True)

dist.barrier()
dist.destroy_process_group()
