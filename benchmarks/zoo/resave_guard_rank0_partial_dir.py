# zoo: culprit=0 op=barrier line=25|29 kind=exception nproc=3 timeout=30
# zoo: about=after an auto-resume from the last complete checkpoint, the save at step 4 finds the partial step_4 directory the killed run left behind; the exists() guard raises FileExistsError on rank 0 alone (only rank 0 writes), so rank 0 never reaches the save's barrier and the others fail there when it dies (rank 0 exits 1 with its FileExistsError, sometimes as a SIGABRT at exit with gloo still connected)
# zoo: source=https://github.com/NVIDIA-NeMo/Automodel/issues/3254
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
root = Path(tempfile.mkdtemp(prefix="run-")) if rank == 0 else None
if rank == 0:
    (root / "step_2").mkdir()
    (root / "step_4" / "model").mkdir(parents=True)   # the previous run was killed mid-save here
    (root / "LATEST").write_text("step_2")

model = torch.nn.Linear(8, 8)


def save_checkpoint(step):
    if rank == 0:
        path = root / f"step_{step}"
        if path.exists():
            raise FileExistsError(f"Checkpoint directory {path} already exists")
        path.mkdir()
        torch.save(model.state_dict(), path / "model.pt")
        (root / "LATEST").write_text(path.name)
    dist.barrier()


for step in range(3, 7):
    model(torch.randn(4, 8)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    model.zero_grad()
    if step % 2 == 0:
        save_checkpoint(step)
dist.destroy_process_group()
