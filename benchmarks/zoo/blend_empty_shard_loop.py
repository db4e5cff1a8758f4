# zoo: culprit=3 op=all_reduce line=22|23|29|33 kind=hang nproc=4 timeout=30
# zoo: about=a blended dataset refills a source when it runs out; the "code" source has 3 files for 4 ranks, so rank 3's shard of it is empty and the first time rank 3 draws from it the refill loop spins for ever; the others wait in all_reduce
# zoo: source=https://github.com/NVIDIA/Megatron-Energon/pull/6
import random

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

FILES = {"web": [f"web-{i}.jsonl" for i in range(8)], "code": [f"code-{i}.jsonl" for i in range(3)]}
WEIGHTS = {"web": 0.7, "code": 0.3}
shards = {name: files[rank::world] for name, files in FILES.items()}   # rank 3 gets no code file
buffers = {name: [] for name in FILES}
rng = random.Random(1234)                     # the same draw order on every rank


def next_sample():
    name = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    buf = buffers[name]
    while not buf:                            # exhausted: start another pass over the shard
        buf.extend(shards[name])              # an empty shard refills to empty, for ever
    return buf.pop()


model = torch.nn.Linear(4, 4)
for step in range(8):
    batch = [next_sample() for _ in range(2)]
    x = torch.full((2, 4), float(sum(len(b) for b in batch)))
    model(x).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
dist.destroy_process_group()
