# zoo: culprit=0 op=gather line=21|22 kind=silent nproc=3 timeout=30
# zoo: about=rank 0 collects each rank's validation counts with gather into a list built as [torch.zeros_like(stats)] * world, one tensor aliased world times, so every slot ends up holding the last rank's counts and the logged accuracy is wrong with no error
# zoo: source=https://github.com/pytorch/pytorch/issues/5506
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(100 + rank)
w = torch.randn(8)


def eval_shard(n):
    x = torch.randn(n, 8)
    correct = ((x @ w) > 0).float().sum()
    return torch.stack([correct, torch.tensor(float(n))])


def collect_on_rank0(stats):
    if rank == 0:
        buckets = [torch.zeros_like(stats)] * world
        dist.gather(stats, gather_list=buckets, dst=0)
        return torch.stack(buckets)
    dist.gather(stats, dst=0)
    return None


for epoch in range(3):
    stats = eval_shard(n=48 + 16 * rank)
    per_rank = collect_on_rank0(stats)
    if rank == 0:
        acc = per_rank[:, 0].sum() / per_rank[:, 1].sum()
        print(f"epoch {epoch} val_acc={acc:.3f} samples={per_rank[:, 1].tolist()}", flush=True)
    dist.barrier()

dist.destroy_process_group()
