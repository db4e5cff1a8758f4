# zoo: culprit=1 op=all_reduce line=19|20|21 kind=killed nproc=3 timeout=30
# zoo: about=rank 1 is preempted: a watchdog thread of its own sends it SIGTERM in its third step, with no handler to save or tell the others
# zoo: source=https://github.com/kyutai-labs/pocket-tts/pull/277 (a rank that exits alone on SIGTERM deadlocks the others in the next collective)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import os
import signal
import threading
import time

x = torch.ones(16)
for step in range(6):
    if rank == 1 and step == 2:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        time.sleep(1)
    dist.all_reduce(x)
dist.destroy_process_group()
