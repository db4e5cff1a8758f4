# zoo: culprit=2 op=all_reduce line=18|31|26 kind=straggler nproc=3 timeout=60
# zoo: about=the sample reader fills a FIFO buffer with the shard's sample ids and takes each batch off the front with list.pop(0), which moves the whole list every time; rank 2's shard index is twenty times longer than the others', so each of its batches spends over a hundred milliseconds moving memory and rank 2 arrives last at every gradient all_reduce; the run passes
# zoo: source=https://github.com/uber/petastorm/pull/414
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SHARD_SAMPLES = [200_000, 200_000, 4_000_000][rank]
BATCH = 64


class FifoReader:
    def __init__(self, n):
        self.buffer = list(range(n))

    def next_batch(self):
        return [self.buffer.pop(0) for _ in range(BATCH)]


reader = FifoReader(SHARD_SAMPLES)
torch.manual_seed(0)
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    ids = torch.tensor(reader.next_batch(), dtype=torch.float32)
    x = torch.randn(BATCH, 32) + (ids % 7)[:, None] / 7
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()

dist.barrier()
if rank == 0:
    print("done", flush=True)
dist.destroy_process_group()
