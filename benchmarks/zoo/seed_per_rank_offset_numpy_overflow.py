# zoo: culprit=3 op=all_reduce line=15|21|29 kind=exception nproc=4 timeout=30
# zoo: about=each rank seeds python, numpy and torch with SEED + rank * 2**30 so that ranks draw from disjoint streams; numpy's legacy seed must fit in 32 bits, and with SEED = 1234567890 only rank 3's seed is past 2**32 - 1, so np.random.seed raises ValueError on rank 3 while the others wait in the first gradient all_reduce
# zoo: source=https://github.com/LZGMatrix/BOP19_CDPN_2019ICCV/issues/8
import random

import numpy as np
import torch
import torch.distributed as dist

SEED = 1234567890


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
seed_everything(SEED + rank * 2**30)
model = torch.nn.Linear(8, 1)
for step in range(3):
    x = torch.from_numpy(np.random.randn(16, 8).astype("float32"))
    loss = model(x).pow(2).mean()
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
dist.destroy_process_group()
