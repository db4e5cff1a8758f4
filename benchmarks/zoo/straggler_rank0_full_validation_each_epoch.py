# zoo: culprit=0 op=all_reduce line=36|32|37 kind=straggler nproc=3 timeout=60
# zoo: about=validation runs on the main process only, over the whole validation set, at the end of every epoch; ranks 1 and 2 go straight on to the next epoch and wait seconds for rank 0 in the first gradient all_reduce each time, but the run completes
# zoo: source=https://github.com/ultralytics/yolov5/issues/12163
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
VAL_BATCHES = 2000


@torch.no_grad()
def validate():
    correct = 0
    for i in range(VAL_BATCHES):
        x = torch.randn(256, 128, generator=torch.Generator().manual_seed(i))
        correct += (model(x).argmax(1) == i % 10).sum().item()
    return correct / (256 * VAL_BATCHES)


for epoch in range(4):
    for step in range(10):
        x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    if rank == 0:
        print(f"epoch {epoch}: val acc {validate():.3f}", flush=True)
dist.barrier()
dist.destroy_process_group()
