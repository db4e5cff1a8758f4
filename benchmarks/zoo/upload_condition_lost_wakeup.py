# zoo: culprit=2 op=barrier line=53|29 kind=hang nproc=3 timeout=40
# zoo: about=the async optimizer-shard uploader signals completion with Condition.notify_all and the main thread waits with a bare cond.wait() (no predicate); with ZeRO-1 ownership over 2 parameters, rank 2 owns none, its shard is empty and the upload returns at once, so the notify comes before the wait and rank 2 waits for ever while the others wait in the barrier
# zoo: source=https://github.com/zeek/zeek/pull/761 (waiting on a condition variable without checking the predicate loses wakeups)
import os
import tempfile
import threading
import time
import torch
import torch.distributed as dist


class AsyncShardUploader:
    def __init__(self, remote_dir):
        self.remote_dir = remote_dir
        self.cond = threading.Condition()

    def _upload(self, name, state):
        if state:
            time.sleep(2.0)  # network transfer
            torch.save(state, os.path.join(self.remote_dir, name))
        with self.cond:
            self.cond.notify_all()

    def start(self, name, state):
        threading.Thread(target=self._upload, args=(name, state), daemon=True).start()

    def wait(self):
        with self.cond:
            self.cond.wait()


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    params = list(model.parameters())
    owned = [i for i in range(len(params)) if i % world == rank]  # ZeRO-1 style ownership
    opt = torch.optim.Adam([params[i] for i in owned] or [torch.zeros(1, requires_grad=True)], lr=1e-3)
    uploader = AsyncShardUploader(tempfile.mkdtemp(prefix=f"remote-{rank}-"))
    for epoch in range(2):
        loss = model(torch.randn(8, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in params:
            dist.all_reduce(p.grad)
        opt.step()
        for i, p in enumerate(params):
            dist.broadcast(p.data, src=i % world)
        shard = {i: opt.state[params[i]] for i in owned if params[i] in opt.state}
        uploader.start(f"optim-e{epoch}-r{rank}.pt", shard)
        dist.all_reduce(loss.detach().clone())
        uploader.wait()
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch} saved")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
