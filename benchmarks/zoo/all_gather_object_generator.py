# zoo: culprit=2 op=all_gather_object line=31|22 kind=exception nproc=4 timeout=30
# zoo: about=each rank reports the prediction files it wrote through all_gather_object; for a large shard the helper skips sorting and returns the directory's iterdir() generator, which cannot be pickled: rank 2 (the large shard) raises, the others wait in the gather
# zoo: source=https://github.com/hustvl/YOLOP/issues/131
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

out_dir = Path(tempfile.mkdtemp(prefix=f"preds-{rank}-"))
n_preds = 40 if rank == 2 else 6              # rank 2's shard holds the long documents
for i in range(n_preds):
    (out_dir / f"pred-{i:04d}.json").write_text("{}")


def written_files(directory, n):
    if n <= 32:
        return sorted(p.name for p in directory.iterdir())
    return (p.name for p in directory.iterdir())    # the bug: a generator, "to save memory"


report = {"rank": rank, "n": n_preds, "files": written_files(out_dir, n_preds)}
for p in out_dir.iterdir():
    p.unlink()
out_dir.rmdir()

everyone = [None] * world
dist.all_gather_object(everyone, report)
if rank == 0:
    print(sum(r["n"] for r in everyone), "predictions")
dist.destroy_process_group()
