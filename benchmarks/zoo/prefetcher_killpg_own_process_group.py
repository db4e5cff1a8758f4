# zoo: culprit=2 op=all_reduce line=25|33|35 kind=killed nproc=3 timeout=30
# zoo: about=each rank runs a shard-prefetch helper and, once its shards are exhausted, stops it with os.killpg(os.getpgid(helper.pid)); the helper was started without its own session, so its process group is the trainer's own and rank 2 (which has one shard of five, and runs out first) sends SIGTERM to itself before its next all_reduce
# zoo: source=https://github.com/ipython/ipykernel/issues/872
import os
import signal
import subprocess
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


class ShardPrefetcher:
    """Keeps the next shard files warm in the page cache from a helper process."""

    def __init__(self, shards):
        self.shards = list(shards)
        self.helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def stop(self):
        # the helper forks readers of its own: stop the whole group
        os.killpg(os.getpgid(self.helper.pid), signal.SIGTERM)
        self.helper.wait()


prefetch = ShardPrefetcher(range(rank, 5, world))     # 5 shards over 3 ranks: 2, 2, 1
w = torch.zeros(8)
for step in range(4):
    if step == len(prefetch.shards):
        prefetch.stop()
    grad = torch.full((8,), float(rank + step))
    dist.all_reduce(grad)
    w -= 0.1 * grad / world
prefetch.helper.terminate()
dist.destroy_process_group()
