"""A hang: one rank waits on a queue its data loader never fills, the others wait for it
inside all_reduce. Nothing fails; the job just stops moving.

    labctl up --script examples/hang.py                  # named live: who, what, where
    labctl up --script examples/hang.py --on-hang stop   # ... and the lab ended there
"""
import queue

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()

batches: queue.Queue = queue.Queue()      # filled by a loader thread that, on rank 1, died
grad = torch.ones(1024)
for step in range(6):
    if rank == 1 and step == 3:
        batch = batches.get()             # the bug: nobody will ever put a batch here
    dist.all_reduce(grad)                 # the gradient's average, every step
    grad /= dist.get_world_size()

dist.destroy_process_group()
