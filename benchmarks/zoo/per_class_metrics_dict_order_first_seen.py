# zoo: culprit=2 op=all_reduce line=29|27 kind=silent nproc=3 timeout=30
# zoo: about=per-class accuracy counts live in a dict filled in the order classes first appear in the rank's eval shard, and the reducer all_reduces one [hits, total] pair per dict entry in that order; rank 2's shard starts with a 'dog', so its pairs go out in another order and every all_reduce completes while summing one class's counts into another's
# zoo: source=https://github.com/mosaicml/composer/issues/2513
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
SHARDS = [                                   # (label, prediction) pairs of each rank's eval shard
    "cat:cat dog:dog bird:cat cat:cat dog:bird cat:cat",
    "cat:dog dog:dog cat:cat bird:bird bird:bird dog:dog",
    "dog:dog cat:cat cat:bird bird:bird dog:cat dog:dog",
]
pairs = [item.split(":") for item in SHARDS[rank].split()]


def per_class_counts(pairs):
    counts = {}
    for label, pred in pairs:
        hits, total = counts.get(label, (0, 0))
        counts[label] = (hits + (label == pred), total + 1)
    return counts


def reduce_accuracy(counts):
    acc = {}
    for label, (hits, total) in counts.items():
        t = torch.tensor([hits, total], dtype=torch.float64)
        dist.all_reduce(t)
        acc[label] = round((t[0] / t[1]).item(), 3)
    return acc


acc = reduce_accuracy(per_class_counts(pairs))
if rank == 0:
    print("per-class accuracy:", acc, flush=True)
dist.barrier()
dist.destroy_process_group()
