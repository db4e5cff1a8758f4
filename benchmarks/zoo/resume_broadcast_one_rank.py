# zoo: culprit=0 op=broadcast_object_list line=20 kind=mismatch nproc=3 timeout=30
# zoo: about=each rank checks for a resume file on its own: only rank 0 finds one and enters broadcast_object_list, the others go on to all_reduce
# zoo: source=https://github.com/KempnerInstitute/KempnerForge/pull/50
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


import os
import tempfile

path = os.path.join(tempfile.gettempdir(), f"zoo-resume-{os.getppid()}-{rank}.pt")
if rank == 0:
    open(path, "w").close()               # rank 0 wrote a train state last run
state = [None]
if os.path.exists(path):                  # the bug: a per-rank check guards a collective
    state = [{"step": 7}]
    dist.broadcast_object_list(state, src=0)
grad = torch.ones(16)
dist.all_reduce(grad)
if rank == 0:
    os.remove(path)
dist.destroy_process_group()
