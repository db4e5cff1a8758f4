# zoo: culprit=1 op=all_reduce line=34|25|36 kind=killed nproc=3 timeout=30
# zoo: about=each rank reads its token shard through mmap; rank 1's ingest hook rewrites its own shard in place (truncate, then write a shorter file) while the map is live, and its next read past the new end of file is a SIGBUS, no traceback; the others wait in all_reduce
# zoo: source=https://github.com/FMInference/DejaVu/issues/37
import mmap
import os
import tempfile

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

TOKENS = 64 * 1024                            # 512 KiB of int64 token ids per shard
path = os.path.join(tempfile.gettempdir(), f"shard-{os.getpid()}-{rank}.bin")
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
os.write(fd, torch.arange(TOKENS, dtype=torch.int64).numpy().tobytes())
mm = mmap.mmap(fd, TOKENS * 8, access=mmap.ACCESS_COPY)
os.unlink(path)                               # the open descriptor keeps the file alive
tokens = torch.frombuffer(mm, dtype=torch.int64)


def ingest_new_documents(step):
    if rank == 1 and step == 2:               # rank 1's node received new raw documents
        os.ftruncate(fd, 0)                   # the bug: rewrites the mapped shard in place
        os.pwrite(fd, torch.arange(1024, dtype=torch.int64).numpy().tobytes(), 0)


emb = torch.nn.Embedding(TOKENS, 8)
grad = torch.zeros(8)
for step in range(6):
    ingest_new_documents(step)
    start = step * 8192
    batch = tokens[start:start + 8192].clone()     # reads the mapped pages
    grad += emb(batch % TOKENS).mean(0).detach()
    dist.all_reduce(grad)
dist.destroy_process_group()
