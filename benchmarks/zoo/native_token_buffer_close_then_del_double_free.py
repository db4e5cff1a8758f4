# zoo: culprit=1 op=all_reduce line=24|28|43|47 kind=abort nproc=3 timeout=30
# zoo: about=each rank's shard reader keeps its file's tokens in a malloc'ed native buffer; close() frees it but leaves the pointer set, and __del__ frees it again; only rank 1's shard spans a second file, so at the switch its old reader is closed and then dropped, glibc detects the double free and aborts rank 1 (SIGABRT, no Python traceback) while the others wait in the gradient all_reduce
# zoo: source=https://github.com/pytorch/pytorch/issues/33661
import ctypes
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
SHARD_FILES = [[("a.tok", 96)], [("b.tok", 96), ("c.tok", 160)], [("d.tok", 96)]][rank]


class NativeTokenBuffer:
    def __init__(self, n_tokens):
        self.n = n_tokens
        self.ptr = libc.malloc(4 * n_tokens)
        ctypes.memset(self.ptr, 1, 4 * n_tokens)

    def close(self):
        libc.free(self.ptr)

    def __del__(self):
        if self.ptr:
            libc.free(self.ptr)

    def batch(self, k):
        arr = (ctypes.c_int32 * self.n).from_address(self.ptr)
        return torch.tensor(arr[k * 8:(k + 1) * 8], dtype=torch.float32)


files = iter(SHARD_FILES)
reader = NativeTokenBuffer(next(files)[1])
model = torch.nn.Linear(8, 1)
for step in range(8):
    if step == 4:
        nxt = next(files, None)
        if nxt is not None:
            reader.close()
            reader = NativeTokenBuffer(nxt[1])
    model.zero_grad()
    model(reader.batch(step % 4)[None, :]).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)

dist.barrier()
dist.destroy_process_group()
