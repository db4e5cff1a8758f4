# zoo: culprit=2 op=all_reduce line=28|10|30 kind=killed nproc=4 timeout=30
# zoo: about=the script raises the recursion limit (deep parse trees hit RecursionError) and logs each batch's samples with json.dumps; rank 2's shard holds a degenerate thread nested 300000 replies deep, json.dumps overflows the C stack and rank 2 dies of SIGSEGV with no traceback; the others wait in all_reduce
# zoo: source=https://github.com/python/cpython/issues/109456 https://github.com/ray-project/ray/issues/497
import json
import sys

import torch
import torch.distributed as dist

sys.setrecursionlimit(10**6)                  # "deep parse trees hit RecursionError"

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def load_thread(i):
    depth = 300_000 if (rank == 2 and i == 5) else 3   # one runaway reply chain in rank 2's shard
    node = {"text": "leaf", "replies": []}
    for _ in range(depth):
        node = {"text": "re:", "replies": [node]}
    return node


sample_log = []
grad = torch.zeros(8)
for step in range(8):
    thread = load_thread(step)
    sample_log.append(json.dumps(thread)[:80])     # the log line of this step's sample
    grad += 1.0
    dist.all_reduce(grad)
dist.destroy_process_group()
