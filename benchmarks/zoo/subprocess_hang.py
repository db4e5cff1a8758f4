# zoo: culprit=0 op=barrier line=15|16 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 runs a download command before the barrier and the command never returns; the others wait at the barrier
# zoo: source=https://github.com/mosaicml/composer/pull/2071
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import subprocess
import sys

if rank == 0:                             # the command stalls (a mount that never answers)
    subprocess.run([sys.executable, "-c", "import time; time.sleep(3600)"], check=True)
dist.barrier()
x = torch.ones(16)
dist.all_reduce(x)
dist.destroy_process_group()
