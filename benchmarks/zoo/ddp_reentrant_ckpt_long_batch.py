# zoo: culprit=2 op=all_reduce|DistributedDataParallel|backward line=53|34 kind=exception nproc=3 timeout=30
# zoo: about=DDP(find_unused_parameters=True) with activation checkpointing (use_reentrant=True) switched on only for batches above a token budget; rank 2's length-sorted shard holds the longest documents, so it alone checkpoints, and its reentrant backward marks parameters ready twice: DDP raises on rank 2 while the others wait in the gradient all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/24005
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

CKPT_ABOVE_TOKENS = 2048


class Block(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ff = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.ff(x)


class Model(torch.nn.Module):
    def __init__(self, vocab=100, dim=32, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim) for _ in range(layers))
        self.aux_head = torch.nn.Linear(dim, 2)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids):
        h = self.emb(ids)
        long_batch = ids.numel() > CKPT_ABOVE_TOKENS
        for blk in self.blocks:
            h = checkpoint(blk, h, use_reentrant=True) if long_batch else blk(h)
        return self.head(h)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Model(), find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    doc_lens = sorted(torch.randint(64, 800, (48,), generator=torch.Generator().manual_seed(0)).tolist())
    shard = doc_lens[rank * 16:(rank + 1) * 16]  # sorted by length so each rank pads little
    seq_len = max(shard)
    g = torch.Generator().manual_seed(rank)
    for step in range(3):
        ids = torch.randint(0, 100, (4, seq_len), generator=g)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
