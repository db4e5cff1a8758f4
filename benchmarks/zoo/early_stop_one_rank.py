# zoo: culprit=1 op=all_reduce|barrier line=14|21|22 kind=mismatch nproc=3 timeout=30
# zoo: about=each rank decides early stopping on its own validation loss: rank 1 stops, the others start another epoch's all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/134920
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


grad = torch.ones(32)
best, patience = float("inf"), 0
for epoch in range(5):
    dist.all_reduce(grad)
    val_loss = 1.0 + (0.5 if rank == 1 else -0.1) * epoch   # a local, unreduced metric
    if val_loss < best:
        best, patience = val_loss, 0
    else:
        patience += 1
    if patience >= 1:
        break                             # the bug: the decision is not shared
dist.barrier()
dist.destroy_process_group()
