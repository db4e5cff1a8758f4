# zoo: culprit=0 op=all_reduce line=30|17 kind=abort nproc=3 timeout=30
# zoo: about=the dataset's __len__ all_reduces the shard length (MIN) so every rank runs the same number of steps; rank 0 alone logs len(loader), which calls __len__ once more, so its extra all_reduce meets the others' first gradient all_reduce: gloo aborts rank 0 (SIGABRT)
# zoo: source=https://github.com/NVIDIA-Merlin/dataloader/pull/123 (side effects in a loader's __len__ triggered by extra len() calls)
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class ShardedTokens(Dataset):
    """Each rank's shard; the length is the minimum over ranks so every rank runs the same steps."""

    def __init__(self, n_local, dim=32, seed=0):
        self.data = torch.randn(n_local, dim, generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        n = torch.tensor([len(self.data)])
        dist.all_reduce(n, op=dist.ReduceOp.MIN)
        return int(n.item())

    def __getitem__(self, i):
        return self.data[i]


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = ShardedTokens(n_local=[40, 37, 44][rank], seed=rank)
    loader = DataLoader(ds, batch_size=8)
    if rank == 0:
        print(f"{len(loader)} steps per epoch")
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x in loader:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
