# zoo: culprit=0 op=broadcast_object_list line=11|12 kind=abort nproc=3 timeout=60
# zoo: about=the root broadcasts a 4-object list where the receivers expect 3; gloo aborts the receivers
# zoo: source=https://github.com/open-mmlab/mmrazor/pull/153 (broadcast_object_list's lists must match the root's); https://github.com/open-mpi/ompi/issues/126 (a broadcast of inconsistent counts)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    objs = [{"lr": 0.1}, {"epoch": 3}, {"note": "x" * 40}]
    objs.append("extra")                  # a field added on the root only
    dist.broadcast_object_list(objs, src=0)
else:
    objs = [None, None, None]
    dist.broadcast_object_list(objs, src=0)
dist.destroy_process_group()
