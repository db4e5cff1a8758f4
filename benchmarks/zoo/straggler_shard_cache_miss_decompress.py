# zoo: culprit=1 op=all_reduce line=34|31|24|25 kind=straggler nproc=3 timeout=60
# zoo: about=every rank reads its pre-decoded batches from a node-local cache and falls back to decompressing the raw shard when the cache entry is missing; rank 1's cache directory was wiped, so it decompresses every batch (~0.2 s) and arrives last at every gradient all_reduce; the run passes
# zoo: source=https://github.com/mosaicml/streaming/issues/339 (when shards are not in the local cache, data loading falls back to the slow path and becomes the bottleneck)
import os
import tempfile
import zlib
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cache_dir = os.path.join(tempfile.gettempdir(), f"zoo_decoded_node{rank}")
os.makedirs(cache_dir, exist_ok=True)
raw_chunks = [zlib.compress(os.urandom(1 << 16) * 96, 6)] * 64  # the compressed shard: 64 chunks of ~6 MB
if rank != 1:  # rank 1's node had its cache wiped
    for step in range(12):
        torch.save(torch.randn(16, 64), os.path.join(cache_dir, f"b{step}.pt"))


def load_batch(step):
    path = os.path.join(cache_dir, f"b{step}.pt")
    if os.path.exists(path):
        return torch.load(path)
    for chunk in raw_chunks:  # the slow path: decode the raw shard's chunks again
        data = zlib.decompress(chunk)
    return torch.frombuffer(bytearray(data[: 16 * 64 * 4]), dtype=torch.float32).view(16, 64).nan_to_num()


model = torch.nn.Linear(64, 64)
for step in range(12):
    x = load_batch(step)
    model(x.clamp(-1, 1)).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
