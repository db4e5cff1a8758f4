# zoo: culprit=none kind=pass nproc=3 timeout=40
# zoo: about=a correct script that looks racy: the ranks elect a cache builder with store.compare_set (the first to arrive wins), the others wait on the store key it sets when done, then every rank reads the builder's rank from the store and receives the vocabulary from it with broadcast_object_list
# zoo: source=https://github.com/pytorch/pytorch/pull/52696 (TCPStore.compare_set: sets the key when it is absent and the expected value is empty)
import time
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = _get_default_store()
time.sleep(0.3 * (world - rank))  # the ranks come up at different times

winner = store.compare_set("vocab/builder", "", str(rank)).decode()
if winner == str(rank):
    time.sleep(2.0)  # build the vocabulary cache
    vocab = {w: i for i, w in enumerate(sorted({"the", "a", "of", "to", "in"}))}
    store.set("vocab/done", "1")
else:
    vocab = None
    store.wait(["vocab/done"])
builder = int(store.get("vocab/builder"))
box = [vocab]
dist.broadcast_object_list(box, src=builder)
vocab = box[0]
emb = torch.nn.Embedding(len(vocab), 4)
t = torch.tensor([float(len(vocab))])
dist.all_reduce(t)
print(f"rank {rank} builder {builder} vocab {len(vocab)} sum {t.item()}")
dist.barrier()
dist.destroy_process_group()
