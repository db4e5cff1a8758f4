# zoo: culprit=0 op=set|add line=21|22 kind=hang nproc=3 timeout=40
# zoo: about=a store-based "all workers ready" counter: rank 0 resets the counter with store.set after loading its shard, but the faster ranks have already added to it, so their arrivals are erased and the count never reaches the world size
# zoo: source=https://github.com/MoonshotAI/checkpoint-engine/pull/107 (a store-based barrier whose counter key is reused between rounds hangs the next barrier)
import time
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = _get_default_store()


def load_shard():
    time.sleep(2.0 if rank == 0 else 0.2)
    return torch.randn(32, 8)


def wait_all_ready(key="ready"):
    if rank == 0:
        store.set(key, "0")
    store.add(key, 1)
    while int(store.get(key)) < world:
        time.sleep(0.1)


data = load_shard()
wait_all_ready()
total = torch.tensor([data.sum().item()])
dist.all_reduce(total)
print(f"rank {rank} total {total.item():.3f}")
dist.destroy_process_group()
