# zoo: culprit=3 op=all_reduce line=25|24|27|21 kind=exit nproc=4 timeout=30
# zoo: about=the trainer supports a graceful stop: every 5 steps each rank checks for a STOP file in its node's run directory and, if it is there, saves, tears down its process group and exits 0; the operator drained only rank 3's node, so rank 3 alone leaves at step 5 and the others wait for it in that step's gradient all_reduce
# zoo: source=https://github.com/ai2cm/ace/pull/1407
import os
import sys
import tempfile

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
run_dir = tempfile.mkdtemp(prefix=f"run_node{rank}_")
if rank == 3:                                    # `touch STOP` by the operator draining this node
    open(os.path.join(run_dir, "STOP"), "w").close()
CHECK_STOP_EVERY = 5

torch.manual_seed(0)
w = torch.zeros(32)
for step in range(1, 16):
    if step % CHECK_STOP_EVERY == 0 and os.path.exists(os.path.join(run_dir, "STOP")):
        torch.save({"w": w, "step": step}, os.path.join(run_dir, "last.pt"))
        print(f"rank {rank}: stop requested, exiting after step {step - 1}", flush=True)
        dist.destroy_process_group()
        sys.exit(0)
    grad = torch.randn(32)
    dist.all_reduce(grad)
    w -= 0.1 * grad / world
dist.destroy_process_group()
