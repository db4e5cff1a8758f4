# zoo: culprit=1 op=all_reduce line=16|18|29 kind=killed nproc=3 timeout=30
# zoo: about=rank 1 scores generated code under a signal.alarm time limit and returns early on a cached result without cancelling the alarm; SIGALRM's default action kills it seconds later, inside a later all_reduce, far from the line that armed it
# zoo: source=https://github.com/scikit-hep/coffea/issues/131 (SIGALRM from a timeout kills the worker) https://github.com/verl-project/verl/pull/6673 (per-sample reward scoring under a time limit)
import signal
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
CACHE = {"print(1)": 1.0} if rank == 1 else {}


def run_with_time_limit(program, seconds=3):
    signal.alarm(seconds)
    if program in CACHE:
        return CACHE[program]                  # early return: the alarm stays armed
    try:
        return float(len(program) % 2)         # stands in for exec() under a time limit
    finally:
        signal.alarm(0)


rewards = torch.tensor([run_with_time_limit(p) for p in ["x = 2", "print(1)"]])
for step in range(8):
    time.sleep(0.8)                            # the policy update
    stats = rewards.clone() + step
    dist.all_reduce(stats)
    if rank == 0:
        print(f"step {step} mean reward {stats.mean().item() / world:.2f}", flush=True)
dist.destroy_process_group()
