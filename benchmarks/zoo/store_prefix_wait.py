# zoo: culprit=2 op=wait line=18 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 sets the ready key through a PrefixStore, rank 2 waits for it on the bare store, where it never appears
# zoo: source=https://github.com/pytorch/pytorch/issues/53840
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


from datetime import timedelta

store = dist.distributed_c10d._get_default_store()
job = dist.PrefixStore("job0", store)
if rank == 0:
    job.set("weights-ready", "1")
if rank == 2:
    store.wait(["weights-ready"], timedelta(hours=1))   # the bug: the bare store
x = torch.ones(16)
dist.all_reduce(x)
dist.destroy_process_group()
