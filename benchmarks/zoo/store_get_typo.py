# zoo: culprit=1 op=get line=16 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 publishes the checkpoint path under "ckpt-path", rank 1 reads "ckpt_path": its store.get waits for a key nobody sets
# zoo: source=https://github.com/meta-pytorch/torchcomms/pull/294 (a store get on a key a peer never sets blocks)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


store = dist.distributed_c10d._get_default_store()
if rank == 0:
    store.set("ckpt-path", "/tmp/ckpt/step-100")
dist.barrier()
if rank == 1:
    path = store.get("ckpt_path").decode()   # the bug: _ for -
x = torch.ones(16)
dist.all_reduce(x)
dist.destroy_process_group()
