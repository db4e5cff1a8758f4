# zoo: culprit=0 op=barrier line=34|33|28 kind=exit nproc=3 timeout=30
# zoo: about=rank 0 alone writes the results file; when the write fails it logs the error, skips the closing barrier (run_failed) and destroys its process group and leaves without an error of its own; the others reach the barrier, lose rank 0's connection and exit 1, so the first failure torchrun sees is a healthy rank (rank 0 has exited 0, or is still tearing down and is stopped by torchrun)
# zoo: source=https://github.com/ai-dynamo/aiconfigurator/pull/1542
import os
import sys
import tempfile

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
out_dir = tempfile.mkdtemp(prefix="moe-a2a-")


def write_rows(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(",".join(f"{v:.4f}" for v in r) + "\n")


run_failed = False
try:
    latency = torch.rand(4) + rank
    everyone = [torch.empty(4) for _ in range(world)]
    dist.all_gather(everyone, latency)
    if rank == 0:
        write_rows(os.path.join(out_dir, "missing-subdir", "perf.csv"), [t.tolist() for t in everyone])
except Exception as error:
    run_failed = True
    print(f"[rank {rank}] publish failed: {error}", file=sys.stderr, flush=True)
finally:
    if not run_failed:
        dist.barrier()
    dist.destroy_process_group()
