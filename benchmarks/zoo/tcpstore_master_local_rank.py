# zoo: culprit=2 op=TCPStore line=23|12 kind=exception nodes=2 nproc=2 timeout=30
# zoo: about=the script opens its own TCPStore for the weight-sync metadata with is_master=(local_rank == 0); on a two-node job the first rank of the second node (global rank 2) also tries to host the store on the same address and port and fails (address already in use)
# zoo: source=https://github.com/cmriat/Etha/pull/14 (review: is_master=(rank == 0) with rank being LOCAL_RANK makes several nodes' local rank 0 try to be master)
import os
import time
from datetime import timedelta
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
local_rank = int(os.environ["LOCAL_RANK"]) % 2  # two ranks a node
host = os.environ["MASTER_ADDR"]
port = int(os.environ["MASTER_PORT"]) + 7


def load_shard(r):
    time.sleep(0.5 * r)  # the later ranks' shards are further into the dataset
    return torch.randn(16, 8)


shard = load_shard(rank)
meta_store = dist.TCPStore(host, port, world, is_master=(local_rank == 0), timeout=timedelta(seconds=20))
meta_store.set(f"shape/{rank}", "1024x1024")
dist.barrier()
shapes = [meta_store.get(f"shape/{r}").decode() for r in range(world)]
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {rank} shapes {shapes} sum {t.item()}")
dist.destroy_process_group()
