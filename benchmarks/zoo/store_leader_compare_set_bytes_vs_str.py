# zoo: culprit=0 op=compare_set|wait line=31|30|35 kind=hang nproc=3 timeout=40
# zoo: about=the first rank to finish indexing elects itself vocabulary builder with store.compare_set and checks 'winner == str(rank)'; compare_set returns bytes, so the winner (rank 0, whose shard is small) never sees itself elected, nobody builds the cache and every rank waits in store.wait for the path
# zoo: source=https://github.com/kspi/dmenu-frecency/pull/12 (comparing a str against bytes is always False)
import os
import tempfile
import time
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

SHARD_FILES = [2, 40, 40]  # files in each rank's shard


def index_shard(rank):
    for _ in range(SHARD_FILES[rank]):
        time.sleep(0.05)  # stat + header read per file


def build_vocab_cache(path):
    vocab = {f"tok{i}": i for i in range(5000)}
    torch.save(vocab, path)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    store = _get_default_store()
    index_shard(rank)
    # the first rank to get here builds the shared cache, the others wait for it
    winner = store.compare_set("vocab/builder", "", str(rank))
    if winner == str(rank):
        path = os.path.join(tempfile.mkdtemp(prefix="vocab-"), "vocab.pt")
        build_vocab_cache(path)
        store.set("vocab/path", path)
    store.wait(["vocab/path"])
    vocab = torch.load(store.get("vocab/path").decode())
    size = torch.tensor([float(len(vocab))])
    dist.all_reduce(size)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
