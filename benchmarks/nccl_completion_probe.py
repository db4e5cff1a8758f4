"""What torch's NCCL completion hook gives, next to the lab's trace of the same ops (GPU only).

ProcessGroupNCCL._register_on_completion_hook calls a Python function for every finished
work with its op type, sequence number, start and end (TORCH_NCCL_ENABLE_TIMING=1 adds the
GPU's active duration). The lab's trace records each op's host-side slice (docs/trace.md);
this probe prints both for the same ops, so a GPU-time record can be matched to the trace:

    TORCH_NCCL_ENABLE_TIMING=1 labctl up --script benchmarks/nccl_completion_probe.py \\
        --dist-backend nccl --nodes 1 --nproc-per-node 1
    grep WORKINFO runs/<run>/ranks/rank-0.log; labctl trace runs/<run>
"""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
seen = []


def hook(info) -> None:
    seen.append((str(info.op_type), info.seq, str(info.time_started), str(info.time_finished),
                 str(info.active_duration)))


try:
    dist.distributed_c10d._get_default_group()._register_on_completion_hook(hook)
except Exception as exc:                 # noqa: BLE001 - the probe reports what torch says
    print("WORKINFO hook refused:", exc, flush=True)
x = torch.ones(1 << 22, device="cuda")
for _ in range(3):
    dist.all_reduce(x)
dist.broadcast(x, 0)
dist.all_reduce(x, async_op=True).wait()
torch.cuda.synchronize()
dist.barrier()
time.sleep(2)
for row in seen:
    print("WORKINFO", row, flush=True)
print("WORKINFO count", len(seen), flush=True)
dist.destroy_process_group()
