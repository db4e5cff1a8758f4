# zoo: culprit=1 op=barrier line=20|17 kind=killed nproc=3 timeout=30
# zoo: about=rank 1 is SIGKILLed (a thread of its own) while it waits in a barrier
# zoo: source=https://github.com/pytorch/pytorch/issues/54823
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

import os
import signal
import threading
import time

dist.all_reduce(torch.ones(4))
if rank == 1:
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
else:
    time.sleep(4)
dist.barrier()
dist.destroy_process_group()
