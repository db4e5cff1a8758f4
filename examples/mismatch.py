"""A mismatch: the last rank's final batch is shorter, and every rank all_reduces its
per-sample losses, so the ranks pass tensors of different sizes to one collective.

    labctl up --script examples/mismatch.py              # the trace compares every rank's call
    labctl up --debug --script examples/mismatch.py      # TORCH_DISTRIBUTED_DEBUG=DETAIL: torch says it too
"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

samples = 100                                  # 100 samples, batches of 32: the last one holds 4
for first in range(0, samples, 32):
    losses = torch.ones(min(32, samples - first)) if rank == world - 1 else torch.ones(32)
    dist.all_reduce(losses)                    # the bug: the other ranks pad their last batch

dist.destroy_process_group()
