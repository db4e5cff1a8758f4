# zoo: culprit=2 op=all_reduce line=28|21 kind=mismatch nproc=3 timeout=30
# zoo: about=each rank sizes its confusion matrix from the largest label it saw (max + 1); rank 2's validation shard has no example of the last class, so its matrix is 9x9 where the others' are 10x10, and TORCH_DISTRIBUTED_DEBUG=DETAIL stops the all_reduce on every rank with a shape mismatch
# zoo: source=https://github.com/Lightning-AI/pytorch-lightning/issues/2724 (item 3: the inferred number of classes differs across DDP processes when one never sees the last class, and the reduction hangs)
import os

os.environ.setdefault("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
NUM_CLASSES_IN_CONFIG = 10
g = torch.Generator().manual_seed(rank)
labels = torch.randint(0, NUM_CLASSES_IN_CONFIG, (200,), generator=g)
if rank == 2:
    labels[labels == 9] = 8                          # its shard holds no example of class 9
preds = torch.where(torch.rand(200, generator=g) < 0.7, labels, torch.randint(0, 9, (200,), generator=g))


def confusion_matrix(preds, labels):
    n = int(max(preds.max(), labels.max())) + 1      # "infer the number of classes"
    cm = torch.zeros(n, n)
    cm.index_put_((labels, preds), torch.ones(len(labels)), accumulate=True)
    return cm


cm = confusion_matrix(preds, labels)
dist.all_reduce(cm)
if rank == 0:
    print("accuracy", (cm.diag().sum() / cm.sum()).item(), flush=True)
dist.destroy_process_group()
