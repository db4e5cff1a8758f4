# zoo: culprit=1 op=all_gather line=20|25|23 kind=hang nproc=3 timeout=30
# zoo: about=the data filter keeps plain-prose documents by matching ^(\w+\s?)*$ against each one; the pattern backtracks exponentially on a long run of word characters followed by a character it cannot match, and rank 1's shard has a release note carrying a 64-digit sha256 followed by a parenthesis, so rank 1 spins in re.match for ever while the others wait in all_gather of the per-rank document counts
# zoo: source=https://github.com/fastai/fastai/pull/2207
import re
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
PLAIN = re.compile(r"^(\w+\s?)*$")
SHARDS = [
    ["the model was trained for three epochs.", "<div>navigation menu</div>", "results improve with scale."],
    ["release notes for version two", "checksum 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 (sha256)",
     "the tokenizer is unchanged."],
    ["data was collected in spring.", "<script>track()</script>", "we thank the reviewers."],
]


def keep(doc):
    return PLAIN.match(doc.rstrip(".!?")) is not None


kept = [d for d in SHARDS[rank] if keep(d)]
counts = [torch.zeros(1) for _ in range(world)]
dist.all_gather(counts, torch.tensor([float(len(kept))]))
if rank == 0:
    print(f"documents kept per rank: {[int(c.item()) for c in counts]}", flush=True)
dist.barrier()
dist.destroy_process_group()
