# zoo: culprit=2 op=all_gather_object line=17|43 kind=abort nproc=3 timeout=30
# zoo: about=the eval metric helper all_gathers tensors and falls back to all_gather_object for plain Python values; rank 2's shard is too small for one full batch (drop_last), so its loss total stays the float 0.0 and it enters all_gather_object, whose int64 size exchange meets the others' float32 all_gather: gloo aborts rank 0 (SIGABRT)
# zoo: source=https://github.com/huggingface/accelerate/pull/2710 (gather_for_metrics switching between gather and gather_object)
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def gather_metric(value):
    world = dist.get_world_size()
    if torch.is_tensor(value):
        out = [torch.zeros_like(value) for _ in range(world)]
        dist.all_gather(out, value)
        return [t.item() for t in out]
    out = [None] * world
    dist.all_gather_object(out, value)
    return out


def evaluate(model, loader):
    total = 0.0
    count = 0
    with torch.no_grad():
        for x, y in loader:
            total = total + F.cross_entropy(model(x), y, reduction="sum")
            count += len(y)
    return total, count


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 5)
    feats, labels = torch.randn(33, 16), torch.randint(0, 5, (33,))
    per_rank = 16
    lo = rank * per_rank
    shard = TensorDataset(feats[lo:lo + per_rank], labels[lo:lo + per_rank])
    loader = DataLoader(shard, batch_size=8, drop_last=True)

    total, count = evaluate(model, loader)
    totals = gather_metric(total)
    counts = gather_metric(torch.tensor(float(count)))
    if rank == 0:
        print(f"eval loss {sum(totals) / max(sum(counts), 1.0):.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
