# zoo: culprit=1 op=init_process_group line=17|13 kind=hang nproc=3 timeout=40
# zoo: about=a helper left over from single-process debugging sets MASTER_PORT when the node's DEBUG_SINGLE_NODE variable is set; on rank 1's node it is, so rank 1 looks for the rendezvous store on another port and never joins, while the others wait for it in init_process_group
# zoo: source=https://github.com/pytorch/pytorch/issues/76069 (init_process_group hangs when processes use different ports for the rendezvous: all must use the same MASTER_PORT)
import os
from datetime import timedelta
import torch
import torch.distributed as dist


def setup_env():
    if os.environ.get("DEBUG_SINGLE_NODE", "1" if os.environ["RANK"] == "1" else "0") == "1":
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = "29533"


setup_env()
dist.init_process_group("gloo", timeout=timedelta(seconds=300))
rank = dist.get_rank()
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {rank} sum {t.item()}")
dist.destroy_process_group()
