# zoo: culprit=0|1 op=send_object_list|recv_object_list line=12|15 kind=abort nproc=2 timeout=30
# zoo: about=rank 0 sends two objects with send_object_list, rank 1 posts recv_object_list for one (either side may be the bug): gloo's size check aborts rank 1
# zoo: source=https://github.com/pytorch/pytorch/issues/113376 (a send and a recv that disagree on the size)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


if rank == 0:
    dist.send_object_list([{"step": 3}, {"lr": 0.1}], dst=1)
else:
    objs = [None]
    dist.recv_object_list(objs, src=0)
    print(objs)
dist.barrier()
dist.destroy_process_group()
