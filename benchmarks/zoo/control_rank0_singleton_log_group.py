# zoo: culprit=none kind=pass nproc=3 timeout=60
# zoo: about=a correct script that looks wrong: rank 0 alone all_reduces its logging stats under 'if rank in LOGGING_RANKS', but on a group created (by every rank) with rank 0 as its only member, and ranks 0 and 1 reduce eval accuracy on their own [0, 1] group that rank 2 never touches; every world collective is called by all ranks
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/16541 (a collective under is_global_zero; here it is on a group of one)
import torch
import torch.distributed as dist
import torch.nn.functional as F

LOGGING_RANKS = [0]
EVAL_RANKS = [0, 1]


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    log_group = dist.new_group(LOGGING_RANKS)
    eval_group = dist.new_group(EVAL_RANKS)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(6):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if rank in LOGGING_RANKS:
            stats = torch.tensor([loss.item(), 1.0])
            dist.all_reduce(stats, group=log_group)
            print(f"step {step} loss {stats[0] / stats[1]:.4f}")
    if rank in EVAL_RANKS:
        with torch.no_grad():
            acc = torch.zeros(2)
            for _ in range(3):
                x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
                acc += torch.tensor([float((model(x).argmax(1) == y).sum()), 8.0])
            dist.all_reduce(acc, group=eval_group)
        if rank == 0:
            print(f"eval acc {acc[0] / acc[1]:.3f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
