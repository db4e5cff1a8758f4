# zoo: culprit=none kind=pass nproc=3 timeout=60
# zoo: about=a correct script: uneven per-rank results gathered the right way (sizes first, then padded all_gather), metrics via all_gather_object
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/7773
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

preds = torch.arange(5 + rank, dtype=torch.float32)
size = torch.tensor([preds.numel()])
sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
dist.all_gather(sizes, size)
longest = int(max(s.item() for s in sizes))
padded = torch.zeros(longest)
padded[: preds.numel()] = preds
slots = [torch.zeros(longest) for _ in range(world)]
dist.all_gather(slots, padded)
merged = torch.cat([s[: int(n.item())] for s, n in zip(slots, sizes)])
stats = [None] * world
dist.all_gather_object(stats, {"rank": rank, "n": preds.numel()})
assert merged.numel() == sum(s["n"] for s in stats)
dist.destroy_process_group()
