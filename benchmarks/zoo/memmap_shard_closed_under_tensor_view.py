# zoo: culprit=1 op=all_reduce line=26|33|35 kind=killed nproc=3 timeout=30
# zoo: about=the shard loader maps raw .bin token dumps with np.memmap and wraps them with torch.from_numpy (no copy), then closes the map "so no descriptor stays open per shard"; rank 1's shard is the raw dump (the others are .npy files, read into memory), so its first batch reads unmapped memory and rank 1 dies of SIGSEGV with no traceback while the others wait in all_reduce
# zoo: source=https://github.com/lens-biophotonics/dcimg/pull/5
import os
import tempfile

import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
data_dir = tempfile.mkdtemp(prefix=f"shards_node{rank}_")
tokens = (np.arange(1 << 20) * (rank + 3) % 50000).astype(np.uint16)
shard_path = os.path.join(data_dir, ["shard0.npy", "shard1.bin", "shard2.npy"][rank])
if shard_path.endswith(".npy"):
    np.save(shard_path, tokens)
else:                                             # this node's copy is the raw dump
    tokens.tofile(shard_path)


def load_shard(path):
    if path.endswith(".bin"):                     # raw dump: map it instead of reading it
        mm = np.memmap(path, dtype=np.uint16, mode="r")
        shard = torch.from_numpy(mm)
        mm._mmap.close()                          # don't hold a descriptor per shard
        return shard
    return torch.from_numpy(np.load(path))


shard = load_shard(shard_path)
for step in range(4):
    batch = shard[step * 4096:(step + 1) * 4096].long()
    counts = torch.bincount(batch % 64, minlength=64).float()
    dist.all_reduce(counts)
dist.destroy_process_group()
