# zoo: culprit=1 op=broadcast_object_list line=24|39|35 kind=hang nproc=3 timeout=30
# zoo: about=the trainer wraps the loop in try/except and saves an emergency checkpoint on any error; rank 1 hits a ValueError on a malformed batch, enters the checkpoint path and waits in broadcast_object_list for rank 0's file name, while ranks 0 and 2 wait in step 3's gradient all_reduce: the hang hides the ValueError
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/6430
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = torch.nn.Linear(12, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def batch(step):
    x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
    if rank == 1 and step == 3:
        y[0] = 7                                     # one label outside the 3 classes
    if y.max() >= 3:
        raise ValueError(f"label {y.max().item()} out of range at step {step}")
    return x, y


def save_emergency_checkpoint(step):
    name = [f"/tmp/emergency-step{step}.pt" if rank == 0 else None]
    dist.broadcast_object_list(name, src=0)          # every rank must agree on the file name
    if rank == 0:
        torch.save(model.state_dict(), name[0])


step = 0
try:
    for step in range(6):
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
except Exception:
    save_emergency_checkpoint(step)
    raise
dist.destroy_process_group()
