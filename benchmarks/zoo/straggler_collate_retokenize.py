# zoo: culprit=3 op=all_gather_into_tensor line=22|15|30 kind=straggler nproc=4 timeout=40
# zoo: about=rank 3's shard was never pre-tokenized (its cache file is missing), so its collate_fn falls back to tokenizing every batch on the fly; it is last at every step's loss all_gather and the others wait for it, but the run passes
# zoo: source=https://github.com/hiyouga/LlamaFactory/issues/903 (the 4th card tokenizes by itself while the others wait)
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
PRETOKENIZED = {r: r != 3 for r in range(world)}    # rank 3's .arrow cache is missing


def tokenize(texts):
    time.sleep(0.05 * len(texts))                     # a slow Python tokenizer, per text
    return torch.randint(0, 1000, (len(texts), 64))


def collate(batch_texts):
    if PRETOKENIZED[rank]:
        return torch.randint(0, 1000, (len(batch_texts), 64))
    return tokenize(batch_texts)


emb = torch.nn.Embedding(1000, 16)
for step in range(10):
    ids = collate([f"doc {step}-{i}" for i in range(8)])
    loss = emb(ids).pow(2).mean().detach().reshape(1)
    losses = torch.empty(world)
    dist.all_gather_into_tensor(losses, loss)
    if rank == 0 and step % 3 == 0:
        print(f"step {step} loss {losses.mean().item():.4f}", flush=True)
dist.destroy_process_group()
