# zoo: culprit=0 op=all_reduce line=28|34 kind=hang nproc=2 timeout=30
# zoo: about=each node JIT-builds the fused kernel into its own build directory under a FileBaton lock file; the previous run was killed on rank 0's node while it held the lock, the stale lock file is still there, so rank 0 waits in FileBaton.wait() for a builder that no longer exists while rank 1 builds and waits in the first all_reduce
# zoo: source=https://github.com/pytorch/pytorch/pull/189339
import os
import tempfile

import torch
import torch.distributed as dist
from torch.utils.file_baton import FileBaton

dist.init_process_group("gloo")
rank = dist.get_rank()
build_dir = tempfile.mkdtemp(prefix=f"fused_kernel_node{rank}_")
if rank == 0:                                   # left behind by the run that was killed mid-build
    open(os.path.join(build_dir, "lock"), "w").close()


def load_fused_kernel():
    so_path = os.path.join(build_dir, "fused_adam.so")
    baton = FileBaton(os.path.join(build_dir, "lock"))
    if baton.try_acquire():
        try:
            with open(so_path, "wb") as f:    # compile and link
                f.write(b"\x7fELF")
        finally:
            baton.release()
    else:
        baton.wait()                          # another process on this node is building it
    return so_path


kernel = load_fused_kernel()
grad = torch.randn(128)
dist.all_reduce(grad)
dist.destroy_process_group()
