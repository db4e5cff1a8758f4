# zoo: culprit=0 op=scatter_object_list line=23|20 kind=exception nproc=2 timeout=30
# zoo: about=the data-shard assignment is scattered with scatter_object_list; following a tutorial that says the root's output list may be empty, rank 0 passes [] (the receivers pass [None]): torch raises on rank 0, the other rank waits in the scatter
# zoo: source=https://runebook.dev/en/docs/pytorch/distributed/torch.distributed.scatter_object_list (its parameter table: an empty list on the root rank)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

FILES = [f"train-{i:03d}.parquet" for i in range(12)]


def plan_shards():
    return [{"rank": r, "files": FILES[r::world]} for r in range(world)]


def receive_assignment():
    if rank == 0:
        plan = plan_shards()
        out = []                              # the bug: the root needs a slot too
    else:
        plan, out = None, [None]
    dist.scatter_object_list(out, plan, src=0)
    return out[0]


mine = receive_assignment()
print(rank, mine["files"])
dist.barrier()
dist.destroy_process_group()
