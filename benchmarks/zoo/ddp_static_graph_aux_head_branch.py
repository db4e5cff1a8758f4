# zoo: culprit=1 op=all_reduce|DistributedDataParallel line=40|22|31 kind=exception nproc=3 timeout=40
# zoo: about=DDP(static_graph=True) on a tagger whose span head runs only when the batch has span annotations (about 30% of sentences); at step 1 rank 1's batch has none, so its span head gets no gradient and DDP raises on rank 1 at the next forward (graph changed, reduction not finished) while the others wait in backward
# zoo: source=https://github.com/pytorch/pytorch/issues/97030 (DDP static_graph with parameters that get no gradient)
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

IGNORE = -1


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
        self.tag_head = torch.nn.Linear(32, 5)
        self.span_head = torch.nn.Linear(32, 2)

    def forward(self, x, spans):
        h = self.body(x)
        out = {"tags": self.tag_head(h)}
        if (spans != IGNORE).any():
            out["spans"] = self.span_head(h)
        return out


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Tagger(), static_graph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(46 + rank)
    for step in range(4):
        x = torch.randn(4, 16, generator=g)
        tags = torch.randint(0, 5, (4,), generator=g)
        spans = torch.randint(0, 2, (4,), generator=g)
        annotated = torch.rand(4, generator=g) >= 0.7  # span labels exist for ~30% of sentences
        spans = spans.masked_fill(~annotated, IGNORE)
        out = model(x, spans)
        loss = F.cross_entropy(out["tags"], tags)
        if "spans" in out:
            loss = loss + F.cross_entropy(out["spans"], spans, ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
