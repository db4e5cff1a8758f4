# zoo: culprit=0 op=broadcast line=22|15|19 kind=mismatch nproc=3 timeout=30
# zoo: about=rank 0 computes the class weights with numpy and broadcasts torch.from_numpy's float64 tensor into the others' float32 buffers: the byte counts differ, and the receivers abort in gloo (SIGABRT) while rank 0, whose tensor is wrong, is killed as a bystander
# zoo: source=https://github.com/pytorch/pytorch/issues/91535
import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


def class_weights_from_labels(counts):
    counts = np.asarray(counts)
    w = counts.sum() / np.maximum(counts, 1)
    return torch.from_numpy(w / w.sum())          # float64: numpy's default dtype


if rank == 0:
    weights = class_weights_from_labels([1200, 400, 70, 330, 5, 120, 64, 900])
else:
    weights = torch.empty(8)                      # float32, as the loss expects
dist.broadcast(weights, src=0)

criterion = torch.nn.CrossEntropyLoss(weight=weights.float())
model = torch.nn.Linear(16, 8)
for step in range(3):
    x, y = torch.randn(32, 16), torch.randint(0, 8, (32,))
    loss = criterion(model(x), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    if rank == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
dist.destroy_process_group()
