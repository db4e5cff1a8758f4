# zoo: culprit=0 op=scatter_object_list line=16 kind=exception nproc=3 timeout=30
# zoo: about=the source rank 0 scatters a list of shard assignments built for 2 workers to a group of 3: torch raises on rank 0, the others wait in scatter_object_list
# zoo: source=https://github.com/pytorch/pytorch/issues/27440 (a scatter or gather list whose length is not the group size)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


shards = [None]
assignments = None
if rank == 0:
    files = ["a.bin", "b.bin", "c.bin", "d.bin"]
    assignments = [files[i::2] for i in range(2)]   # the bug: 2 workers, the group has 3
dist.scatter_object_list(shards, assignments, src=0)
print(rank, shards)
dist.barrier()
dist.destroy_process_group()
