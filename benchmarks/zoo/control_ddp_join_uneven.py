# zoo: culprit=none kind=pass nproc=3 timeout=90
# zoo: about=a correct script: DDP on uneven shards (rank 2 has two batches fewer) inside model.join(), so the ranks that finish early shadow the others' all_reduces; then an all_gather_object of per-rank sample counts and a barrier
# zoo: source=https://github.com/pytorch/pytorch/issues/38174 (the Join API for uneven inputs, used as designed)
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
n_batches = 6 if rank == 2 else 8             # uneven shards, handled by join()
torch.manual_seed(rank)
batches = [(torch.randn(4, 16), torch.randn(4, 1)) for _ in range(n_batches)]

with model.join():
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

counts = [None] * world
dist.all_gather_object(counts, {"rank": rank, "samples": 4 * n_batches})
if rank == 0:
    print("samples seen:", sum(c["samples"] for c in counts))
dist.barrier()
dist.destroy_process_group()
