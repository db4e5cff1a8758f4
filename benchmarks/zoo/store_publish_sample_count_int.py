# zoo: culprit=0 op=set line=31 kind=exception nproc=3 timeout=30
# zoo: about=rank 0 indexes the corpus and publishes the sample count with store.set(key, int); Store.set takes str or bytes, so rank 0 raises TypeError while the others wait in store.get for the key
# zoo: source=https://github.com/pytorch/pytorch/issues/53840 (store get/set between ranks)
import json
import os
import tempfile
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store


def build_index(root, n_files=12):
    sizes = {}
    for i in range(n_files):
        path = os.path.join(root, f"part-{i:03d}.jsonl")
        with open(path, "w") as f:
            for j in range(20 + 3 * i):
                f.write(json.dumps({"id": j, "text": "x" * (j % 7)}) + "\n")
        sizes[path] = 20 + 3 * i
    return sizes


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = _get_default_store()
    if rank == 0:
        root = tempfile.mkdtemp(prefix="corpus-")
        sizes = build_index(root)
        store.set("corpus/root", root)
        store.set("corpus/num_samples", sum(sizes.values()))
    root = store.get("corpus/root").decode()
    num_samples = int(store.get("corpus/num_samples"))
    per_rank = num_samples // world
    print(f"rank {rank}: {per_rank} samples from {root}")
    total = torch.tensor([float(per_rank)])
    dist.all_reduce(total)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
