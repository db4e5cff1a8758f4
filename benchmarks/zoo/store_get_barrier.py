# zoo: culprit=0 op=get line=14 kind=deadlock nproc=2 timeout=60
# zoo: about=rank 0 reads a key that rank 1 writes only after a barrier rank 0 has not reached
# zoo: source=https://github.com/pytorch/pytorch/issues/67972 (TCPStore get hangs waiting for a key another rank has not set)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
store = dist.distributed_c10d._get_default_store()
t = torch.ones(4)
dist.all_reduce(t)
store.set_timeout(__import__("datetime").timedelta(hours=1))
if rank == 0:
    addr = store.get("master_ckpt_path")
dist.barrier()
if rank == 1:
    store.set("master_ckpt_path", "/ckpt/step100")
dist.destroy_process_group()
