# zoo: culprit=none kind=pass nproc=3 timeout=40
# zoo: about=a correct script that looks stuck: rank 0 alone builds the vocabulary (several seconds) while ranks 1 and 2 sit in store.get, then publishes it; everyone reads it and trains in step
# zoo: source=https://github.com/pytorch/pytorch/issues/107177
import json
import time

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = _get_default_store()


def build_vocab():
    time.sleep(6)                                     # a pass over the corpus
    return {w: i for i, w in enumerate(["<pad>", "<unk>", "the", "a", "of", "to"])}


if rank == 0:
    vocab = build_vocab()
    store.set("vocab", json.dumps(vocab))
else:
    vocab = json.loads(store.get("vocab"))

emb = torch.nn.Embedding(len(vocab), 8)
for step in range(3):
    emb(torch.randint(0, len(vocab), (4, 5))).sum().backward()
    dist.all_reduce(emb.weight.grad)
    emb.zero_grad()
if rank == 0:
    print("trained on a vocabulary of", len(vocab), flush=True)
dist.destroy_process_group()
