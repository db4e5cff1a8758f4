# zoo: culprit=2 op=all_reduce line=19 kind=hang nproc=3 timeout=30
# zoo: about=rank 2's main thread waits for a lock a background thread never releases
# zoo: source=https://github.com/horovod/horovod/issues/3352
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import threading
import time

lock = threading.Lock()
if rank == 2:
    threading.Thread(target=lambda: (lock.acquire(), time.sleep(3600)), daemon=True).start()
    time.sleep(0.5)
t = torch.ones(16)
for step in range(4):
    with lock:
        t += 1
    dist.all_reduce(t)
dist.destroy_process_group()
