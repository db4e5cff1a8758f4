# zoo: culprit=1 op=broadcast|DistributedDataParallel line=34|30|21 kind=hang nproc=3 timeout=40
# zoo: about=the encoder registers a position_ids buffer only in the newer version of the model code, and rank 1's node runs that version; DDP broadcasts rank 0's buffers before every forward, rank 1's buffer broadcast has more to receive than the others send, so in the first step rank 1 is still in the forward's buffer broadcast while the others wait in the backward's gradient all_reduce
# zoo: source=https://github.com/lucidrains/CoCa-pytorch/issues/17 (registered buffers that differ across ranks break DDP's buffer broadcast)
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
MODEL_CODE_VERSION = os.environ.get("MODEL_CODE_VERSION", "4.31" if rank == 1 else "4.30")


class Encoder(torch.nn.Module):
    def __init__(self, vocab=1000, dim=64, max_len=512):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(max_len, dim)
        self.register_buffer("scale", torch.ones(1))
        if MODEL_CODE_VERSION >= "4.31":
            self.register_buffer("position_ids", torch.arange(max_len).expand((1, -1)))
        self.out = torch.nn.Linear(dim, 2)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.out((self.tok(ids) + self.pos(pos)).mean(1) * self.scale)


torch.manual_seed(rank)
model = DDP(Encoder())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    ids = torch.randint(0, 1000, (4, 16))
    model(ids).sum().backward()
    opt.step()
    opt.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
