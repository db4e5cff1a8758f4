# zoo: culprit=0 op=barrier line=19|25|26 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 lists the dataset manifest with a subprocess, stdout=PIPE, then Popen.wait(): the listing is larger than the pipe buffer, so the child blocks writing and rank 0 waits for it for ever; the others wait at the barrier
# zoo: source=https://github.com/google/turbinia/issues/945
import subprocess
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

LIST_CMD = [sys.executable, "-c",
            "for i in range(20000): print(f'shard-{i:06d}.tar 4096 sha256:0123456789abcdef')"]


def read_manifest():
    proc = subprocess.Popen(LIST_CMD, stdout=subprocess.PIPE, text=True)
    proc.wait()                               # the bug: waits before reading the pipe
    return proc.stdout.read().splitlines()


shards = None
if rank == 0:
    shards = read_manifest()
dist.barrier()                                # the others wait for the manifest here
holder = [shards]
dist.broadcast_object_list(holder, src=0)
print(rank, len(holder[0]))
dist.destroy_process_group()
