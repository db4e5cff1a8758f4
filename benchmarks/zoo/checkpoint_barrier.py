# zoo: culprit=none kind=pass nproc=3 timeout=120
# zoo: about=rank 0 writes a checkpoint for 30 s while the others wait at the barrier: the live view shows it, then the ranks move on
# zoo: source=https://github.com/mosaicml/llm-foundry/pull/733
import os
import tempfile
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(16)
dist.all_reduce(t)
if rank == 0:
    end = time.monotonic() + 30
    with tempfile.TemporaryDirectory() as folder:
        while time.monotonic() < end:  # a slow checkpoint
            torch.save({"w": torch.randn(64, 64)}, os.path.join(folder, "ckpt.pt"))
            time.sleep(0.05)
dist.barrier()
dist.all_reduce(t)
dist.destroy_process_group()
