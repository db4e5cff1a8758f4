# zoo: culprit=2 op=all_reduce line=20|25|26 kind=hang nproc=3 timeout=30
# zoo: about=rank 2's async checkpoint task, running on a one-thread executor, waits for a second task queued behind it: the main thread waits on it for ever
# zoo: source=https://github.com/pytorch/pytorch/issues/32322 (a deadlock of Python threads in a training process)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


from concurrent.futures import ThreadPoolExecutor

pool = ThreadPoolExecutor(max_workers=1)

def upload(step):
    return step

def save(step):
    if rank == 2:                         # rank 2 also uploads, from inside the pool
        return pool.submit(upload, step).result()   # the bug: waits on its own pool
    return step

grad = torch.ones(16)
for step in range(4):
    dist.all_reduce(grad)
    pool.submit(save, step).result()
dist.destroy_process_group()
