# zoo: culprit=1 op=new_subgroups line=12|10 kind=hang nproc=4 timeout=40
# zoo: about=the expert-parallel groups come from dist.new_subgroups(group_size=EP); rank 1 reads EP=4 from a stale launcher config where the others read 2, so it creates one group of four where they create two of two: rank 1 and rank 0 wait in new_subgroups for groups nobody else creates, ranks 2 and 3 go on to the barrier
# zoo: source=https://github.com/PaddlePaddle/Paddle/pull/68847 (a hang from ranks creating different communication groups: some create [0, 2], others do not)
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cfg = {"ep_size": int(os.environ.get("EP_SIZE", "4" if rank == 1 else "2"))}

ep_group, _ = dist.new_subgroups(group_size=cfg["ep_size"])
experts = torch.nn.Linear(8, 8)
for step in range(2):
    out = experts(torch.randn(4, 8)).sum()
    out.backward()
    for p in experts.parameters():
        dist.all_reduce(p.grad, group=ep_group)
    experts.zero_grad()
dist.barrier()
print(f"rank {rank} done")
dist.destroy_process_group()
