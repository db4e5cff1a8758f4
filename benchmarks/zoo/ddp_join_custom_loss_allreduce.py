# zoo: culprit=2 op=all_reduce line=31|25|24 kind=abort nproc=3 timeout=40
# zoo: about=DDP training inside model.join() for uneven shards, with an extra dist.all_reduce of the loss for logging in the loop; join only shadows DDP's own collectives, so once rank 2 (the shorter shard) runs out of batches its shadow collectives meet the others' logging all_reduce: gloo aborts rank 2 and the others fail in the join's final sync
# zoo: source=https://github.com/pytorch/pytorch/pull/57448 (the join context manager is not aware of non-DDP collectives)
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

SHARD_SIZES = [48, 48, 40]  # the last shard file is shorter


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(rank)
    n = SHARD_SIZES[rank]
    data = TensorDataset(torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g))
    loader = DataLoader(data, batch_size=8)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    running = 0.0
    with model.join():
        for step, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            running = 0.9 * running + 0.1 * (mean_loss.item() / dist.get_world_size())
    if rank == 0:
        print(f"final running loss {running:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
