# zoo: culprit=1 op=all_reduce line=44|20|38 kind=abort nproc=3 timeout=30
# zoo: about=the best-checkpoint test is 'torch.isfinite(val_loss) and global_mean(val_loss) < best', and global_mean all_reduces; rank 1's validation shard has a zero-length document whose log-length feature is -inf, so its local isfinite short-circuits the all_reduce and it goes on to the next epoch's gradient all_reduce, which meets the others' metric all_reduce: gloo aborts rank 0 (SIGABRT)
# zoo: source=https://github.com/Project-MONAI/monai-physio/pull/137 (a non-finite-loss check decided per rank before a collective)
import math
import torch
import torch.distributed as dist


def load_val_shard(rank):
    g = torch.Generator().manual_seed(6 + rank)
    doc_len = torch.randint(0, 40, (24,), generator=g).float()
    other = torch.randn(24, 7, generator=g)
    x = torch.cat([doc_len.log().unsqueeze(1), other], dim=1)
    y = (other[:, 0] > 0).float()
    return x, y


def global_mean(t):
    t = t.detach().clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    val_x, val_y = load_val_shard(rank)
    best = math.inf
    for epoch in range(3):
        x = torch.randn(32, 8)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), (x[:, 1] > 0).float())
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()

        with torch.no_grad():
            val_loss = torch.nn.functional.mse_loss(model(val_x).squeeze(1), val_y)
        if torch.isfinite(val_loss) and global_mean(val_loss) < best:
            best = val_loss.item()
            if rank == 0:
                print(f"epoch {epoch}: new best {best:.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
