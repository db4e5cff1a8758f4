# zoo: culprit=0 op=add|all_reduce line=16|22|27 kind=hang nproc=3 timeout=30
# zoo: about=a home-made store barrier (add, then poll get): rank 0 returns early before it adds, so the others poll for ever
# zoo: source=https://github.com/ai-dynamo/nixl/pull/1539 (a store barrier built on add and get)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import time

store = dist.distributed_c10d._get_default_store()

def store_barrier(tag):
    store.add(f"bar/{tag}", 1)
    while int(store.get(f"bar/{tag}")) < world:
        time.sleep(0.01)

def save(step):
    if rank == 0 and step == 0:
        return                            # the bug: an early return skips the barrier
    store_barrier(f"save-{step}")

save(0)
x = torch.ones(16)
dist.all_reduce(x)
dist.destroy_process_group()
