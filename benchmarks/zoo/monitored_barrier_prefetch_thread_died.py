# zoo: culprit=3 op=monitored_barrier line=30|31|24 kind=exception nproc=4 timeout=40
# zoo: about=each epoch starts with a monitored_barrier that checks every rank's loader is ready; rank 3's prefetch thread dies on a corrupt record (the exception stays in the thread), so its main thread waits forever in queue.get and rank 0's monitored_barrier raises naming rank 3, a rank with no error of its own to show
# zoo: source=https://github.com/pytorch/pytorch/pull/53773 (gloo monitored_barrier reports the ranks that did not arrive) https://github.com/OpenPipe/ART/issues/906
import queue
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
READY = queue.Queue(maxsize=4)


def decode(i):
    if rank == 3 and i == 2:
        raise ValueError("corrupt record in shard 3")
    return torch.randn(8, 16)


def prefetch(n):
    for i in range(n):
        READY.put(decode(i))                           # an exception here ends the thread only


threading.Thread(target=prefetch, args=(12,), daemon=True).start()
model = torch.nn.Linear(16, 2)
for epoch in range(3):
    warm = [READY.get() for _ in range(4)]             # fill the first micro-batches of the epoch
    dist.monitored_barrier(timeout=timedelta(seconds=10), wait_all_ranks=True)
    for x in warm:
        model(x).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        model.zero_grad()
dist.destroy_process_group()
