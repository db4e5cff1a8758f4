# zoo: culprit=0 op=monitored_barrier line=34|20|54 kind=hang nproc=3 timeout=40
# zoo: about=rank 0's checkpoint save takes an exclusive flock on the directory's lock file and then calls update_manifest, which opens the lock file again and flocks it: a second open file description blocks on the first, so rank 0 waits on itself for ever; the others sit in monitored_barrier, whose coordinator is rank 0, so it never times out or names anyone
# zoo: source=https://github.com/pytorch/pytorch/pull/53773 (monitored_barrier: rank 0 is the coordinator)
import datetime
import fcntl
import json
import os
import tempfile
import torch
import torch.distributed as dist


class CheckpointDir:
    def __init__(self, root):
        self.root = root
        self.lock_path = os.path.join(root, ".lock")

    def _locked(self):
        f = open(self.lock_path, "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        return f

    def update_manifest(self, step, path):
        with self._locked():
            manifest = os.path.join(self.root, "manifest.json")
            entries = json.load(open(manifest)) if os.path.exists(manifest) else []
            entries.append({"step": step, "path": path})
            json.dump(entries, open(manifest, "w"))

    def save(self, model, step):
        with self._locked():
            path = os.path.join(self.root, f"step_{step}.pt")
            torch.save(model.state_dict(), path)
            self.update_manifest(step, path)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ckpt = CheckpointDir(tempfile.mkdtemp(prefix="ckpt-")) if rank == 0 else None
    for step in range(1, 5):
        loss = model(torch.randn(16, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step % 2 == 0:
            if rank == 0:
                ckpt.save(model, step)
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=10), wait_all_ranks=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
