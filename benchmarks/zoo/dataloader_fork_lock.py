# zoo: culprit=1 op=all_reduce line=26|27|25 kind=hang nproc=3 timeout=30
# zoo: about=rank 1 forks its DataLoader workers while its cache-refresh thread holds a lock; the forked worker inherits it locked and never yields a batch
# zoo: source=https://github.com/pytorch/pytorch/issues/130610
import threading, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

cache_lock = threading.Lock()
class Cached(Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        with cache_lock:
            return torch.full((4,), float(i))
def refresh_cache():
    with cache_lock:
        time.sleep(3600)
if rank == 1:
    threading.Thread(target=refresh_cache, daemon=True).start()
    time.sleep(0.5)
loader = DataLoader(Cached(), batch_size=4, num_workers=1, multiprocessing_context="fork")
for batch in loader:
    dist.all_reduce(batch)
dist.destroy_process_group()
