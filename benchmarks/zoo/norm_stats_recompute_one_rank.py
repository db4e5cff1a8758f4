# zoo: culprit=2 op=all_reduce line=27|38|43 kind=abort nproc=3 timeout=30
# zoo: about=feature normalisation statistics come from the resumed checkpoint, and are recomputed with two all_reduces only when the checkpoint lacks them; rank 2's node still has the older checkpoint without the key, so it runs those extra all_reduces while the others are already in the gradient all_reduce
# zoo: source=https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/5593 (an older checkpoint that predates a saved field sends the restore down another code path)
import os
import tempfile
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
node_dir = os.path.join(tempfile.gettempdir(), f"zoo_norm_node{rank}")
os.makedirs(node_dir, exist_ok=True)
ckpt_path = os.path.join(node_dir, "last.pt")
# what each node's local disk holds from the previous run (rank 2's copy predates the stats)
old = {"step": 100, "model": torch.nn.Linear(8, 1).state_dict()}
if rank != 2:
    old["feat_mean"], old["feat_std"] = torch.zeros(8), torch.ones(8)
torch.save(old, ckpt_path)


def feature_stats(ckpt, features):
    if "feat_mean" in ckpt:
        return ckpt["feat_mean"], ckpt["feat_std"]
    s = features.sum(0)
    sq = (features ** 2).sum(0)
    n = torch.tensor([float(len(features))])
    dist.all_reduce(s)
    dist.all_reduce(sq)
    dist.all_reduce(n)
    mean = s / n
    return mean, (sq / n - mean ** 2).sqrt()


ckpt = torch.load(ckpt_path)
model = torch.nn.Linear(8, 1)
model.load_state_dict(ckpt["model"])
feats = torch.randn(64, 8) * 3 + 1
mean, std = feature_stats(ckpt, feats)
for step in range(3):
    x = (feats[step * 16:(step + 1) * 16] - mean) / std
    model(x).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
