# zoo: culprit=0 op=new_group line=19|33|29 kind=hang nproc=4 timeout=30
# zoo: about=the eval set is a datapipe (shuffle, sharding_filter) behind a DataLoader, and rank 0 alone pulls one batch from it to log sample predictions; iterating a DataLoader over an IterDataPipe under torch.distributed creates a gloo group and broadcasts a shared shuffle seed, so rank 0 waits in that hidden new_group while the other ranks wait in the gradient all_reduce
# zoo: source=https://github.com/rwth-i6/returnn/issues/1621
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.datapipes.iter import IterableWrapper

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
eval_pipe = IterableWrapper([torch.randn(16) for _ in range(64)]).shuffle().sharding_filter()
eval_loader = DataLoader(eval_pipe, batch_size=8)


def log_sample_predictions():
    batch = next(iter(eval_loader))
    with torch.no_grad():
        print("sample predictions:", model(batch).argmax(1).tolist(), flush=True)


for step in range(1, 7):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    if rank == 0 and step % 3 == 0:
        log_sample_predictions()
dist.destroy_process_group()
