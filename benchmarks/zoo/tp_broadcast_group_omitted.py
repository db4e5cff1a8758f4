# zoo: culprit=3 op=broadcast line=21 kind=hang nproc=4 timeout=40
# zoo: about=each tensor-parallel pair broadcasts its batch from the pair's first rank; rank 3 runs the older copy of the data helper whose broadcast has no group= argument, so it broadcasts on the world group while its pair (and everyone else) use their tp groups
# zoo: source=https://github.com/NVIDIA/Megatron-LM/issues/620 (a communication issued without the parallel group it belongs to hangs the tp>1 ranks) https://github.com/vllm-project/vllm/pull/2522 (broadcast helpers given an explicit group argument)
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
TP = 2
tp_groups = [dist.new_group(list(range(i, i + TP))) for i in range(0, world, TP)]
tp_group = tp_groups[rank // TP]
tp_src = rank // TP * TP
HELPER_VERSION = int(os.environ.get("DATA_HELPER_VERSION", "1" if rank == 3 else "2"))


def broadcast_batch(batch):
    if HELPER_VERSION >= 2:
        dist.broadcast(batch, src=tp_src, group=tp_group)
    else:
        dist.broadcast(batch, src=tp_src)
    return batch


w = torch.nn.Linear(16, 16)
for step in range(3):
    batch = torch.randn(4, 16) if rank == tp_src else torch.empty(4, 16)
    batch = broadcast_batch(batch)
    loss = w(batch).pow(2).mean()
    loss.backward()
    for p in w.parameters():
        dist.all_reduce(p.grad)
    w.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
