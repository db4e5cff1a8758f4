# zoo: culprit=1 op=fully_shard|all_gather_into_tensor|reduce_scatter_tensor line=37|39|45 kind=hang nproc=3 timeout=40
# zoo: about=FSDP2 with reshard_after_forward chosen per rank from the rank's own activation size ('keep params gathered when activations are small'); rank 1 reads the short-document source, so it alone keeps its layers unsharded after forward, skips the backward all-gathers and goes straight to reduce-scatter while ranks 0 and 2 all-gather: all three hang in backward
# zoo: source=https://github.com/pytorch/torchtitan/pull/822 (reshard_after_forward policy made configurable)
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard

ACT_BUDGET_BYTES = 96 * 1024
SOURCES = ["web", "chat", "web"]  # one data source per rank
MEAN_DOC_LEN = {"web": 64, "chat": 16}


class MLP(torch.nn.Module):
    def __init__(self, dim=64, layers=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(layers))
        self.out = torch.nn.Linear(dim, 4)

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.out(x)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(rank)
    tokens_per_batch = 8 * MEAN_DOC_LEN[SOURCES[rank]]
    x = torch.randn(tokens_per_batch, 64, generator=g)
    y = torch.randint(0, 4, (tokens_per_batch,), generator=g)

    model = MLP()
    act_bytes = x.numel() * x.element_size() * len(model.layers)
    reshard = act_bytes > ACT_BUDGET_BYTES  # keep params gathered when activations are small
    for layer in model.layers:
        fully_shard(layer, reshard_after_forward=reshard)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
