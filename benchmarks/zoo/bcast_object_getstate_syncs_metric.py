# zoo: culprit=0 op=broadcast_object_list|all_reduce line=38|21 kind=hang nproc=3 timeout=30
# zoo: about=rank 0 broadcasts its early-stopping tracker with broadcast_object_list so every rank agrees on the best score; the tracker holds a RunningMean whose __getstate__ all_reduces its sums "so pickled copies hold the global value", so pickling on rank 0 issues an all_reduce inside broadcast_object_list while ranks 1 and 2 wait for the object's size broadcast, and the ranks never meet again
# zoo: source=https://github.com/devitocodes/devito/pull/1607
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


class RunningMean:
    def __init__(self):
        self.sums = torch.zeros(2)

    def update(self, value, n=1):
        self.sums += torch.tensor([value * n, float(n)])

    def __getstate__(self):
        state = dict(self.__dict__)
        synced = self.sums.clone()
        dist.all_reduce(synced)
        state["sums"] = synced
        return state


class EarlyStopping:
    def __init__(self):
        self.best, self.bad_epochs, self.val = float("inf"), 0, RunningMean()


tracker = EarlyStopping()
torch.manual_seed(rank)
for epoch in range(3):
    tracker.val.update(float(torch.rand(1)) + 1.0 / (epoch + 1), n=16)
    grad = torch.randn(32)
    dist.all_reduce(grad)
    payload = [tracker if rank == 0 else None]
    dist.broadcast_object_list(payload, src=0)
    tracker = payload[0]
    if rank == 0:
        print(f"epoch {epoch}: best {tracker.best}", flush=True)

dist.barrier()
dist.destroy_process_group()
