# zoo: culprit=1 op=get line=28|22 kind=hang nproc=2 timeout=30
# zoo: about=rank 0 publishes the vocabulary size in the store under a key prefixed with the run name, which each rank derives from its own clock (run-%Y%m%d-%H%M%S) after loading its shard; rank 1's shard is larger and takes seconds longer, so its run name and key differ and its store.get waits for a key nobody sets while rank 0 waits in all_reduce
# zoo: source=https://github.com/ashleve/lightning-hydra-template/issues/393
import time
from datetime import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
store = dist.distributed_c10d._get_default_store()


def load_shard(rank):
    n_docs = [20_000, 120_000][rank]        # rank 1 reads the large web shard
    time.sleep(n_docs / 40_000)             # tokenizing and indexing
    return torch.randint(0, 32000, (n_docs // 1000, 128))


tokens = load_shard(rank)
run_name = datetime.now().strftime("run-%Y%m%d-%H%M%S")   # names the output directory too

if rank == 0:
    vocab_size = int(tokens.max()) + 1
    store.set(f"{run_name}/vocab_size", str(vocab_size))
else:
    vocab_size = int(store.get(f"{run_name}/vocab_size"))

emb = torch.nn.Embedding(vocab_size, 16)
grad = torch.zeros(16)
dist.all_reduce(grad)
dist.destroy_process_group()
