# zoo: culprit=1 op=broadcast line=31|23 kind=hang nproc=3 timeout=40
# zoo: about=each rank fetches the teacher model's weights on a background thread and waits on a threading.Event before distillation starts; the fetch returns early on a local cache hit without setting the event, and only rank 1's node has the file cached, so rank 1 waits for ever while the others wait in the broadcast
# zoo: source=https://github.com/cnpm/npminstall/pull/219 (the download cache's done-file path returns without emitting the event a waiter is blocked on)
import os
import tempfile
import threading
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cache = tempfile.mkdtemp(prefix=f"zoo_teacher_cache_node{rank}_")   # this run's own: no cache left by an earlier one
os.makedirs(cache, exist_ok=True)
if rank == 1:  # this node ran the job before: the weights are in its cache
    torch.save(torch.nn.Linear(16, 16).state_dict(), os.path.join(cache, "teacher.pt"))
teacher_ready = threading.Event()


def fetch_teacher(dest):
    path = os.path.join(dest, "teacher.pt")
    if os.path.exists(path):
        return
    time.sleep(1.0)  # the download
    torch.save(torch.nn.Linear(16, 16).state_dict(), path)
    teacher_ready.set()


threading.Thread(target=fetch_teacher, args=(cache,), daemon=True).start()
student = torch.nn.Linear(16, 16)
teacher_ready.wait()
teacher = torch.nn.Linear(16, 16)
teacher.load_state_dict(torch.load(os.path.join(cache, "teacher.pt")))
for p in teacher.parameters():
    dist.broadcast(p.data, src=0)
for step in range(3):
    x = torch.randn(8, 16)
    loss = (student(x) - teacher(x).detach()).pow(2).mean()
    loss.backward()
    for p in student.parameters():
        dist.all_reduce(p.grad)
    student.zero_grad()
print(f"rank {rank} done")
dist.destroy_process_group()
