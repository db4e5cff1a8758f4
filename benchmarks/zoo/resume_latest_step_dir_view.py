# zoo: culprit=2 op=all_reduce line=25|30|15 kind=hang nproc=3 timeout=30
# zoo: about=on restart every rank resolves the newest checkpoint itself by listing step_* directories; rank 2's listing (a stale NFS attribute cache) shows step_6, which the killed run never finished, while the others skip it as incomplete and resume from step_4: rank 2 runs two steps fewer and waits at the end while the others wait in the gradient all_reduce
# zoo: source=https://github.com/KempnerInstitute/KempnerForge/issues/49 (ranks' exists() checks disagree on a distributed filesystem) https://github.com/RLinf/RLinf/pull/1469 (auto-resume picks an incomplete newest checkpoint)
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
root = Path(tempfile.mkdtemp(prefix=f"ckpts-{rank}-"))
for s in (2, 4, 6):
    (root / f"step_{s}").mkdir()
    if s < 6 or rank == 2:                               # rank 2's view: step_6 looks complete
        (root / f"step_{s}" / "COMPLETE").touch()


def latest_complete_step(root):
    done = [int(d.name.split("_")[1]) for d in root.iterdir() if (d / "COMPLETE").exists()]
    return max(done, default=0)


TOTAL_STEPS = 10
start = latest_complete_step(root)
model = torch.nn.Linear(8, 8)
for step in range(start, TOTAL_STEPS):
    model(torch.randn(4, 8)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
print(f"rank {rank} resumed at {start}, finished", flush=True)
dist.barrier()
dist.destroy_process_group()
