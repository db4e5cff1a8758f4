# zoo: culprit=2 op=all_reduce line=38|37|29 kind=mismatch nproc=3 timeout=30
# zoo: about=with TORCH_DISTRIBUTED_DEBUG=DETAIL, eval stats start as the ints 0, 0 and become floats only when an item is scored; rank 2's eval split holds only documents above MAX_LEN, so all are filtered out and torch.tensor([0, 0]) is int64 where the others' is float32: DETAIL's fingerprint check raises on every rank, naming rank 2's Long tensor
# zoo: source=https://github.com/deepspeedai/DeepSpeed/issues/4726 (loss tensors of mismatched dtypes across ranks in a collective)
import os

os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # chasing a hang from last week's run

import torch
import torch.distributed as dist
import torch.nn.functional as F

MAX_LEN = 256
EVAL_SPLITS = ["news", "news", "books"]  # one eval split per rank
LEN_RANGE = {"news": (32, 400), "books": (300, 900)}


def eval_shard(rank):
    g = torch.Generator().manual_seed(40 + rank)
    lo, hi = LEN_RANGE[EVAL_SPLITS[rank]]
    lengths = torch.randint(lo, hi, (24,), generator=g).tolist()
    return [(torch.randn(16, generator=g), int(n)) for n in lengths]


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 3)
    total_loss, n_items = 0, 0
    with torch.no_grad():
        for feats, length in eval_shard(rank):
            if length > MAX_LEN:
                continue
            target = torch.tensor(length % 3)
            total_loss += F.cross_entropy(model(feats).unsqueeze(0), target.unsqueeze(0)).item()
            n_items += 1
    stats = torch.tensor([total_loss, n_items])
    dist.all_reduce(stats)
    if rank == 0:
        print(f"eval loss {stats[0] / max(stats[1], 1):.4f} over {int(stats[1])} items")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
