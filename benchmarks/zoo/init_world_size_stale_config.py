# zoo: culprit=2 op=init_process_group line=11|10 kind=exception nproc=3 timeout=30
# zoo: about=the script passes world_size explicitly to init_process_group from the run config on each node; after the job was grown from 2 to 3 workers, rank 2's node still has the old config (world_size=2), so its init_process_group fails (its rank is not below the world size) and the others wait in the rendezvous
# zoo: source=https://runebook.dev/en/articles/pytorch/distributed/torch.distributed.init_process_group (init_process_group problems: processes that disagree on world_size or rank)
import json
import os
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
node_cfg = json.loads(os.environ.get("RUN_CONFIG", '{"world_size": 2}' if rank == 2 else '{"world_size": 3}'))
dist.init_process_group("gloo", rank=rank, world_size=node_cfg["world_size"])
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {rank} world {dist.get_world_size()} sum {t.item()}")
dist.destroy_process_group()
