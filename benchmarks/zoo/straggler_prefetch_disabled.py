# zoo: culprit=2 op=all_reduce line=34|44|47|13 kind=straggler nproc=4 timeout=90
# zoo: about=batches come from a prefetch queue with a 0.25 s get timeout and a synchronous fallback; rank 2's config sets prefetch_workers=0, so no thread fills its queue and every batch waits out the timeout; the others wait for it in all_reduce; the run passes
# zoo: source=https://github.com/marin-community/marin/issues/7681 (prefetch-queue starvation on one host)
import queue
import threading

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

CONFIG = {"prefetch_workers": 0 if rank == 2 else 1}   # rank 2 got a debugging config


def load_batch(i):
    g = torch.Generator().manual_seed(1000 * rank + i)
    return torch.randn(8, 32, generator=g)


class Prefetcher:
    def __init__(self, n, workers):
        self.q, self.n, self.i = queue.Queue(maxsize=4), n, 0
        for _ in range(workers):
            threading.Thread(target=self._fill, daemon=True).start()

    def _fill(self):
        for i in range(self.n):
            self.q.put(load_batch(i))

    def next(self):
        self.i += 1
        try:
            return self.q.get(timeout=0.25)   # wait for the prefetch thread
        except queue.Empty:
            return load_batch(self.i - 1)     # fallback: load it here


STEPS = 20
torch.manual_seed(0)
model = torch.nn.Linear(32, 32)
batches = Prefetcher(STEPS, CONFIG["prefetch_workers"])
for step in range(STEPS):
    x = batches.next()
    model(x).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
dist.destroy_process_group()
