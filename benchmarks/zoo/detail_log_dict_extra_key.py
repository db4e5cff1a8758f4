# zoo: culprit=3 op=all_reduce line=22|36 kind=mismatch nproc=4 timeout=40
# zoo: about=with TORCH_DISTRIBUTED_DEBUG=DETAIL, a log_dict helper all_reduces each metric in key order; rank 3's batch holds the rare class, so its dict has one more key (an int64 count) and its second all_reduce is that count where the others reduce the float loss
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/19106
import os
os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
model = torch.nn.Linear(8, 4)


def log_dict(metrics):
    synced = {}
    for key in sorted(metrics):
        value = metrics[key]
        t = value if torch.is_tensor(value) else torch.tensor([float(value)])
        t = t.reshape(1)
        dist.all_reduce(t)                    # one all_reduce per key: the keys must match
        synced[key] = t.item()
    return synced


for step in range(3):
    x = torch.randn(16, 8)
    labels = torch.full((16,), rank % 3)      # ranks 0-2 see classes 0-2 only
    if rank == 3 and step == 1:
        labels[0] = 3                         # the rare class shows up in rank 3's batch
    logits = model(x)
    metrics = {"loss": torch.nn.functional.cross_entropy(logits, labels).item(),
               "acc": (logits.argmax(1) == labels).float().mean().item()}
    if (labels == 3).any():
        metrics["count_class3"] = (labels == 3).sum()   # an int64 tensor, on one rank only
    if rank == 0:
        print(step, log_dict(metrics))
    else:
        log_dict(metrics)
dist.destroy_process_group()
