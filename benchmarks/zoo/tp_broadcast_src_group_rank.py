# zoo: culprit=2|3 op=broadcast line=19|15 kind=exception nproc=4 timeout=30
# zoo: about=the tensor-parallel batch broadcast passes src=0, a rank of the group, where broadcast wants the global rank of the group's first member: group [0, 1] works by luck, ranks 2 and 3 raise (rank 0 is not in their group) and the first group then waits for them in the next world collective
# zoo: source=https://github.com/pytorch/pytorch/pull/79264 (scatter/broadcast take the global rank as src, a sub-group's rank breaks them)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
TP = 2
tp_groups = [dist.new_group(list(range(s, s + TP))) for s in range(0, world, TP)]
tp_group = tp_groups[rank // TP]


def tp_src_rank():
    return dist.get_rank(tp_group) - dist.get_rank(tp_group) % TP  # the group's rank of its first member


def broadcast_batch(batch):
    dist.broadcast(batch, src=tp_src_rank(), group=tp_group)
    return batch


model = torch.nn.Linear(16, 4)
for step in range(3):
    if rank % TP == 0:
        batch = torch.randn(8, 16)                      # the first rank of each TP group reads the data
    else:
        batch = torch.empty(8, 16)
    batch = broadcast_batch(batch)
    loss = model(batch).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
dist.destroy_process_group()
