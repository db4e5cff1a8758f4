# zoo: culprit=2 op=all_reduce line=17|18|19|20|34 kind=hang nproc=3 timeout=30
# zoo: about=batches are drawn by rejection sampling (redraw until a document fits MAX_TOKENS); rank 2 reads the arxiv source, whose documents are all longer than MAX_TOKENS, so its while loop never ends (CPU busy, in Python) and the others wait in the gradient all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/14307 (an endless resampling loop in a dataset when no candidate qualifies)
import random
import torch
import torch.distributed as dist
import torch.nn.functional as F

MAX_TOKENS = 512
BATCH = 4
SHARDS = ["wiki", "web", "arxiv"]  # one source per rank
LENGTHS = {"wiki": (64, 700), "web": (32, 900), "arxiv": (2000, 9000)}


def sample_batch(doc_lens, rng):
    batch = []
    while len(batch) < BATCH:
        i = rng.randrange(len(doc_lens))
        if doc_lens[i] <= MAX_TOKENS:
            batch.append(i)
    return batch


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rng = random.Random(rank)
    lo, hi = LENGTHS[SHARDS[rank]]
    doc_lens = [rng.randint(lo, hi) for _ in range(5000)]
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        idx = sample_batch(doc_lens, rng)
        x = torch.stack([torch.full((16,), doc_lens[i] / MAX_TOKENS) for i in idx])
        loss = F.cross_entropy(model(x), torch.tensor(idx) % 4)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
