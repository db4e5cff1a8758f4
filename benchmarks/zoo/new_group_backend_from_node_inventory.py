# zoo: culprit=3 op=new_group line=24|13 kind=exception nproc=4 timeout=30
# zoo: about=the data-parallel groups are created with a backend picked from each node's accelerator inventory ("nccl" where the node lists a GPU); rank 3's inventory entry, copied from a GPU node, lists one, so its new_group asks for nccl on a CPU-only build and raises, while its group peer waits for it
# zoo: source=https://github.com/pytorch/pytorch/issues/159742
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

NODE_INVENTORY = {
    "node0": {"ranks": [0, 1], "gpus": 0},
    "node1": {"ranks": [2], "gpus": 0},
    "node2": {"ranks": [3], "gpus": 8},
}


def pick_backend(r):
    node = next(v for v in NODE_INVENTORY.values() if r in v["ranks"])
    return "nccl" if node["gpus"] > 0 else "gloo"


dp_groups = {}
for members in ([0, 1], [2, 3]):
    dp_groups[tuple(members)] = dist.new_group(members, backend=pick_backend(rank))
my_dp = dp_groups[(0, 1) if rank < 2 else (2, 3)]

grad = torch.full((32,), float(rank))
dist.all_reduce(grad, group=my_dp)
dist.barrier()
print(f"rank {rank}: dp-averaged grad {grad[0].item()}", flush=True)
dist.destroy_process_group()
