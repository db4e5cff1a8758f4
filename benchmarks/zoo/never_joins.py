# zoo: culprit=2 op=init_process_group line=11|12 kind=hang nproc=3 timeout=30
# zoo: about=rank 2 sleeps before init_process_group: the others wait in the rendezvous
# zoo: source=https://github.com/pytorch/pytorch/issues/49846
import os
import time

import torch
import torch.distributed as dist

if os.environ.get("RANK") == "2":
    time.sleep(3600)                  # never joins
dist.init_process_group("gloo")

t = torch.ones(16)
dist.all_reduce(t)
dist.destroy_process_group()
