# zoo: culprit=2 op=all_reduce line=43|40|33 kind=straggler nproc=3 timeout=60
# zoo: about=each rank streams its batches from an object store; rank 2's shard lives in a bucket that throttles, so every read fails twice and succeeds after exponential back-off (about 0.3 s a batch): rank 2 is last at every gradient all_reduce and the run passes
# zoo: source=https://github.com/awslabs/mountpoint-s3/pull/743 (S3 SlowDown throttling and retries with back-off during DDP training)
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
BUCKET = "train-shards-b" if rank == 2 else "train-shards-a"


class Throttled(Exception):
    pass


class ObjectStore:
    def __init__(self, bucket):
        self.bucket, self.attempts = bucket, {}

    def get(self, key):
        n = self.attempts[key] = self.attempts.get(key, 0) + 1
        if self.bucket.endswith("-b") and n <= 2:  # SlowDown: reduce your request rate
            raise Throttled(key)
        return torch.randn(16, 32)


def fetch(store, key, retries=5, backoff=0.1):
    for i in range(retries):
        try:
            return store.get(key)
        except Throttled:
            time.sleep(backoff * 2 ** i)
    raise RuntimeError(f"giving up on {key}")


store = ObjectStore(BUCKET)
model = torch.nn.Linear(32, 32)
for step in range(15):
    x = fetch(store, f"batch-{step:05d}")
    model(x).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
