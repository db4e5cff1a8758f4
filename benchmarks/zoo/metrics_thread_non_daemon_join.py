# zoo: culprit=1 op=barrier line=42|43 kind=hang nproc=3 timeout=30
# zoo: about=rank 1 (the rank that pushes metrics to the tracking server) runs a non-daemon uploader thread that loops until its queue holds a None sentinel; the shutdown path joins it without ever putting the sentinel, so rank 1 blocks in join() and never reaches the final barrier the others wait in
# zoo: source=https://github.com/alibaba/ChatLearn/pull/30 (join the log thread with a timeout: an un-signalled log thread hangs the process at exit)
import queue
import threading
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
UPLOADS = queue.Queue()


def uploader():
    while True:
        try:
            item = UPLOADS.get(timeout=0.5)
        except queue.Empty:
            continue                                    # poll until the sentinel arrives
        if item is None:
            return
        time.sleep(0.01)                                # POST to the tracking server


if rank == 1:
    worker = threading.Thread(target=uploader, name="metrics-uploader")
    worker.start()

model = torch.nn.Linear(8, 8)
for step in range(4):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    if rank == 1:
        UPLOADS.put({"step": step, "loss": loss.item()})

if rank == 1:
    worker.join()                                       # the None sentinel was never put
dist.barrier()
dist.destroy_process_group()
