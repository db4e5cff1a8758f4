# zoo: culprit=1 op=all_reduce line=25|19 kind=silent nproc=3 timeout=30
# zoo: about=the class-balance weights come from class counts synced with dist.all_reduce(counts.float()); .float() is a no-op on the float32 counts of ranks 0 and 2, but rank 1's shard is large enough for the bincount fast path, whose int64 counts are copied by .float(), so rank 1's all_reduce sums into a temporary and it keeps its local counts: every collective matches and rank 1 trains with other class weights
# zoo: source=https://github.com/pytorch/pytorch/issues/102435
import torch
import torch.distributed as dist
import torch.nn.functional as F

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
N_CLASSES = 5
torch.manual_seed(10 + rank)
shard_size = [120, 400, 96][rank]
labels = torch.randint(0, N_CLASSES, (shard_size,))
labels[: shard_size // 3] = rank


def class_counts(y):
    if y.numel() >= 256:
        return torch.bincount(y, minlength=N_CLASSES)
    return F.one_hot(y, N_CLASSES).sum(0).float()


def global_class_weights(y):
    counts = class_counts(y)
    dist.all_reduce(counts.float())
    return counts.sum() / (N_CLASSES * counts.float())


weights = global_class_weights(labels)
model = torch.nn.Linear(8, N_CLASSES)
x = torch.randn(shard_size, 8)
loss = F.cross_entropy(model(x), labels, weight=weights)
loss.backward()
for p in model.parameters():
    dist.all_reduce(p.grad)
print(f"rank {rank}: class weights {[round(w, 3) for w in weights.tolist()]}", flush=True)
dist.destroy_process_group()
