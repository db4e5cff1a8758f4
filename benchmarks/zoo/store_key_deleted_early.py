# zoo: culprit=0 op=delete_key|get line=17|23 kind=timeout nproc=3 timeout=40
# zoo: about=rank 0 deletes the shared key (its cleanup) once the first reader has it; rank 2, slower to get there, waits on the store and times out
# zoo: source=https://github.com/pytorch/pytorch/issues/53840
import time
from datetime import timedelta
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

store = dist.distributed_c10d._get_default_store()
store.set_timeout(timedelta(seconds=10))
if rank == 0:
    store.set("run_id", "exp-042")
    store.wait(["reader_1_done"])
    store.delete_key("run_id")
elif rank == 1:
    run_id = store.get("run_id")
    store.set("reader_1_done", "1")
else:
    time.sleep(2)
    run_id = store.get("run_id")
dist.barrier()
dist.destroy_process_group()
