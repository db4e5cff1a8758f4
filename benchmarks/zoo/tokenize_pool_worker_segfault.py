# zoo: culprit=1 op=all_reduce line=35|16 kind=hang nproc=3 timeout=40
# zoo: about=each rank measures its documents in a multiprocessing.Pool through libc strlen; rank 1's shard has an attachment record with text None, which becomes a NULL pointer, so a pool worker segfaults: Pool replaces the worker but loses its task, and pool.map on rank 1 waits for ever while the others wait in all_reduce
# zoo: source=https://github.com/python/cpython/issues/96061 (multiprocessing.Pool stuck when a worker process is killed)
import ctypes
import multiprocessing as mp
import random
import torch
import torch.distributed as dist

_libc = ctypes.CDLL(None)
_libc.strlen.argtypes = [ctypes.c_char_p]


def byte_length(doc):
    # fast path through libc; the docs are plain UTF-8 text
    return _libc.strlen(doc.get("text") and doc["text"].encode())


def load_shard(rank):
    rng = random.Random(4 + rank)
    docs = []
    for i in range(200):
        if rng.random() < 0.004:  # attachments are stored out of line
            docs.append({"id": i, "text": None, "blob": f"s3://corpus/blobs/{rank}-{i}.bin"})
        else:
            docs.append({"id": i, "text": "lorem ipsum " * rng.randint(1, 8)})
    return docs


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    docs = load_shard(rank)
    with mp.Pool(2) as pool:
        lengths = pool.map(byte_length, docs, chunksize=16)
    total = torch.tensor([float(sum(lengths))])
    dist.all_reduce(total)
    if rank == 0:
        print(f"corpus bytes: {int(total.item())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
