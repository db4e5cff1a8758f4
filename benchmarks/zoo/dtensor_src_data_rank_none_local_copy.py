# zoo: culprit=1 op=distribute_tensor|full_tensor line=24|26|31 kind=hang nproc=2 timeout=30
# zoo: about=the loader shards the embedding with distribute_tensor and skips the scatter (src_data_rank=None) when the rank finds a full copy of the weights in its node-local cache; only rank 1's node has the file, so rank 1 shards locally and goes on to the next collective while rank 0 waits in the scatter it started
# zoo: source=https://github.com/ByteDance-Seed/VeOmni/issues/637
import os
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
node_cache = tempfile.mkdtemp(prefix="node_cache_")
if rank == 1:                                  # this node kept last run's weights on local disk
    torch.save(torch.randn(128, 32), os.path.join(node_cache, "embed.pt"))


def load_embedding():
    local_copy = os.path.join(node_cache, "embed.pt")
    if os.path.exists(local_copy):
        # every rank that holds the full tensor can cut its own shard: no scatter needed
        return distribute_tensor(torch.load(local_copy), mesh, [Shard(0)], src_data_rank=None)
    full = torch.randn(128, 32) if rank == 0 else torch.empty(128, 32)   # fetched by rank 0
    return distribute_tensor(full, mesh, [Shard(0)])


emb = load_embedding()
tokens = torch.randint(0, 128, (16,))
feats = emb.full_tensor()[tokens]
loss = feats.pow(2).mean().reshape(1)
dist.all_reduce(loss)
dist.destroy_process_group()
