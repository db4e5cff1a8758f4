# zoo: culprit=2 op=all_gather|scatter|all_reduce line=27|25|20 kind=hang nproc=3 timeout=40
# zoo: about=a supervised contrastive loss gathers embeddings with torch.distributed.nn.functional.all_gather, whose backward runs collectives; rank 2's batch shares no label with the global batch, so it returns a regulariser that does not use the gathered tensor, its backward skips the all_gather's backward collectives and it goes on to the gradient all_reduce while the others wait inside backward
# zoo: source=https://github.com/pytorch/pytorch/issues/73515 (torch.distributed.nn.functional.all_gather and its backward collectives)
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.nn.functional import all_gather

TEMPERATURE = 0.1


def gather_labels(y):
    out = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(out, y)
    return torch.cat(out)


def supcon_loss(z, y):
    rank, n = dist.get_rank(), z.shape[0]
    z_all = torch.cat(all_gather(z))
    y_all = gather_labels(y)
    self_mask = torch.zeros(n, len(y_all), dtype=torch.bool)
    self_mask[torch.arange(n), rank * n + torch.arange(n)] = True
    pos = (y[:, None] == y_all[None, :]) & ~self_mask
    if not pos.any():
        # nothing to pull together in this batch: keep the embeddings on the sphere
        return (z.norm(dim=1) - 1).pow(2).mean()
    logits = (z @ z_all.T / TEMPERATURE).masked_fill(self_mask, -1e9)
    log_prob = logits - logits.logsumexp(dim=1, keepdim=True)
    per_anchor = -(log_prob * pos).sum(1) / pos.sum(1).clamp(min=1)
    return per_anchor[pos.any(1)].mean()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    opt = torch.optim.SGD(encoder.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(63 + rank)
    y = torch.randint(0, 10, (4,), generator=g)
    x = torch.randn(4, 32, generator=g)
    for step in range(2):
        z = F.normalize(encoder(x), dim=1)
        loss = supcon_loss(z, y)
        opt.zero_grad()
        loss.backward()
        for p in encoder.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
