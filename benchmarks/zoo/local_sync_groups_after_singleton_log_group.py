# zoo: culprit=3 op=new_group line=18|22 kind=hang nproc=4 timeout=30
# zoo: about=the tensor- and data-parallel groups are created by their members only, with use_local_synchronization=True; rank 3 is the metrics rank and first creates a singleton group of its own for logging, and since torch salts a locally synchronized group's name with the number of groups the rank already has, rank 3 names its tp and dp groups differently from its peers: rank 3 and rank 2 wait in new_group for [2, 3], and ranks 0 and 1 wait in new_group for their dp groups
# zoo: source=https://github.com/pytorch/pytorch/pull/189073
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
TP = 2
METRICS_RANK = world - 1
tp_ranks = [list(range(i, i + TP)) for i in range(0, world, TP)]
dp_ranks = [list(range(i, world, TP)) for i in range(TP)]


def build_groups():
    groups = {}
    if rank == METRICS_RANK:
        groups["log"] = dist.new_group([rank], use_local_synchronization=True)
    for kind, all_ranks in (("tp", tp_ranks), ("dp", dp_ranks)):
        for ranks in all_ranks:
            if rank in ranks:
                groups[kind] = dist.new_group(ranks, use_local_synchronization=True)
    return groups


groups = build_groups()
for step in range(3):
    act = torch.full((8,), float(rank))
    dist.all_reduce(act, group=groups["tp"])
    grad = act / TP
    dist.all_reduce(grad, group=groups["dp"])
    if rank == METRICS_RANK:
        dist.all_reduce(grad.sum().reshape(1), group=groups["log"])

dist.barrier()
dist.destroy_process_group()
