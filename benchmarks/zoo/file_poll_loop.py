# zoo: culprit=2 op=barrier line=19|20|21 kind=hang nproc=3 timeout=30
# zoo: about=rank 2 polls for the done-file rank 0 writes, but under the wrong name: it loops for ever, the others wait at the barrier
# zoo: source=https://github.com/mosaicml/composer/pull/2071 (a busy wait for a file a local rank writes)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import os
import tempfile
import time

base = os.path.join(tempfile.gettempdir(), f"zoo-poll-{os.getppid()}")
if rank == 0:
    open(base + ".done", "w").close()
if rank == 2:
    while not os.path.exists(base + "-done"):   # the bug: - for .
        time.sleep(0.05)
dist.barrier()
if rank == 0:
    os.remove(base + ".done")
dist.destroy_process_group()
