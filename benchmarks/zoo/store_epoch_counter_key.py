# zoo: culprit=1 op=add line=20|23|22|15 kind=hang nproc=3 timeout=30
# zoo: about=an end-of-epoch barrier built on store.add with the epoch in the key; rank 1 resumed with its epoch counter one ahead, so it adds to the next epoch's key: the others wait for a count of 3 that never comes, and rank 1 for its own key
# zoo: source=https://github.com/ai-dynamo/nixl/pull/1539
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()

resume = {"epoch": 1}                                  # the checkpoint every rank loads
if rank == 1:
    resume["epoch"] += 1                               # rank 1 counted the epoch it was saved in as done


def epoch_barrier(epoch):
    key = f"epoch-{epoch}-done"
    arrived = store.add(key, 1)
    while arrived < world:                             # poll until every rank has added
        time.sleep(0.1)
        arrived = store.add(key, 0)


grad = torch.ones(16)
for epoch in range(resume["epoch"], 4):
    for step in range(2):
        dist.all_reduce(grad)
    epoch_barrier(epoch)
dist.destroy_process_group()
