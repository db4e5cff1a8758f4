# zoo: culprit=1 op=init_process_group line=11 kind=hang backend=compose nodes=2 nproc=1 timeout=60
# zoo: about=node 1's rank sleeps before it joins
# zoo: source=https://github.com/pytorch/pytorch/issues/81704
import os
import time

import torch
import torch.distributed as dist

if os.environ.get("RANK") == "1":
    time.sleep(3600)
dist.init_process_group("gloo")

t = torch.ones(16)
dist.all_reduce(t)
dist.destroy_process_group()
