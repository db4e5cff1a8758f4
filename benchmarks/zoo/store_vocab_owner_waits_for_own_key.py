# zoo: culprit=2 op=wait line=20|25|27 kind=hang nproc=3 timeout=30
# zoo: about=every rank publishes its shard's token count in the store and then waits for all counts; the vocabulary owner (rank 2) needs all counts to size the vocabulary, so its branch waits first and publishes its own count only afterwards: it waits for a key that only it will set, and ranks 0 and 1 wait in the same store.wait for rank 2's count
# zoo: source=https://github.com/pytorch/pytorch/pull/53860 (a store.wait that hangs depending on the order of the set and wait calls)
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()
VOCAB_OWNER = 2
tokens = torch.randint(0, 30000, (1000 * (rank + 1),), generator=torch.Generator().manual_seed(rank))


def publish_count():
    store.set(f"token_count/{rank}", str(tokens.numel()))


def all_counts():
    keys = [f"token_count/{r}" for r in range(world)]
    store.wait(keys)
    return [int(store.get(k)) for k in keys]


if rank == VOCAB_OWNER:
    counts = all_counts()                      # sizes the vocabulary from every shard
    vocab_size = min(32000, sum(counts) // 4)
    publish_count()
else:
    publish_count()
    counts = all_counts()
grad = torch.zeros(8)
dist.all_reduce(grad)
dist.destroy_process_group()
