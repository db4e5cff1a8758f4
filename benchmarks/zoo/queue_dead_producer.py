# zoo: culprit=1 op=all_reduce line=25|26 kind=hang nproc=3 timeout=30
# zoo: about=rank 1's prefetch thread dies on a bad record; its main thread waits on the queue for ever, the others in all_reduce
# zoo: source=https://github.com/facebookresearch/fairseq/issues/4816
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import queue
import threading

q = queue.Queue(maxsize=2)

def prefetch():
    for i in range(8):
        if rank == 1 and i == 3:
            raise ValueError("corrupt record")   # the thread dies; nobody joins it
        q.put(torch.ones(4))

threading.Thread(target=prefetch, daemon=True).start()
grad = torch.ones(16)
for step in range(8):
    batch = q.get()
    dist.all_reduce(grad)
dist.destroy_process_group()
