# zoo: culprit=3 op=get_rank|all_reduce line=15|27 kind=silent nproc=4 timeout=30
# zoo: about=ranks 0-2 train and rank 3 evaluates; the shard picker uses dist.get_rank(trainer_group) for every rank, which is -1 on rank 3 (not a member), so rank 3 quietly takes files[-1::3] and its later all_reduce over the trainer group is a no-op: no error, rank 3 evaluates its own weights
# zoo: source=https://github.com/facebookresearch/lingua/issues/58 (a rank index computed from the wrong group picks the wrong data shard)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
TRAINERS = [0, 1, 2]
trainer_group = dist.new_group(TRAINERS)
files = [f"shard-{i:03d}.bin" for i in range(12)]


def my_files():
    dp_rank = dist.get_rank(trainer_group)
    return files[dp_rank::len(TRAINERS)]


torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
mine = my_files()
for step, name in enumerate(mine[:3]):
    g = torch.Generator().manual_seed(int(name[6:9]))
    model(torch.randn(4, 8, generator=g)).pow(2).mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p.grad, group=trainer_group)
            p -= 0.1 * p.grad / len(TRAINERS)
    model.zero_grad()
w = model.weight.detach().clone()
everyone = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(everyone, w)
if rank == 3:
    print("evaluating with weights", w.sum().item(), "trainers have", everyone[0].sum().item())
dist.destroy_process_group()
