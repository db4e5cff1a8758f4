# zoo: culprit=1 op=all_reduce line=35|23|20 kind=hang nproc=3 timeout=40
# zoo: about=the shard reader retries every failed read ("the preprocessing job may still be writing it") with no limit; rank 1's shard file was truncated by an interrupted copy, so json.load fails every time and rank 1 retries for ever while the others wait in the first all_reduce
# zoo: source=https://github.com/fangfufu/httpdirfs/pull/242 (review: a failed download retried with no limit loops for ever)
import json
import os
import tempfile
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
shard_path = os.path.join(tempfile.gettempdir(), f"zoo_shard_{rank}.json")
records = json.dumps([{"x": [float(i + j) for j in range(8)], "y": i % 2} for i in range(64)])
with open(shard_path, "w") as f:
    f.write(records[: len(records) // 2] if rank == 1 else records)  # rank 1's copy was cut short


def read_shard(path):
    while True:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            print(f"rank {rank}: shard not ready ({type(e).__name__}), retrying", flush=True)
            time.sleep(1.0)


data = read_shard(shard_path)
x = torch.tensor([r["x"] for r in data])
model = torch.nn.Linear(8, 1)
for step in range(3):
    model(x[step * 8:(step + 1) * 8]).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
