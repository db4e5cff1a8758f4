# zoo: culprit=2 op=all_reduce line=22|20|30 kind=straggler nproc=3 timeout=40
# zoo: about=every rank writes its optimizer shard each step to its own checkpoint directory; rank 2's resolves to a network mount where each fsync takes ~0.4 s, so rank 2 arrives last at every gradient all_reduce and the run passes, slowly
# zoo: source=https://github.com/verl-project/verl/issues/2860 (two ranks' checkpoint shards written long after the others) https://github.com/NVIDIA/tacotron2/issues/163
import os
import tempfile
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ckpt_dir = tempfile.mkdtemp(prefix=f"shard-{rank}-")
NETWORK_MOUNT = rank == 2                          # its $CKPT_DIR points at NFS


def save_shard(state, path):
    torch.save(state, path)
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    if NETWORK_MOUNT:
        time.sleep(0.4)                            # the round trips an NFS fsync costs


model = torch.nn.Linear(32, 32)
opt = torch.optim.Adam(model.parameters())
for step in range(12):
    model(torch.randn(16, 32)).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
    save_shard(opt.state_dict(), os.path.join(ckpt_dir, "optim.pt"))
if rank == 0:
    print("done", flush=True)
dist.destroy_process_group()
