# zoo: culprit=0 op=broadcast line=21|31|18 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 starts a data-index helper and reads its output pipe line by line until EOF; the helper fails at once, but rank 0 still holds the pipe's write end (passed to the child and never closed in the parent), so the read never sees EOF and rank 0 never broadcasts the index the others wait for
# zoo: source=https://github.com/Kludex/zuvloop/pull/6 (a live writer left on the pipe: the reader never sees EOF) https://github.com/python/cpython/issues/118981
import os
import subprocess
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
HELPER = "import sys; sys.exit('index builder: shard manifest not found')"


def build_index():
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", HELPER], stdout=w, stderr=subprocess.DEVNULL)
    offsets = []
    with os.fdopen(r) as out:                          # the parent's copy of w is still open
        for line in out:
            offsets.append(int(line))
    proc.wait()
    return torch.tensor(offsets or [0], dtype=torch.int64)


n = torch.zeros(1, dtype=torch.int64)
if rank == 0:
    index = build_index()
    n[0] = len(index)
dist.broadcast(n, src=0)
if rank != 0:
    index = torch.empty(int(n), dtype=torch.int64)
dist.broadcast(index, src=0)
print(f"rank {rank} has {len(index)} offsets", flush=True)
dist.destroy_process_group()
