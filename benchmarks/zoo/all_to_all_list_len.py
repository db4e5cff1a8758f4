# zoo: culprit=2 op=all_to_all line=14 kind=exception nproc=3 timeout=30
# zoo: about=rank 2 hands all_to_all one tensor per peer but forgets itself (2 for a group of 3): torch raises on rank 2
# zoo: source=https://github.com/pytorch/pytorch/issues/101380 (the number of splits must be the group size)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


peers = [r for r in range(world) if r != rank] if rank == 2 else list(range(world))   # the bug
inputs = [torch.full((4,), float(rank)) for _ in peers]
outputs = [torch.zeros(4) for _ in peers]
dist.all_to_all(outputs, inputs)
print(rank, [o[0].item() for o in outputs])
dist.destroy_process_group()
