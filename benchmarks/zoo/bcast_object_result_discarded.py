# zoo: culprit=1+2 op=broadcast_object_list line=16|21 kind=exception nproc=3 timeout=30
# zoo: about=the run-config helper broadcasts rank 0's config with broadcast_object_list([cfg]) and returns cfg, not the list's element; broadcast_object_list fills the list in place, so on ranks 1 and 2 the helper still returns None and they raise on the first lookup, while rank 0 waits in the next all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/56142 (broadcast_object_list seems not to broadcast: the caller reads its own object, not the list the call filled)
import json
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def load_run_config():
    cfg = None
    if rank == 0:
        cfg = json.loads('{"lr": 0.05, "hidden": 32, "steps": 3}')
    dist.broadcast_object_list([cfg], src=0)
    return cfg


cfg = load_run_config()
model = torch.nn.Linear(cfg["hidden"], 1)
opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
for step in range(cfg["steps"]):
    model(torch.randn(8, cfg["hidden"])).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
