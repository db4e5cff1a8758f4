# zoo: culprit=2 op=barrier line=23|16 kind=hang nproc=3 timeout=30
# zoo: about=rank 2 flushes its async checkpoint writer with queue.join(), but its writer thread never calls task_done(): join waits for ever, the others at the barrier
# zoo: source=https://github.com/Rikorose/DeepFilterNet/pull/245
import queue, threading
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

pending = queue.Queue()
def writer():
    while True:
        item = pending.get()
        torch.save(item, "/dev/null")
        if rank != 2:
            pending.task_done()

threading.Thread(target=writer, daemon=True).start()
for step in range(3):
    dist.all_reduce(torch.ones(8))
    pending.put({"step": step})
pending.join()
dist.barrier()
dist.destroy_process_group()
